// Greedy by lifetime length: the longest-lived allocations first (ties: the larger
// footprint, the earlier alloc_at, the id). Long lifetimes (skip connections, a
// recurrent state) meet the most other allocations; placed first they sit low and
// stay out of the way, which is where greedy by size loses on some recurrent and
// U-Net-like traces.
#include <algorithm>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_lifetime(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  std::vector<order_key> keys;
  keys.reserve(in.plannable.size());
  for (const std::uint32_t i : in.plannable) {
    keys.push_back({~(all[i].free_at - all[i].alloc_at), ~in.footprint[i], all[i].alloc_at, i});
  }
  return sort_by_keys(in, keys);
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_lifetime(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_lifetime(*in), "greedy_by_lifetime");
}

}  // namespace replayalloc
