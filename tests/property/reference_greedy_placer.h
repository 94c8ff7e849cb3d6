// tests/property/reference_greedy_placer.h: the greedy placer as it was before the fast
// tier (issue 32, item 2), kept as the reference the fast placer must match offset for
// offset (fast_placer_test.cc). Test-only: the library never includes it.
//
// The rule (planner/greedy.h): take the allocations in the given order and put each in
// the smallest gap, among the slots already placed whose lifetimes intersect its own,
// that holds it (ties: the lowest offset); above the highest such slot when none does.
// The slots met are found by a stabbing query on a segment tree over positions (the
// slots live at the allocation's first position) and a count-pruned segment tree over
// start positions (those starting inside its lifetime): the code of commit 243c773,
// less its work counter, its scan of short ranges of leaves and its one-word sort keys
// (neither changes an offset: slots met at one offset may come in any order, Note
// [One-word sort keys] in planner/greedy_placer.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "planner/greedy.h"

namespace replayalloc::testing {

class reference_greedy_placer {
 public:
  explicit reference_greedy_placer(const detail::greedy_input& in) : in_(in), first_(in.first), last_(in.last) {
    while (leaves_ < in.positions) leaves_ <<= 1;
    start_count_.assign(2 * leaves_, 0);
    offsets_.assign(in.tr->allocations.size(), not_in_slab);
    lists_.assign(3 * leaves_, list_ref{0, 0});
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

  // As greedy_placer::place: the slab, or a value above give_up_above once it is passed.
  std::uint64_t place(std::span<const std::uint32_t> order, std::uint64_t give_up_above = UINT64_MAX) {
    for (list_ref& x : lists_) x.fill = 0;
    std::fill(start_count_.begin(), start_count_.end(), 0);
    std::fill(offsets_.begin(), offsets_.end(), not_in_slab);
    std::uint64_t slab = 0;
    for (const std::uint32_t i : order) {
      const std::size_t l = first_[i], r = last_[i];
      cand_.clear();
      for (std::size_t node = leaves_ + l; node >= 1; node >>= 1) {
        const entry* e = entries_.data() + lists_[node].begin;
        for (std::uint32_t k = 0; k < lists_[node].fill; ++k) cand_.push_back(e[k]);
      }
      collect_starts(1, 0, leaves_, l + 1, r);
      std::sort(cand_.begin(), cand_.end(), [](const entry& x, const entry& y) {
        return x.offset != y.offset ? x.offset < y.offset : x.end < y.end;
      });
      const std::uint64_t fp = in_.footprint[i], al = in_.alignment[i];
      std::uint64_t best = not_in_slab, best_gap = UINT64_MAX, end = 0;
      for (const auto& [oj, ej] : cand_) {
        const std::uint64_t off = detail::align_up(end, al);
        if (off + fp <= oj && oj - end < best_gap) {
          best_gap = oj - end;
          best = off;
        }
        end = std::max(end, ej);
      }
      if (best == not_in_slab) best = detail::align_up(end, al);
      offsets_[i] = best;
      slab = std::max(slab, best + fp);
      if (slab > give_up_above) return slab;
      for (std::size_t a = l + leaves_, b = r + leaves_; a < b; a >>= 1, b >>= 1) {
        if (a & 1) push(a++, i);
        if (b & 1) push(--b, i);
      }
      push(2 * leaves_ + l, i);
      for (std::size_t node = leaves_ + l; node >= 1; node >>= 1) ++start_count_[node];
    }
    return slab;
  }

  const std::vector<std::uint64_t>& offsets() const { return offsets_; }

 private:
  struct entry {
    std::uint64_t offset, end;
  };
  struct list_ref {
    std::uint32_t begin, fill;
  };

  void push(std::size_t list, std::uint32_t slot) {
    list_ref& x = lists_[list];
    entries_[x.begin + x.fill++] = {offsets_[slot], offsets_[slot] + in_.footprint[slot]};
  }

  void collect_starts(std::size_t node, std::size_t lo, std::size_t hi, std::size_t l, std::size_t r) {
    if (start_count_[node] == 0 || hi <= l || r <= lo) return;
    if (hi - lo == 1) {
      const list_ref& x = lists_[2 * leaves_ + lo];
      for (std::uint32_t k = 0; k < x.fill; ++k) cand_.push_back(entries_[x.begin + k]);
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    collect_starts(2 * node, lo, mid, l, r);
    collect_starts(2 * node + 1, mid, hi, l, r);
  }

  const detail::greedy_input& in_;
  std::size_t leaves_ = 1;
  const std::vector<std::uint32_t>& first_;
  const std::vector<std::uint32_t>& last_;
  std::vector<std::uint32_t> start_count_;
  std::vector<list_ref> lists_;
  std::vector<entry> entries_;
  std::vector<entry> cand_;
  std::vector<std::uint64_t> offsets_;
};

}  // namespace replayalloc::testing
