// Greedy by size: the largest allocations first.
//
// Note [Why largest first]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Placing the largest allocations first fixes the slab's skeleton; each later,
// smaller allocation only has to fit between slots it meets. This is TFLite's
// ArenaPlanner ordering (and XLA's GlobalDecreasingSizeBestFitHeap with its spatial
// ordering); it reaches the lower bound on most inference traces and stays within a
// few percent on the rest.
#include <algorithm>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_size(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  std::vector<order_key> keys;
  keys.reserve(in.plannable.size());
  for (const std::uint32_t i : in.plannable) {
    keys.push_back({~in.footprint[i], ~(all[i].free_at - all[i].alloc_at), all[i].alloc_at, i});
  }
  return sort_by_keys(in, keys);
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_size(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_size(*in), "greedy_by_size");
}

}  // namespace replayalloc
