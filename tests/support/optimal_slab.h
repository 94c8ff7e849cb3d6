// tests/support/optimal_slab.h: the brute-force optimum of a tiny trace, the yardstick
// the planners are held to (tests/unit/planner_greedy_test.cc, tests/property/).
//
// Exhaustive: every slot tries every aligned offset below the best slab found so far,
// so only traces of a handful of allocations finish. Independent of the planners: it
// shares nothing with them but slot_alignment() and slot_footprint().
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::testing {

// True when the two lifetimes share a position ([alloc_at, free_at) each; a free at p
// and an allocation at p do not meet).
inline bool lifetimes_intersect(const trace_allocation& a, const trace_allocation& b) {
  return a.alloc_at < b.free_at && b.alloc_at < a.free_at;
}

// The smallest slab over every placement of t: each slot tries every aligned offset
// below the best slab found so far (exhaustive; for tiny traces). Returns the slab, and
// the placement in *best.
inline std::uint64_t optimal_slab(const trace& t, const planner_options& o, placement* best) {
  const auto& all = t.allocations;
  const std::size_t n = all.size();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i) {
    if (!all[i].outlives()) order.push_back(i);
  }
  // Largest first prunes sooner; the search is exhaustive whatever the order.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return slot_footprint(all[a], o) > slot_footprint(all[b], o);
  });
  // Start from stacking every slot: a valid placement, and usually a poor one.
  std::vector<std::uint64_t> cur(n, not_in_slab);
  std::uint64_t limit = 0;
  for (const std::size_t i : order) {
    const std::uint64_t al = slot_alignment(all[i], o);
    cur[i] = (limit + al - 1) / al * al;
    limit = cur[i] + slot_footprint(all[i], o);
  }
  best->offsets = cur;
  best->slab_bytes = limit;
  std::fill(cur.begin(), cur.end(), not_in_slab);

  std::function<void(std::size_t, std::uint64_t)> place = [&](std::size_t k, std::uint64_t top) {
    if (k == order.size()) {
      best->offsets = cur;
      best->slab_bytes = limit = top;
      return;
    }
    const std::size_t i = order[k];
    const std::uint64_t al = slot_alignment(all[i], o), fp = slot_footprint(all[i], o);
    for (std::uint64_t off = 0; std::max(top, off + fp) < limit; off += al) {
      bool clash = false;
      for (std::size_t m = 0; m < k && !clash; ++m) {
        const std::size_t j = order[m];
        clash = lifetimes_intersect(all[i], all[j]) && off < cur[j] + slot_footprint(all[j], o) &&
                cur[j] < off + fp;
      }
      if (clash) continue;
      cur[i] = off;
      place(k + 1, std::max(top, off + fp));
      cur[i] = not_in_slab;
    }
  };
  place(0, 0);
  return limit;
}

}  // namespace replayalloc::testing
