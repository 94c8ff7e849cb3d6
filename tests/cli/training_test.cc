// Tests for cli/training.h (Note [Training memory]): a training step's split into
// parameters, gradients, optimizer state, saved activations, outputs, workspace and
// temporaries, on a hand-made first step of a tiny model whose bytes per part are
// known in advance; the predicted split at a batch size never recorded.
//
// The model: x[B,4] -> Linear(4, 8) -> ReLU -> Linear(8, 2) -> MSE loss; SGD with
// momentum; floats. Built inside the step (as a model made in the recorded iteration):
// W1 128 B, b1 32 B, W2 64 B, b2 8 B, 232 bytes of parameters; as many bytes of
// gradients and of momentum buffers. Op names as libtorch 1.13 tags them (innermost
// RecordFunction scope), time across (one column per event), '#' where live, '>' when
// it outlives the iteration; B is the batch size. The backward phase starts at event 12
// (aten::mse_loss_backward), the optimizer phase at 28 (Optimizer.step#SGD.step). Ops
// shortened: relu aten::clamp_min, mse aten::mse_loss, ones aten::ones_like, thr_bw
// aten::threshold_backward, step and zero_g the optimizer's scopes (training_trace()).
//
//  id op      size 0         1         2         3         4
//                  0123456789012345678901234567890123456789012
//  0  empty    128 ###########################################> parameters
//  1  empty     32  ##########################################> parameters
//  2  empty     64   #########################################> parameters
//  3  empty      8    ########################################> parameters
//  4  addmm    256     #                                        workspace
//  5  addmm    32B       ##                                     temporaries
//  6  relu     32B        #############                         saved activations
//  7  addmm     8B          #######                             saved activations
//  8  mse        4           #################################> outputs
//  9  ones       4            ######                            saved activations
//  10 mse_bw    8B             ###                              temporaries
//  11 mm        64              ##########################      gradients
//  12 sum        8               ##########################     gradients
//  13 mm       32B                   ###                        temporaries
//  14 thr_bw   32B                    #####                     temporaries
//  15 mm       128                       ###################    gradients
//  16 sum       32                        ###################   gradients
//  17 mm       512                          #                   workspace
//  18 zeros      4                            ###               temporaries
//  19 step     288                             #                workspace
//  20 clone    128                                ############> optimizer state
//  21 clone     32                                 ###########> optimizer state
//  22 clone     64                                  ##########> optimizer state
//  23 clone      8                                   #########> optimizer state
//  24 zeros      4                                    ###       temporaries
//  25 zero_g   288                                     #        workspace
//
// Why each is what it is: 0-3 outlive the step and are made before the first allocation
// the step frees (4); 8 (the loss) outlives it too, made after. 6 (the ReLU's output),
// 7 (the prediction, for the loss's backward) and 9 (loss.backward()'s seed, made just
// before the first backward op: the Note says so) are made in forward and freed in
// backward. 11, 12, 15, 16 are made in backward and freed by zero_grad(set_to_none=True)
// after the last optimizer allocation (25). 18 is torch 1.13's record_function placeholder
// (torch.zeros(1), made just before the optimizer's scope, freed inside it): a
// temporary, not a gradient. 20-23 are the momentum buffers. 4, 17, 19, 25 are freed
// before another op allocates.
//
// At B = 16 the step's peak is at event 19 (aten::threshold_backward): parameters 232,
// the ReLU's output 512, the loss 4, two gradients 64 + 8, the two 512-byte temporaries
// 13 and 14: 1844 bytes. The lower bound's peak is there too: slot footprints (64-byte
// slots) 512 + 64 + 64 + 512 + 512 = 1664.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/analysis.h"
#include "cli/predict.h"
#include "cli/training.h"

namespace replayalloc::cli {
namespace {

using ::testing::ElementsAre;

constexpr std::uint64_t never = never_freed;

trace training_trace(std::uint64_t batch) {
  trace t;
  t.ops = {"unknown",                                   // 0
           "aten::empty",                               // 1
           "aten::addmm",                               // 2
           "aten::clamp_min",                           // 3
           "aten::mse_loss",                            // 4
           "aten::ones_like",                           // 5
           "aten::mse_loss_backward",                   // 6
           "aten::mm",                                  // 7
           "aten::sum",                                 // 8
           "aten::threshold_backward",                  // 9
           "aten::zeros",                               // 10
           "Optimizer.step#SGD.step",                   // 11
           "aten::clone",                               // 12
           "Optimizer.zero_grad#SGD.zero_grad"};        // 13
  struct row {
    std::uint64_t size, alloc_at, free_at;
    std::uint32_t op;
  };
  const std::uint64_t b = batch;
  const row rows[] = {
      {128, 0, never, 1},     {32, 1, never, 1},      {64, 2, never, 1},      {8, 3, never, 1},
      {256, 4, 5, 2},        {32 * b, 6, 8, 2},     {32 * b, 7, 20, 3},    {8 * b, 9, 16, 2},
      {4, 10, never, 4},      {4, 11, 17, 5},        {8 * b, 12, 15, 6},    {64, 13, 39, 7},
      {8, 14, 40, 8},        {32 * b, 18, 21, 7},   {32 * b, 19, 24, 9},   {128, 22, 41, 7},
      {32, 23, 42, 8},       {512, 25, 26, 7},      {4, 27, 30, 10},       {288, 28, 29, 11},
      {128, 31, never, 12},   {32, 32, never, 12},    {64, 33, never, 12},    {8, 34, never, 12},
      {4, 35, 38, 10},       {288, 36, 37, 13},
  };
  for (const row& r : rows) {
    trace_allocation a;
    a.id = t.allocations.size();
    a.size = r.size;
    a.alloc_at = r.alloc_at;
    a.free_at = r.free_at;
    a.op = r.op;
    t.allocations.push_back(a);
  }
  t.events = 43;
  return t;
}

std::optional<training_split> split(const trace& t, std::uint64_t parameters_given = 0) {
  EXPECT_TRUE(check_trace(t).ok()) << check_trace(t);
  return split_training(t, analyze(t), planner_options{}, parameters_given);
}

const training_row& part(const training_split& s, training_part p) { return s.by_part[static_cast<int>(p)]; }

using tp = training_part;

TEST(Training, PhasesFromOpNames) {
  EXPECT_TRUE(is_backward_op("aten::convolution_backward"));
  EXPECT_TRUE(is_backward_op("aten::_log_softmax_backward_data"));
  EXPECT_TRUE(is_backward_op("autograd::engine::evaluate_function: AddmmBackward0"));
  EXPECT_FALSE(is_backward_op("aten::addmm"));
  EXPECT_FALSE(is_backward_op("Optimizer.step#SGD.step"));
  EXPECT_TRUE(is_optimizer_op("Optimizer.step#SGD.step"));
  EXPECT_TRUE(is_optimizer_op("Optimizer.zero_grad#Adam.zero_grad"));
  EXPECT_FALSE(is_optimizer_op("aten::clone"));

  const std::optional<training_split> s = split(training_trace(16));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->backward_at, 12u);
  EXPECT_EQ(s->optimizer_at, 28u);
  EXPECT_TRUE(s->has_optimizer);
  EXPECT_EQ(s->end, 43u);
}

TEST(Training, EachAllocationFollowsTheNote) {
  const std::optional<training_split> s = split(training_trace(16));
  ASSERT_TRUE(s.has_value());
  EXPECT_THAT(s->parts,
              ElementsAre(tp::parameters, tp::parameters, tp::parameters, tp::parameters,              // 0-3
                          tp::workspace, tp::temporaries, tp::saved_activations, tp::saved_activations,  // 4-7
                          tp::outputs, tp::saved_activations, tp::temporaries, tp::gradients,            // 8-11
                          tp::gradients, tp::temporaries, tp::temporaries, tp::gradients,                // 12-15
                          tp::gradients, tp::workspace, tp::temporaries, tp::workspace,                  // 16-19
                          tp::optimizer_state, tp::optimizer_state, tp::optimizer_state,                 // 20-22
                          tp::optimizer_state, tp::temporaries, tp::workspace));                         // 23-25
}

// The bytes of each part at batch `b`, as the model says.
void expect_model_bytes(const training_split& s, std::uint64_t b) {
  EXPECT_EQ(part(s, tp::parameters).count, 4u);
  EXPECT_EQ(part(s, tp::parameters).total_bytes, 232u);  // W1 128, b1 32, W2 64, b2 8
  EXPECT_EQ(part(s, tp::gradients).count, 4u);
  EXPECT_EQ(part(s, tp::gradients).total_bytes, 232u);   // one per parameter
  EXPECT_EQ(part(s, tp::optimizer_state).count, 4u);
  EXPECT_EQ(part(s, tp::optimizer_state).total_bytes, 232u);  // one momentum buffer each
  EXPECT_EQ(part(s, tp::saved_activations).count, 3u);
  EXPECT_EQ(part(s, tp::saved_activations).total_bytes, 32 * b + 8 * b + 4);  // ReLU out, prediction, seed
  EXPECT_EQ(part(s, tp::outputs).count, 1u);
  EXPECT_EQ(part(s, tp::outputs).total_bytes, 4u);  // the loss
  EXPECT_EQ(part(s, tp::workspace).count, 4u);
  EXPECT_EQ(part(s, tp::workspace).total_bytes, 256u + 512 + 288 + 288);
  EXPECT_EQ(part(s, tp::temporaries).count, 6u);
  EXPECT_EQ(part(s, tp::temporaries).total_bytes, 32 * b + 8 * b + 32 * b + 32 * b + 4 + 4);
}

TEST(Training, BytesPerPartAreTheModels) {
  const std::optional<training_split> s = split(training_trace(16));
  ASSERT_TRUE(s.has_value());
  expect_model_bytes(*s, 16);
  EXPECT_EQ(part(*s, tp::saved_activations).largest_bytes, 512u);
  EXPECT_EQ(s->held_after_bytes, 232u + 4 + 232);  // parameters, the loss, momentum
}

TEST(Training, PeakAndTheOpThatSetsIt) {
  const trace t = training_trace(16);
  const trace_analysis r = analyze(t);
  const std::optional<training_split> s = split_training(t, r);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->peak_bytes, 1844u);
  EXPECT_EQ(s->peak_bytes, r.peak_live_bytes);
  EXPECT_EQ(s->peak_at, 19u);
  EXPECT_EQ(s->peak_op, "aten::threshold_backward");
  EXPECT_EQ(s->peak_phase, training_phase::backward);
  EXPECT_EQ(part(*s, tp::parameters).at_peak_bytes, 232u);
  EXPECT_EQ(part(*s, tp::gradients).at_peak_bytes, 64u + 8);
  EXPECT_EQ(part(*s, tp::optimizer_state).at_peak_bytes, 0u);
  EXPECT_EQ(part(*s, tp::saved_activations).at_peak_bytes, 512u);
  EXPECT_EQ(part(*s, tp::outputs).at_peak_bytes, 4u);
  EXPECT_EQ(part(*s, tp::workspace).at_peak_bytes, 0u);
  EXPECT_EQ(part(*s, tp::temporaries).at_peak_bytes, 1024u);
  // The lower bound's peak (slot footprints, slab-eligible): the same moment.
  EXPECT_EQ(r.lower_bound_bytes, 1664u);
  EXPECT_EQ(r.peak_at, 19u);
  EXPECT_EQ(part(*s, tp::gradients).at_slab_peak_bytes, 64u + 64);
  EXPECT_EQ(part(*s, tp::saved_activations).at_slab_peak_bytes, 512u);
  EXPECT_EQ(part(*s, tp::temporaries).at_slab_peak_bytes, 1024u);
  std::uint64_t at_peak = 0, at_slab_peak = 0;
  for (const training_row& row : s->by_part) at_peak += row.at_peak_bytes, at_slab_peak += row.at_slab_peak_bytes;
  EXPECT_EQ(at_peak, s->peak_bytes);
  EXPECT_EQ(at_slab_peak, r.lower_bound_bytes);
}

TEST(Training, GradientsKeptPastTheStepAreGradientsToo) {
  // zero_grad in place (or not called): the gradients outlive the iteration.
  trace t = training_trace(16);
  for (const std::size_t i : {11u, 12u, 15u, 16u}) t.allocations[i].free_at = never_freed;
  const std::optional<training_split> s = split(t);
  ASSERT_TRUE(s.has_value());
  expect_model_bytes(*s, 16);
  EXPECT_EQ(s->held_after_bytes, 232u + 4 + 232 + 232);  // and the gradients
}

TEST(Training, ParametersGivenCountAllAlong) {
  // Parameters made before the recorded iteration: the user gives their bytes.
  trace t = training_trace(16);
  t.allocations.erase(t.allocations.begin(), t.allocations.begin() + 4);
  std::optional<training_split> s = split(t);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(part(*s, tp::parameters).count, 0u);
  EXPECT_EQ(part(*s, tp::parameters).total_bytes, 0u);
  EXPECT_EQ(s->peak_bytes, 1844u - 232);
  s = split(t, 232);
  EXPECT_EQ(s->parameters_given_bytes, 232u);
  EXPECT_EQ(part(*s, tp::parameters).count, 0u);
  EXPECT_EQ(part(*s, tp::parameters).total_bytes, 232u);
  EXPECT_EQ(part(*s, tp::parameters).at_peak_bytes, 232u);
  EXPECT_EQ(part(*s, tp::parameters).at_slab_peak_bytes, 0u);
  EXPECT_EQ(s->peak_bytes, 1844u);
  EXPECT_EQ(s->held_after_bytes, 232u + 4 + 232);
  EXPECT_EQ(part(*s, tp::gradients).total_bytes, 232u);
  EXPECT_EQ(part(*s, tp::optimizer_state).total_bytes, 232u);
}

TEST(Training, NoBackwardOpIsNoTrainingStep) {
  // Inference: the forward alone (allocations 0-9, the seed included), and a trace with
  // an optimizer op but no backward one.
  trace t = training_trace(16);
  t.allocations.resize(10);
  t.events = 21;
  EXPECT_FALSE(split(t).has_value());
  trace u = training_trace(16);
  for (trace_allocation& a : u.allocations) {
    if (u.ops[a.op].find("backward") != std::string::npos) a.op = 7;  // aten::mm
  }
  EXPECT_FALSE(split(u).has_value());
  trace empty;
  empty.ops = {"unknown"};
  EXPECT_FALSE(split(empty).has_value());
}

TEST(Training, WithoutAnOptimizerOpThePhaseIsEmpty) {
  // Backward only (the optimizer outside the iteration): gradients are what backward
  // made and kept past the step.
  trace t = training_trace(16);
  t.allocations.resize(18);  // up to the backward workspace
  for (const std::size_t i : {11u, 12u, 15u, 16u}) t.allocations[i].free_at = never_freed;
  t.events = 27;
  const std::optional<training_split> s = split(t);
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->has_optimizer);
  EXPECT_EQ(s->optimizer_at, s->end);
  EXPECT_EQ(part(*s, tp::gradients).total_bytes, 232u);
  EXPECT_EQ(part(*s, tp::optimizer_state).count, 0u);
}

TEST(Training, PredictedSplitAtABatchNeverRecorded) {
  // Recorded at batch 2 and 8, predicted at 16: activations and temporaries scale,
  // parameters, gradients and optimizer state keep their bytes; the prediction is the
  // batch-16 trace's split exactly.
  const std::vector<batch_trace> rec = {{2, training_trace(2)}, {8, training_trace(8)}};
  std::vector<footprint> measured;
  for (const batch_trace& r : rec) measured.push_back(*measure(r.tr, "best"));
  ASSERT_TRUE(measured[0].training.has_value());
  EXPECT_EQ(part(*measured[0].training, tp::saved_activations).total_bytes, 32u * 2 + 8 * 2 + 4);
  EXPECT_EQ(part(*measured[1].training, tp::saved_activations).total_bytes, 32u * 8 + 8 * 8 + 4);

  absl::StatusOr<prediction> p = predict(rec, measured, 16, "best");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, "per_allocation");
  ASSERT_TRUE(p->predicted.training.has_value());
  const training_split& s = *p->predicted.training;
  expect_model_bytes(s, 16);
  EXPECT_EQ(part(s, tp::saved_activations).total_bytes, 644u);
  EXPECT_EQ(part(s, tp::temporaries).total_bytes, 1672u);
  EXPECT_EQ(s.peak_bytes, 1844u);
  EXPECT_EQ(s.peak_at, 19u);
  EXPECT_EQ(s.peak_op, "aten::threshold_backward");
  EXPECT_EQ(part(s, tp::saved_activations).at_peak_bytes, 512u);
  EXPECT_EQ(part(s, tp::temporaries).at_peak_bytes, 1024u);
  EXPECT_EQ(part(s, tp::gradients).at_peak_bytes, 72u);
  EXPECT_EQ(s.parts, split(training_trace(16))->parts);

  // Parameters made before the recordings, given: constant in every column.
  p = predict(rec, measured, 16, "best", 1000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(part(*p->predicted.training, tp::parameters).total_bytes, 1232u);
  EXPECT_EQ(p->predicted.training->peak_bytes, 2844u);

  // The linear peak has no split.
  std::vector<batch_trace> other = rec;
  other[1].tr.allocations.pop_back();
  std::vector<footprint> m2;
  for (const batch_trace& r : other) m2.push_back(*measure(r.tr, "best"));
  p = predict(other, m2, 16, "best");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->method, "linear_peak");
  EXPECT_FALSE(p->predicted.training.has_value());
}

}  // namespace
}  // namespace replayalloc::cli
