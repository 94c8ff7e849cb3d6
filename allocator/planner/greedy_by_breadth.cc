// Greedy by breadth (after TFLite's GreedyByBreadth and XLA's temporal ordering): the
// allocations that meet the busiest moment of the iteration first. The breadth of a
// moment is the bytes live then; an allocation's key is the largest breadth over its
// lifetime (ties: the earlier such moment, then the larger footprint). Those moments
// set the lower bound, so packing their allocations first, tightly, is what can reach
// it; the rest fill in around them.
//
// Note [Breadth by range maximum]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Live bytes only grow at allocations, so the busiest moment of a lifetime is at one
// of the allocation positions inside it; a segment tree over those positions answers
// each lifetime's maximum in O(log n).
#include <algorithm>
#include <utility>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {

std::vector<std::uint32_t> order_by_breadth(const greedy_input& in) {
  const std::size_t m = in.positions;
  // Segment tree of (live bytes, -position index) over the positions (the live bytes
  // of the lifetimes as mapped, lifetimes.h): the maximum is the busiest moment, the
  // earliest on a tie.
  using node = std::pair<std::int64_t, std::int64_t>;
  std::size_t size = 1;
  while (size < m) size <<= 1;
  std::vector<node> tree(2 * size, node{-1, 0});
  for (std::size_t k = 0; k < m; ++k) {
    tree[size + k] = {static_cast<std::int64_t>(in.live[k]), -static_cast<std::int64_t>(k)};
  }
  for (std::size_t k = size - 1; k >= 1; --k) tree[k] = std::max(tree[2 * k], tree[2 * k + 1]);
  auto range_max = [&](std::size_t l, std::size_t r) {  // over [l, r), r > l
    node best{-1, 0};
    for (l += size, r += size; l < r; l >>= 1, r >>= 1) {
      if (l & 1) best = std::max(best, tree[l++]);
      if (r & 1) best = std::max(best, tree[--r]);
    }
    return best;
  };
  // The sort's keys sit in the array being sorted (order_key, greedy.h): the busiest
  // moment's live bytes (descending) and position, the footprint (descending); the
  // rarer full ties look at the allocations themselves.
  std::vector<order_key> keys;
  keys.reserve(in.plannable.size());
  for (const std::uint32_t i : in.plannable) {
    const node k = range_max(in.first[i], in.last[i]);
    keys.push_back({~static_cast<std::uint64_t>(k.first), static_cast<std::uint64_t>(-k.second), ~in.footprint[i], i});
  }
  return sort_by_keys(in, keys, [](const greedy_input& g, std::uint32_t x, std::uint32_t y) {
    const trace_allocation& a = g.tr->allocations[x];
    const trace_allocation& b = g.tr->allocations[y];
    const std::uint64_t la = a.free_at - a.alloc_at, lb = b.free_at - b.alloc_at;
    if (la != lb) return la > lb;
    if (a.alloc_at != b.alloc_at) return a.alloc_at < b.alloc_at;
    return a.id < b.id;
  });
}

}  // namespace detail

absl::StatusOr<placement> plan_greedy_by_breadth(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::greedy_placement(*in, detail::order_by_breadth(*in), "greedy_by_breadth");
}

}  // namespace replayalloc
