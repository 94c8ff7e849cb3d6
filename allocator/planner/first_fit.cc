// First fit, online, in arrival order: what a caching allocator does. Events are
// taken in time order (at one position, frees before allocations, as everywhere);
// each allocation takes the lowest aligned gap between the slots live at that moment
// that holds it, else goes above the highest; a free gives its bytes back at once.
// It cannot look ahead, so it fragments; reported next to the offline planners to
// show what planning buys. The engine never uses it.
#include <algorithm>
#include <map>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

placement first_fit_placement(const greedy_input& in) {
  const auto& all = in.tr->allocations;
  placement p;
  p.algorithm = "first_fit";
  p.lower_bound_bytes = in.lower_bound;
  p.offsets.assign(all.size(), not_in_slab);

  // Frees in time order; allocations come in time order from the trace itself.
  std::vector<std::uint32_t> frees = in.plannable;
  std::stable_sort(frees.begin(), frees.end(),
                   [&](std::uint32_t x, std::uint32_t y) { return all[x].free_at < all[y].free_at; });
  std::map<std::uint64_t, std::uint64_t> live;  // offset -> end, of the live slots
  std::size_t next_free = 0;
  for (const std::uint32_t i : in.plannable) {
    const trace_allocation& a = all[i];
    for (; next_free < frees.size() && all[frees[next_free]].free_at <= a.alloc_at; ++next_free) {
      live.erase(p.offsets[frees[next_free]]);
    }
    const std::uint64_t fp = in.footprint[i], al = in.alignment[i];
    std::uint64_t end = 0, off = 0;
    bool found = false;
    for (const auto& [start, stop] : live) {
      off = align_up(end, al);
      if (off + fp <= start) {
        found = true;
        break;
      }
      end = std::max(end, stop);
    }
    if (!found) off = align_up(end, al);
    p.offsets[i] = off;
    live.emplace(off, off + fp);
    p.slab_bytes = std::max(p.slab_bytes, off + fp);
  }
  return p;
}

}  // namespace detail

absl::StatusOr<placement> plan_first_fit(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::first_fit_placement(*in);
}

}  // namespace replayalloc
