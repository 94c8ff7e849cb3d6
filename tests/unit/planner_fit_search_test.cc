// Tests for planner/fit_search.cc, the bounded search "best" runs when every greedy
// ordering ends above the lower bound (Note [Two-sided placement in arrival order]):
// a transformer encoder whose layer inputs must alternate between the bottom and the
// top of the slab.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "planner/planner.h"
#include "trace/trace.h"
#include "planner_testing.h"

namespace replayalloc {
namespace {

using namespace planner_testing;

// A transformer encoder's layer, as recorded from PyTorch (u = 1024 bytes here; the
// layer's input X lives through the layer, its output Y is made before X is freed):
//   time  0  1  3  5  6  9  15 16 18 ... 25
//   A 3u  [0,2)         fused QKV matmul      Q 3u  [1,8)   attention's qkv
//   B 2u  [3,4)  bmm    C 1u [5,7)  clone     D 1u  [6,14)  out projection
//   E 1u  [9,24) norm   F 4u [15,17) FFN      G 1u  [16,23) FFN out
//   Y 1u  [18, next layer's 25) output norm
// The peaks are 7u: X + A + Q (so X is at 0, 3u or 6u: A and Q need 3u each in one
// piece) and X + E + F + G (F needs 4u in one piece: X at 0 or 6u). Y lives with X,
// E and G, and is the next layer's X: the bound is reached only when the layer
// inputs alternate between 0 and the top (6u). Every greedy ordering puts Y at the
// bottom of some gap and ends at 8u; "best" must find the alternation.
trace encoder_chain(int layers) {
  constexpr std::uint64_t u = 1024;
  trace t;
  t.key = "test/encoder";
  t.ops = {"unknown"};
  std::uint64_t id = 0;
  auto add = [&](std::uint64_t units, std::uint64_t at, std::uint64_t free_at) {
    t.allocations.push_back(alloc(id++, units * u, at, free_at, 64));
    return t.allocations.size() - 1;
  };
  std::size_t x = not_in_slab;
  for (int l = 0; l < layers; ++l) {
    const std::uint64_t b = 25 * static_cast<std::uint64_t>(l);
    add(3, b + 0, b + 2);
    add(3, b + 1, b + 8);
    add(2, b + 3, b + 4);
    add(1, b + 5, b + 7);
    add(1, b + 6, b + 14);
    add(1, b + 9, b + 24);
    add(4, b + 15, b + 17);
    add(1, b + 16, b + 23);
    if (x != not_in_slab) t.allocations[x].free_at = b + 24;  // X freed after Y is made
    x = add(1, b + 18, b + 25 + 1);                           // Y: lives into the next layer
  }
  t.events = 25 * static_cast<std::uint64_t>(layers) + 2;
  std::stable_sort(t.allocations.begin(), t.allocations.end(),
                   [](const trace_allocation& a, const trace_allocation& b) { return a.alloc_at < b.alloc_at; });
  return t;
}

TEST(Best, ReachesTheBoundOnAnEncoderWhoseLayerInputsMustAlternate) {
  const trace t = encoder_chain(12);
  EXPECT_EQ(lower_bound(t), 7u * 1024);
  for (const std::string_view greedy : {"greedy_by_size", "greedy_by_breadth", "greedy_by_lifetime"}) {
    EXPECT_GT(plan_named(t, greedy).slab_bytes, 7u * 1024) << greedy;
  }
  const placement p = plan_named(t, "best");
  EXPECT_EQ(p.slab_bytes, 7u * 1024);
  EXPECT_EQ(p.algorithm, "best(fit)");
  // The layer outputs (1u, born at 18 within their layer) that are the next layer's
  // input alternate 0, 6u, 0, ... (the last one is free to go anywhere).
  std::vector<std::uint64_t> outputs;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    if (t.allocations[i].alloc_at % 25 == 18) outputs.push_back(p.offsets[i]);
  }
  ASSERT_EQ(outputs.size(), 12u);
  for (std::size_t l = 1; l + 1 < outputs.size(); ++l) {
    EXPECT_TRUE((outputs[l - 1] == 0 && outputs[l] == 6u * 1024) || (outputs[l - 1] == 6u * 1024 && outputs[l] == 0))
        << "layers " << l - 1 << " and " << l << ": " << outputs[l - 1] << ", " << outputs[l];
  }
}

}  // namespace
}  // namespace replayalloc
