// replayalloc/cli/torch_snapshot.h: a plan as PyTorch's memory snapshot, for its viewer.
//
// Layer: cli (a pure function over a trace and its placement; writes no file).
//
// Note [Torch snapshot]
// ~~~~~~~~~~~~~~~~~~~~~
// `replayalloc viz --torch-snapshot FILE` writes what torch.cuda.memory._snapshot()
// returns, pickled (protocol 2: dicts, lists, ints, strings, booleans), so that
// pytorch.org/memory_viz and torch.cuda._memory_viz (trace_plot, segment_plot) open a
// replayalloc plan beside PyTorch's own recordings:
//   segments       one per slab (there is one): address a made-up base (the plan has
//                  offsets, not addresses), total_size the slab's bytes, stream 0,
//                  segment_type "large"; its blocks the slots live at the lower bound's
//                  peak (alloc_at <= peak_at < free_at, Note [Memory kinds]) at their
//                  offsets, state "active_allocated", size the slot's footprint,
//                  requested_size the request, and "inactive" blocks for the gaps, so
//                  the blocks cover the segment exactly as PyTorch's do.
//   device_traces  one list (device 0): segment_alloc of the slab, then every slab
//                  allocation's "alloc" and its "free_requested" + "free_completed" in
//                  event-counter order (at one position frees first, as the lower bound
//                  counts them), addr the slab base + offset, frames one frame naming
//                  the op ({"name": op, "filename": the trace's key, "line": 0});
//                  time_us is the position on the event counter (a trace has no clock).
// Allocations that outlive the iteration are served outside the slab (invariant 4):
// they are in neither, as the HTML page does not draw them either.
#pragma once

#include <cstdint>
#include <string>

#include "cli/analysis.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::cli {

// The slab's made-up address in the snapshot: page aligned, above any offset.
inline constexpr std::uint64_t torch_snapshot_base = 0x7f0000000000;

// The pickle's bytes. pre: p is a valid placement of t (validate()), r = analyze(t, o).
std::string torch_snapshot_pickle(const trace& t, const placement& p, const trace_analysis& r,
                                  const planner_options& o);

}  // namespace replayalloc::cli
