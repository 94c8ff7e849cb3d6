// replayalloc/runtime/entry.h: the entry points' fast paths, inline.
//
// Layer: runtime. runtime/api.cc builds the C API from these; the LD_PRELOAD library
// (hooks/preload.cc) inlines them into its malloc and free, so an interposed call
// costs no extra call, PLT or TLS lookup over the C API's. Four cases are served
// here, everything else by one call into api.cc:
//   * the replay hit (replay/fast_path.h): a slot of the plan (the cursor is closed
//     outside a replaying iteration and inside the engine, so nothing else is asked);
//   * a backend block freed that neither a recording nor auto mode's watcher needs
//     to see (thread_state.h: Note [The plain-free gate]): straight to jemalloc's
//     free (asked first: a slab block is never in that case), or, a block of the
//     front cache's, to its list (Note [The gate's range]);
//   * a slab block freed as the recording freed it (it matches only that block);
//   * a request the engine would only pass to the backend, while the thread holds
//     passes granted ahead (runtime/shortcuts.h: Note [Passes granted ahead]).
// A request below REPLAYALLOC_MIN_SIZE (95% of the calls of a Python inference loop)
// goes to the fallback's plain malloc from here (the front cache's, where it is on:
// Note [Small blocks in the front cache]; else jemalloc's), before anything else is
// looked at. The question
// is below_min_size() (Note [Below the minimum size] in replay/fast_path.h), the one
// every path asks; here its answer comes precomputed, process-wide, as g_small_limit
// (thread_state.h: Note [Below the minimum, inline]; 0 where this path may not serve:
// no plain malloc, check mode), since asking those conditions on every call would
// cost instructions more.
//
// Cost (callgrind, instructions per malloc+free pair, the benchmark loop's 8
// included): see tests/perf/instruction_budget.txt, the one place the figures are
// kept (the test perf.instruction_counts fails when one rises more than 5% above it,
// and prints the instructions of replayalloc's own code apart).
// Below the minimum, what this file adds to the plain malloc and free, 12 instructions
// for a block outside the gate's range (jemalloc's own, where the front cache is off):
// on the malloc side the size test (2: one compare with the process-wide limit, one
// branch; 3 while it was a span above malloc_align) and the tail jump; on the free
// side the TLS block's address, the slab's part of the gate's range (4: slab range,
// null, check mode, re-entry, recording and the watcher in one subtraction and
// compare), the front cache's part (2: one add, its carry) and the tail jump, to
// jemalloc's own free (Note [The gate's range]: 5 more while the front cache's range
// was asked apart, in the backend's free). A block of the front cache's (every small
// block where it is on: Note [Small blocks in the front cache]) asks the same two
// tests, then goes to its list: 3 fewer than while the predicted free was asked before
// the front cache's part. Where the front cache serves, both list hits run here (Note
// [The front cache's lists inline], backend/front_inline.h): the malloc's tail jump is
// a compare of the plain malloc with the narrowed one's address and the list's pop, the
// free's the list's push. Nothing is counted on this path (each count was one
// instruction more): not the request, its bytes or its free. The slab's part is asked
// before the predicted free, which costs the replayed free those 4 instructions; the
// replayed pair pays for them with one-instruction cursor steps and state compare
// (replay/fast_path.h: step(), state_is()).
#pragma once

#include <cstddef>

#include "backend/front_cache.h"
#include "backend/front_inline.h"
#include "backend/slab_range.h"
#include "replay/fast_path.h"
#include "runtime/check.h"
#include "runtime/shortcuts.h"
#include "support/config.h"
#include "support/reentry.h"

namespace replayalloc::detail {

// Out of line (runtime/host_slow_path.cc), hidden: everything the inline paths below do not serve.
// noexcept (the allocation interface never throws), so that the noexcept entry points
// of the preload library tail-call them.
REPLAYALLOC_NOINLINE void* entry_alloc_slow(std::size_t size, std::size_t align) noexcept;
REPLAYALLOC_NOINLINE void entry_free_slow(void* ptr) noexcept;
// The whole ladder (host_slow_path.cc), for what does not take the inline path: calloc
// (zero) and an alignment beyond max_slot_align. pre: align a power of two >= malloc_align.
void* host_alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) noexcept;

// An aligned request (align > malloc_align) below the minimum: the front cache's class
// aligned as asked (Note [Aligned requests in the front cache]), where it serves; null
// where it does not (then the slow path). Never recorded, planned or watched, as
// malloc's below the minimum. entry_alloc's, and posix_memalign's inline way's (Note
// [posix_memalign's two ways], api.cc).
REPLAYALLOC_ALWAYS_INLINE void* aligned_below_min(std::size_t size, std::size_t align) {
  if (!small_request(size)) return nullptr;
  backend::plain_memalign_fn m = backend::g_plain_memalign.load(std::memory_order_acquire);
  return m != nullptr ? m(size, align) : nullptr;
}

// pre: align is a power of two >= malloc_align and <= max_slot_align.
REPLAYALLOC_ALWAYS_INLINE void* entry_alloc(std::size_t size, std::size_t align) {
  // Below the minimum (Note [Below the minimum, inline], thread_state.h): never
  // recorded, planned or watched, in any phase, so straight to the backend's plain
  // malloc, the front cache's where it is on (neither calls back into replayalloc, so
  // this is safe inside the engine too), a
  // tail call, before the TLS block is looked at. One compare for size < the minimum:
  // the plain malloc serves a request under malloc_align bytes as glibc aligns it.
  if (small_request(size) && align <= malloc_align) [[likely]] {
    // Note [The front cache's lists inline] (backend/front_inline.h).
    return backend::plain_malloc_inline(backend::g_plain_malloc.load(std::memory_order_acquire), size);
  }
  // An aligned one below the minimum (nothing for malloc, whose align is malloc_align).
  if (align > malloc_align) {
    if (void* p = aligned_below_min(size, align)) [[likely]] return p;
  }
  // The cursor is closed outside a replaying iteration and inside the engine
  // (reentry_guard), so the hit asks nothing else.
  thread_state& t = tls_state;
  if (void* p = replay_try_hit(t.host.cursor, size, align)) [[likely]] return p;
  // A pass granted ahead (Note [Passes granted ahead], runtime/shortcuts.h): none while
  // the thread replays, records, is watched or is inside the engine. A request under
  // malloc_align bytes (rounded up by the slow path), one of pass_inline_max or more
  // and an aligned one ask there.
  if (t.pass_left != 0 && size - malloc_align < pass_inline_max - malloc_align && align <= malloc_align) {
    return pass_granted(t, size);
  }
  // An aligned one at or above the minimum (nothing for malloc): the front cache's aligned
  // class where it serves one (Note [Aligned requests in the front cache]), counted as the
  // pass above is; else the slow path, which grants it there. (One below the minimum the
  // cache did not serve above is never counted: the slow path's.)
  if (align > malloc_align) {
    if (void* p = aligned_pass(t, size, align)) [[likely]] return p;
  }
  return entry_alloc_slow(size, align);
}

REPLAYALLOC_ALWAYS_INLINE void entry_free(void* ptr) {
  thread_state& t = tls_state;
  // Outside the slab's part of the gate's range (Note [The plain-free gate],
  // thread_state.h; Note [The gate's range]): a block of the front cache's part, just
  // below it, to its list, any other (or null) straight to the backend's free, each a
  // tail call. A slab block is always inside, so asking first changes no answer.
  // Laid out apart (unlikely) so that the replayed free's code follows the first test
  // (bench/RESULTS.md, "Small path": the other layout cost its time).
  const std::uintptr_t from = reinterpret_cast<std::uintptr_t>(ptr) - t.look_from;
  if (from >= t.look_span) [[unlikely]] {
    // from + look_front, the offset from the front cache's part's start, wraps below
    // look_front exactly there (look_front is 0 while the gate is not).
    const std::uintptr_t in_front = from + t.look_front;
    if (in_front >= t.look_front) [[unlikely]] return backend::g_outside_free.load(std::memory_order_relaxed)(ptr);
    return backend::front_free_inline(ptr);  // Note [The front cache's lists inline]
  }
  // The predicted free: it matches only the block of the free cursor's rank.
  if (replay_try_free(t.host.cursor, ptr)) [[likely]] return;
  if (!backend::in_slab_range(ptr) && ptr != nullptr && free_backend_filtered(t, ptr)) return;
  entry_free_slow(ptr);
}

// A free that is told the block's size (C++'s sized delete; the size new was asked
// for). A size below the minimum (as entry_alloc tests it) names a block the backend's
// malloc served and that nothing recorded, planned or watched, in any phase: straight
// to the backend's free, without the predicted-free test, the plain-free gate or the
// recording's and watcher's filters (while a thread records or is watched, ~20
// instructions per free of TorchScript's ~2 M small blocks in a model's first
// inferences). The gate's range (Note [The gate's range]: the slab range, with the
// front cache's below it; the front cache's alone without a slab range) is still
// asked, so a wrong size (undefined behaviour in the program) given for a slab block
// falls back to entry_free, which knows the slab; null lies below it. A block of the front cache's part of that range (every small block
// where the cache is on: Note [Small blocks in the front cache]) goes to its list the
// same way, whatever the thread's gate: while a thread was watched, each of its small
// sized deletes took entry_free's long way, the watcher's filter and, as its table
// filled, the slow path (ONNX Runtime under Node.js, arena on: ~45 instructions a free).
// Any other size: entry_free.
REPLAYALLOC_ALWAYS_INLINE void entry_free_sized(void* ptr, std::size_t size) {
  if (small_request(size)) [[likely]] {
    const std::uintptr_t from = reinterpret_cast<std::uintptr_t>(ptr) - backend::g_gate_range.from;
    // The front cache's part lies at the range's start (front <= span; 0 where the cache is off).
    if (from < backend::g_gate_range.front) [[likely]] return backend::front_free_inline(ptr);
    if (from >= backend::g_gate_range.span) return backend::g_outside_free.load(std::memory_order_relaxed)(ptr);
  }
  entry_free(ptr);
}

}  // namespace replayalloc::detail
