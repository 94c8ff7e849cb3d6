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
#include <bit>
#include <cmath>
#include <utility>

namespace replayalloc::detail {
namespace {

// Note [Time index]: the window, a power of two from 4 to 4096 positions, that makes
// the least estimated work: each placement scans the slots starting in a window
// (window * slots per position) and walks the long slots' tree (its depth); each long
// slot costs its canonical nodes, pushed once and met by the queries below them.
std::uint32_t choose_window(const greedy_input& in) {
  const std::size_t n = in.plannable.size();
  if (n == 0 || in.positions == 0) return 4;
  std::uint64_t longer[13] = {};  // per k: lifetimes longer than 2^k positions
  for (const std::uint32_t i : in.plannable) {
    const std::uint32_t len = in.last[i] - in.first[i];
    for (unsigned k = 2; k <= 12 && (std::uint32_t{1} << k) < len; ++k) ++longer[k];
  }
  const double per_position = static_cast<double>(n) / static_cast<double>(in.positions);
  double best_cost = 0;
  std::uint32_t best = 4;
  for (unsigned k = 2; k <= 12; ++k) {
    const double window = static_cast<double>(std::uint64_t{1} << k);
    const double depth = 1 + std::log2(1 + static_cast<double>(in.positions) / window);
    const double cost = static_cast<double>(n) * (window * per_position + depth) +
                        4.0 * static_cast<double>(longer[k]) * depth;
    if (k == 2 || cost < best_cost) {
      best_cost = cost;
      best = std::uint32_t{1} << k;
    }
  }
  return best;
}

}  // namespace

greedy_placer::greedy_placer(const greedy_input& in) : in_(in), first_(in.first), last_(in.last) {
  const auto& all = in.tr->allocations;
  const std::size_t n = in.plannable.size();
  window_ = choose_window(in);
  offsets_.assign(all.size(), not_in_slab);
  rank_.assign(all.size(), 0);
  // Plannable allocations are in alloc_at order: first_ never decreases along them,
  // so the slots starting in a range of positions are a run of ranks.
  std::vector<std::uint32_t> start_rank(in.positions + 2, static_cast<std::uint32_t>(n));
  for (std::size_t k = n; k-- > 0;) {
    const std::uint32_t i = in.plannable[k];
    rank_[i] = static_cast<std::uint32_t>(k);
    start_rank[first_[i]] = static_cast<std::uint32_t>(k);
  }
  for (std::size_t p = in.positions; p-- > 0;) start_rank[p] = std::min(start_rank[p], start_rank[p + 1]);
  info_.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t i = in.plannable[k], l = first_[i], r = last_[i];
    info_[k] = {l, r, start_rank[l + 1 > window_ ? l + 1 - window_ : 0], start_rank[l + 1], start_rank[r],
                static_cast<std::uint32_t>(in.alignment[i]), in.footprint[i]};
  }
  slot_.assign(n, {unplaced, 0});
  back_last_.assign(n, 0);
  placed_.assign((n >> block_bits) + 1, 0);
  // Note [Lists in place]: each run's length (a long slot at the canonical nodes of
  // the blocks it covers whole, and in the blocks it covers in part), then the runs.
  const std::size_t blocks = in.positions / window_ + 1;
  while (leaves_ < blocks) leaves_ <<= 1;
  nodes_.assign(2 * leaves_, run_ref{0, 0, 0});
  partial_.assign(leaves_, run_ref{0, 0, 0});
  for (const std::uint32_t i : in.plannable) {
    const std::uint32_t l = first_[i], r = last_[i];
    if (r - l <= window_) continue;
    if (l % window_ != 0) ++partial_[l / window_].begin;
    if (r % window_ != 0) ++partial_[r / window_].begin;
    for (std::size_t a = (l + window_ - 1) / window_ + leaves_, b = r / window_ + leaves_; a < b; a >>= 1, b >>= 1) {
      if (a & 1) ++nodes_[a++].begin;
      if (b & 1) ++nodes_[--b].begin;
    }
  }
  std::uint32_t sum = 0;
  for (run_ref& x : nodes_) sum += std::exchange(x.begin, sum);
  union_.resize(sum);
  choose_partials();
  sum = 0;
  for (run_ref& x : partial_) sum += std::exchange(x.begin, sum);
  partial_entries_.resize(sum);
  sum = 0;
  for (run_ref& x : starting_at_) sum += std::exchange(x.begin, sum);
  for (run_ref& x : ending_at_) sum += std::exchange(x.begin, sum);
  partial_union_.resize(sum);
  choose_starts();
}

// Note [Partial blocks as unions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A long slot is listed one by one in the blocks it covers in part (Note [Time index]),
// and a placement scans its block's list. Where many long slots begin or end inside one
// block (a real trace's buffers made together at one moment, or S_1 repeated: 3,218
// begin at each copy's first position, inside a block, and every placement beginning
// there scanned them all: 72.7 a placement, 0.7 on S_1 itself), those of one block are
// kept instead as a union per position (Note [Long slots as unions]): those beginning at
// it, live at every later position of the block (a long slot outlives its block), and
// those ending at it, live at every earlier one; a placement at l takes the unions of
// the positions before it and after it that are non-empty (a bit mask per block). Made
// where a block's list would hold more than partial_union_least slots and blocks are of
// at most 16 positions; elsewhere a union's upkeep costs more than the short lists'
// scan (synthetic traces 5-15% slower with it everywhere).
void greedy_placer::choose_partials() {
  std::uint32_t most = 0;
  for (const run_ref& x : partial_) most = std::max(most, x.begin);
  if (window_ > partial_union_window || most <= partial_union_least) return;
  const std::size_t blocks = in_.positions / window_ + 1;
  partial_.clear();
  starting_at_.assign(in_.positions + 1, run_ref{0, 0, 0});
  ending_at_.assign(in_.positions + 1, run_ref{0, 0, 0});
  starting_mask_.assign(blocks, 0);
  ending_mask_.assign(blocks, 0);
  for (const std::uint32_t i : in_.plannable) {
    const std::uint32_t l = first_[i], r = last_[i];
    if (r - l <= window_) continue;
    if (l % window_ != 0) ++starting_at_[l].begin;
    if (r % window_ != 0) ++ending_at_[r].begin;
  }
}

// Note [Starts as unions]: the tree over blocks of 64 ranks, made when the ranks the
// placements would scan for starts are more than 256 per placement on average (a
// placement then unites its slot at about log2(n / 64) nodes instead), on traces of
// at most 2^18 plannable allocations (the runs take 16 bytes per rank and level). A
// node's run holds at most its ranks' count of intervals.
void greedy_placer::choose_starts() {
  const std::size_t n = info_.size();
  if (n == 0 || n > (std::size_t{1} << 18)) return;
  std::uint64_t scanned = 0;
  for (const rank_info& x : info_) scanned += x.stop - x.after;
  if (scanned <= 256 * static_cast<std::uint64_t>(n)) return;
  const std::size_t blocks = (n >> block_bits) + 1;
  start_leaves_ = 1;
  while (start_leaves_ < blocks) start_leaves_ <<= 1;
  start_nodes_.assign(2 * start_leaves_, run_ref{0, 0, 0});
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t from = b << block_bits;
    start_nodes_[start_leaves_ + b].begin = static_cast<std::uint32_t>(std::min(n, from + (std::size_t{1} << block_bits)) - from);
  }
  for (std::size_t node = start_leaves_; node-- > 1;) {
    start_nodes_[node].begin = start_nodes_[2 * node].begin + start_nodes_[2 * node + 1].begin;
  }
  std::uint32_t sum = 0;
  for (run_ref& x : start_nodes_) sum += std::exchange(x.begin, sum);
  start_union_.resize(sum);
}

// Appends to cand_ the placed slots of ranks [from, to), skipping blocks of 64 ranks
// with none placed.
void greedy_placer::collect_starting(std::uint32_t from, std::uint32_t to) {
  std::uint32_t q = from;
  while (q < to) {
    const std::uint32_t block_end = std::min(to, ((q >> block_bits) + 1) << block_bits);
    if (placed_[q >> block_bits] == 0) {
      q = block_end;
      continue;
    }
    for (; q < block_end; ++q) {
      if (slot_[q].offset != unplaced) cand_.push_back(slot_[q]);
    }
  }
}

// Appends a union's intervals (run x of `run`) to runs_, as a run of their own (Note
// [Unions merged, not sorted]); returns how many more slots it holds than intervals
// (Note [Long slots as unions]: work() counts slots).
inline std::uint64_t greedy_placer::take_union(const run_ref& x, const index_entry* run) {
  if (x.fill == 0) return x.slots;
  const index_entry* u = run + x.begin;
  runs_.insert(runs_.end(), u, u + x.fill);
  run_ends_.push_back(static_cast<std::uint32_t>(runs_.size()));
  return x.slots - x.fill;
}

// Appends to cand_ the placed slots of ranks [from, to) (Note [Starts as unions]): the
// unions of the blocks of 64 ranks it covers whole, the rest one by one. Returns how
// many more slots those unions hold than the intervals appended.
std::uint64_t greedy_placer::collect_starting_wide(std::uint32_t from, std::uint32_t to) {
  const std::size_t first_block = (std::size_t{from} + (std::size_t{1} << block_bits) - 1) >> block_bits, end_block = to >> block_bits;
  if (first_block >= end_block) {
    collect_starting(from, to);
    return 0;
  }
  collect_starting(from, static_cast<std::uint32_t>(first_block << block_bits));
  collect_starting(static_cast<std::uint32_t>(end_block << block_bits), to);
  std::uint64_t more = 0;
  for (std::size_t a = first_block + start_leaves_, b = end_block + start_leaves_; a < b; a >>= 1, b >>= 1) {
    if (a & 1) more += take_union(start_nodes_[a++], start_union_.data());
    if (b & 1) more += take_union(start_nodes_[--b], start_union_.data());
  }
  return more;
}

// Appends to cand_ the placed long slots live at position l (Note [Time index]): those
// of l's block that cover it in part, one by one, and the unions on its path to the
// root (Note [Long slots as unions]). Returns how many more slots those unions hold
// than the intervals appended.
std::uint64_t greedy_placer::collect_long(std::uint32_t l) {
  const std::size_t block = l / window_;
  std::uint64_t more = 0;
  if (!starting_at_.empty()) {
    // Note [Partial blocks as unions]: those that start in l's block at or before l,
    // and those that end in it after l (a long slot outlives a block: both are live).
    // Each block's positions with a union are bits of its masks.
    const std::size_t from = block * window_;
    const std::uint32_t upto = (2u << (l - from)) - 1;  // the positions from..l
    for (std::uint32_t m = starting_mask_[block] & upto; m != 0; m &= m - 1) {
      more += take_union(starting_at_[from + static_cast<unsigned>(std::countr_zero(m))], partial_union_.data());
    }
    for (std::uint32_t m = ending_mask_[block] & ~upto; m != 0; m &= m - 1) {
      more += take_union(ending_at_[from + static_cast<unsigned>(std::countr_zero(m))], partial_union_.data());
    }
  } else {
    const long_entry* p = partial_entries_.data() + partial_[block].begin;
    for (std::uint32_t k = 0, n = partial_[block].fill; k < n; ++k) {
      if (p[k].first <= l && l < p[k].last) cand_.push_back({p[k].offset, p[k].end});
    }
  }
  for (std::size_t node = leaves_ + block; node >= 1; node >>= 1) {
    if (nodes_[node].fill != 0) more += take_union(nodes_[node], union_.data());  // most are empty
  }
  return more;
}

// Adds slot e to node's union (Note [Long slots as unions]): e and the intervals it
// overlaps or touches become one. The run stays sorted by offset, its ends sorted too
// (no two meet), so the first interval that may meet e is found by binary search.
void greedy_placer::unite(run_ref& x, index_entry* run, index_entry e) {
  ++x.slots;
  index_entry* const b = run + x.begin;
  index_entry* const end = b + x.fill;
  index_entry* const from =
      std::partition_point(b, end, [&](const index_entry& u) { return u.end < e.offset; });
  index_entry* to = from;
  while (to != end && to->offset <= e.end) ++to;
  if (from == to) {
    std::move_backward(from, end, end + 1);
    *from = e;
    ++x.fill;
    return;
  }
  *from = {std::min(from->offset, e.offset), std::max((to - 1)->end, e.end)};
  std::move(to, end, from + 1);
  x.fill -= static_cast<std::uint32_t>(to - from - 1);
}

void greedy_placer::index_long(std::uint32_t l, std::uint32_t r, const long_entry& e) {
  if (!starting_at_.empty()) {  // Note [Partial blocks as unions]
    if (l % window_ != 0) {
      if (starting_at_[l].slots == 0 && ending_at_[l].slots == 0) united_at_.push_back(l);
      starting_mask_[l / window_] |= static_cast<std::uint16_t>(1u << (l % window_));
      unite(starting_at_[l], partial_union_.data(), {e.offset, e.end});
    }
    if (r % window_ != 0) {
      if (starting_at_[r].slots == 0 && ending_at_[r].slots == 0) united_at_.push_back(r);
      ending_mask_[r / window_] |= static_cast<std::uint16_t>(1u << (r % window_));
      unite(ending_at_[r], partial_union_.data(), {e.offset, e.end});
    }
  } else {
    if (l % window_ != 0) {
      run_ref& x = partial_[l / window_];
      partial_entries_[x.begin + x.fill++] = e;
    }
    if (r % window_ != 0) {
      run_ref& x = partial_[r / window_];
      partial_entries_[x.begin + x.fill++] = e;
    }
  }
  for (std::size_t a = (l + window_ - 1) / window_ + leaves_, b = r / window_ + leaves_; a < b; a >>= 1, b >>= 1) {
    if (a & 1) unite(nodes_[a++], union_.data(), {e.offset, e.end});
    if (b & 1) unite(nodes_[--b], union_.data(), {e.offset, e.end});
  }
  ++long_placed_;
}

// Asks the memory system for what placing `rank` will read. The order jumps about in
// time (by size, by lifetime), so each placement's rank_info, runs of ranks and tree
// path are elsewhere; fetched a few placements ahead they arrive together instead of
// one cache miss after another.
void greedy_placer::prefetch(std::uint32_t rank) const {
  const rank_info& s = info_[rank];
  __builtin_prefetch(&back_last_[s.window_from]);
  __builtin_prefetch(&slot_[s.window_from]);
  __builtin_prefetch(&slot_[s.after]);
  __builtin_prefetch(&placed_[s.after >> block_bits]);
  if (long_placed_ != 0) {
    const std::size_t block = s.first / window_;
    __builtin_prefetch(partial_.empty() ? static_cast<const void*>(&starting_mask_[block]) : &partial_[block]);
    __builtin_prefetch(&nodes_[leaves_ + block]);
    __builtin_prefetch(&nodes_[(leaves_ + block) >> 3]);
  }
}

// The slots that meet [l, r) (Note [Time index]) into cand_: the short ones live at l,
// those starting inside (l, r), the long ones live at l. Returns how many more slots
// met the unions hold than their intervals in cand_.
inline std::uint64_t greedy_placer::collect(const rank_info& s) {
  cand_.clear();
  runs_.clear();
  run_ends_.clear();
  for (std::uint32_t q = s.window_from; q < s.after; ++q) {
    if (back_last_[q] > s.first) cand_.push_back(slot_[q]);
  }
  std::uint64_t in_unions = 0;
  if (start_leaves_ != 0) {
    in_unions += collect_starting_wide(s.after, s.stop);
  } else {
    collect_starting(s.after, s.stop);
  }
  if (long_placed_ != 0) in_unions += collect_long(s.first);
  return in_unions;
}

// Indexes rank k's new slot at `offset`: its rank's entry, the starts' unions when
// kept, and the tree when it is long.
inline void greedy_placer::index_placed(std::uint32_t k, std::uint64_t offset) {
  const rank_info& s = info_[k];
  slot_[k] = {offset, offset + s.footprint};
  ++placed_[k >> block_bits];
  if (start_leaves_ != 0) {
    for (std::size_t node = start_leaves_ + (k >> block_bits); node >= 1; node >>= 1) {
      unite(start_nodes_[node], start_union_.data(), slot_[k]);
    }
  }
  if (s.last - s.first <= window_) {
    back_last_[k] = s.last;
  } else {
    index_long(s.first, s.last, {offset, offset + s.footprint, s.first, s.last});
  }
}

// Note [Unions merged, not sorted]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A placement reads the slots it meets by offset. Those the unions hold (Notes [Long
// slots as unions] and [Starts as unions]) come as runs already sorted by offset, a run
// per union met (about 8 per placement on a real trace of 28,526 buffers, holding 60%
// of the intervals met); only the slots met one by one need sorting. So the loose
// slots are sorted (by their packed keys, Note [One-word sort keys]) and merged with
// the runs pairwise, a level at a time: about log2(runs + 1) passes over the
// intervals where a sort of them all made log2(intervals) (the sort was half of a
// placement's time there). Slots at one offset may come in any order (place()), so the
// offsets are the same as a sort's.
const std::vector<greedy_placer::index_entry>& greedy_placer::merge_runs() {
  merge_from_.clear();
  seg_ends_.clear();
  for (const std::uint64_t key : packed_) merge_from_.push_back(cand_[key & ((std::uint64_t{1} << 24) - 1)]);
  if (!merge_from_.empty()) seg_ends_.push_back(static_cast<std::uint32_t>(merge_from_.size()));
  const auto loose = static_cast<std::uint32_t>(merge_from_.size());
  merge_from_.insert(merge_from_.end(), runs_.begin(), runs_.end());
  for (const std::uint32_t end : run_ends_) seg_ends_.push_back(loose + end);
  merge_to_.resize(merge_from_.size());
  auto by_offset = [](const index_entry& x, const index_entry& y) { return x.offset < y.offset; };
  while (seg_ends_.size() > 1) {
    seg_next_.clear();
    std::uint32_t begin = 0;
    for (std::size_t k = 0; k < seg_ends_.size(); k += 2) {
      const std::uint32_t mid = seg_ends_[k];
      const std::uint32_t end = k + 1 < seg_ends_.size() ? seg_ends_[k + 1] : mid;
      std::merge(merge_from_.begin() + begin, merge_from_.begin() + mid, merge_from_.begin() + mid,
                 merge_from_.begin() + end, merge_to_.begin() + begin, by_offset);
      seg_next_.push_back(end);
      begin = end;
    }
    merge_from_.swap(merge_to_);
    seg_ends_.swap(seg_next_);
  }
  return merge_from_;
}

std::uint64_t greedy_placer::place(std::span<const std::uint32_t> order,
                                   std::uint64_t give_up_above) {
  for (run_ref& x : nodes_) x.fill = x.slots = 0;
  for (run_ref& x : partial_) x.fill = 0;
  for (const std::uint32_t q : united_at_) {
    starting_at_[q].fill = starting_at_[q].slots = ending_at_[q].fill = ending_at_[q].slots = 0;
    starting_mask_[q / window_] = ending_mask_[q / window_] = 0;
  }
  united_at_.clear();
  for (run_ref& x : start_nodes_) x.fill = x.slots = 0;
  long_placed_ = 0;
  std::fill(slot_.begin(), slot_.end(), index_entry{unplaced, 0});
  std::fill(back_last_.begin(), back_last_.end(), 0);
  std::fill(placed_.begin(), placed_.end(), 0);
  std::fill(offsets_.begin(), offsets_.end(), not_in_slab);
  // The order as ranks first: independent loads, which the memory system overlaps.
  ranks_.resize(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) ranks_[j] = rank_[order[j]];
  constexpr std::size_t info_ahead = 16, data_ahead = 8;
  std::uint64_t slab = 0;
  std::size_t j = 0;
  for (; j < ranks_.size(); ++j) {
    if (j + info_ahead < ranks_.size()) __builtin_prefetch(&info_[ranks_[j + info_ahead]]);
    if (j + data_ahead < ranks_.size()) prefetch(ranks_[j + data_ahead]);
    const std::uint32_t k = ranks_[j];
    const rank_info& s = info_[k];
    const std::uint64_t in_unions = collect(s);
    work_ += 2 * (cand_.size() + runs_.size() + in_unions) + 1;  // see work() in greedy.h
    // By offset; slots at the same offset in any order (after the first of them no
    // gap can end at that offset).
    //
    // Note [One-word sort keys]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~
    // When offsets fit in 40 bits and candidates are fewer than 2^24, (offset,
    // candidate) packed in one word sorts several times faster than pairs.
    const std::uint64_t fp = s.footprint, al = s.alignment;
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
      if (runs_.empty()) {
        for (const std::uint64_t key : packed_) {
          const auto& [oj, ej] = cand_[key & ((std::uint64_t{1} << 24) - 1)];
          consider(oj, ej);
        }
      } else {
        for (const index_entry& e : merge_runs()) consider(e.offset, e.end);
      }
    } else {
      cand_.insert(cand_.end(), runs_.begin(), runs_.end());
      std::sort(cand_.begin(), cand_.end(), [](const index_entry& x, const index_entry& y) {
        return x.offset != y.offset ? x.offset < y.offset : x.end < y.end;
      });
      for (const auto& [oj, ej] : cand_) consider(oj, ej);
    }
    if (best == not_in_slab) best = align_up(end, al);
    slab = std::max(slab, best + fp);
    if (slab > give_up_above) break;
    index_placed(k, best);
  }
  // The offsets by allocation index, in one pass (every rank when nothing gave up).
  for (std::size_t k = 0; k < slot_.size(); ++k) {
    if (slot_[k].offset != unplaced) offsets_[in_.plannable[k]] = slot_[k].offset;
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
