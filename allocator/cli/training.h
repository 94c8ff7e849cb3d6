// replayalloc/cli/training.h: a training step's memory, split into what it is for.
//
// Layer: cli (pure functions over a trace and its analysis). Shared by `report` and
// `predict`.
//
// Note [Training memory]
// ~~~~~~~~~~~~~~~~~~~~~~
// A training step (forward, loss, backward, optimizer step, zero_grad) recorded as one
// iteration holds memory for reasons a trainer tells apart (weights, their gradients,
// the optimizer's state, what autograd keeps for backward); the split tells them apart
// from lifetimes and op tags, with no knowledge of the model. The op tags first cut the
// step into three phases (a tag is the innermost RecordFunction scope in the libtorch
// integration, Note [Op tags]):
//   backward   starts at the first allocation whose op is a backward op: its name
//              contains "backward" (any case: aten::convolution_backward,
//              aten::nll_loss_backward, aten::_log_softmax_backward_data, the autograd
//              engine's "...Backward0" nodes) or starts with "autograd::".
//   optimizer  starts at the first allocation, at or after that, whose op names an
//              optimizer: contains "optimizer" (any case; torch's optimizers run in a
//              scope "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad").
//              With none, the optimizer phase is empty (it starts at the trace's end).
//   forward    everything before backward.
// A trace with no backward op is not a training step and gets no split.
// Each allocation is then one part:
//   parameters         outlives the iteration, made in the forward phase before the
//                      step computes anything (before the first allocation the
//                      iteration frees): a model built inside the recorded step.
//                      Parameters made before the recorded iteration (the usual case)
//                      are not in the trace at all: the user gives their bytes
//                      (`--parameters-bytes N`), which count as live all along.
//   gradients          made in the backward phase and still live after the last
//                      allocation of an optimizer op: kept past the step (.grad,
//                      zero_grad in place or not at all), or freed at its end
//                      (zero_grad(set_to_none=True)). Not just "live when the optimizer
//                      starts": torch 1.13's record_function makes a placeholder handle
//                      (torch.zeros(1)) just before its scope and frees it inside, when
//                      the real handle replaces it: a temporary.
//   optimizer state    made in the optimizer phase and outliving the iteration:
//                      momentum buffers, Adam's moments and step counts. Only a step
//                      that creates them (the first) has them in its trace.
//   saved activations  made in the forward phase, freed after the backward phase began:
//                      the tensors autograd keeps for backward (layer inputs and
//                      outputs, batch-norm statistics, masks). They scale with the batch.
//   outputs            outlives the iteration, made in the forward phase once it
//                      computes: the loss, outputs the program keeps.
//   workspace          Note [Memory kinds]'s workspace: freed before any other op
//                      allocates (one kernel's scratch memory), in any phase.
//   temporaries        the rest: made by one op, used by a later one and freed in the
//                      same phase (forward intermediates autograd does not keep, the
//                      gradients that flow between backward ops, the optimizer's
//                      intermediates).
// The step's peak counts every allocation live at once (requested bytes, outliving
// ones included) plus the parameters given; the op at the peak is the one whose
// allocation reached it.
// Where the rule can be wrong:
//  * A phase starts at its first *allocation* tagged so. Tags are the innermost op, so
//    most backward allocations carry aten names (aten::mm, aten::sum): a backward pass
//    whose first kernels allocate under such names (a linear layer's backward before
//    any *_backward kernel) starts later than it should, and what they made counts as
//    forward memory. torch's loss.backward() makes its seed gradient (aten::ones_like)
//    just before the first backward op: a few bytes counted as saved activations.
//  * An optimizer step that allocates nothing in its own scope before its first state
//    buffer would have that state counted as gradients. torch 1.13 always allocates
//    there: record_function's handle starts as at::empty(sizeof(RecordFunction)), 288
//    bytes freed at once. A torch whose record_function keeps no tensor would not, and
//    SGD's first step makes its momentum buffers under aten::clone.
//  * Parameters created with temporaries on the way (an orthogonal init), lazily inside
//    the forward (nn.LazyLinear), or an input batch made inside the step and kept: the
//    first count as outputs, the last as parameters.
//  * A later step than the first makes no optimizer state, and with zero_grad in place
//    no gradients either (new ones are added into the old and freed: temporaries):
//    those were made before its iteration and are not in its trace. A first step makes
//    them late (the optimizer state at its very end), so its peak does not include
//    them; a later step starts with them live. `held_after_bytes` (what outlives the
//    step, with the parameters given) says how much.
//  * Gradient accumulation over micro-batches in one iteration: the forward passes
//    after the first run in the "backward" phase, and their saved activations count as
//    temporaries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/analysis.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::cli {

enum class training_part : std::uint8_t {
  parameters,
  gradients,
  optimizer_state,
  saved_activations,
  outputs,
  workspace,
  temporaries,
};
inline constexpr int training_part_count = 7;
const char* training_part_name(training_part p);  // "optimizer state"
const char* training_part_key(training_part p);   // "optimizer_state" (JSON)

enum class training_phase : std::uint8_t { forward, backward, optimizer };
const char* training_phase_name(training_phase p);

// Note [Training memory]: which op names mark the backward and optimizer phases.
bool is_backward_op(std::string_view name);
bool is_optimizer_op(std::string_view name);

struct training_row {
  std::uint64_t count = 0;               // allocations
  std::uint64_t total_bytes = 0;         // requested bytes, summed over the iteration
  std::uint64_t at_peak_bytes = 0;       // requested bytes live at the step's peak
  std::uint64_t at_slab_peak_bytes = 0;  // slot footprints live at the lower bound's peak
  std::uint64_t largest_bytes = 0;       // the largest single request
};

struct training_split {
  std::vector<training_part> parts;     // one per allocation, trace order
  std::uint64_t backward_at = 0;        // where the backward phase starts (event counter)
  std::uint64_t optimizer_at = 0;       // where the optimizer phase starts; `end` when none
  std::uint64_t end = 0;                // trace_end()
  bool has_optimizer = false;           // an optimizer op allocated after backward began
  std::uint64_t parameters_given_bytes = 0;  // not in the trace; in parameters' row
  std::uint64_t peak_bytes = 0;         // requested bytes live at once, + parameters given
  std::uint64_t peak_at = 0;            // first event position where it is reached
  std::string peak_op;                  // the op whose allocation reached it
  training_phase peak_phase = training_phase::forward;
  std::uint64_t held_after_bytes = 0;   // outlives the step, + parameters given
  training_row by_part[training_part_count];  // indexed by training_part; the
                                              // parameters given are in total and at peak
  training_phase phase_of(std::uint64_t at) const {
    return at < backward_at ? training_phase::forward
                            : at < optimizer_at ? training_phase::backward : training_phase::optimizer;
  }
};

// The split of `t` (Note [Training memory]), or nullopt when `t` has no backward op.
// pre: `r` is analyze(t, o).
std::optional<training_split> split_training(const trace& t, const trace_analysis& r,
                                             const planner_options& o = {},
                                             std::uint64_t parameters_given_bytes = 0);

// The value of --parameters-bytes (report, predict): a whole number of bytes, digits
// only, below 2^62.
std::optional<std::uint64_t> parse_parameters_bytes(std::string_view s);

// The split as one JSON object (report --json, predict --json): the phases, the peak,
// and "parts", one object per part in training_part order.
std::string training_json(const training_split& s);

}  // namespace replayalloc::cli
