#include "trace/trace.h"

#include <algorithm>
#include <bit>

#include "absl/container/flat_hash_set.h"
#include "support/config.h"
#include "support/hash.h"
#include "support/status.h"
#include "trace/period.h"

namespace replayalloc {

std::uint64_t trace::signature() const {
  std::uint64_t h = detail::fnv_offset;
  for (const trace_allocation& a : allocations) {
    h = detail::fnv1a(h, a.size);
    h = detail::fnv1a(h, a.align);
  }
  return detail::fnv1a(h, allocations.size());
}

std::uint64_t trace::shape_signature() const {
  std::uint64_t h = detail::fnv1a(detail::fnv_offset, allocations.size());
  for (const trace_allocation& a : allocations) {
    h = detail::fnv1a(h, a.align);
    h = detail::fnv1a(h, a.alloc_at);
    h = detail::fnv1a(h, a.free_at);
  }
  return detail::fnv1a(h, events);
}

envelope make_envelope(const trace& t, const trace_period* period) {
  envelope e{t, {}, {}};
  e.least.reserve(t.allocations.size());
  for (const trace_allocation& a : t.allocations) e.least.push_back(a.size);
  // Note [Periodic iterations]: each step's sizes on its column's line.
  detail::add_period(e, period != nullptr ? *period : find_period(t));
  return e;
}

bool merge_envelope(envelope& into, const trace& t, const trace_period* period) {
  if (into.lines.periodic()) {
    // Note [Periodic iterations]: the same step, repeated a different number of times.
    const trace_period p = period != nullptr ? *period : find_period(t);
    const step_lines& l = into.lines;
    if (p.found() && p.prefix == l.prefix && p.period == l.period && p.tail == l.tail) {
      return detail::merge_periodic(into, t, p);
    }
  }
  bool grew = false;
  const std::size_t n = std::min(into.tr.allocations.size(), t.allocations.size());
  for (std::size_t i = 0; i < n; ++i) {
    grew = detail::fold_slot(into, i, t.allocations[i].size, t.allocations[i].size) || grew;
  }
  return grew;
}

namespace detail {

bool fold_slot(envelope& e, std::size_t at, std::uint64_t size, std::uint64_t least) {
  std::uint64_t& cap = e.tr.allocations[at].size;
  e.least[at] = std::min(e.least[at], least);
  if (size <= cap) return false;
  cap = size;
  return true;
}

}  // namespace detail

void add_growth_headroom(envelope& e) {
  for (std::size_t i = 0; i < e.tr.allocations.size() && i < e.least.size(); ++i) {
    std::uint64_t& cap = e.tr.allocations[i].size;
    if (e.least[i] >= cap) continue;  // one fixed size: kept exact
    const std::uint64_t raised = (cap + cap / 4 + 63) & ~std::uint64_t{63};
    cap = std::min<std::uint64_t>(raised, detail::max_request_bytes);
  }
}

std::vector<std::uint64_t> least_served(const envelope& e) {
  std::vector<std::uint64_t> out(e.tr.allocations.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t cap = e.tr.allocations[i].size;
    out[i] = i < e.least.size() && e.least[i] < cap ? 1 : cap;
  }
  return out;
}

absl::Status check_trace(const trace& t) {
  REPLAYALLOC_EXPECTS(!t.ops.empty(), "trace has no op table");
  absl::flat_hash_set<std::uint64_t> ids;
  ids.reserve(t.allocations.size());
  std::uint64_t prev_at = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const trace_allocation& a = t.allocations[i];
    REPLAYALLOC_EXPECTS(ids.insert(a.id).second, "allocation id ", a.id, " appears twice");
    REPLAYALLOC_EXPECTS(a.size > 0, "allocation ", a.id, " has size 0");
    REPLAYALLOC_EXPECTS(a.size <= detail::max_request_bytes, "allocation ", a.id, " has size ",
                        a.size, ", above the limit of 2^47 bytes");
    REPLAYALLOC_EXPECTS(std::has_single_bit(a.align), "allocation ", a.id,
                        " has alignment ", a.align, ", not a power of two");
    REPLAYALLOC_EXPECTS(a.align <= detail::max_slot_align, "allocation ", a.id, " has alignment ",
                        a.align, ", above the limit of 2 MiB");
    REPLAYALLOC_EXPECTS(a.free_at == never_freed || a.alloc_at < a.free_at, "allocation ", a.id,
                        " is freed at ", a.free_at, ", not after its allocation at ", a.alloc_at);
    REPLAYALLOC_EXPECTS(i == 0 || a.alloc_at >= prev_at, "allocation ", a.id,
                        " is out of alloc_at order");
    REPLAYALLOC_EXPECTS(a.op < t.ops.size(), "allocation ", a.id, " names op ", a.op,
                        " but the trace has ", t.ops.size(), " ops");
    prev_at = a.alloc_at;
  }
  return absl::OkStatus();
}

}  // namespace replayalloc
