// replayalloc/cli/analysis.h: what a trace's memory is made of, from lifetimes alone.
//
// Layer: cli (pure functions over a trace). Shared by `report` and `viz`.
//
// Note [Memory kinds]
// ~~~~~~~~~~~~~~~~~~~
// Every allocation of a trace is one of three kinds, decided from its lifetime and the
// op tags, with no knowledge of the framework:
//   persistent  it outlives the iteration (free_at == never_freed): outputs, caches,
//               state kept for the next request. The engine serves it from the backend,
//               never from the slab (invariant 4).
//   workspace   it is freed before any other op allocates: every allocation made while
//               it is live (after it in alloc_at order, before its free_at) carries its
//               own op tag. Scratch buffers of one op (im2col, reorders, temporaries of
//               a fused kernel). An allocation tagged "unknown" (op 0) counts as its own
//               op, so an untagged trace calls workspace what is freed before the next
//               allocation of any kind.
//   activation  everything else: memory one op made and a later op still used (layer
//               outputs, the tensors that pass between ops). This is what scales with
//               the batch size.
// Weights loaded before the iteration are not in the trace at all. A training step is
// split further (parameters, gradients, optimizer state, ...): Note [Training memory],
// cli/training.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::cli {

enum class memory_kind : std::uint8_t { persistent, activation, workspace };
inline constexpr int memory_kind_count = 3;
const char* memory_kind_name(memory_kind k);

struct usage_row {
  std::string name;                   // an op, or a kind's name
  std::uint64_t count = 0;            // allocations
  std::uint64_t total_bytes = 0;      // requested bytes, summed over the iteration
  std::uint64_t at_peak_bytes = 0;    // slot footprints live at the lower bound's peak
  std::uint64_t largest_bytes = 0;    // the largest single request
  double byte_events = 0;             // sum of size x lifetime (events), slab-eligible only
};

struct trace_analysis {
  std::vector<memory_kind> kinds;         // one per allocation, trace order
  std::uint64_t peak_live_bytes = 0;      // requested bytes live at once, all allocations
  std::uint64_t peak_live_at = 0;         // first event position where peak_live_bytes is met
  std::uint64_t lower_bound_bytes = 0;    // lower_bound(): slot footprints, slab-eligible
  std::uint64_t peak_at = 0;              // first event position where the lower bound is met
  std::uint64_t persistent_bytes = 0;     // requested bytes that outlive the iteration
  std::uint64_t events = 0;               // the trace's length on the event counter
  usage_row by_kind[memory_kind_count];   // indexed by memory_kind
  std::vector<usage_row> by_op;           // sorted: at_peak_bytes, then total_bytes, desc
};

trace_analysis analyze(const trace& t, const planner_options& o = {});

// The end of the trace on the event counter: past every alloc_at and free_at.
std::uint64_t trace_end(const trace& t);

}  // namespace replayalloc::cli
