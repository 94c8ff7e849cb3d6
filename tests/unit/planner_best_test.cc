// Tests for planner/best.cc: "best" tries the greedy orderings and stops at the lower
// bound with the first that reaches it; on large traces, the smaller of size and
// breadth. (Its search under the bound: planner_fit_search_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <string>

#include "planner/planner.h"
#include "trace/trace.h"
#include "planner_testing.h"

namespace replayalloc {
namespace {

using namespace planner_testing;
using ::testing::ElementsAre;

// The size class ordering goes first (Note [Size classes, then lifetime]); where it
// reaches the lower bound nothing after it runs: B (the longest) at 0, C and A above it.
TEST(Best, StopsAtTheLowerBoundWithTheFirstOrderingThatReachesIt) {
  const placement p = plan_named(fragmenting_trace(), "best");
  EXPECT_EQ(p.algorithm, "best(size_class)");
  EXPECT_THAT(p.offsets, ElementsAre(1024, 0, 1024));
  EXPECT_EQ(p.slab_bytes, p.lower_bound_bytes);
  const placement one_class = plan_named(one_class_trace(), "best");  // size alone: 7168
  EXPECT_EQ(one_class.algorithm, "best(size_class)");
  EXPECT_EQ(one_class.slab_bytes, 6144u);
  EXPECT_EQ(one_class.slab_bytes, one_class.lower_bound_bytes);
}

// Where the size class ordering leaves a gap too small (7168), size, tried next, reaches
// the bound.
TEST(Best, TakesSizeWhereItReachesTheBoundAndTheSizeClassOrderingDoesNot) {
  ASSERT_EQ(plan_named(long_small_trace(), "greedy_by_size_class").slab_bytes, 7168u);
  const placement p = plan_named(long_small_trace(), "best");
  EXPECT_EQ(p.algorithm, "best(size)");
  EXPECT_THAT(p.offsets, ElementsAre(0, 3072, 3072));
  EXPECT_EQ(p.slab_bytes, 6144u);
  EXPECT_EQ(p.slab_bytes, p.lower_bound_bytes);
}

// Note [Best of orderings, then improve] (best.cc): on a large trace (above 4096
// plannable allocations, where the searches do not run) best is the smallest of the
// five orderings and first fit, and names the one it took.
TEST(Best, OnLargeTracesIsTheSmallestOfEveryOrderingAndFirstFit) {
  std::mt19937_64 rng(0x5eed0100);
  const trace t = random_event_trace(rng, 6000);
  const std::size_t plannable = std::count_if(t.allocations.begin(), t.allocations.end(),
                                              [](const trace_allocation& a) { return !a.outlives(); });
  ASSERT_GT(plannable, 4096u);
  const placement best = plan_named(t, "best");
  std::uint64_t smallest = UINT64_MAX;
  std::string winner;
  for (const char* name : {"greedy_by_size", "greedy_by_size_class", "greedy_by_breadth", "greedy_by_lifetime",
                           "greedy_by_arrival", "first_fit"}) {
    const placement p = plan_named(t, name);
    if (p.slab_bytes < smallest) {
      smallest = p.slab_bytes;
      winner = name;
    }
  }
  EXPECT_EQ(best.slab_bytes, smallest);
  const std::string short_name = winner.rfind("greedy_by_", 0) == 0 ? winner.substr(10) : winner;
  EXPECT_EQ(best.algorithm, "best(" + short_name + ")");
  EXPECT_TRUE(validate(t, best).ok());
}

}  // namespace
}  // namespace replayalloc
