// replayalloc/cli/predict.h: the memory of an iteration at a batch size never recorded.
//
// Layer: cli (pure functions over traces).
//
// Note [Footprint prediction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// "Will batch 32 fit?" From recordings of the same model at two (or more) batch sizes:
//  * per-allocation fit (the default when it applies). Inference at another batch size
//    runs the same ops in the same order: the recordings have the same allocations, in
//    the same order, from the same ops; only sizes change. Each allocation's size is
//    fitted as a line in the batch size, size(b) = c + k*b (least squares over the
//    recordings; through both points when there are two): weights-derived and
//    workspace buffers come out constant (k = 0), activations proportional. The
//    predicted trace (fitted sizes, the lifetimes of the recording nearest in batch) is
//    then measured and planned like a real one, so the prediction gives the peak, the
//    lower bound and the slab a plan would really have, wherever the peak moves.
//  * linear peak (the fallback, and reported beside the other): the lower bound, slab
//    and peak of each recording, fitted as lines in the batch size. It needs nothing
//    to match between recordings but cannot see the peak move to another point of the
//    iteration, and the slab's excess over the lower bound does not scale linearly.
// The per-allocation fit applies when the recordings have the same number of
// allocations with the same op, in the same order; otherwise the result says why it
// did not and uses the linear peak.
// Recordings of different models are refused (one_model() below), since no line
// through them means anything: most allocations of one recording carry an op the
// other never ran (ops tagged), or, without tags, one recording has more than twice
// the other's allocations. The same model at another batch size runs the same ops,
// and a kernel that changes with the batch adds or drops a few allocations, not half.
// Training steps: a predicted trace is a trace, so the per-allocation fit splits it as
// a recording is (Note [Training memory], training.h): parameters, gradients and
// optimizer state keep their sizes, saved activations and most temporaries scale. The
// linear peak has no split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include "absl/status/statusor.h"
#include "cli/training.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::cli {

struct batch_trace {
  double batch = 0;  // > 0
  trace tr;
};

struct footprint {
  double peak_live_bytes = 0;    // requested bytes live at once, all allocations
  double lower_bound_bytes = 0;  // slot footprints live at once, slab-eligible
  double slab_bytes = 0;         // the planned slab
  double persistent_bytes = 0;   // outlives the iteration
  std::optional<training_split> training;  // a training step's split; none for inference
                                           // and for the linear peak
};

struct prediction {
  double at = 0;
  std::string method;            // "per_allocation" or "linear_peak"
  std::string why_not_per_allocation;  // empty when per_allocation applied
  footprint predicted;           // by `method`
  footprint linear;              // the linear-peak fit, always
  std::size_t allocations = 0;   // per-allocation: how many were fitted
  std::size_t scaling = 0;       //   of which grow with the batch size
  std::size_t constant = 0;      //   of which keep their size
  double plan_ms = 0;            // planning the predicted trace
};

// The measured footprint of a recording, planned with `algorithm`; a training step's
// split counts `parameters_given_bytes` (not in the trace) as parameters.
absl::StatusOr<footprint> measure(const trace& t, std::string_view algorithm, double* plan_ms = nullptr,
                                  std::uint64_t parameters_given_bytes = 0);

// OK when the recordings can be one model's at several batch sizes; otherwise an error
// that says so and what differs (Note [Footprint prediction]). predict() asks it first.
absl::Status one_model(const std::vector<batch_trace>& recordings);

// The trace predicted at batch `at` by the per-allocation fit, or why it cannot be made.
// pre: at least two recordings with distinct batch sizes.
absl::StatusOr<trace> predict_trace(const std::vector<batch_trace>& recordings, double at);

// pre: at least two recordings with distinct batch sizes; `measured` holds their
// footprints, same order. The planner `algorithm` plans the predicted trace, and
// `parameters_given_bytes` goes into its training split as in measure().
absl::StatusOr<prediction> predict(const std::vector<batch_trace>& recordings,
                                   const std::vector<footprint>& measured, double at,
                                   std::string_view algorithm, std::uint64_t parameters_given_bytes = 0);

}  // namespace replayalloc::cli
