// replayalloc/planner/planner.h: from a trace to an offset for every allocation.
//
// Layer: planner (pure functions over a trace; no engine, no threads, no I/O).
// A placement gives each allocation of a trace either an offset inside one slab or
// not_in_slab (it outlives the iteration, invariant 4). Planners differ in how they
// choose offsets; the invariants they must keep do not, and validate() checks them:
//   * two allocations whose lifetimes intersect share no byte;
//   * every offset is a multiple of the slot's alignment;
//   * every slot lies inside [0, slab_bytes);
//   * allocations that outlive the iteration are not in the slab.
// Planners are deterministic: the same trace and options give the same placement.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trace/trace.h"

namespace replayalloc {

inline constexpr std::uint64_t not_in_slab = UINT64_MAX;

struct planner_options {
  // Every slot starts on a multiple of max(slot_align, its own alignment) and its
  // size is rounded up to the same: 64 keeps slots on their own cache lines and is
  // what PyTorch's CPU allocator promises.
  std::uint64_t slot_align = 64;
};

struct placement {
  std::vector<std::uint64_t> offsets;  // one per trace allocation, same order
  std::uint64_t slab_bytes = 0;        // end of the highest slot
  std::uint64_t lower_bound_bytes = 0; // lower_bound() of the same trace
  std::string algorithm;
};

// The alignment and the footprint of an allocation's slot.
std::uint64_t slot_alignment(const trace_allocation& a, const planner_options& o);
std::uint64_t slot_footprint(const trace_allocation& a, const planner_options& o);

// The peak of slot footprints live at once, over allocations that can be planned.
// No placement can use a smaller slab.
std::uint64_t lower_bound(const trace& t, const planner_options& o = {});

// Greedy by size (after TFLite's arena planner): allocations in decreasing footprint
// (ties: longer lifetime, then earlier alloc_at, then id), each put in the smallest
// gap, among slots already placed whose lifetimes intersect its own, that holds it
// (ties: the lowest offset); above the highest such slot when none does. The slots
// that intersect a lifetime are found through a time index, so planning is close to
// O(n log n) on traces whose lifetimes are short, as inference traces' are.
absl::StatusOr<placement> plan_greedy_by_size(const trace& t, const planner_options& o = {});

// The same placement rule (smallest gap among intersecting slots) under other
// orderings (planner/greedy.h):
//   size class  by size class (powers of four, the largest first), then the longest
//             lifetimes first in a class (Note [Size classes, then lifetime]);
//   breadth   allocations meeting the busiest moment first (the largest live bytes
//             over the lifetime; TFLite's greedy by breadth, XLA's temporal order);
//   lifetime  the longest lifetimes first;
//   arrival   the order the program asked for them.
absl::StatusOr<placement> plan_greedy_by_size_class(const trace& t, const planner_options& o = {});
absl::StatusOr<placement> plan_greedy_by_breadth(const trace& t, const planner_options& o = {});
absl::StatusOr<placement> plan_greedy_by_lifetime(const trace& t, const planner_options& o = {});
absl::StatusOr<placement> plan_greedy_by_arrival(const trace& t, const planner_options& o = {});

// The default: the greedy orderings above (size class, size, breadth, lifetime,
// arrival) and first fit, keeping the smallest slab and stopping at the lower bound;
// then, while still above it, a
// bounded backtracking search that may put slots at the top of a gap as well as the
// bottom, under the lower bound (then 1%, 2%, 5% above it); then a bounded local
// search over the winning ordering. Budgets are counted in work, not time:
// deterministic. Note [Best of orderings, then improve] in best.cc. The algorithm
// field says what won: "best(size_class)", "best(size)", "best(fit)", "best(breadth+search)", ...
absl::StatusOr<placement> plan_best(const trace& t, const planner_options& o = {});

// Online first fit in arrival order, what caching allocators do: each allocation at
// the lowest gap among the slots live when it arrives, bytes given back at each free.
// A baseline for reports; the engine never uses it.
absl::StatusOr<placement> plan_first_fit(const trace& t, const planner_options& o = {});

// The planners by name, for make_plan(), the CLI's --algo and the reports: "best" (the
// default), "greedy_by_size", "greedy_by_size_class", "greedy_by_breadth",
// "greedy_by_lifetime", "greedy_by_arrival", "first_fit". (The exact planner, planner/exact.h, drives an
// external solver and lives outside the core library.)
const std::vector<std::string>& planner_names();

// Runs the planner called `algorithm` (one of planner_names()). An unknown name is an
// InvalidArgument that lists the known ones.
absl::StatusOr<placement> make_plan(const trace& t, std::string_view algorithm = "best",
                                    const planner_options& o = {});

// Checks every invariant above; the message names the first offending allocations.
absl::Status validate(const trace& t, const placement& p, const planner_options& o = {});

}  // namespace replayalloc
