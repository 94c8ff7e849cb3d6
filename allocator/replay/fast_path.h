// replayalloc/replay/fast_path.h: the hot path. Read this file first.
//
// Layer: replay. A thread replaying an iteration holds a cursor into its plan and a
// slab of its own. A malloc that asks for what the recording asked for next is
// served at the slab's base plus the slot's offset; a free of the slot the recording
// freed next marks it dead. Everything else (a size the plan did not expect, a slot
// whose bytes are still in use, a free from another thread) takes one [[unlikely]]
// branch into slow_path.cc.
//
// Cost: a replayed 4 KiB malloc+free pair is 93.0 instructions through the C API and
// 99.0 through the preload library (callgrind, the benchmark loop's 8 included; one
// overlap-list entry per slot; the capacity range of Note [Envelope] added 2 to each;
// jemalloc's own pair is 77.1 at 64 B and 112.2 at 4 KiB): the entry points in
// runtime/api.cc are these functions inline, with no stack frame, then one tail call
// to the slow path. The figures live in tests/perf/instruction_budget.txt; the test
// perf.instruction_counts fails when one rises more than 5% above it.
// bench/RESULTS.md has the table against other allocators and the command.
//
// Thread-safety contract:
//  * The cursor is thread-local; only its thread reads or writes it.
//  * The compiled plan is immutable and shared read-only.
//  * Slot state words (slab::state) are written by the owning thread when it hands a
//    slot out (relaxed: a thread that later frees the block learned the pointer
//    through the program's own synchronisation, which orders the store before its
//    free) and when it frees one (release). Another thread frees with a release CAS
//    (slow path). The overlap check reads with acquire, so bytes freed by another
//    thread are reused only after that thread's last access to them.
//  * slab::slot_at is written by the owner at hand-out, read by remote frees.
// Never here: locks, syscalls, allocation, logging, exceptions, virtual calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "replay/slab_pool.h"
#include "support/config.h"

namespace replayalloc::detail {

// Why a request in a replaying iteration was not served from the slab.
enum class miss_reason : unsigned {
  size_mismatch,  // no slot at or near the cursor fits this request (extra or changed)
  beyond_plan,    // the iteration asked for more than the recording did
  overlap_live,   // the slot's bytes are still held by an earlier block
  alignment,      // the slot's offset does not meet the requested alignment
  too_large,      // larger than its slot's capacity: a shape beyond the plan's envelope
  count
};

struct replay_cursor {
  // Hot: read on every call.
  const slot* slots = nullptr;
  const std::uint32_t* overlaps = nullptr;
  const std::uint32_t* free_order = nullptr;
  std::atomic<std::uint32_t>* state = nullptr;
  std::atomic<std::uint32_t>* slot_at = nullptr;
  std::uint8_t* base = nullptr;
  std::uint32_t next = 0;        // next slot expected
  std::uint32_t count = 0;       // slots in the plan; 0 when not replaying
  std::uint32_t free_next = 0;   // next free expected (rank in free_order)
  std::uint32_t free_count = 0;
  std::uint32_t live_tag = 0;    // (epoch << 2) | slot_live
  std::uint32_t handed = 0;      // slots handed out this iteration
  std::uint32_t freed_here = 0;  // of which freed by this thread during the iteration
  std::uint64_t hit_bytes = 0;
  // Cold: set at iteration begin, or counted on the slow path. The counters are
  // cumulative for the thread; atomics (relaxed, single writer) so that statistics
  // can be read from any thread.
  slab* current = nullptr;
  std::uint32_t resync_window = 8;
  std::uint64_t bypass_below = 0;  // below_min_size()'s threshold
  backend_kind last_kind = backend_kind::ordinary;  // of the last request the slab declined
  std::uint32_t pending = 0;  // look-ahead match to confirm (slot after it), 0 none
  bool mismatched = false;    // the previous slow-path request matched no slot
  std::uint32_t too_large_at = 0;  // cursor + 1 at the last too_large miss, 0 none
  std::uint32_t grown = 0;   // this iteration: slots whose allocation outgrew them
  // This iteration's first request the plan could not serve (any miss but alignment):
  // the cursor's slot then, plus 1 (0: none), and its size. Says which regime the
  // iteration followed instead (Note [Regimes], runtime/engine.h).
  std::uint32_t first_miss_at = 0;
  std::uint64_t first_miss_size = 0;
  // Its first request larger than its slot's capacity, the same way: what the shape
  // grew to (Note [Predicted plans], trace/size_model.h).
  std::uint32_t first_too_large_at = 0;
  std::uint64_t first_too_large_size = 0;
  std::atomic<std::uint64_t> misses[static_cast<unsigned>(miss_reason::count)] = {};
  std::atomic<std::uint64_t> miss_bytes{0};
  std::atomic<std::uint64_t> backend_planned{0};  // outliving slots, served as planned
  std::atomic<std::uint64_t> bypassed{0};         // below min_size (or empty)
  std::atomic<std::uint64_t> bypassed_bytes{0};
  std::atomic<std::uint64_t> remote_frees{0};     // slab blocks freed outside their iteration
  std::atomic<std::uint64_t> invalid_frees{0};    // slab-range pointers that are no block
  std::atomic<std::uint64_t> double_frees{0};     // blocks freed that were not live
};

// Adds n to a counter only this thread writes (no locked instruction).
inline void bump(std::atomic<std::uint64_t>& a, std::uint64_t n = 1) {
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// Note [Below the minimum size]: a request below REPLAYALLOC_MIN_SIZE, or of 0 bytes, is
// never recorded, planned or watched by auto mode, in any domain or phase: its domain's
// backend serves it. Every path asks this function, of the one copy of the threshold,
// the cursor's bypass_below: the option, at least 1 (an empty request is never
// planned), set when the domain is registered (runtime/lifecycle.cc); 0, so that
// nothing is below it, until then. The host's inline entry point alone reads the
// answer precomputed (thread_state::small_below, runtime/entry.h says why).
REPLAYALLOC_ALWAYS_INLINE bool below_min_size(const replay_cursor& c, std::size_t size) {
  return size < c.bypass_below;
}

// The slab's answer when the fast path could not serve: a block, or null when the
// request belongs to the backend (c.last_kind says which kind of backend memory).
void* replay_malloc_slow(replay_cursor& c, std::size_t size, std::size_t align);
// pre: s owns p (null: p lies in no slab, and the free is reported as invalid).
void replay_free_slow(replay_cursor& c, void* p, slab* s);

// True when slot i's bytes may be in use: live, or passed over while busy.
REPLAYALLOC_ALWAYS_INLINE bool slot_occupied(const replay_cursor& c, std::uint32_t i) {
  return (c.state[i].load(std::memory_order_acquire) | 2u) == (c.live_tag | 2u);
}

// The hit: the slot at the cursor, when `size` fits its capacity (Note [Envelope]:
// a slot serves any request up to the largest its allocation was recorded at, never a
// larger one: DESIGN invariant 7), meets `align`, and no earlier slot on its bytes is
// occupied. Returns null otherwise, having changed
// nothing; the caller then takes its slow path (replay_malloc_slow and its backend).
// No calls, so callers that tail-call their slow path need no stack frame.
// pre: align is a power of two >= malloc_align. c.count is 0 when not replaying.
REPLAYALLOC_ALWAYS_INLINE void* replay_try_hit(replay_cursor& c, std::size_t size,
                                               std::size_t align) {
  const std::uint32_t i = c.next;
  if (i >= c.count) [[unlikely]] return nullptr;
  const slot& s = c.slots[i];
  // not_in_slab has every low bit set, so an unplanned slot fails this test too.
  if (size > s.size || size < s.least || (s.offset & (align - 1)) != 0) [[unlikely]] return nullptr;
  // Locals: the acquire loads below would otherwise make the compiler reload the
  // cursor's fields from TLS after each one.
  std::atomic<std::uint32_t>* const state = c.state;
  const std::uint32_t live = c.live_tag;
  const std::uint32_t* o = c.overlaps + s.overlap_begin;
  const std::uint32_t* const end = o + s.overlap_count;
  for (; o != end; ++o) {
    if ((state[*o].load(std::memory_order_acquire) | 2u) == (live | 2u)) [[unlikely]] return nullptr;
  }
  state[i].store(live, std::memory_order_relaxed);
  c.slot_at[s.offset_row].store(i, std::memory_order_relaxed);
  c.next = i + 1;
  ++c.handed;
  c.hit_bytes += size;
  return c.base + s.offset;
}

// Replays one allocation: the hit, else the slow path, else `fallback(size, align,
// kind)` (the domain's backend). Null only when the backend is out of memory.
template <class Fallback>
REPLAYALLOC_ALWAYS_INLINE void* replay_malloc(replay_cursor& c, std::size_t size,
                                              std::size_t align, Fallback&& fallback) {
  if (void* p = replay_try_hit(c, size, align)) [[likely]] return p;
  void* p = replay_malloc_slow(c, size, align);
  return p != nullptr ? p : fallback(size, align, c.last_kind);
}

// The predicted free: p is the slot the recording freed next, and it is live.
// Returns false, having changed nothing, otherwise. No calls.
// pre: p lies in a slab range (host: backend::in_slab_range).
REPLAYALLOC_ALWAYS_INLINE bool replay_try_free(replay_cursor& c, void* p) {
  const std::uint32_t r = c.free_next;
  if (r >= c.free_count) [[unlikely]] return false;
  const std::uint32_t i = c.free_order[r];
  const std::uint32_t live = c.live_tag;
  if (p != c.base + c.slots[i].offset || c.state[i].load(std::memory_order_relaxed) != live)
      [[unlikely]] {
    return false;
  }
  c.state[i].store(live + 1, std::memory_order_release);  // live -> dead
  c.free_next = r + 1;
  ++c.freed_here;
  return true;
}

// Replays one free, from any thread, replaying or not. `owner_of(p)` names the slab
// owning p; it is called only off the predicted path.
template <class OwnerOf>
REPLAYALLOC_ALWAYS_INLINE void replay_free(replay_cursor& c, void* p, OwnerOf&& owner_of) {
  if (replay_try_free(c, p)) [[likely]] return;
  replay_free_slow(c, p, owner_of(p));
}

}  // namespace replayalloc::detail
