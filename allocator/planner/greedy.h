// replayalloc/planner/greedy.h: the placement step every greedy planner shares.
//
// Layer: planner (internal; included by the planners' .cc files only). A greedy
// planner is an ordering of the allocations plus one rule: take them in that order,
// and put each in the smallest gap, among slots already placed whose lifetimes
// intersect its own, that holds it (ties: the lowest offset); above the highest such
// slot when none does. Each concept has its file: the lifetimes every run shares,
// computed once per plan (lifetimes.h, lifetimes.cc), the placer (greedy_placer.cc),
// the orderings' sort (sort_by_keys.cc) and the orderings (greedy_by_size.cc,
// greedy_by_breadth.cc, greedy_by_lifetime.cc, greedy_by_arrival.cc); best.cc tries
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
// that meet a lifetime [l, r) are those live at l, found by a stabbing query on a
// segment tree holding each slot at the O(log n) canonical nodes of its range (a slot
// live at l sits at exactly one node on l's path to the root, so no filter is
// needed), and those that start inside (l, r), found in a count-pruned segment tree
// over start positions. Each is found once: a query costs O(log n) plus O(log n) per
// slot found, whatever the lifetimes' lengths.
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

  // Work done by every place() so far (index entries visited and slots compared): a
  // machine-independent measure of time, for budgets that must be deterministic.
  std::uint64_t work() const { return work_; }

 private:
  void push(std::size_t list, std::uint32_t slot);
  void collect_starts(std::size_t node, std::size_t lo, std::size_t hi, std::size_t l, std::size_t r);

  const greedy_input& in_;
  std::size_t leaves_ = 1;                      // a power of two >= the positions
  const std::vector<std::uint32_t>& first_;     // in.first, in.last
  const std::vector<std::uint32_t>& last_;
  std::vector<std::uint32_t> start_count_;      // per tree node: slots starting below it
  // Note [Lists in place]
  // ~~~~~~~~~~~~~~~~~~~~~
  // The lists are lists 0 .. 2 * leaves_ - 1 (per tree node: the slots held there for
  // stabbing queries) and 2 * leaves_ + p (the slots starting at leaf p). Which slots a
  // list will hold depends only on the lifetimes, not on the order, so each list has its
  // own run of entries_, sized once (list_ref::begin); a place() fills each run from its
  // start (list_ref::fill), and a query scans the filled part: contiguous memory, where
  // linked lists missed the cache once per slot. Each entry carries what a query needs
  // (the slot's offset and end).
  struct index_entry {
    std::uint64_t offset, end;
  };
  struct list_ref {
    std::uint32_t begin;  // the run's first entry
    std::uint32_t fill;   // entries filled in this place()
  };
  std::vector<list_ref> lists_;
  std::vector<index_entry> entries_;
  std::vector<index_entry> cand_;                              // the slots met
  std::vector<std::uint64_t> packed_;                          // offset << 24 | index in cand_
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
// input already prepared (best.cc tries it without preparing the trace again).
placement first_fit_placement(const greedy_input& in);

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
std::vector<std::uint32_t> order_by_breadth(const greedy_input& in);
std::vector<std::uint32_t> order_by_lifetime(const greedy_input& in);
std::vector<std::uint32_t> order_by_arrival(const greedy_input& in);

}  // namespace replayalloc::detail
