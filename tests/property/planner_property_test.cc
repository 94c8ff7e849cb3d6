// Property tests of every planner (planner/planner.h). Offsets differ between planners;
// what must hold for all of them does not:
//   * every plan passes validate() (no live overlap, aligned, inside the slab,
//     outliving allocations outside it) and its slab is the end of its highest slot;
//   * no slab is below lower_bound(), and none beats the brute-force optimum;
//   * planning is deterministic: the same trace gives the same offsets;
//   * "best" is never worse than any of the orderings it tries.
// Thousands of seeded random traces of three shapes (event-by-event, coarse, layer
// chains); a failure names its iteration.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "../../bench/planner/synthetic.h"
#include "random_traces.h"

namespace replayalloc {
namespace {

using namespace testing_random;

std::uint64_t highest_slot_end(const trace& t, const placement& p, const planner_options& o) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    if (p.offsets[i] != not_in_slab) end = std::max(end, p.offsets[i] + slot_footprint(t.allocations[i], o));
  }
  return end;
}

// Plans t with every planner, checks each plan, returns the slabs by planner.
std::map<std::string, std::uint64_t> check_every_planner(const trace& t, const planner_options& o) {
  std::map<std::string, std::uint64_t> slabs;
  const std::uint64_t lb = lower_bound(t, o);
  for (const std::string& name : planner_names()) {
    SCOPED_TRACE(name);
    const absl::StatusOr<placement> p = make_plan(t, name, o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) continue;
    const absl::Status v = validate(t, *p, o);
    EXPECT_TRUE(v.ok()) << v;
    EXPECT_EQ(p->lower_bound_bytes, lb);
    EXPECT_GE(p->slab_bytes, lb);
    EXPECT_EQ(p->slab_bytes, highest_slot_end(t, *p, o));
    for (std::size_t i = 0; i < t.allocations.size(); ++i) {
      // Every planner places everything it may: only outliving allocations stay out.
      EXPECT_EQ(p->offsets[i] == not_in_slab, t.allocations[i].outlives()) << "allocation " << i;
    }
    const absl::StatusOr<placement> again = make_plan(trace(t), name, o);
    EXPECT_TRUE(again.ok() && again->offsets == p->offsets && again->algorithm == p->algorithm)
        << "not deterministic";
    slabs[name] = p->slab_bytes;
  }
  for (const auto& [name, slab] : slabs) {
    if (name.starts_with("greedy_by_") || name == "first_fit") {
      EXPECT_LE(slabs["best"], slab) << "best is worse than " << name;
    }
  }
  return slabs;
}

TEST(PlannerProperty, EveryPlannerGivesValidPlansOnEventTraces) {
  std::mt19937_64 rng(0x9a11e401);
  for (int iter = 0; iter < 1500; ++iter) {
    SCOPED_TRACE(iter);
    check_every_planner(event_trace(rng, 1 + rng() % 80), {});
    if (HasFailure()) return;
  }
}

TEST(PlannerProperty, EveryPlannerGivesValidPlansOnCoarseTraces) {
  std::mt19937_64 rng(0x9a11e402);
  for (int iter = 0; iter < 1500; ++iter) {
    SCOPED_TRACE(iter);
    const planner_options o{.slot_align = std::uint64_t{16} << (rng() % 5)};
    check_every_planner(coarse_trace(rng, 1 + rng() % 60), o);
    if (HasFailure()) return;
  }
}

TEST(PlannerProperty, EveryPlannerGivesValidPlansOnLayerChains) {
  std::mt19937_64 rng(0x9a11e403);
  int at_bound = 0;
  const int runs = 1000;
  for (int iter = 0; iter < runs; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = chain_trace(rng, 2 + rng() % 120);
    const auto slabs = check_every_planner(t, {});
    if (HasFailure()) return;
    at_bound += slabs.at("best") == lower_bound(t);
  }
  // Chains are what inference looks like; "best" should reach the bound on nearly all.
  EXPECT_GT(at_bound, runs * 9 / 10);
}

// Traces large enough that the time index is deep and the search's budget matters.
TEST(PlannerProperty, EveryPlannerGivesValidPlansOnLargerTraces) {
  std::mt19937_64 rng(0x9a11e404);
  for (int iter = 0; iter < 24; ++iter) {
    SCOPED_TRACE(iter);
    const std::size_t n = 500 + rng() % 1500;
    const trace t = iter % 3 == 0 ? event_trace(rng, n) : iter % 3 == 1 ? coarse_trace(rng, n) : chain_trace(rng, n);
    check_every_planner(t, {});
    if (HasFailure()) return;
  }
}

// Growing traces (an LLM request's decode steps) and staircases of crossing lifetimes
// (bench/planner's), where first fit used to beat every greedy ordering: best is never
// worse than any of them (check_every_planner), on small and large traces alike.
TEST(PlannerProperty, BestIsNeverWorseThanFirstFitOnGrowingAndStaircaseTraces) {
  std::mt19937_64 rng(0x9a11e406);
  double worst_gain = 1e9;
  for (int iter = 0; iter < 60; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = iter % 3 == 0   ? (iter < 54 ? decode_trace(rng, 1 + rng() % 4, 8 + rng() % 40)
                                                 : decode_trace(rng, 6 + rng() % 7, 60 + rng() % 90))
                    : iter % 3 == 1 ? bench::staircase(200 + rng() % (iter < 54 ? 800 : 6000), rng())
                                    : multi_stream_staircase(rng, 2 + rng() % 6, 100 + rng() % (iter < 54 ? 900 : 6000));
    const auto slabs = check_every_planner(t, {});
    if (HasFailure()) return;
    worst_gain = std::min(worst_gain, static_cast<double>(slabs.at("first_fit")) / slabs.at("best"));
  }
  std::printf("first fit / best on growing and staircase traces: at least %.3f\n", worst_gain);
}

TEST(PlannerProperty, NoPlannerBeatsTheBruteForceOptimum) {
  std::mt19937_64 rng(0x9a11e405);
  const planner_options o;
  std::map<std::string, int> optimal;
  const int runs = 400;
  for (int iter = 0; iter < runs; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = tiny_trace(rng, 7);
    placement opt;
    const std::uint64_t best = optimal_slab(t, o, &opt);
    ASSERT_TRUE(validate(t, opt, o).ok()) << validate(t, opt, o);  // a real placement...
    ASSERT_GE(best, lower_bound(t, o));                              // ...that respects the bound
    for (const std::string& name : planner_names()) {
      const absl::StatusOr<placement> p = make_plan(t, name, o);
      ASSERT_TRUE(p.ok()) << name << ": " << p.status();
      ASSERT_GE(p->slab_bytes, best) << name << " beat the optimum: the brute force or validate() is wrong";
      optimal[name] += p->slab_bytes == best;
    }
  }
  for (const auto& [name, count] : optimal) std::printf("%-20s optimal on %d/%d tiny traces\n", name.c_str(), count, runs);
  // The search must find the optimum of nearly every tiny trace, and do better than
  // greedy by size alone; if it did not, it would not be searching.
  EXPECT_GT(optimal["best"], runs * 95 / 100);
  EXPECT_GE(optimal["best"], optimal["greedy_by_size"]);
}

// The traces above where every planner could still be at the lower bound; these are
// not: the bound cannot be reached, so a planner that "reached" it would be wrong, and
// "best" must still find the optimum the brute force finds.
TEST(PlannerProperty, AboveTheLowerBoundNoPlannerBeatsTheBruteForceAndBestFindsIt) {
  const planner_options o;
  const auto cases = tiny_traces_above_bound(0x9a11e406, 30000, o);
  ASSERT_GE(cases.size(), 15u) << "the scan should find traces above the bound";
  int best_optimal = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(k);
    const auto& [t, optimum] = cases[k];
    ASSERT_GT(optimum, lower_bound(t, o));
    for (const std::string& name : planner_names()) {
      const absl::StatusOr<placement> p = make_plan(t, name, o);
      ASSERT_TRUE(p.ok()) << name << ": " << p.status();
      ASSERT_TRUE(validate(t, *p, o).ok()) << name << ": " << validate(t, *p, o);
      ASSERT_GE(p->slab_bytes, optimum) << name << " beat the optimum";
    }
    best_optimal += make_plan(t, "best", o)->slab_bytes == optimum;
  }
  std::printf("best optimal on %d/%zu tiny traces above the lower bound\n", best_optimal, cases.size());
  EXPECT_GE(best_optimal * 10, static_cast<int>(cases.size()) * 9);
}

}  // namespace
}  // namespace replayalloc
