// An ordering's sort (greedy.h, sort_by_keys): the keys packed into one word and radix
// sorted when they fit (Note [Radix sort of orderings]), else compared.
#include "planner/greedy.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace replayalloc::detail {
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

}  // namespace replayalloc::detail
