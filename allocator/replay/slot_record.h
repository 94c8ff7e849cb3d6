// replayalloc/replay/slot_record.h: what the hot path reads of one slot, in one place.
//
// Layer: replay. A compiled plan (compiled_plan.h) is shared by every slab of the plan;
// the hot path would have to combine it with the slab's base and state arrays on every
// call. Instead each slab gets, when it is made, its own copy of what the hit and the
// predicted free need, resolved to that slab: a record per slot (absolute address,
// the size range it serves, its state word, where it registers itself for frees) and
// the recorded order of frees as (address, record) pairs. A hit is then one record
// read at the cursor; a predicted free one pair read at the free cursor.
//
// Note [Freed prefix]
// ~~~~~~~~~~~~~~~~~~~
// Invariant 1 asks, before a slot is handed out, that every earlier slot on its bytes
// be free. Its overlap list (Note [Overlap lists], compiled_plan.h) names those slots;
// in the recording each was freed before the slot was allocated, so each has a rank in
// the recorded order of frees, and `need` is the largest such rank plus one. When a
// thread has freed, in the recorded order, the blocks of every rank below `need`, all
// of them are dead, and the slot is handed out without reading a single state word. The
// free cursor is that count: it moves past a rank only when the free of that rank's
// block is seen (the block was live, and is now dead), so every rank below it is dead,
// and stays dead, since the allocation cursor never goes back. When the program frees
// out of order, the slow path moves the free cursor to where the next free is predicted
// (runtime prediction, not safety); if that is past a rank whose slot is not known
// dead, the cursor moves into the second copy of the free order, which lies below the
// first in memory: every `need` (an address in the first copy) then compares above it,
// and hits take the slow path's full overlap check until the dead prefix catches up
// (slow_path.cc).
#pragma once

#include <atomic>
#include <cstdint>

namespace replayalloc::detail {

struct free_entry;

// One slot of one slab. The hit serves a request of `size` bytes here when
// size - least <= span (unsigned: least <= size <= least + span) and the thread's free
// cursor is at or past `need` (null: no earlier slot shares its bytes).
struct slot_record {
  std::uint64_t least;     // the smallest request served; UINT64_MAX: never served here
  std::uint64_t span;      // capacity - least
  std::uint8_t* ptr;       // the slot's block in this slab
  // Note [Freed prefix]: the address of the free entry of rank `need_rank` (compiled_plan.h)
  // in the slab's first copy of the free order; 0 when the slot has no earlier sharer;
  // UINTPTR_MAX when the slot is never served here (no free cursor reaches it).
  std::uintptr_t need;
  std::atomic<std::uint32_t> state;       // slot_unreached, _live, _dead or _blocked (slab_pool.h)
  std::uint32_t index;                    // the slot's index in the plan
};

// One rank of the recorded order of frees: the block freed then, and its slot.
struct free_entry {
  const std::uint8_t* ptr;  // never a block's address in a sentinel
  slot_record* rec;
};

// Records that serve nothing: a closed cursor points at one (replay/fast_path.h).
inline constexpr std::uint64_t unservable_least = UINT64_MAX;

}  // namespace replayalloc::detail
