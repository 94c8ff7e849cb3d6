// Greedy by size: the largest allocations first. Note [Why largest first]: placing the
// largest allocations first fixes the slab's skeleton; each later, smaller allocation
// only has to fit between slots it meets. This is TFLite's ArenaPlanner ordering (and
// XLA's GlobalDecreasingSizeBestFitHeap with its spatial ordering); it reaches the
// lower bound on most inference traces and stays within a few percent on the rest.
#include <algorithm>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_size(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  std::vector<std::uint32_t> order = in.plannable;
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
    const trace_allocation& a = all[x];
    const trace_allocation& b = all[y];
    if (in.footprint[x] != in.footprint[y]) return in.footprint[x] > in.footprint[y];
    const std::uint64_t la = a.free_at - a.alloc_at, lb = b.free_at - b.alloc_at;
    if (la != lb) return la > lb;
    if (a.alloc_at != b.alloc_at) return a.alloc_at < b.alloc_at;
    return a.id < b.id;
  });
  return order;
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_size(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_size(*in), "greedy_by_size");
}

}  // namespace replayalloc
