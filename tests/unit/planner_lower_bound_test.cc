// Tests for planner/lower_bound.cc: slot_alignment, slot_footprint and lower_bound()
// (the peak of live footprints, under which no placement fits). The shared traces and
// their diagrams: planner_testing.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "trace/trace.h"
#include "planner_testing.h"

namespace replayalloc {
namespace {

using namespace planner_testing;
using ::testing::ElementsAre;

// ---- slot_alignment, slot_footprint ----------------------------------------------------

TEST(SlotFootprint, RoundsSizeUpToTheSlotAlignment) {
  const planner_options o;  // slot_align 64
  EXPECT_EQ(slot_alignment(alloc(1, 1, 0, 1), o), 64u);
  EXPECT_EQ(slot_footprint(alloc(1, 1, 0, 1), o), 64u);
  EXPECT_EQ(slot_footprint(alloc(1, 64, 0, 1), o), 64u);
  EXPECT_EQ(slot_footprint(alloc(1, 65, 0, 1), o), 128u);
  EXPECT_EQ(slot_footprint(alloc(1, 6000, 0, 1), o), 6016u);
  // An alignment above slot_align rules both the offset and the rounding.
  EXPECT_EQ(slot_alignment(alloc(1, 100, 0, 1, 4096), o), 4096u);
  EXPECT_EQ(slot_footprint(alloc(1, 100, 0, 1, 4096), o), 4096u);
  EXPECT_EQ(slot_footprint(alloc(1, 4097, 0, 1, 4096), o), 8192u);
  const planner_options o16{.slot_align = 16};
  EXPECT_EQ(slot_alignment(alloc(1, 100, 0, 1), o16), 16u);
  EXPECT_EQ(slot_footprint(alloc(1, 100, 0, 1), o16), 112u);
}

// ---- lower_bound ------------------------------------------------------------------

TEST(LowerBound, IsThePeakOfLiveFootprints) {
  // Time:      0 1 2 3 4
  // 1 (1024)   ####
  // 2 (2048)     ######
  // 3 ( 100)       ####     footprint 128
  // Live at 1: 1024 + 2048; at 2: 2048 + 128 (1 is freed at 2, before 3 is
  // allocated). The peak moves between the two as 1's size changes.
  const trace t = make_trace({alloc(1, 1024, 0, 2), alloc(2, 2048, 1, 4), alloc(3, 100, 2, 4)});
  EXPECT_EQ(lower_bound(t), 3072u);  // at 1: 1024 + 2048
  const trace t2 =
      make_trace({alloc(1, 512, 0, 2), alloc(2, 2048, 1, 4), alloc(3, 100, 2, 4)});
  EXPECT_EQ(lower_bound(t2), 2560u);  // at 1: 512 + 2048, above 2048 + 128 at 2
  const trace t3 =
      make_trace({alloc(1, 64, 0, 2), alloc(2, 2048, 1, 4), alloc(3, 100, 2, 4)});
  EXPECT_EQ(lower_bound(t3), 2176u);  // at 2: 2048 + 128
}

TEST(LowerBound, FreesAtAPositionComeBeforeAllocationsThere) {
  // Time:      0 1 2 3
  // 1 (1024)   ####
  // 2 (1024)       ####
  // 3 ( 512)       ##
  // At 2, 1 is freed and 2 and 3 are allocated: 1536, not 2560.
  const trace t = make_trace({alloc(1, 1024, 0, 2), alloc(2, 1024, 2, 4), alloc(3, 512, 2, 3)});
  EXPECT_EQ(lower_bound(t), 1536u);
  const placement p = plan_and_validate(t);
  EXPECT_EQ(p.slab_bytes, 1536u);
  EXPECT_THAT(p.offsets, ElementsAre(0, 0, 1024));
}

TEST(LowerBound, IgnoresOutlivingAllocations) {
  const trace t = make_trace({alloc(1, 1 << 20, 0, never_freed), alloc(2, 1000, 1, 2)});
  EXPECT_EQ(lower_bound(t), 1024u);
  EXPECT_EQ(lower_bound(make_trace({})), 0u);
}

}  // namespace
}  // namespace replayalloc
