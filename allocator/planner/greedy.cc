// The greedy placement step (greedy.h). Note [Why best fit among intersecting slots]:
// an allocation only has to avoid the slots whose lifetimes intersect its own; of the
// gaps between them, the smallest that holds it leaves the larger gaps for
// allocations still to come. With the largest allocations first this is TFLite's
// ArenaPlanner strategy; other orderings reuse the same rule.
#include "planner/greedy.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "support/config.h"
#include "support/status.h"

namespace replayalloc::detail {
namespace {

inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

absl::StatusOr<greedy_input> prepare_greedy(const trace& t, const planner_options& o) {
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  REPLAYALLOC_EXPECTS(o.slot_align != 0 && (o.slot_align & (o.slot_align - 1)) == 0 &&
                          o.slot_align <= max_slot_align,
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
  // The lower bound (lower_bound()'s value: frees at a position come before the
  // allocations there, as in the mapping): the peak of live bytes over positions.
  std::vector<std::int64_t> delta(in.positions + 1, 0);
  for (const std::uint32_t i : in.plannable) {
    delta[in.first[i]] += static_cast<std::int64_t>(in.footprint[i]);
    delta[in.last[i]] -= static_cast<std::int64_t>(in.footprint[i]);
  }
  std::int64_t live = 0;
  for (const std::int64_t d : delta) {
    live += d;
    in.lower_bound = std::max(in.lower_bound, static_cast<std::uint64_t>(live));
  }
  return in;
}

greedy_placer::greedy_placer(const greedy_input& in) : in_(in), first_(in.first), last_(in.last) {
  const auto& all = in.tr->allocations;
  while (leaves_ < in.positions) leaves_ <<= 1;
  start_count_.assign(2 * leaves_, 0);
  offsets_.assign(all.size(), not_in_slab);
  // Note [Lists in place]: each list's length (a slot at the canonical nodes of its
  // range and at its start), then the runs.
  const std::size_t lists = 3 * leaves_;
  lists_.assign(lists, list_ref{0, 0});
  for (const std::uint32_t i : in.plannable) {
    ++lists_[2 * leaves_ + first_[i]].begin;
    for (std::size_t a = first_[i] + leaves_, b = last_[i] + leaves_; a < b; a >>= 1, b >>= 1) {
      if (a & 1) ++lists_[a++].begin;
      if (b & 1) ++lists_[--b].begin;
    }
  }
  std::uint32_t sum = 0;
  for (list_ref& x : lists_) sum += std::exchange(x.begin, sum);
  entries_.resize(sum);
}

void greedy_placer::push(std::size_t list, std::uint32_t slot) {
  list_ref& x = lists_[list];
  entries_[x.begin + x.fill++] = {offsets_[slot], offsets_[slot] + in_.footprint[slot]};
}

// Appends to cand_ the slots starting in [l, r), visiting only subtrees that hold one.
void greedy_placer::collect_starts(std::size_t node, std::size_t lo, std::size_t hi, std::size_t l,
                                   std::size_t r) {
  ++work_;
  if (start_count_[node] == 0 || hi <= l || r <= lo) return;
  if (hi - lo <= 32) {  // a short range: its leaves directly (cheaper than the tree)
    for (std::size_t p = std::max(lo, l); p < std::min(hi, r); ++p) {
      const std::size_t list = 2 * leaves_ + p;
      const index_entry* e = entries_.data() + lists_[list].begin;
      const std::uint32_t n = lists_[list].fill;
      for (std::uint32_t k = 0; k < n; ++k) cand_.push_back(e[k]);
      work_ += 1 + n;
    }
    return;
  }
  const std::size_t mid = (lo + hi) / 2;
  collect_starts(2 * node, lo, mid, l, r);
  collect_starts(2 * node + 1, mid, hi, l, r);
}

std::uint64_t greedy_placer::place(std::span<const std::uint32_t> order,
                                   std::uint64_t give_up_above) {
  for (list_ref& x : lists_) x.fill = 0;
  std::fill(start_count_.begin(), start_count_.end(), 0);
  std::fill(offsets_.begin(), offsets_.end(), not_in_slab);
  std::uint64_t slab = 0;
  for (const std::uint32_t i : order) {
    const std::size_t l = first_[i], r = last_[i];
    // The slots that meet [l, r): those live at l, then those that start inside
    // (l, r) (Note [Time index]).
    cand_.clear();
    for (std::size_t node = leaves_ + l; node >= 1; node >>= 1) {
      const index_entry* e = entries_.data() + lists_[node].begin;
      const std::uint32_t n = lists_[node].fill;
      for (std::uint32_t k = 0; k < n; ++k) cand_.push_back(e[k]);
      work_ += n;
    }
    collect_starts(1, 0, leaves_, l + 1, r);
    work_ += cand_.size();
    // By offset; slots at the same offset in any order (after the first of them no
    // gap can end at that offset). Note [One-word sort keys]: when offsets fit in 40
    // bits and candidates are fewer than 2^24, (offset, candidate) packed in one
    // word sorts several times faster than pairs.
    const std::uint64_t fp = in_.footprint[i], al = in_.alignment[i];
    std::uint64_t best = not_in_slab, best_gap = UINT64_MAX, end = 0;
    auto consider = [&](std::uint64_t oj, std::uint64_t ej) {
      const std::uint64_t off = align_up(end, al);
      if (off + fp <= oj && oj - end < best_gap) {
        best_gap = oj - end;
        best = off;
      }
      end = std::max(end, ej);
    };
    if (slab < (std::uint64_t{1} << 40) && cand_.size() < (std::size_t{1} << 24)) {
      packed_.clear();
      for (std::size_t c = 0; c < cand_.size(); ++c) packed_.push_back(cand_[c].offset << 24 | c);
      std::sort(packed_.begin(), packed_.end());
      for (const std::uint64_t key : packed_) {
        const auto& [oj, ej] = cand_[key & ((std::uint64_t{1} << 24) - 1)];
        consider(oj, ej);
      }
    } else {
      std::sort(cand_.begin(), cand_.end(), [](const index_entry& x, const index_entry& y) {
        return x.offset != y.offset ? x.offset < y.offset : x.end < y.end;
      });
      for (const auto& [oj, ej] : cand_) consider(oj, ej);
    }
    if (best == not_in_slab) best = align_up(end, al);
    offsets_[i] = best;
    slab = std::max(slab, best + fp);
    if (slab > give_up_above) return slab;
    // Index the new slot: at the canonical nodes of [l, r), and at its start.
    for (std::size_t a = l + leaves_, b = r + leaves_; a < b; a >>= 1, b >>= 1) {
      if (a & 1) push(a++, i);
      if (b & 1) push(--b, i);
    }
    push(2 * leaves_ + l, i);
    for (std::size_t node = leaves_ + l; node >= 1; node >>= 1) ++start_count_[node];
  }
  return slab;
}

namespace {

bool id_less(const greedy_input& in, std::uint32_t x, std::uint32_t y) {
  return in.tr->allocations[x].id < in.tr->allocations[y].id;
}

// One field of Note [Radix sort of orderings]: x -> (x - min) >> shift keeps the
// order and loses nothing; `bits` is the width of the largest result.
struct packed_field {
  std::uint64_t min = UINT64_MAX;
  unsigned shift = 0, bits = 0;
  std::uint64_t map(std::uint64_t x) const { return (x - min) >> shift; }
};

template <typename Get>
packed_field fit_field(const std::vector<order_key>& keys, Get get) {
  packed_field f;
  std::uint64_t max = 0;
  for (const order_key& k : keys) {
    f.min = std::min(f.min, get(k));
    max = std::max(max, get(k));
  }
  std::uint64_t any = 0;
  for (const order_key& k : keys) any |= get(k) - f.min;
  if (any == 0) return f;
  f.shift = static_cast<unsigned>(std::countr_zero(any));
  f.bits = static_cast<unsigned>(std::bit_width((max - f.min) >> f.shift));
  return f;
}

}  // namespace

std::vector<std::uint32_t> sort_by_keys(const greedy_input& in, std::vector<order_key>& keys,
                                        tie_less_fn tie_less) {
  if (tie_less == nullptr) tie_less = id_less;
  std::vector<std::uint32_t> order(keys.size());
  const packed_field fa = fit_field(keys, [](const order_key& k) { return k.a; });
  const packed_field fb = fit_field(keys, [](const order_key& k) { return k.b; });
  const packed_field fc = fit_field(keys, [](const order_key& k) { return k.c; });
  const unsigned bits = fa.bits + fb.bits + fc.bits;
  if (keys.size() < 256 || bits > 64) {
    std::sort(keys.begin(), keys.end(), [&](const order_key& x, const order_key& y) {
      if (x.a != y.a) return x.a < y.a;
      if (x.b != y.b) return x.b < y.b;
      if (x.c != y.c) return x.c < y.c;
      return tie_less(in, x.i, y.i);
    });
    for (std::size_t r = 0; r < keys.size(); ++r) order[r] = keys[r].i;
    return order;
  }
  struct item {
    std::uint64_t key;
    std::uint32_t i;
  };
  std::vector<item> cur(keys.size()), tmp(keys.size());
  for (std::size_t r = 0; r < keys.size(); ++r) {
    const order_key& k = keys[r];
    std::uint64_t w = fa.map(k.a);
    if (fb.bits) w = w << fb.bits | fb.map(k.b);
    if (fc.bits) w = w << fc.bits | fc.map(k.c);
    cur[r] = {w, k.i};
  }
  constexpr unsigned digit = 11;
  std::vector<std::uint32_t> count(std::size_t{1} << digit);
  for (unsigned shift = 0; shift < bits; shift += digit) {
    std::fill(count.begin(), count.end(), 0);
    for (const item& x : cur) ++count[(x.key >> shift) & ((1u << digit) - 1)];
    std::uint32_t sum = 0;
    for (std::uint32_t& c : count) sum += std::exchange(c, sum);
    for (const item& x : cur) tmp[count[(x.key >> shift) & ((1u << digit) - 1)]++] = x;
    cur.swap(tmp);
  }
  for (std::size_t r = 0; r < cur.size();) {
    std::size_t e = r + 1;
    while (e < cur.size() && cur[e].key == cur[r].key) ++e;
    if (e - r > 1) {
      std::sort(cur.begin() + static_cast<std::ptrdiff_t>(r), cur.begin() + static_cast<std::ptrdiff_t>(e),
                [&](const item& x, const item& y) { return tie_less(in, x.i, y.i); });
    }
    r = e;
  }
  for (std::size_t r = 0; r < cur.size(); ++r) order[r] = cur[r].i;
  return order;
}

placement greedy_placement(const greedy_input& in, std::span<const std::uint32_t> order,
                           std::string algorithm) {
  greedy_placer placer(in);
  placement p;
  p.slab_bytes = placer.place(order);
  p.offsets = placer.offsets();
  p.lower_bound_bytes = in.lower_bound;
  p.algorithm = std::move(algorithm);
  return p;
}

}  // namespace replayalloc::detail
