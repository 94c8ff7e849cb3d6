// replayalloc/planner/lifetimes.h: a trace's lifetimes as every planner after the
// check needs them, computed once per plan.
//
// Layer: planner (internal; the planners' .cc files include it through greedy.h).
//
// Note [Positions]
// ~~~~~~~~~~~~~~~~
// Each lifetime [alloc_at, free_at) is mapped onto the distinct allocation positions,
// [first, last): every alloc_at is one of those positions, so two lifetimes intersect
// exactly when their mapped ranges do, and whatever depends only on which lifetimes meet
// (the placer's index, the live bytes, the lower bound) can work on positions, dense and
// at most one per allocation, instead of on event numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// What every planner run over one trace needs: the trace checked, the slots'
// footprints and alignments, the lifetimes mapped onto positions, the bytes live at
// each position and their peak, the lower bound. One per plan: plan_best() runs every
// ordering, first fit and the searches on the same one.
struct greedy_input {
  const trace* tr = nullptr;
  std::vector<std::uint32_t> plannable;  // indices of allocations that do not outlive
  std::vector<std::uint64_t> footprint;  // slot_footprint(), per allocation index
  std::vector<std::uint64_t> alignment;  // slot_alignment(), per allocation index
  std::uint64_t horizon = 1;             // 1 + the largest free_at among plannable
  // Note [Positions]: each plannable lifetime mapped onto the distinct allocation
  // positions, [first, last) per allocation index; `positions` of them.
  std::vector<std::uint32_t> first, last;
  std::size_t positions = 0;
  // The footprints live at each position (frees at a position come before the
  // allocations there, as in the mapping), and their peak: lower_bound()'s value.
  std::vector<std::uint64_t> live;
  std::uint64_t lower_bound = 0;
};

// Checks the trace and the options and fills a greedy_input.
absl::StatusOr<greedy_input> prepare_greedy(const trace& t, const planner_options& o);

// v rounded up to a multiple of a. pre: a is a power of two.
inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace replayalloc::detail
