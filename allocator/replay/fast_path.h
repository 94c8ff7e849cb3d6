// replayalloc/replay/fast_path.h: the hot path. Read this file first.
//
// Layer: replay. A thread replaying an iteration holds a cursor into its slab's slot
// records (replay/slot_record.h) and a free cursor into the slab's recorded order of
// frees. A malloc that fits the record at the cursor, when the thread has seen the
// frees of every earlier slot on its bytes (Note [Freed prefix]), is served at the
// record's address; a free of the block the recording freed next marks it dead.
// Everything else (a size the plan did not expect, a free out of order, a slot whose
// earlier sharers' frees were not seen in order, a free from another thread) takes
// one [[unlikely]] branch into slow_path.cc, which checks the overlap lists
// themselves.
//
// Cost: a replayed 4 KiB malloc+free pair is 37.1 instructions through the C API and
// 39.1 through the preload library (callgrind, the benchmark loop's 8.1 included;
// jemalloc's own pair is 77.1 at 64 B and 112.2 at 4 KiB): the hit is one record read,
// two compares, one store of a constant state word, one add to the cursor; the
// predicted free one pair read, two compares (one with the state word in memory), one
// store, one add to the cursor (the entry point's gate range before it, runtime/
// entry.h, is 4 more). The entry points in runtime/api.cc are these functions
// inline, with no stack frame, then one tail call to the slow path. The figures live
// in tests/perf/instruction_budget.txt; the test perf.instruction_counts fails when
// one rises more than 5% above it. bench/RESULTS.md has the table against other
// allocators and the command.
//
// Thread-safety contract:
//  * The cursors are thread-local; only their thread reads or writes them.
//  * The compiled plan is immutable and shared read-only; so are a slab's records but
//    for their state words.
//  * State words (slot_record::state) are written by the owning thread when it hands
//    a slot out (relaxed: a thread that later frees the block learned the pointer
//    through the program's own synchronisation, which orders the store before its
//    free) and when it frees one (release). Another thread frees with a release CAS
//    (slow path). The overlap check reads with acquire, so bytes freed by another
//    thread are reused only after that thread's last access to them; the hit's
//    freed-prefix test needs no read at all, since it counts only this thread's frees.
// Never here: locks, syscalls, allocation, logging, exceptions, virtual calls.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "replay/slab_pool.h"
#include "replay/slot_record.h"
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

// What a closed cursor points at: a slot that serves nothing, and a free that matches
// no block (replay/slot_record.h).
inline constinit slot_record g_closed_slot{unservable_least, 0, nullptr, UINTPTR_MAX, {0}, 0};
// The closed free's block: this byte's address, which no allocation returns (the
// pointer 1 it was is no constant expression: clang refuses the constinit).
inline constinit const std::uint8_t g_never_a_block = 0;
inline constinit free_entry g_closed_free{&g_never_a_block, &g_closed_slot};

struct replay_cursor {
  // Hot: read on every call. `cur` is the record of the slot expected next and
  // `free_cur` the free expected next (Note [Freed prefix], slot_record.h). Both point
  // at the closed records above whenever the hit must not serve: no iteration
  // replays, check mode hides the plan, the plan is cut short, or (`cur` only) the
  // thread is inside the engine (runtime/thread_state.h: reentry_guard). While `cur`
  // is open it alone says where the cursor is; the slow path reads `next` after
  // close_cursor() and moves the cursor by `next` before open_cursor().
  const slot_record* cur = &g_closed_slot;
  const free_entry* free_cur = &g_closed_free;
  std::uint64_t hit_bytes = 0;
  // Cold: set at iteration begin, or kept by the slow path.
  const slot* slots = nullptr;   // the plan's
  const std::uint32_t* overlaps = nullptr;
  slot_record* recs = nullptr;   // the slab's
  free_entry* first_frees = nullptr;   // the slab's two copies of the order of frees
  free_entry* second_frees = nullptr;
  std::uint32_t next = 0;        // next slot expected, while `cur` is closed
  std::uint32_t count = 0;       // slots in the plan (fewer once cut short); 0 when not replaying
  std::uint32_t free_count = 0;  // ranks in the order of frees
  std::uint32_t dead_prefix = 0; // Note [Freed prefix]: every rank below it is dead
  bool serving = false;          // replaying with the plan visible: `cur` may open
  bool guarded = false;          // closed by the engine's reentry guard (host cursor)
  std::uint32_t published = 0;   // `cur`'s index when the slow path last opened it
  const free_entry* free_published = &g_closed_free;  // `free_cur` when last set
  const free_entry* free_saved = &g_closed_free;      // where `free_cur` was, while hidden
  std::uint32_t handed = 0;      // slots handed out this iteration (to `published`)
  std::uint32_t freed_here = 0;  // of which freed by this thread (to `free_published`)
  slab* current = nullptr;
  std::uint8_t* base = nullptr;
  std::uint32_t resync_window = 8;
  std::uint64_t bypass_below = 0;  // below_min_size()'s threshold
  backend_kind last_kind = backend_kind::ordinary;  // of the last request the slab declined
  std::uint32_t pending = 0;  // look-ahead match to confirm (slot after it), 0 none
  bool mismatched = false;    // the previous slow-path request matched no slot
  std::uint32_t too_large_at = 0;  // cursor + 1 at the last too_large miss, 0 none
  std::uint32_t grown = 0;   // this iteration: slots whose allocation outgrew them
  // This iteration's first request the plan could not serve (any miss but alignment):
  // the cursor's slot then, plus 1 (0: none), and its size. Says which regime the
  // iteration followed instead (Note [Regimes], runtime/key_entry.h).
  std::uint32_t first_miss_at = 0;
  std::uint64_t first_miss_size = 0;
  // Its first request larger than its slot's capacity, the same way: what the shape
  // grew to (Note [Predicted plans], trace/size_model.h).
  std::uint32_t first_too_large_at = 0;
  std::uint64_t first_too_large_size = 0;
  // Cumulative for the thread; atomics (relaxed, single writer) so that statistics
  // can be read from any thread.
  std::atomic<std::uint64_t> misses[static_cast<unsigned>(miss_reason::count)] = {};
  std::atomic<std::uint64_t> miss_bytes{0};
  std::atomic<std::uint64_t> backend_planned{0};  // outliving slots, served as planned
  std::atomic<std::uint64_t> bypassed{0};         // below min_size (or empty)
  std::atomic<std::uint64_t> remote_frees{0};     // slab blocks freed outside their iteration
  std::atomic<std::uint64_t> invalid_frees{0};    // slab-range pointers that are no block
  std::atomic<std::uint64_t> double_frees{0};     // blocks freed that were not live
};

// ---- Opening and closing the cursor (slow path and iteration boundaries only) --------

inline bool cursor_open(const replay_cursor& c) { return c.cur != &g_closed_slot; }

// The allocation cursor's position and hand-outs, brought up to date with the hits
// served since it was last opened; then closed: `next` is where it stands.
inline void close_cursor(replay_cursor& c) {
  if (!cursor_open(c)) return;
  const auto pos = static_cast<std::uint32_t>(c.cur - c.recs);
  c.handed += pos - c.published;
  c.next = pos;
  c.cur = &g_closed_slot;
}

// Opens the allocation cursor at `next` when the hit may serve there.
inline void open_cursor(replay_cursor& c) {
  if (c.serving && !c.guarded && c.next < c.count) {
    c.cur = c.recs + c.next;
    c.published = c.next;
  } else {
    c.cur = &g_closed_slot;
  }
}

// Counts the predicted frees served since `free_cur` was last set.
inline void sync_frees(replay_cursor& c) {
  c.freed_here += static_cast<std::uint32_t>(c.free_cur - c.free_published);
  c.free_published = c.free_cur;
}

// Moves the free cursor to `rank` (the slow path): into the first copy when every rank
// below it is dead, else the second (Note [Freed prefix]).
inline void set_free_rank(replay_cursor& c, std::uint32_t rank) {
  sync_frees(c);
  // A free cursor in the first copy is itself a dead prefix.
  if (c.free_cur != &g_closed_free && c.free_cur >= c.first_frees) {
    c.dead_prefix = std::max(c.dead_prefix, static_cast<std::uint32_t>(c.free_cur - c.first_frees));
  }
  c.free_cur = (rank <= c.dead_prefix ? c.first_frees : c.second_frees) + rank;
  c.free_published = c.free_cur;
}

// Hides the plan from the hit and the predicted free (check mode), and shows it again.
inline void hide_plan(replay_cursor& c) {
  close_cursor(c);
  c.serving = false;
  sync_frees(c);
  c.free_saved = c.free_cur;
  c.free_cur = c.free_published = &g_closed_free;
}
inline void show_plan(replay_cursor& c) {
  c.serving = true;
  c.free_cur = c.free_published = c.free_saved;
  open_cursor(c);
}

// Live figures for readers outside the slow path (auto mode): slots handed out and
// freed by this thread this iteration, and the allocation cursor's position.
inline std::uint32_t cursor_next(const replay_cursor& c) {
  return cursor_open(c) ? static_cast<std::uint32_t>(c.cur - c.recs) : c.next;
}
inline std::uint32_t cursor_handed(const replay_cursor& c) {
  return c.handed + (cursor_open(c) ? cursor_next(c) - c.published : 0);
}
inline std::uint32_t cursor_freed(const replay_cursor& c) {
  return c.freed_here + static_cast<std::uint32_t>(c.free_cur - c.free_published);
}

// Ends the plan at the cursor: the rest of the iteration goes to the slow path.
inline void cut_plan_at_cursor(replay_cursor& c) {
  close_cursor(c);
  c.count = c.next;
  open_cursor(c);
}

// Adds n to a counter only this thread writes (no locked instruction).
// On x86-64 one unlocked add to memory: with a single writer no update is lost, and
// its store is one aligned 8-byte write, so a reader on another thread sees the old
// count or the new one (what the relaxed load and store say, in one instruction
// instead of three; below-minimum requests pay it on every call). ThreadSanitizer
// builds keep the atomic operations, which it understands.
#if defined(__SANITIZE_THREAD__)
#define REPLAYALLOC_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REPLAYALLOC_UNDER_TSAN 1
#endif
#endif
REPLAYALLOC_ALWAYS_INLINE void bump(std::atomic<std::uint64_t>& a, std::uint64_t n = 1) {
#if defined(__x86_64__) && !defined(REPLAYALLOC_UNDER_TSAN)
  static_assert(sizeof(a) == sizeof(std::uint64_t) && alignof(std::atomic<std::uint64_t>) == 8);
  asm volatile("addq %1, %0" : "+m"(*reinterpret_cast<std::uint64_t*>(&a)) : "er"(n));
#else
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
#endif
}

// Moves a cursor (one only its thread reads or writes) to the next record: c = c + 1,
// as one add to memory where the compiler would load, add and store (one instruction
// of the replayed pair's ~30, on each side).
template <class T>
REPLAYALLOC_ALWAYS_INLINE void step(const T*& cur) {
#if defined(__x86_64__) && !defined(REPLAYALLOC_UNDER_TSAN)
  asm volatile("addq %1, %0" : "+m"(cur) : "i"(sizeof(T)));
#else
  ++cur;
#endif
}

// True when the slot's state word holds `want` (a relaxed load): one compare with the
// word in memory, which the compiler does not fold for an atomic load (one
// instruction of the predicted free's ten).
template <std::uint32_t want>
REPLAYALLOC_ALWAYS_INLINE bool state_is(const slot_record& r) {
#if defined(__x86_64__) && !defined(REPLAYALLOC_UNDER_TSAN)
  static_assert(sizeof(r.state) == sizeof(std::uint32_t));
  bool equal;
  asm("cmpl %2, %1" : "=@cce"(equal) : "m"(r.state), "i"(want));
  return equal;
#else
  return r.state.load(std::memory_order_relaxed) == want;
#endif
}

// Note [Below the minimum size]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A request below REPLAYALLOC_MIN_SIZE, or of 0 bytes, is never recorded, planned or
// watched by auto mode, in any domain or phase: its domain's backend serves it. Every
// path asks this function, of the one copy of the threshold, the cursor's bypass_below:
// the option, at least 1 (an empty request is never planned), set when the domain is
// registered (runtime/lifecycle.cc); 0, so that nothing is below it, until then. The
// host's inline entry point alone reads the answer precomputed (g_small_limit:
// Note [Below the minimum, inline] in runtime/thread_state.h).
REPLAYALLOC_ALWAYS_INLINE bool below_min_size(const replay_cursor& c, std::size_t size) {
  return size < c.bypass_below;
}

// The slab's answer when the fast path could not serve: a block, or null when the
// request belongs to the backend (c.last_kind says which kind of backend memory).
// pre: not below_min_size(c, size): each domain's path asks that once, before it
// (runtime/host_slow_path.cc, integrations/cuda/device_domain.cc), and counts the
// request in c.bypassed or its own below_min.
void* replay_malloc_slow(replay_cursor& c, std::size_t size, std::size_t align);
// pre: s owns p (null: p lies in no slab, and the free is reported as invalid).
void replay_free_slow(replay_cursor& c, void* p, slab* s);

// True when slot i's bytes may be in use: live, or passed over while busy.
REPLAYALLOC_ALWAYS_INLINE bool slot_occupied(const replay_cursor& c, std::uint32_t i) {
  return (c.recs[i].state.load(std::memory_order_acquire) | 2u) == (slot_live | 2u);  // live or blocked
}

// The hit: the slot at the cursor, when `size` fits its range (Note [Envelope]: a
// slot serves any request up to the largest its allocation was recorded at, never a
// larger one: invariant 7 (allocator/DESIGN.md)), its block meets `align`, and every
// earlier slot on its bytes is known dead because the thread has seen their frees
// (Note [Freed prefix]). Returns null otherwise, having changed nothing; the caller
// then takes its slow path (replay_malloc_slow and its backend), which checks the
// overlap lists themselves. No calls, so callers that tail-call their slow path need
// no stack frame.
// pre: align is a power of two >= malloc_align. A closed cursor serves nothing.
REPLAYALLOC_ALWAYS_INLINE void* replay_try_hit(replay_cursor& c, std::size_t size,
                                               std::size_t align) {
  const slot_record* r = c.cur;
  if (size - r->least > r->span) [[unlikely]] return nullptr;
  if (r->need > reinterpret_cast<std::uintptr_t>(c.free_cur)) [[unlikely]] return nullptr;
  if (align > malloc_align && (reinterpret_cast<std::uintptr_t>(r->ptr) & (align - 1)) != 0) [[unlikely]] {
    return nullptr;
  }
  const_cast<slot_record*>(r)->state.store(slot_live, std::memory_order_relaxed);
  step(c.cur);
  c.hit_bytes += size;
  // Read last, straight into the return register.
  std::uint8_t* const p = r->ptr;
  // A slot the hit serves is in a slab: the caller need not test for null.
  if (p == nullptr) __builtin_unreachable();
  return p;
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

// The predicted free: p is the block of the rank the free cursor is at, and it is live.
// Returns false, having changed nothing, otherwise. No calls. Any pointer may be asked
// (a block's address is never a closed or sentinel entry's).
REPLAYALLOC_ALWAYS_INLINE bool replay_try_free(replay_cursor& c, void* p) {
  const free_entry* f = c.free_cur;
  if (p != f->ptr) [[unlikely]] return false;
  slot_record* r = f->rec;
  if (!state_is<slot_live>(*r)) [[unlikely]] return false;
  r->state.store(slot_dead, std::memory_order_release);
  step(c.free_cur);
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
