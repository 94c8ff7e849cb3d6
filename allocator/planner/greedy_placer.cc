// The greedy placement step (greedy.h).
//
// Note [Why best fit among intersecting slots]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An allocation only has to avoid the slots whose lifetimes intersect its own; of the
// gaps between them, the smallest that holds it leaves the larger gaps for
// allocations still to come. With the largest allocations first this is TFLite's
// ArenaPlanner strategy; other orderings reuse the same rule.
#include "planner/greedy.h"

#include <algorithm>
#include <utility>

namespace replayalloc::detail {

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
    // gap can end at that offset).
    //
    // Note [One-word sort keys]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~
    // When offsets fit in 40 bits and candidates are fewer than 2^24, (offset,
    // candidate) packed in one word sorts several times faster than pairs.
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
