// Tests for cli/predict.h (Note [Footprint prediction]): the per-allocation fit on
// traces whose sizes are exactly linear in the batch size predicts the recording at
// another batch size exactly; constant sizes stay constant; recordings that do not
// match fall back to the linear peak and say why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/analysis.h"
#include "cli/predict.h"

namespace replayalloc::cli {
namespace {

using ::testing::HasSubstr;

// A chain of layers: a constant 4 KiB workspace per layer, then an activation of
// batch * (1000 + 37 * layer) bytes that lives until the next layer's activation exists;
// the last one outlives the iteration.
trace model_trace(std::uint64_t batch, int layers = 20) {
  trace t;
  t.ops = {"unknown", "conv", "relu"};
  std::uint64_t at = 0, id = 0;
  std::size_t prev = SIZE_MAX;  // the previous layer's activation
  for (int l = 0; l < layers; ++l) {
    trace_allocation ws;
    ws.id = id++, ws.size = 4096, ws.op = 1, ws.alloc_at = at++, ws.free_at = at++;
    t.allocations.push_back(ws);
    trace_allocation act;
    act.id = id++, act.size = batch * (1000 + 37 * l), act.op = l % 2 ? 2 : 1, act.alloc_at = at++;
    t.allocations.push_back(act);
    if (prev != SIZE_MAX) t.allocations[prev].free_at = at++;
    prev = t.allocations.size() - 1;
  }
  t.events = at;
  return t;
}

std::vector<footprint> measure_all(const std::vector<batch_trace>& r) {
  std::vector<footprint> out;
  for (const batch_trace& b : r) out.push_back(*measure(b.tr, "best"));
  return out;
}

TEST(Predict, LinearSizesArePredictedExactly) {
  const std::vector<batch_trace> rec = {{1, model_trace(1)}, {8, model_trace(8)}};
  for (const std::uint64_t at : {16u, 32u, 3u}) {
    absl::StatusOr<trace> t = predict_trace(rec, static_cast<double>(at));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(*t, model_trace(at)) << "batch " << at;
    absl::StatusOr<prediction> p = predict(rec, measure_all(rec), static_cast<double>(at), "best");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->method, "per_allocation");
    const footprint truth = *measure(model_trace(at), "best");
    EXPECT_EQ(p->predicted.lower_bound_bytes, truth.lower_bound_bytes);
    EXPECT_EQ(p->predicted.slab_bytes, truth.slab_bytes);
    EXPECT_EQ(p->predicted.peak_live_bytes, truth.peak_live_bytes);
    EXPECT_EQ(p->predicted.persistent_bytes, truth.persistent_bytes);
    EXPECT_EQ(p->constant, 20u);  // the workspaces
    EXPECT_EQ(p->scaling, 20u);
  }
}

TEST(Predict, ThreeRecordingsFitByLeastSquares) {
  // Sizes 100 + 10*b exactly at b = 1, 2, 4 except one recording off by +6 bytes at
  // b = 2: the least-squares line through (1,110), (2,126), (4,140) is 105 + 9*b... with
  // mean x 7/3, mean y 376/3: k = sum dx*dy / sum dx^2 = (-4/3*-46/3 + -1/3*2/3 + 5/3*44/3)
  // / (16/9 + 1/9 + 25/9) = (184/9 - 2/9 + 220/9) / (42/9) = 402/42 = 9.571...;
  // at b = 10: 376/3 + 9.571 * (10 - 7/3) = 198.7 -> 199.
  auto one = [](std::uint64_t size) {
    trace t;
    t.ops = {"unknown"};
    trace_allocation a;
    a.size = size, a.alloc_at = 0, a.free_at = 1;
    t.allocations = {a};
    t.events = 1;
    return t;
  };
  const std::vector<batch_trace> rec = {{1, one(110)}, {2, one(126)}, {4, one(140)}};
  absl::StatusOr<trace> t = predict_trace(rec, 10);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->allocations[0].size, 199u);
  // Extrapolated below zero, a size stays one byte.
  const std::vector<batch_trace> shrinking = {{1, one(1000)}, {2, one(10)}};
  EXPECT_EQ(predict_trace(shrinking, 5)->allocations[0].size, 1u);
  // Beyond 2^47 bytes is an error, not a wrapped size.
  const std::vector<batch_trace> big = {{1, one(1) }, {2, one(std::uint64_t{1} << 40)}};
  EXPECT_THAT(predict_trace(big, 1e6).status().message(), HasSubstr("above the limit"));
}

TEST(Predict, MismatchedRecordingsFallBackToTheLinearPeak) {
  const std::vector<batch_trace> rec = {{1, model_trace(1, 20)}, {8, model_trace(8, 21)}};
  absl::StatusOr<prediction> p = predict(rec, measure_all(rec), 16, "best");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, "linear_peak");
  EXPECT_THAT(p->why_not_per_allocation, HasSubstr("number of allocations"));
  const std::vector<footprint> m = measure_all(rec);
  // The line through the two lower bounds, at 16.
  const double expect = m[0].lower_bound_bytes + (m[1].lower_bound_bytes - m[0].lower_bound_bytes) / 7 * 15;
  EXPECT_NEAR(p->predicted.lower_bound_bytes, expect, 1e-6 * expect);
  EXPECT_GE(p->predicted.slab_bytes, p->predicted.lower_bound_bytes);

  trace other_ops = model_trace(8);
  other_ops.allocations[3].op = 1;  // relu -> conv
  const std::vector<batch_trace> rec2 = {{1, model_trace(1)}, {8, other_ops}};
  EXPECT_THAT(predict_trace(rec2, 16).status().message(), HasSubstr("allocation 3 differs"));
}

}  // namespace
}  // namespace replayalloc::cli
