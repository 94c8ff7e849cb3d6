// Greedy by arrival: allocations in the order the program asked for them (ties at one
// position: the larger footprint, then the id), each in the smallest gap among the
// slots live when it arrives. Unlike an online allocator it knows every lifetime, but
// it places like one: the ordering a planner gets without looking ahead. "best" tries
// it last; on the recorded models it never wins, but it costs one run.
#include <algorithm>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_arrival(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  std::vector<order_key> keys;
  keys.reserve(in.plannable.size());
  for (const std::uint32_t i : in.plannable) keys.push_back({all[i].alloc_at, ~in.footprint[i], 0, i});
  return sort_by_keys(in, keys);
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_arrival(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_arrival(*in), "greedy_by_arrival");
}

}  // namespace replayalloc
