// Greedy by size with a time index. Note [Why best fit among intersecting slots]:
// placing the largest allocations first fixes the slab's skeleton; each later, smaller
// allocation only has to avoid the slots whose lifetimes intersect its own, and the
// smallest gap that holds it leaves the larger gaps for allocations still to come.
// This is TFLite's ArenaPlanner strategy; it reaches the lower bound on most
// inference traces and stays within a few percent on the rest.
#include <algorithm>
#include <numeric>

#include "planner/planner.h"
#include "support/config.h"
#include "support/status.h"

namespace replayalloc {
namespace {

inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

absl::StatusOr<placement> plan_greedy_by_size(const trace& t, const planner_options& o) {
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  REPLAYALLOC_EXPECTS(o.slot_align != 0 && (o.slot_align & (o.slot_align - 1)) == 0 &&
                          o.slot_align <= detail::max_slot_align,
                      "slot alignment ", o.slot_align, " is not a power of two up to 2 MiB");
  const auto& all = t.allocations;
  const std::size_t n = all.size();
  placement p;
  p.algorithm = "greedy_by_size";
  p.offsets.assign(n, not_in_slab);
  p.lower_bound_bytes = lower_bound(t, o);

  std::vector<std::uint32_t> order;
  std::vector<std::uint64_t> fp(n, 0);
  std::uint64_t horizon = 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (all[i].outlives()) continue;
    order.push_back(i);
    fp[i] = slot_footprint(all[i], o);
    horizon = std::max(horizon, all[i].free_at);
  }
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
    const trace_allocation& a = all[x];
    const trace_allocation& b = all[y];
    if (fp[x] != fp[y]) return fp[x] > fp[y];
    const std::uint64_t la = a.free_at - a.alloc_at, lb = b.free_at - b.alloc_at;
    if (la != lb) return la > lb;
    if (a.alloc_at != b.alloc_at) return a.alloc_at < b.alloc_at;
    return a.id < b.id;
  });

  // The time index: the event counter cut into buckets; each placed slot is listed in
  // every bucket its lifetime touches.
  const std::uint64_t n_buckets = std::clamp<std::uint64_t>(order.size() / 4, 1, 1u << 16);
  const std::uint64_t width = (horizon + n_buckets - 1) / n_buckets;
  std::vector<std::vector<std::uint32_t>> buckets(n_buckets);
  std::vector<std::uint32_t> seen(n, 0);
  std::vector<std::uint32_t> cand;
  std::uint32_t stamp = 0;

  for (const std::uint32_t i : order) {
    const trace_allocation& a = all[i];
    const std::uint64_t lo = a.alloc_at / width;
    const std::uint64_t hi = std::min(n_buckets - 1, (a.free_at - 1) / width);
    ++stamp;
    cand.clear();
    for (std::uint64_t b = lo; b <= hi; ++b) {
      for (const std::uint32_t j : buckets[b]) {
        if (seen[j] == stamp) continue;
        seen[j] = stamp;
        if (all[j].alloc_at < a.free_at && a.alloc_at < all[j].free_at) cand.push_back(j);
      }
    }
    std::sort(cand.begin(), cand.end(), [&](std::uint32_t x, std::uint32_t y) {
      return p.offsets[x] != p.offsets[y] ? p.offsets[x] < p.offsets[y] : x < y;
    });
    const std::uint64_t al = slot_alignment(a, o);
    std::uint64_t best = not_in_slab, best_gap = UINT64_MAX, end = 0;
    for (const std::uint32_t j : cand) {
      const std::uint64_t off = align_up(end, al);
      if (off + fp[i] <= p.offsets[j] && p.offsets[j] - end < best_gap) {
        best_gap = p.offsets[j] - end;
        best = off;
      }
      end = std::max(end, p.offsets[j] + fp[j]);
    }
    if (best == not_in_slab) best = align_up(end, al);
    p.offsets[i] = best;
    p.slab_bytes = std::max(p.slab_bytes, best + fp[i]);
    for (std::uint64_t b = lo; b <= hi; ++b) buckets[b].push_back(i);
  }
  return p;
}

}  // namespace replayalloc
