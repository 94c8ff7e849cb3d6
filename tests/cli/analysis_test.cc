// Tests for cli/analysis.h: memory kinds (Note [Memory kinds]), peaks, usage by op.
//
// The hand-made trace, time across (one column per event), '#' where live; a lifetime
// is [alloc_at, free_at). Ops: conv (1), relu (2), unknown (0).
//
//   id op     size  0 1 2 3 4 5 6 7 8 9
//   0  conv   1000  #                        workspace: freed before anything else is allocated
//   1  conv   2000    # # # #                activation: relu allocates (id 3) while it is live
//   2  conv    500      #                    workspace: only its own op allocates meanwhile
//   3  relu   3000          # # # #          activation: conv allocates (id 4) while it is live
//   4  conv    100            # # # # #      persistent: never freed
//   5  unkn     64              #            workspace: nothing is allocated while it is live
//   6  unkn     64                # #        activation: id 7 allocates; "unknown" is never the same op
//   7  unkn     64                  #        workspace
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/analysis.h"

namespace replayalloc::cli {
namespace {

using ::testing::ElementsAre;

trace_allocation alloc(std::uint64_t id, std::uint64_t size, std::uint64_t alloc_at,
                       std::uint64_t free_at, std::uint32_t op) {
  trace_allocation a;
  a.id = id;
  a.size = size;
  a.alloc_at = alloc_at;
  a.free_at = free_at;
  a.op = op;
  return a;
}

trace diagram_trace() {
  trace t;
  t.ops = {"unknown", "conv", "relu"};
  t.allocations = {alloc(0, 1000, 0, 1, 1),           alloc(1, 2000, 1, 5, 1),
                   alloc(2, 500, 2, 3, 1),            alloc(3, 3000, 4, 8, 2),
                   alloc(4, 100, 5, never_freed, 1), alloc(5, 64, 6, 7, 0),
                   alloc(6, 64, 7, 9, 0),             alloc(7, 64, 8, 9, 0)};
  t.events = 10;
  return t;
}

TEST(Analysis, KindsFollowTheNote) {
  const trace_analysis r = analyze(diagram_trace());
  EXPECT_THAT(r.kinds, ElementsAre(memory_kind::workspace, memory_kind::activation, memory_kind::workspace,
                                   memory_kind::activation, memory_kind::persistent, memory_kind::workspace,
                                   memory_kind::activation, memory_kind::workspace));
}

TEST(Analysis, PeaksAndWhatIsLiveThere) {
  planner_options o;  // slot_align 64: footprints 1024, 2048, 512, 3008, -, 64, 64, 64
  const trace_analysis r = analyze(diagram_trace(), o);
  // Requested bytes, persistent included: 2000 + 3000 at event 4 (at 5, id 1 is freed
  // and only 3000 + 100 are live).
  EXPECT_EQ(r.peak_live_bytes, 5000u);
  EXPECT_EQ(r.lower_bound_bytes, 2048u + 3008u);
  EXPECT_EQ(r.lower_bound_bytes, lower_bound(diagram_trace(), o));
  EXPECT_EQ(r.peak_at, 4u);
  EXPECT_EQ(r.persistent_bytes, 100u);
  EXPECT_EQ(r.events, 10u);
  const usage_row& act = r.by_kind[static_cast<int>(memory_kind::activation)];
  EXPECT_EQ(act.count, 3u);
  EXPECT_EQ(act.total_bytes, 2000u + 3000u + 64u);
  EXPECT_EQ(act.at_peak_bytes, 2048u + 3008u);
  EXPECT_EQ(act.largest_bytes, 3000u);
  EXPECT_EQ(r.by_kind[static_cast<int>(memory_kind::workspace)].count, 4u);
  EXPECT_EQ(r.by_kind[static_cast<int>(memory_kind::workspace)].at_peak_bytes, 0u);
  EXPECT_EQ(r.by_kind[static_cast<int>(memory_kind::persistent)].count, 1u);
}

TEST(Analysis, OpsSortedByBytesAtThePeak) {
  const trace_analysis r = analyze(diagram_trace());
  ASSERT_EQ(r.by_op.size(), 3u);
  EXPECT_EQ(r.by_op[0].name, "relu");  // 3008 at the peak
  EXPECT_EQ(r.by_op[0].at_peak_bytes, 3008u);
  EXPECT_EQ(r.by_op[1].name, "conv");  // 2048 at the peak
  EXPECT_EQ(r.by_op[1].count, 4u);
  EXPECT_EQ(r.by_op[1].total_bytes, 1000u + 2000u + 500u + 100u);
  EXPECT_EQ(r.by_op[2].name, "unknown");
  EXPECT_EQ(r.by_op[2].at_peak_bytes, 0u);
}

TEST(Analysis, EmptyTraceAndOnlyOutliving) {
  trace t;
  t.ops = {"unknown"};
  trace_analysis r = analyze(t);
  EXPECT_EQ(r.peak_live_bytes, 0u);
  EXPECT_EQ(r.lower_bound_bytes, 0u);
  EXPECT_TRUE(r.by_op.empty());
  t.allocations = {alloc(0, 10, 0, never_freed, 0)};
  r = analyze(t);
  EXPECT_EQ(r.peak_live_bytes, 10u);
  EXPECT_EQ(r.lower_bound_bytes, 0u);
  EXPECT_EQ(r.by_op[0].at_peak_bytes, 0u);
  EXPECT_EQ(r.events, 1u);
}

}  // namespace
}  // namespace replayalloc::cli
