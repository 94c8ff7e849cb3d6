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
  std::vector<std::uint32_t> order = in.plannable;
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
    const trace_allocation& a = all[x];
    const trace_allocation& b = all[y];
    const std::uint64_t la = a.free_at - a.alloc_at, lb = b.free_at - b.alloc_at;
    if (la != lb) return la > lb;
    if (in.footprint[x] != in.footprint[y]) return in.footprint[x] > in.footprint[y];
    if (a.alloc_at != b.alloc_at) return a.alloc_at < b.alloc_at;
    return a.id < b.id;
  });
  return order;
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_lifetime(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_lifetime(*in), "greedy_by_lifetime");
}

}  // namespace replayalloc
