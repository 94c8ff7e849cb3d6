// Tests of the search planner (planner/search.h): on tiny traces it reaches the
// optimum a brute-force enumeration knows (tests/support/optimal_slab.h) and proves it;
// on random traces of every shape it is never worse than "best", its plans pass
// validate(), and what it calls a lower bound never exceeds what it found; a stop flag
// and a node budget end it with best's plan or better.
#include <gtest/gtest.h>

#include <atomic>

#include "planner/search.h"
#include "random_traces.h"

namespace replayalloc {
namespace {

using namespace testing_random;

search_options budget(std::uint64_t nodes) {
  search_options s;
  s.time_limit_s = 0;  // nodes, not time: deterministic
  s.max_nodes = nodes;
  return s;
}

TEST(SearchPlanner, ReachesAndProvesTheBruteForceOptimumOnTinyTraces) {
  std::mt19937_64 rng(0x5ea4c401);
  const planner_options o;
  int above_greedy = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const trace t = tiny_trace(rng, 7);
    placement opt;
    const std::uint64_t optimum = optimal_slab(t, o, &opt);
    absl::StatusOr<search_result> r = search_plan(t, o, budget(UINT64_MAX));
    ASSERT_TRUE(r.ok()) << r.status();
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    ASSERT_TRUE(validate(t, r->plan, o).ok()) << validate(t, r->plan, o);
    EXPECT_EQ(r->plan.slab_bytes, optimum);
    EXPECT_TRUE(r->proven_optimal);
    EXPECT_EQ(r->lower_bound, optimum);
    above_greedy += plan_best(t, o)->slab_bytes > optimum;
  }
  RecordProperty("best_above_optimum", above_greedy);
}

// The traces that matter for the proof: the optimum is above the lower bound, so the
// search must prove every smaller capacity infeasible, not just reach a bound.
TEST(SearchPlanner, ProvesOptimaAboveTheLowerBound) {
  const planner_options o;
  const auto cases = tiny_traces_above_bound(0x5ea4c402, 2500, o);
  ASSERT_FALSE(cases.empty());
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& [t, optimum] = cases[k];
    absl::StatusOr<search_result> r = search_plan(t, o, budget(UINT64_MAX));
    ASSERT_TRUE(r.ok()) << r.status();
    SCOPED_TRACE(::testing::Message() << "case " << k);
    ASSERT_TRUE(validate(t, r->plan, o).ok());
    EXPECT_EQ(r->plan.slab_bytes, optimum);
    EXPECT_TRUE(r->proven_optimal);
    EXPECT_GT(r->lower_bound, lower_bound(t, o));  // raised by the proof, not the peak
  }
}

// Unaligned bytes, as MiniMalloc's problems are planned (--slot-align 1).
TEST(SearchPlanner, ReachesTheOptimumAtSlotAlignmentOne) {
  std::mt19937_64 rng(0x5ea4c403);
  planner_options o;
  o.slot_align = 1;
  for (int iter = 0; iter < 200; ++iter) {
    trace t = tiny_trace(rng, 7);
    for (trace_allocation& a : t.allocations) {
      a.align = 1;
      a.size = 1 + rng() % 9;
    }
    placement opt;
    const std::uint64_t optimum = optimal_slab(t, o, &opt);
    absl::StatusOr<search_result> r = search_plan(t, o, budget(UINT64_MAX));
    ASSERT_TRUE(r.ok()) << r.status();
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    ASSERT_TRUE(validate(t, r->plan, o).ok());
    EXPECT_EQ(r->plan.slab_bytes, optimum);
    EXPECT_TRUE(r->proven_optimal);
  }
}

TEST(SearchPlanner, NeverWorseThanBestAndAlwaysValid) {
  std::mt19937_64 rng(0x5ea4c404);
  const planner_options o;
  int improved = 0;
  for (int iter = 0; iter < 120; ++iter) {
    trace t;
    switch (iter % 5) {
      case 0: t = event_trace(rng, 20 + rng() % 200); break;
      case 1: t = coarse_trace(rng, 20 + rng() % 200); break;
      case 2: t = chain_trace(rng, 20 + rng() % 300); break;
      case 3: t = decode_trace(rng, 1 + rng() % 3, 2 + rng() % 6); break;
      default: t = multi_stream_staircase(rng, 2 + rng() % 3, 40 + rng() % 200); break;
    }
    SCOPED_TRACE(::testing::Message() << "iteration " << iter << ", " << t.key);
    const absl::StatusOr<placement> best = plan_best(t, o);
    ASSERT_TRUE(best.ok());
    absl::StatusOr<search_result> r = search_plan(t, o, budget(20'000));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(validate(t, r->plan, o).ok()) << validate(t, r->plan, o);
    EXPECT_LE(r->plan.slab_bytes, best->slab_bytes);
    EXPECT_GE(r->lower_bound, lower_bound(t, o));
    EXPECT_LE(r->lower_bound, r->plan.slab_bytes);
    EXPECT_EQ(r->proven_optimal, r->lower_bound == r->plan.slab_bytes);
    EXPECT_EQ(r->plan.lower_bound_bytes, lower_bound(t, o));
    improved += r->plan.slab_bytes < best->slab_bytes;
  }
  EXPECT_GT(improved, 0);  // the search does more than hand back best's plan
}

// A goal between the optimum and best's slab: the search stops at the first placement
// under it, without proving anything further.
TEST(SearchPlanner, StopsAtTheGoal) {
  const planner_options o;
  const auto cases = tiny_traces_above_bound(0x5ea4c406, 2500, o);
  int tried = 0;
  for (const auto& [t, optimum] : cases) {
    const std::uint64_t best = plan_best(t, o)->slab_bytes;
    search_options s = budget(UINT64_MAX);
    s.goal_bytes = best;  // met at the start: no search
    absl::StatusOr<search_result> r = search_plan(t, o, s);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->nodes, 0u);
    EXPECT_EQ(r->plan.slab_bytes, best);
    if (best == optimum) continue;
    ++tried;
    s.goal_bytes = best - 1;
    r = search_plan(t, o, s);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->plan.slab_bytes, best - 1);
    EXPECT_GE(r->plan.slab_bytes, optimum);
    EXPECT_TRUE(validate(t, r->plan, o).ok());
  }
  RecordProperty("goals_below_best", tried);
}

TEST(SearchPlanner, StopsAtTheStopFlagWithBestsPlan) {
  std::mt19937_64 rng(0x5ea4c405);
  const planner_options o;
  const trace t = multi_stream_staircase(rng, 3, 400);
  std::atomic<bool> stop{true};
  search_options s;
  s.stop = &stop;
  absl::StatusOr<search_result> r = search_plan(t, o, s);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(validate(t, r->plan, o).ok());
  EXPECT_LE(r->plan.slab_bytes, plan_best(t, o)->slab_bytes);
  EXPECT_LE(r->nodes, 3 * 256u);  // checked every 256 nodes, per capacity tried
  EXPECT_LT(r->seconds, 5.0);
}

TEST(SearchPlanner, EmptyAndOutlivingOnlyTracesAreOptimal) {
  trace t;
  t.ops = {"unknown"};
  absl::StatusOr<search_result> r = search_plan(t);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->proven_optimal);
  EXPECT_EQ(r->plan.slab_bytes, 0u);
  trace_allocation a;
  a.size = 100;
  t.allocations.push_back(a);  // outlives
  r = search_plan(t);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->proven_optimal);
  EXPECT_EQ(r->plan.offsets[0], not_in_slab);
}

}  // namespace
}  // namespace replayalloc
