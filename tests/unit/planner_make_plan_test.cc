// Tests for planner/make_plan.cc: the planners by name (planner_names(), make_plan()).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "trace/trace.h"
#include "planner_testing.h"

namespace replayalloc {
namespace {

using namespace planner_testing;
using ::testing::HasSubstr;

TEST(MakePlan, KnowsEveryPlannerAndRefusesOthersByName) {
  EXPECT_THAT(planner_names(), ::testing::ElementsAre("best", "greedy_by_size", "greedy_by_size_class",
                                                      "greedy_by_breadth", "greedy_by_lifetime", "greedy_by_arrival", "first_fit"));
  const absl::StatusOr<placement> p = make_plan(fragmenting_trace(), "simulated_annealing");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("known: best, greedy_by_size"));
}

}  // namespace
}  // namespace replayalloc
