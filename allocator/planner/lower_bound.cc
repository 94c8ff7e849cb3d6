#include <algorithm>

#include "planner/planner.h"

namespace replayalloc {

std::uint64_t slot_alignment(const trace_allocation& a, const planner_options& o) {
  return std::max<std::uint64_t>(a.align, o.slot_align);
}

std::uint64_t slot_footprint(const trace_allocation& a, const planner_options& o) {
  const std::uint64_t al = slot_alignment(a, o);
  return (a.size + al - 1) & ~(al - 1);
}

std::uint64_t lower_bound(const trace& t, const planner_options& o) {
  // Sweep over the event counter: +footprint at alloc_at, -footprint at free_at. At
  // equal positions frees come first (a free at p and an alloc at p do not conflict).
  struct step {
    std::uint64_t at;
    bool alloc;
    std::uint64_t bytes;
  };
  std::vector<step> steps;
  steps.reserve(t.allocations.size() * 2);
  for (const trace_allocation& a : t.allocations) {
    if (a.outlives()) continue;
    const std::uint64_t b = slot_footprint(a, o);
    steps.push_back({a.alloc_at, true, b});
    steps.push_back({a.free_at, false, b});
  }
  std::sort(steps.begin(), steps.end(), [](const step& x, const step& y) {
    return x.at != y.at ? x.at < y.at : (!x.alloc && y.alloc);
  });
  std::uint64_t live = 0, peak = 0;
  for (const step& s : steps) {
    live = s.alloc ? live + s.bytes : live - s.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace replayalloc
