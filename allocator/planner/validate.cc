#include <algorithm>

#include "absl/container/btree_map.h"
#include "planner/planner.h"
#include "support/status.h"

namespace replayalloc {

absl::Status validate(const trace& t, const placement& p, const planner_options& o) {
  const auto& all = t.allocations;
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));  // the sweep below relies on a sane trace
  REPLAYALLOC_EXPECTS(p.offsets.size() == all.size(), "placement has ", p.offsets.size(),
                      " offsets for a trace of ", all.size(), " allocations");
  struct step {
    std::uint64_t at;
    bool alloc;
    std::uint32_t index;
  };
  std::vector<step> steps;
  bool all_placed = true;
  for (std::uint32_t i = 0; i < all.size(); ++i) {
    const trace_allocation& a = all[i];
    const std::uint64_t off = p.offsets[i];
    if (off == not_in_slab) {
      all_placed = all_placed && a.outlives();
      continue;
    }
    REPLAYALLOC_EXPECTS(!a.outlives(), "allocation ", a.id,
                        " outlives the iteration but was placed in the slab at offset ", off);
    const std::uint64_t al = slot_alignment(a, o);
    REPLAYALLOC_EXPECTS(off % al == 0, "allocation ", a.id, " at offset ", off,
                        " is not aligned to ", al);
    const std::uint64_t fp = slot_footprint(a, o);
    REPLAYALLOC_EXPECTS(off <= p.slab_bytes && fp <= p.slab_bytes - off, "allocation ", a.id,
                        " at [", off, ", ", off + fp, ") lies outside the slab of ", p.slab_bytes,
                        " bytes");
    steps.push_back({a.alloc_at, true, i});
    steps.push_back({a.free_at, false, i});
  }
  std::sort(steps.begin(), steps.end(), [](const step& x, const step& y) {
    if (x.at != y.at) return x.at < y.at;
    if (x.alloc != y.alloc) return !x.alloc;  // frees first
    return x.index < y.index;
  });
  absl::btree_map<std::uint64_t, std::uint32_t> live;  // offset -> allocation index
  for (const step& s : steps) {
    const std::uint64_t off = p.offsets[s.index];
    if (!s.alloc) {
      live.erase(off);
      continue;
    }
    const std::uint64_t end = off + slot_footprint(all[s.index], o);
    auto it = live.lower_bound(off);
    if (it != live.end() && it->first < end) {
      return absl::InvalidArgumentError(absl::StrCat(
          "allocations ", all[s.index].id, " and ", all[it->second].id,
          " are live at the same time and share bytes from offset ", it->first));
    }
    if (it != live.begin()) {
      const auto prev = std::prev(it);
      const std::uint64_t prev_end = prev->first + slot_footprint(all[prev->second], o);
      if (prev_end > off) {
        return absl::InvalidArgumentError(absl::StrCat(
            "allocations ", all[s.index].id, " and ", all[prev->second].id,
            " are live at the same time and share bytes from offset ", off));
      }
    }
    live.emplace(off, s.index);
  }
  // A planner may leave allocations to the backend; when it places them all, no slab
  // can be below the peak of live bytes.
  const std::uint64_t lb = lower_bound(t, o);
  REPLAYALLOC_EXPECTS(!all_placed || p.slab_bytes >= lb, "slab of ", p.slab_bytes,
                      " bytes is below the lower bound of ", lb, " bytes: the placement is inconsistent");
  return absl::OkStatus();
}

}  // namespace replayalloc
