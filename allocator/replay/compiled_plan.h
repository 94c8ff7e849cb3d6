// replayalloc/replay/compiled_plan.h: a placement turned into what the hot path reads.
//
// Layer: replay. A compiled plan is immutable once built and shared read-only by
// every thread replaying it. Slots are in allocation order: the hot path walks them
// with a cursor. For each slot it lists the few earlier slots whose bytes it shares
// (Note [Overlap lists]), the row of its offset in a slab's owner table (so a free
// finds its slot), and its rank in the recorded order of frees (so the common free is
// predicted without a lookup).
//
// Note [Overlap lists]
// ~~~~~~~~~~~~~~~~~~~~
// A slot may be handed out only when no earlier slot sharing its bytes is live
// (invariant 1). Listing every earlier sharer would cost O(n) per slot on traces where
// a large slot follows many small ones. Instead each slot lists, for each of its bytes,
// only the latest earlier slot that covered that byte. That is enough because of how
// the hot path treats a slot it passes over without handing it out (skipped, or its
// request fell back): the slot is marked "blocked" when one of its own listed slots is
// occupied, "dead" otherwise. By induction over slot order, a slot that is dead or
// freed guarantees that no earlier slot sharing its bytes is live or can become live
// again (the cursor never moves back), so checking the latest sharers per byte checks
// them all.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::detail {

template <class T>
using ivector = std::vector<T, backend::internal_allocator<T>>;

inline constexpr std::uint32_t no_rank = UINT32_MAX;

// Which backend memory serves a slot that is not in the slab.
enum class backend_kind : std::uint32_t {
  ordinary = 0,  // the domain's fallback (jemalloc; cudaMallocAsync)
  managed = 1,   // large-model support: CUDA managed memory
};

struct slot {
  std::uint64_t size;           // capacity: the most bytes the allocation was recorded
                                // at (Note [Envelope]); a hit asks for at most this
  std::uint64_t least;          // and at least this (the capacity, or 1 when it varied)
  std::uint64_t offset;         // in the slab, or not_in_slab (served by the backend)
  std::uint32_t overlap_begin;  // [overlap_begin, +overlap_count) in overlaps
  std::uint32_t overlap_count;
  // In the slab: the row of `offset` (compiled_plan::offset_rows). Not in the slab:
  // the backend_kind that serves it.
  std::uint32_t offset_row;
  std::uint32_t free_rank;      // position in free_order, or no_rank
  // Note [Freed prefix] (slot_record.h): one more than the largest free_rank of the
  // slots in this slot's overlap list (0: none), or no_rank when one of them has none.
  std::uint32_t need_rank;
};

struct compiled_plan {
  ivector<slot> slots;               // allocation order
  ivector<std::uint32_t> overlaps;   // concatenated overlap lists
  ivector<std::uint32_t> free_order; // slots in the recorded order of their frees
  absl::flat_hash_map<std::uint64_t, std::uint32_t, absl::Hash<std::uint64_t>,
                      std::equal_to<std::uint64_t>,
                      backend::internal_allocator<std::pair<const std::uint64_t, std::uint32_t>>>
      offset_rows;                   // distinct slot offset -> row
  // The slots of each row, in allocation order: row r's are
  // row_slots[row_begin[r], row_begin[r + 1]). See Note [Finding a freed block] in
  // slab_pool.h.
  ivector<std::uint32_t> row_begin;
  ivector<std::uint32_t> row_slots;
  std::uint64_t slab_bytes = 0;
  std::uint64_t lower_bound_bytes = 0;
  std::uint64_t signature = 0;
  std::uint64_t slot_align = 64;
  std::uint32_t planned_slots = 0;   // slots with an offset in the slab
  std::uint64_t planned_bytes = 0;   // sum of their requested sizes
};

// Builds the compiled form. pre: validate(t, p, o) is OK. `managed`, when given,
// marks (one flag per allocation) the slots out of the slab that managed memory serves.
// `least`, when given, is least_served() of the envelope `t` is (Note [Envelope]);
// without it every slot serves exactly its size. No slot serves a request below
// `min_size` (REPLAYALLOC_MIN_SIZE, Note [Below the minimum size]): the inline entry
// point sends an over-aligned request to the hit before asking the minimum (PyTorch's
// CPU allocator asks posix_memalign(64) for every tensor, a few bytes too), and a slot
// that scales would otherwise serve it, taking the slot of the allocation the plan
// expects there.
compiled_plan compile_plan(const trace& t, const placement& p, const planner_options& o,
                           const std::vector<bool>* managed = nullptr,
                           const std::vector<std::uint64_t>* least = nullptr, std::uint64_t min_size = 0);

}  // namespace replayalloc::detail
