// Tests for planner/first_fit.cc: online first fit in arrival order, the caching
// allocators' way, cannot look ahead. The fragmenting trace: planner_testing.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "trace/trace.h"
#include "planner_testing.h"

namespace replayalloc {
namespace {

using namespace planner_testing;
using ::testing::ElementsAre;

TEST(FirstFit, CannotLookAheadAndFragments) {
  const placement p = plan_named(fragmenting_trace(), "first_fit");
  EXPECT_THAT(p.offsets, ElementsAre(0, 1024, 2048));
  EXPECT_EQ(p.slab_bytes, 4096u);
  EXPECT_EQ(p.algorithm, "first_fit");
}

}  // namespace
}  // namespace replayalloc
