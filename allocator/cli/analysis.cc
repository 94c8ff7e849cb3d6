// Memory kinds and usage by op (analysis.h; Note [Memory kinds]).
#include "cli/analysis.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace replayalloc::cli {

const char* memory_kind_name(memory_kind k) {
  switch (k) {
    case memory_kind::persistent: return "persistent";
    case memory_kind::activation: return "activations";
    case memory_kind::workspace: return "workspace";
  }
  return "?";
}

std::uint64_t trace_end(const trace& t) {
  std::uint64_t end = t.events;
  for (const trace_allocation& a : t.allocations) {
    end = std::max(end, a.outlives() ? a.alloc_at + 1 : a.free_at);
  }
  return end;
}

namespace {

// The peak of `bytes(a)` live at once over allocations `take(a)`, and the first event
// position where it is reached. Frees at a position come before its allocations.
template <class Bytes, class Take>
std::pair<std::uint64_t, std::uint64_t> sweep_peak(const trace& t, Bytes bytes, Take take) {
  struct step {
    std::uint64_t at;
    bool alloc;
    std::uint64_t bytes;
  };
  std::vector<step> steps;
  steps.reserve(2 * t.allocations.size());
  for (const trace_allocation& a : t.allocations) {
    if (!take(a)) continue;
    steps.push_back({a.alloc_at, true, bytes(a)});
    if (!a.outlives()) steps.push_back({a.free_at, false, bytes(a)});
  }
  std::sort(steps.begin(), steps.end(), [](const step& x, const step& y) {
    return x.at != y.at ? x.at < y.at : (!x.alloc && y.alloc);
  });
  std::uint64_t live = 0, peak = 0, peak_at = 0;
  for (const step& s : steps) {
    live = s.alloc ? live + s.bytes : live - s.bytes;
    if (live > peak) peak = live, peak_at = s.at;
  }
  return {peak, peak_at};
}

}  // namespace

trace_analysis analyze(const trace& t, const planner_options& o) {
  trace_analysis r;
  const std::size_t n = t.allocations.size();
  r.events = trace_end(t);
  r.kinds.resize(n);

  // run_end[i]: the first index after i whose op differs from i's (n when none); an
  // "unknown" op (0) differs from everything, itself included.
  std::vector<std::size_t> run_end(n + 1, n);
  for (std::size_t i = n; i-- > 0;) {
    const bool same_as_next = i + 1 < n && t.allocations[i].op != 0 &&
                              t.allocations[i + 1].op == t.allocations[i].op;
    run_end[i] = same_as_next ? run_end[i + 1] : i + 1;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    if (a.outlives()) {
      r.kinds[i] = memory_kind::persistent;
    } else {
      const std::size_t j = run_end[i];
      r.kinds[i] = j == n || t.allocations[j].alloc_at >= a.free_at ? memory_kind::workspace
                                                                     : memory_kind::activation;
    }
  }

  std::tie(r.peak_live_bytes, r.peak_live_at) =
      sweep_peak(t, [](const trace_allocation& a) { return a.size; }, [](const auto&) { return true; });
  std::tie(r.lower_bound_bytes, r.peak_at) = sweep_peak(
      t, [&](const trace_allocation& a) { return slot_footprint(a, o); },
      [](const trace_allocation& a) { return !a.outlives(); });

  for (int k = 0; k < memory_kind_count; ++k) r.by_kind[k].name = memory_kind_name(memory_kind(k));
  absl::flat_hash_map<std::uint32_t, std::size_t> op_row;
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    const auto [it, fresh] = op_row.emplace(a.op, r.by_op.size());
    if (fresh) r.by_op.push_back({a.op < t.ops.size() ? t.ops[a.op] : "unknown"});
    // The lower bound's peak is met right after the allocations at peak_at: live there
    // is every slab-eligible allocation with alloc_at <= peak_at < free_at.
    const bool at_peak = !a.outlives() && r.lower_bound_bytes > 0 && a.alloc_at <= r.peak_at &&
                         r.peak_at < a.free_at;
    for (usage_row* row : {&r.by_op[it->second], &r.by_kind[static_cast<int>(r.kinds[i])]}) {
      row->count += 1;
      row->total_bytes += a.size;
      row->largest_bytes = std::max(row->largest_bytes, a.size);
      if (at_peak) row->at_peak_bytes += slot_footprint(a, o);
      if (!a.outlives()) row->byte_events += static_cast<double>(a.size) * static_cast<double>(a.free_at - a.alloc_at);
    }
    if (a.outlives()) r.persistent_bytes += a.size;
  }
  std::sort(r.by_op.begin(), r.by_op.end(), [](const usage_row& x, const usage_row& y) {
    if (x.at_peak_bytes != y.at_peak_bytes) return x.at_peak_bytes > y.at_peak_bytes;
    if (x.total_bytes != y.total_bytes) return x.total_bytes > y.total_bytes;
    return x.name < y.name;
  });
  return r;
}

}  // namespace replayalloc::cli
