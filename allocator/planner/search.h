// replayalloc/planner/search.h: the placement with the smallest slab, by a
// branch-and-bound search in MiniMalloc's manner.
//
// Layer: planner (a pure function over a trace: no engine, no I/O, no threads of its
// own). Unlike the other planners it runs against a clock: it stops at its time limit,
// or when `stop` is set from another thread, with the best placement found so far.
// That placement is never larger than plan_best()'s (it starts from it), and always
// passes validate(). Meant off the request path: `replayalloc plan --algo search`,
// `replayalloc plans optimize`, and the runtime's planner thread improving an installed
// plan when it has time (a smaller plan is swapped in at an iteration boundary).
// Note [Search for the smallest slab] in search.cc says how it works.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc {

struct search_options {
  // Wall-clock budget in seconds (steady clock), the greedy start included; <= 0: no
  // limit (then `stop`, `max_nodes` or the proof ends it).
  double time_limit_s = 10;
  // Set by another thread to stop the search at its next node (checked every few
  // hundred nodes); it then returns its best so far. Not owned; may be null.
  const std::atomic<bool>* stop = nullptr;
  // A budget of search nodes over all capacities tried: a machine-independent limit,
  // for deterministic tests. UINT64_MAX: none.
  std::uint64_t max_nodes = UINT64_MAX;
  // Good enough: stop as soon as a placement of at most this many bytes is found (a
  // known capacity, a device's free memory). 0: keep going to the optimum.
  std::uint64_t goal_bytes = 0;
};

struct search_result {
  placement plan;               // algorithm "search", or best's when nothing beat it
  bool proven_optimal = false;  // no placement has a smaller slab
  // No placement has a slab below this: lower_bound() at least, raised by every
  // capacity the search proved infeasible. Equals plan.slab_bytes when proven optimal.
  std::uint64_t lower_bound = 0;
  std::uint64_t nodes = 0;      // search nodes visited
  double seconds = 0;           // wall time spent, the greedy start included
};

// The search. Errors only for a bad trace or options (as every planner).
absl::StatusOr<search_result> search_plan(const trace& t, const planner_options& o = {},
                                          const search_options& s = {});

}  // namespace replayalloc
