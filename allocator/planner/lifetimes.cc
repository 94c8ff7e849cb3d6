// The lifetimes of a trace mapped onto positions (Note [Positions] in lifetimes.h),
// with the live bytes at each position and the lower bound, once per plan.
#include "planner/lifetimes.h"

#include <algorithm>
#include <bit>

#include "support/config.h"
#include "support/status.h"

namespace replayalloc::detail {

absl::StatusOr<greedy_input> prepare_greedy(const trace& t, const planner_options& o) {
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  REPLAYALLOC_EXPECTS(std::has_single_bit(o.slot_align) && o.slot_align <= max_slot_align,
                      "slot alignment ", o.slot_align, " is not a power of two up to 2 MiB");
  greedy_input in;
  in.tr = &t;
  const std::size_t n = t.allocations.size();
  in.footprint.assign(n, 0);
  in.alignment.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    if (a.outlives()) continue;
    in.plannable.push_back(i);
    in.footprint[i] = slot_footprint(a, o);
    in.alignment[i] = slot_alignment(a, o);
    in.horizon = std::max(in.horizon, a.free_at + 1);
  }
  // Positions: allocations are in alloc_at order, so first is a running count; last
  // is the number of positions before free_at, found by a table over the events
  // when they are few (every recorded trace) and by binary search otherwise.
  std::vector<std::uint64_t> pos;
  in.first.assign(n, 0);
  in.last.assign(n, 0);
  for (const std::uint32_t i : in.plannable) {
    if (pos.empty() || pos.back() != t.allocations[i].alloc_at) pos.push_back(t.allocations[i].alloc_at);
    in.first[i] = static_cast<std::uint32_t>(pos.size() - 1);
  }
  in.positions = pos.size();
  if (in.horizon <= 4 * n + 1024) {
    std::vector<std::uint32_t> before(in.horizon + 1, 0);  // positions < e, for each event e
    std::size_t k = 0;
    for (std::uint64_t e = 0; e <= in.horizon; ++e) {
      while (k < pos.size() && pos[k] < e) ++k;
      before[e] = static_cast<std::uint32_t>(k);
    }
    for (const std::uint32_t i : in.plannable) in.last[i] = before[t.allocations[i].free_at];
  } else {
    for (const std::uint32_t i : in.plannable) {
      in.last[i] = static_cast<std::uint32_t>(std::lower_bound(pos.begin(), pos.end(), t.allocations[i].free_at) - pos.begin());
    }
  }
  // Live bytes: +footprint from first, -footprint from last (unsigned: a step wraps
  // below zero, the running sum never does). Their peak is the lower bound.
  std::vector<std::uint64_t> delta(in.positions + 1, 0);
  for (const std::uint32_t i : in.plannable) {
    delta[in.first[i]] += in.footprint[i];
    delta[in.last[i]] -= in.footprint[i];
  }
  in.live.resize(in.positions);
  std::uint64_t live = 0;
  for (std::size_t k = 0; k < in.positions; ++k) {
    live += delta[k];
    in.live[k] = live;
    in.lower_bound = std::max(in.lower_bound, live);
  }
  return in;
}

}  // namespace replayalloc::detail
