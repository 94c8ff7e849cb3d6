// replayalloc/planner/greedy.h: the placement step every greedy planner shares.
//
// Layer: planner (internal; included by the planners' .cc files only). A greedy
// planner is an ordering of the allocations plus one rule: take them in that order,
// and put each in the smallest gap, among slots already placed whose lifetimes
// intersect its own, that holds it (ties: the lowest offset); above the highest such
// slot when none does. Each concept has its file: the lifetimes every run shares,
// computed once per plan (lifetimes.h, lifetimes.cc), the placer (greedy_placer.cc),
// the orderings' sort (sort_by_keys.cc) and the orderings (greedy_by_size.cc,
// greedy_by_size_class.cc, greedy_by_breadth.cc, greedy_by_lifetime.cc, greedy_by_arrival.cc); best.cc tries
// them all and then improves the best ordering. Never allocates per placed slot once
// warmed up: a greedy_placer keeps its buffers between runs, which is what makes the
// improving pass in best.cc affordable.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "planner/lifetimes.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// Places allocations in a given order; reusable across orders of the same input.
//
// Note [Time index]
// ~~~~~~~~~~~~~~~~~
// On the lifetimes mapped onto positions (Note [Positions] in lifetimes.h), the slots
// that meet a lifetime [l, r) are those live at l and those that start inside (l, r).
// The plannable allocations are in alloc_at order, so the slots starting in a range
// of positions are a run of that order (their ranks), found through start_rank_:
//   * those starting inside (l, r): the run is scanned, in blocks of 64 ranks that
//     are skipped whole while none of theirs is placed;
//   * the short ones live at l (a lifetime of at most `window_` positions): they
//     started in (l - window_, l], a run of at most window_ positions, scanned for
//     the placed ones still live at l (back_last_: their end, 0 when not placed);
//   * the long ones live at l (the rest): a segment tree over blocks of window_
//     positions holds each at the canonical nodes of the blocks it covers whole, as
//     the union of the bytes they take (Note [Long slots as unions]); the one or two
//     blocks it covers in part list it with its lifetime, and a stabbing query at l's
//     block keeps those live at l.
// Each slot met is found once (a long one in a union, counted there). Every run
// scanned is contiguous, and in the orderings
// that jump about in time (by size, by lifetime) a placement touches a few runs of
// memory instead of a root-to-leaf path of lists (what the placer before the fast
// tier walked: 20 levels at 10^6 positions, a cache miss each). window_ is chosen per
// trace from its lifetimes' lengths (choose_window): the scan of the window costs
// about window_ times the slots per position; a long slot costs its tree nodes.
// Over one place(), the runs of (l, r) cost one visit per pair of intersecting
// lifetimes, as finding them cost before (each pair was found once, by the later
// placed); the offsets are those of that placer (tests/property/fast_placer_test.cc
// compares them with tests/property/reference_greedy_placer.h, the placer of
// 243c773).
class greedy_placer {
 public:
  explicit greedy_placer(const greedy_input& in);

  // Places `order` (a permutation of in.plannable) one by one. Returns the slab (the
  // end of the highest slot); offsets() then holds an offset per allocation index
  // (not_in_slab for those that outlive). When the slab would exceed `give_up_above`,
  // stops at once and returns a value above it (offsets() is then incomplete).
  std::uint64_t place(std::span<const std::uint32_t> order,
                      std::uint64_t give_up_above = UINT64_MAX);

  const std::vector<std::uint64_t>& offsets() const { return offsets_; }

  // Work done by every place() so far: per placement, one plus twice the slots met (a
  // slot is found, then compared). A machine-independent measure of time, for budgets
  // that must be deterministic. It is never more than the placer before the fast tier
  // counted for the same placement (that one also counted its trees' nodes), so a
  // budget buys at least the placements it bought then: best.cc's improving pass
  // follows the same course as before, as far or farther.
  std::uint64_t work() const { return work_; }

  // Whether this trace's starts are kept as unions (Note [Starts as unions]).
  bool starts_as_unions() const { return start_leaves_ != 0; }
  // Whether its blocks' long slots covering them in part are (Note [Partial blocks as unions]).
  bool partials_as_unions() const { return !starting_at_.empty(); }

 private:
  struct index_entry {
    std::uint64_t offset, end;
  };
  // A long slot in the tree: its place and its lifetime, to keep those live at l.
  struct long_entry {
    std::uint64_t offset, end;
    std::uint32_t first, last;
  };
  static constexpr std::uint64_t unplaced = UINT64_MAX;
  static constexpr unsigned block_bits = 6;  // ranks per placed count: 64

  // What a placement reads of its allocation, in one place per rank: its lifetime,
  // the runs of ranks it scans (Note [Time index]) and its slot.
  struct rank_info {
    std::uint32_t first, last;  // positions
    std::uint32_t window_from;  // the first rank starting in (first - window_, first]
    std::uint32_t after;        // the first rank starting after first
    std::uint32_t stop;         // the first rank starting at or after last
    std::uint32_t alignment;
    std::uint64_t footprint;
  };
  void prefetch(std::uint32_t rank) const;
  void collect_starting(std::uint32_t from, std::uint32_t to);
  void choose_starts();
  void choose_partials();
  [[gnu::always_inline]] std::uint64_t collect(const rank_info& s);
  [[gnu::always_inline]] void index_placed(std::uint32_t k, std::uint64_t offset);
  std::uint64_t collect_starting_wide(std::uint32_t from, std::uint32_t to);
  std::uint64_t collect_long(std::uint32_t l);
  void index_long(std::uint32_t l, std::uint32_t r, const long_entry& e);
  struct run_ref;
  static void unite(run_ref& x, index_entry* run, index_entry e);
  std::uint64_t take_union(const run_ref& x, const index_entry* run);
  const std::vector<index_entry>& merge_runs();

  const greedy_input& in_;
  const std::vector<std::uint32_t>& first_;  // in.first, in.last
  const std::vector<std::uint32_t>& last_;
  std::uint32_t window_ = 1;                 // Note [Time index]
  std::vector<std::uint32_t> rank_;          // per allocation index: its rank
  std::vector<rank_info> info_;              // per rank
  std::vector<std::uint32_t> ranks_;         // the order being placed, as ranks
  std::vector<index_entry> slot_;            // per rank: offset (unplaced) and end
  std::vector<std::uint32_t> back_last_;     // per rank: last, when placed and short; else 0
  std::vector<std::uint32_t> placed_;        // per 64 ranks: how many are placed
  std::size_t leaves_ = 1;                   // of the long slots' tree: a power of two >= its blocks
  std::uint32_t long_placed_ = 0;
  // Note [Lists in place]
  // ~~~~~~~~~~~~~~~~~~~~~
  // Which long slots each node of the tree and each block will hold depends only on
  // the lifetimes, not on the order, so each has its own run of one array, sized once
  // (run_ref::begin); a place() fills each run from its start (run_ref::fill), and a
  // query scans the filled part: contiguous memory, where linked lists missed the
  // cache once per slot. A node's run holds at most its slots' count of intervals, as
  // a union never has more pieces than slots (Note [Long slots as unions]).
  struct run_ref {
    std::uint32_t begin;  // the run's first entry
    std::uint32_t fill;   // entries filled in this place()
    std::uint32_t slots;  // a node's: the slots its union holds
  };
  // Note [Long slots as unions]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A long slot is live over every position of a block it covers whole, so at a node
  // of such blocks only the bytes its slots take together matter to a query below it:
  // each node keeps their union, intervals by offset, merged where they overlap or
  // touch. A slot has at least one byte (a trace has no allocation of none), so a
  // point where one slot ends and another begins is no gap for any, and the gaps a
  // placement sees are those it saw among the slots themselves, and it takes the same
  // offsets. Where the placer packs well, thousands of slots live at once are a few
  // intervals (a real trace of 28,526 buffers, some 3,000 live at any moment:
  // bench/RESULTS.md, "Planner"). The slots met are still counted one by one (the
  // union's `slots`), so work() is what it was.
  std::vector<run_ref> nodes_;                // per tree node: its union's run in union_
  std::vector<index_entry> union_;
  std::vector<run_ref> partial_;              // per block: its long slots covering it in part
  std::vector<long_entry> partial_entries_;
  // Note [Partial blocks as unions] (greedy_placer.cc): the long slots covering a block
  // in part, united per position instead of listed where partial_ would hold many: those
  // starting at a position (first % window_ != 0) and those ending at one.
  static constexpr std::uint32_t partial_union_window = 16;
  static constexpr std::uint32_t partial_union_least = 256;
  std::vector<run_ref> starting_at_, ending_at_;  // per position
  std::vector<index_entry> partial_union_;
  std::vector<std::uint32_t> united_at_;          // positions whose unions place() filled
  std::vector<std::uint16_t> starting_mask_, ending_mask_;  // per block: its positions with a union
  // Note [Starts as unions]
  // ~~~~~~~~~~~~~~~~~~~~~~~
  // On traces whose lifetimes span thousands of others' starts (a real trace's
  // buffers live over most of it), the slots starting inside a lifetime are most of
  // what a placement meets, and scanning them one by one is most of its time. There a
  // second tree, over the blocks of 64 ranks, keeps at each node the union of the
  // placed slots starting in its blocks (Note [Long slots as unions]'s rule), and a
  // lifetime's starts are its blocks' canonical nodes, the blocks it covers in part
  // scanned as before. Each placement then unites its slot at every level, so the
  // tree is made only where the scans it replaces would cost more (choose_starts):
  // never on the short lifetimes of inference traces.
  std::size_t start_leaves_ = 0;              // 0: no such tree
  std::vector<run_ref> start_nodes_;          // per node: its union's run in start_union_
  std::vector<index_entry> start_union_;
  std::vector<index_entry> cand_;                              // the slots met one by one
  std::vector<std::uint64_t> packed_;                          // offset << 24 | index in cand_
  // Note [Unions merged, not sorted] (greedy_placer.cc): the unions' intervals met, each
  // union a run sorted by offset (run_ends_: where each ends in runs_), and the buffers
  // the runs and the sorted loose slots are merged through.
  std::vector<index_entry> runs_;
  std::vector<std::uint32_t> run_ends_;
  std::vector<index_entry> merge_from_, merge_to_;
  std::vector<std::uint32_t> seg_ends_, seg_next_;
  std::vector<std::uint64_t> offsets_;
  std::uint64_t work_ = 0;
};

// Note [Two-sided placement in arrival order] in fit_search.cc: a depth-first search
// for a placement of every plannable allocation inside [0, capacity), stopping after
// `budget` units of work (added to *work when given). True, with `offsets` (per
// allocation index), when one was found; false otherwise (the search tries three
// places per slot, so false does not prove that none exists). Traces of more than
// fit_search_max_allocations plannable allocations are not searched.
inline constexpr std::size_t fit_search_max_allocations = 4096;
bool fit_under(const greedy_input& in, std::uint64_t capacity, std::uint64_t budget,
               std::vector<std::uint64_t>& offsets, std::uint64_t* work = nullptr);

// One greedy run: a placement named `algorithm` from `order`.
placement greedy_placement(const greedy_input& in, std::span<const std::uint32_t> order,
                           std::string algorithm);

// First fit in arrival order (first_fit.cc): plan_first_fit()'s placement, from an
// input already prepared (best.cc tries it without preparing the trace again). The
// gaps are found by a walk over the live slots or in a tree of gaps (Note [First fit
// over a tree of gaps]): `automatic` chooses by how many slots are live at once; the
// two give the same offsets (tests/property/fast_placer_test.cc).
enum class first_fit_index { automatic, walk, tree };
placement first_fit_placement(const greedy_input& in, first_fit_index index = first_fit_index::automatic);

// An ordering's sort: by (a, b, c), then by `tie_less` (allocation indices) on full
// ties, by default the allocation's id, the tie-break every ordering ends with
// (tie_less must end with it too). The keys sit in the array being sorted, so
// comparisons touch no other memory (the trace's allocations are 48 bytes each,
// scattered).
//
// Note [Radix sort of orderings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// When (a, b, c), each less its minimum and divided by the largest power of two
// dividing every such difference, fit in 64 bits together, they are packed into one
// word and radix sorted (stable, 11 bits a pass); only runs of equal words then go to
// tie_less. Otherwise std::sort.
struct order_key {
  std::uint64_t a, b, c;
  std::uint32_t i;
};
using tie_less_fn = bool (*)(const greedy_input& in, std::uint32_t x, std::uint32_t y);
std::vector<std::uint32_t> sort_by_keys(const greedy_input& in, std::vector<order_key>& keys,
                                        tie_less_fn tie_less = nullptr);

// The orderings (permutations of in.plannable), each deterministic; ties are broken
// down to the allocation's id.
std::vector<std::uint32_t> order_by_size(const greedy_input& in);
std::vector<std::uint32_t> order_by_size_class(const greedy_input& in);
std::vector<std::uint32_t> order_by_breadth(const greedy_input& in);
std::vector<std::uint32_t> order_by_lifetime(const greedy_input& in);
std::vector<std::uint32_t> order_by_arrival(const greedy_input& in);

}  // namespace replayalloc::detail
