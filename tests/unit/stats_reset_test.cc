// Statistics: replayalloc_reset_stats() (C, C++), the current and peak bytes, and the
// readable table of REPLAYALLOC_STATS_FORMAT=text (Note [Statistics reset]).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/stats.h"

namespace {

using ::testing::HasSubstr;

// Six iterations of one key: two recorded, then replayed from a slab.
void run_iterations(const char* key) {
  for (int r = 0; r < 6; ++r) {
    {
      replayalloc::Iteration it(key);
      void* a = replayalloc_malloc(40000);
      void* b = replayalloc_malloc(70000);
      replayalloc_free(a);
      replayalloc_free(b);
    }
    replayalloc_wait_plans();  // the plan made in the background, installed before the next
  }
}

TEST(StatsReset, CountersStartAgainAndCurrentValuesStay) {
  run_iterations("stats-reset/a");
  const replayalloc::Stats before = replayalloc::stats();
  ASSERT_GT(before.slab_hits, 0u);
  ASSERT_GT(before.iterations, 0u);
  ASSERT_GT(before.mapped_bytes, 0u);
  EXPECT_GE(before.mapped_bytes_peak, before.mapped_bytes);
  EXPECT_GE(before.backend_bytes_peak, before.backend_bytes);

  replayalloc_reset_stats();
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.slab_hits, 0u);
  EXPECT_EQ(after.iterations, 0u);
  EXPECT_EQ(after.allocations, 0u);
  EXPECT_EQ(after.plans, 0u);
  EXPECT_EQ(after.bytes_from_slab, 0u);
  // Current values are not counters: the plan and its slab are still there.
  EXPECT_EQ(after.keys, before.keys);
  EXPECT_EQ(after.slab_bytes, before.slab_bytes);
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes);
  EXPECT_EQ(after.mapped_bytes_peak, after.mapped_bytes);

  // Counting goes on from zero; C++'s reset is the same.
  run_iterations("stats-reset/a");
  const replayalloc::Stats again = replayalloc::stats();
  EXPECT_EQ(again.iterations, 6u);
  EXPECT_EQ(again.slab_hits, 12u);
  replayalloc::reset_stats();
  EXPECT_EQ(replayalloc::stats().iterations, 0u);
}

TEST(StatsText, IsATableOfEveryField) {
  run_iterations("stats-text/a");
  const replayalloc::Stats s = replayalloc::stats();
  char buf[8192];
  const std::size_t n = replayalloc::detail::format_stats_text(s, buf, sizeof buf);
  ASSERT_LT(n, sizeof buf);
  const std::string text(buf, n);
  EXPECT_THAT(text, HasSubstr("replayalloc statistics\n"));
  EXPECT_THAT(text, testing::ContainsRegex("\n  slab_hits +[0-9]+\n"));
  EXPECT_THAT(text, HasSubstr("  fallbacks by reason:\n    size_mismatch"));
  EXPECT_THAT(text, testing::ContainsRegex("\n  mapped_bytes +[0-9]+  \\([0-9.]+ KiB\\)\n"));
  EXPECT_THAT(text, HasSubstr("mapped_bytes_peak"));
  EXPECT_THAT(text, HasSubstr("backend_bytes_peak"));
  // snprintf's contract: the length needed, the text cut and terminated.
  char small[16];
  EXPECT_EQ(replayalloc::detail::format_stats_text(s, small, sizeof small), n);
  EXPECT_EQ(std::string(small), text.substr(0, 15));
}

// Note [Resident memory by owner]: the process's resident set, and of it the slabs'
// pages and the fallback allocator's, each as the kernel or jemalloc counts them.
TEST(StatsResident, SaysWhereTheResidentBytesAre) {
  for (int r = 0; r < 6; ++r) {
    {
      replayalloc::Iteration it("stats-resident/a");
      auto* a = static_cast<unsigned char*>(replayalloc_malloc(3 << 20));
      auto* b = static_cast<unsigned char*>(replayalloc_malloc(1 << 20));
      for (std::size_t i = 0; i < (3u << 20); i += 4096) a[i] = 1;  // every page touched
      for (std::size_t i = 0; i < (1u << 20); i += 4096) b[i] = 1;
      replayalloc_free(a);
      replayalloc_free(b);
    }
    replayalloc_wait_plans();
  }
  const replayalloc::Stats s = replayalloc::stats();
  ASSERT_GT(s.slab_hits, 0u);
  // The slab's pages the replays wrote are resident, and no more than it committed.
  EXPECT_GE(s.slab_resident_bytes, std::uint64_t{4} << 20);
  EXPECT_LE(s.slab_resident_bytes, s.mapped_bytes);
  EXPECT_GT(s.backend_resident_bytes, 0u);
  EXPECT_GE(s.resident_bytes, s.slab_resident_bytes);
  EXPECT_GE(s.resident_bytes_peak, s.resident_bytes - (s.resident_bytes >> 4));  // read apart, nearly together
  char buf[8192];
  const std::size_t n = replayalloc::detail::format_stats_text(s, buf, sizeof buf);
  ASSERT_LT(n, sizeof buf);
  EXPECT_THAT(std::string(buf, n), testing::ContainsRegex("\n  slab_resident_bytes +[0-9]+  \\([0-9.]+ MiB\\)\n"));
}

}  // namespace
