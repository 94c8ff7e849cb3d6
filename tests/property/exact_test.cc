// Tests of the exact planner (planner/exact.h) through GLPK's glpsol: it matches the
// brute-force optimum on tiny traces, its plans pass validate(), and every way it can
// fail is a clear status. Tests that need glpsol skip, saying why, when it is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "planner/exact.h"
#include "random_traces.h"

namespace replayalloc {
namespace {

using namespace testing_random;
using ::testing::HasSubstr;

bool have_glpsol() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t colon = std::min(dirs.find(':', at), dirs.size());
    if (std::filesystem::exists(dirs.substr(at, colon - at) + "/glpsol")) return true;
    at = colon + 1;
  }
  return false;
}

#define SKIP_WITHOUT_GLPSOL() \
  if (!have_glpsol()) GTEST_SKIP() << "glpsol is not installed (apt install glpk-utils)"

TEST(ExactPlanner, MatchesTheBruteForceOptimumOnTinyTraces) {
  SKIP_WITHOUT_GLPSOL();
  std::mt19937_64 rng(0xe4ac7001);
  const planner_options o;
  exact_options x;
  x.always_solve = true;  // run the solver even where "best" is at the bound
  int above_bound = 0;
  for (int iter = 0; iter < 40; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = tiny_trace(rng, 7);
    placement opt;
    const std::uint64_t best = optimal_slab(t, o, &opt);
    const absl::StatusOr<placement> p = plan_exact(t, o, x);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->algorithm, "exact");
    ASSERT_TRUE(validate(t, *p, o).ok()) << validate(t, *p, o);
    EXPECT_EQ(p->slab_bytes, best);
    above_bound += best > lower_bound(t, o);
  }
  std::printf("%d of 40 tiny traces have an optimum above the lower bound\n", above_bound);
}

// Where the optimum is above the lower bound, the solver has to prove it (no early
// stop at the bound): the exact planner must match the brute force there too.
TEST(ExactPlanner, MatchesTheBruteForceAboveTheLowerBound) {
  SKIP_WITHOUT_GLPSOL();
  const planner_options o;
  const auto cases = tiny_traces_above_bound(0xe4ac7008, 12000, o);
  ASSERT_GE(cases.size(), 5u);
  exact_options x;
  x.always_solve = true;
  for (std::size_t k = 0; k < cases.size() && k < 10; ++k) {
    SCOPED_TRACE(k);
    const auto& [t, optimum] = cases[k];
    const absl::StatusOr<placement> p = plan_exact(t, o, x);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(validate(t, *p, o).ok()) << validate(t, *p, o);
    EXPECT_EQ(p->slab_bytes, optimum);
  }
}

TEST(ExactPlanner, AtTheLowerBoundNoSolverRuns) {
  std::mt19937_64 rng(0xe4ac7002);
  const trace t = chain_trace(rng, 20);
  exact_options x;
  x.solver = "/nonexistent/glpsol";  // would fail if it ran
  const absl::StatusOr<placement> best = plan_best(t);
  ASSERT_TRUE(best.ok());
  ASSERT_EQ(best->slab_bytes, best->lower_bound_bytes) << "pick a trace \"best\" solves";
  const absl::StatusOr<placement> p = plan_exact(t, {}, x);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->algorithm, "exact(lower bound)");
  EXPECT_EQ(p->offsets, best->offsets);
}

TEST(ExactPlanner, AMissingSolverIsNotFound) {
  std::mt19937_64 rng(0xe4ac7003);
  exact_options x;
  x.solver = "replayalloc-no-such-solver";
  x.always_solve = true;
  const absl::StatusOr<placement> p = plan_exact(tiny_trace(rng, 5), {}, x);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("glpk-utils"));
}

TEST(ExactPlanner, RefusesLargeTraces) {
  std::mt19937_64 rng(0xe4ac7004);
  exact_options x;
  x.max_allocations = 10;
  x.always_solve = true;
  const absl::StatusOr<placement> p = plan_exact(chain_trace(rng, 40), {}, x);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("more than the 10"));
}

TEST(ExactPlanner, RejectsBadInputLikeEveryPlanner) {
  trace t;
  t.key = "bad";
  t.ops = {"unknown"};
  trace_allocation a;
  a.size = 0;  // sizes must be positive
  a.alloc_at = 0;
  a.free_at = 1;
  t.allocations.push_back(a);
  EXPECT_EQ(plan_exact(t).status().code(), absl::StatusCode::kInvalidArgument);
  exact_options x;
  x.time_limit_s = 0;
  EXPECT_EQ(plan_exact(trace{}, {}, x).status().code(), absl::StatusCode::kInvalidArgument);
}

// A trace too hard to prove within one second: the result is still a valid plan, no
// worse than "best", and says it was cut short.
// A random trace that "best" leaves above its lower bound, so that plan_exact runs the
// solver; nullopt when 20 tries found none.
std::optional<trace> trace_for_the_solver(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int attempt = 0; attempt < 20; ++attempt) {
    trace t = event_trace(rng, 60);
    const absl::StatusOr<placement> best = plan_best(t);
    if (best.ok() && best->slab_bytes != best->lower_bound_bytes) return t;
  }
  return std::nullopt;
}

// The time limit reached before the solver found any integer solution (seen under load:
// glpsol then writes no solution file): "best"'s plan, named as a time limit, not an
// error. A stand-in solver that logs what glpsol logs then, and writes nothing.
TEST(ExactPlanner, ATimeLimitWithNoSolutionYetGivesBestsPlan) {
  const std::optional<trace> t = trace_for_the_solver(0xe4ac7005);
  if (!t) GTEST_SKIP() << "every random trace was solved by \"best\" at the bound";
  const std::string solver = ::testing::TempDir() + "/replayalloc-glpsol-timeout.sh";
  {
    std::ofstream f(solver);
    f << "#!/bin/sh\n"
         "echo '+  1552: mip =     not found yet >=   1.640500000e+04        (66; 885)'\n"
         "echo 'TIME LIMIT EXCEEDED; SEARCH TERMINATED'\n";
  }
  ASSERT_EQ(::chmod(solver.c_str(), 0700), 0);
  exact_options x;
  x.solver = solver;
  x.time_limit_s = 1;
  const absl::StatusOr<placement> p = plan_exact(*t, {}, x);
  std::remove(solver.c_str());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->algorithm, "exact(time limit)");
  EXPECT_EQ(p->offsets, plan_best(*t)->offsets);
  EXPECT_TRUE(validate(*t, *p).ok()) << validate(*t, *p);
}

TEST(ExactPlanner, ATimeLimitGivesAValidPlanNoWorseThanBest) {
  SKIP_WITHOUT_GLPSOL();
  const std::optional<trace> t = trace_for_the_solver(0xe4ac7005);
  if (!t) GTEST_SKIP() << "every random trace was solved by \"best\" at the bound";
  exact_options x;
  x.time_limit_s = 1;
  const absl::StatusOr<placement> p = plan_exact(*t, {}, x);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(validate(*t, *p).ok()) << validate(*t, *p);
  EXPECT_LE(p->slab_bytes, plan_best(*t)->slab_bytes);
  EXPECT_THAT(p->algorithm, ::testing::AnyOf("exact", "exact(time limit)"));
}

}  // namespace
}  // namespace replayalloc
