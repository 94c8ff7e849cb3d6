// The first-fit placement as it was before its gaps were kept in a tree (first_fit.cc,
// Note [First fit over a tree of gaps]): every allocation walks the live slots in offset
// order. Kept as the reference the fast one must equal, offset for offset.
#pragma once

#include <algorithm>
#include <map>

#include "planner/greedy.h"

namespace replayalloc::testing {

inline placement reference_first_fit(const detail::greedy_input& in) {
  const auto& all = in.tr->allocations;
  placement p;
  p.algorithm = "first_fit";
  p.lower_bound_bytes = in.lower_bound;
  p.offsets.assign(all.size(), not_in_slab);
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
      off = detail::align_up(end, al);
      if (off + fp <= start) {
        found = true;
        break;
      }
      end = std::max(end, stop);
    }
    if (!found) off = detail::align_up(end, al);
    p.offsets[i] = off;
    live.emplace(off, off + fp);
    p.slab_bytes = std::max(p.slab_bytes, off + fp);
  }
  return p;
}

}  // namespace replayalloc::testing
