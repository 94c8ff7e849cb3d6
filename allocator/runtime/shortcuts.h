// replayalloc/runtime/shortcuts.h: what the host entry points may decide without the
// engine: a request below the minimum, a request the engine would only pass through,
// and a free of a backend block nothing needs to see.
//
// Layer: runtime, below the engine (runtime/engine.h includes it; it does not include
// the engine): the inline entry points (runtime/entry.h) and the slow path's top
// (runtime/host_slow_path.cc) read only the thread's state, the recorder's and the
// watcher's filters, and three process-wide figures fixed when the engine is made.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "backend/backend.h"
#include "backend/front_inline.h"
#include "runtime/auto_detect.h"
#include "runtime/check.h"
#include "runtime/thread_state.h"
#include "trace/recorder.h"

namespace replayalloc::detail {

// Whether auto mode watches the threads (REPLAYALLOC_MODE=auto): written once by the
// engine's constructor, before any thread registers, so every reader that asks it
// (a registered thread) sees it set.
inline constinit bool g_watches_threads = false;

// The backend serves a request: zeroed when asked (by its calloc where the alignment
// allows), errno ENOMEM when it cannot. Every rung of the slow path that ends at the
// backend ends here (runtime/host_slow_path.cc).
inline void* serve_from_backend(std::size_t size, std::size_t align, bool zero) {
  void* p = zero && align <= malloc_align ? backend::fallback_calloc(size) : backend::fallback_alloc(size, align);
  if (p == nullptr) [[unlikely]] {
    errno = ENOMEM;
    return nullptr;
  }
  if (zero && align > malloc_align) std::memset(p, 0, size);
  return p;
}

// A request the engine makes of the interposed malloc (in_engine()): the backend's
// engine_alloc (Note [The engine's large buffers]) where it is not zeroed.
inline void* serve_engine(std::size_t size, std::size_t align, bool zero) {
  if (zero) return serve_from_backend(size, align, true);
  void* p = backend::engine_alloc(size, align);
  if (p == nullptr) [[unlikely]] errno = ENOMEM;
  return p;
}

// The backend serves a request that needs nothing else of it (not zeroed): through its
// plain malloc where it has one (the backend's own checks are for the engine's requests:
// failure injection, alignment), rounded up as glibc aligns; serve_from_backend
// otherwise. A request below the minimum and one passed through (Note [Pass-through]).
inline void* serve_plain(std::size_t size, std::size_t align) {
  backend::plain_malloc_fn plain = backend::g_pass_malloc.load(std::memory_order_acquire);
  if (plain == nullptr || align > malloc_align) [[unlikely]] return serve_from_backend(size, align, false);
  void* p = plain(size < malloc_align ? malloc_align : size);
  if (p == nullptr) [[unlikely]] errno = ENOMEM;
  return p;
}

// The two requests the preload library sees most (95% of the calls of a Python
// inference loop), inline so that they cost little more than jemalloc's own fast path:
//
// A host request below REPLAYALLOC_MIN_SIZE (or of 0 bytes): never recorded, planned
// or watched by auto mode, so it goes straight to the backend, and is not counted, as
// the inline path counts none (Note [Below the minimum, inline], thread_state.h).
// pre: check mode off.
inline void* alloc_below_min(std::size_t size, std::size_t align, bool zero) {
  return zero ? serve_from_backend(size, align, true) : serve_plain(size, align);
}

// Note [Pass-through]
// ~~~~~~~~~~~~~~~~~~~
// True when engine::alloc_slow_unchecked would do nothing for this request but pass it
// to the backend and count it as pass-through: a registered thread whose host domain
// neither records nor replays (phase none, a slab not missing), check mode off, a size
// the backend may be asked for, and nothing for auto mode to do: not auto mode, or the
// thread marks its own iterations (auto mode is off there), or its watcher rests
// (Note [Auto mode rests]) outside any iteration, whose count this takes one off. The
// rest's last allocation (resting == 1) goes the engine's way, which starts watching
// again (or glancing: Note [A glance after a rest], auto_mode.cc); so does a thread's
// first in auto mode, which makes its watcher (auto_mode::before_alloc counts the rest
// down the same way). Here, with the
// engine's other inline shortcuts; used by the slow path's top
// (runtime/host_slow_path.cc), which grants the passes that follow ahead (Note
// [Passes granted ahead]). pre: not in the engine, size at or above the minimum.
//
// Note [Passes granted ahead]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// What passes_through() asks depends only on the thread's own state and on figures
// fixed when the engine is made, and all of that state changes inside the engine, or
// in set_phase(). So when it says yes, it also says how many of the requests that
// follow would get the same answer: all of them (not auto mode, or the thread marks
// its own iterations: t.pass_left = UINT64_MAX), or the rest's count but its last
// (moved into t.pass_left, the watcher keeping 1, so that every test of "resting > 0"
// answers as before and the last still goes the engine's way). The inline entry point
// (runtime/entry.h: entry_alloc) then passes a request of malloc_align bytes or more,
// aligned as malloc aligns, to the backend's plain malloc on one test of the count,
// counting it as the slow path would (pass-through, backend bytes). The engine's
// reentry guard and set_phase() take the passes back (revoke_passes(),
// runtime/thread_state.h), a rest's given back to the watcher's count (and the pointer
// to it dropped, emptied or not): so none is passed inside the engine (whose requests
// are its own, with failure injection) and none survives a begin, an end, a watch or a
// thread's exit (a forked child keeps the forking thread's, whose state is the
// parent's, as the grant assumed). Requests the inline path leaves to the slow path
// (aligned, zeroed, tiny or huge) take a granted pass there. Granted only where
// the backend has a plain malloc. Why it is safe even where a grant were stale: a
// request passed is served by the backend as the slow path would serve it outside an
// iteration, never from a slab; at worst a recording would miss it and its replay
// deviate, which falls back. A 4 KiB stream that never repeats spends nearly all its
// requests resting: 215.3 instructions per pair before (RESULTS "Small path").
inline bool passes_through(thread_state& t, std::size_t size) noexcept {
  if (!t.registered || t.host.ph != phase::none || t.host.no_slab || check::enabled() ||
      size > max_request_bytes) {
    return false;
  }
  // A request the inline path leaves here (aligned, under malloc_align bytes, or of
  // pass_inline_max or more) while passes are granted: one of them.
  if (t.pass_left != 0) {
    --t.pass_left;
    return true;
  }
  const bool plain = backend::g_plain_malloc.load(std::memory_order_relaxed) != nullptr;
  auto_state* a = t.autod;
  if (t.marks_own || (a == nullptr && !g_watches_threads)) {
    revoke_passes(t);  // a rest's count, emptied inline: pass_home goes
    if (plain) t.pass_left = UINT64_MAX;
    return true;
  }
  if (a == nullptr) return false;
  if (a->resting > 1 && t.depth == 0) {
    --a->resting;
    if (plain && a->resting > 1) {
      t.pass_left = a->resting - 1;
      t.pass_home = &a->resting;
      a->resting = 1;
    }
    return true;
  }
  return false;
}

// The watcher's rest still to run (Note [Auto mode rests]): its count and the passes
// granted from it ahead (Note [Passes granted ahead]).
inline std::uint64_t resting_left(const thread_state& t) {
  if (t.autod == nullptr) return 0;
  return t.autod->resting + (t.pass_home == &t.autod->resting ? t.pass_left : 0);
}

// The inline entry point's pass (Note [Passes granted ahead]): one granted pass taken
// and counted as the slow path's pass-through is (a request, its bytes), then the
// backend's plain malloc, a tail call, so that the entry point needs no stack frame
// (which the replay hit before it would pay for: 6 instructions). Counted before the
// backend answers, so that a request it cannot serve is counted too: only requests under
// pass_inline_max come here, and a failure below that is the system's memory running
// out. pre: t.pass_left != 0, malloc_align <= size < pass_inline_max, malloc's alignment.
inline constexpr std::size_t pass_inline_max = std::size_t{1} << 30;
REPLAYALLOC_ALWAYS_INLINE void* pass_granted(thread_state& t, std::size_t size) {
  --t.pass_left;
  bump(t.host.backend_bytes, size);
  bump(t.host.passthrough);
  // Note [The front cache's lists inline] (backend/front_inline.h).
  return backend::pass_malloc_inline(backend::g_pass_malloc.load(std::memory_order_acquire), size);
}

// The same for an aligned request (entry_alloc; Note [Aligned requests in the front
// cache]): the front cache's aligned class, the pass taken and counted only where it
// serves one; null (nothing taken) otherwise. pre: t.pass_left != 0, align > malloc_align.
REPLAYALLOC_ALWAYS_INLINE void* pass_granted_aligned(thread_state& t, std::size_t size, std::size_t align) {
  backend::plain_memalign_fn m = backend::g_plain_memalign.load(std::memory_order_acquire);
  void* p = m != nullptr ? m(size, align) : nullptr;
  if (p != nullptr) [[likely]] {
    --t.pass_left;
    bump(t.host.backend_bytes, size);
    bump(t.host.passthrough);
  }
  return p;
}

// An aligned request at or above the minimum with passes granted (entry_alloc's, and
// posix_memalign's inline way's: Note [posix_memalign's two ways], api.cc): the front
// cache's aligned class, the pass counted; null (nothing taken) where the thread has no
// pass, the request is below the minimum or of pass_inline_max or more, or the cache does
// not serve it. pre: align > malloc_align.
REPLAYALLOC_ALWAYS_INLINE void* aligned_pass(thread_state& t, std::size_t size, std::size_t align) {
  if (t.pass_left == 0 || small_request(size) || size >= pass_inline_max) return nullptr;
  return pass_granted_aligned(t, size, align);
}

// A free of a backend block (outside the slab range) that only a recording or auto
// mode's watcher might need to see (the plain-free gate holds gate_recording and/or
// gate_watched, nothing else): when neither can hold p (Note [Live filters]),
// straight to the backend's free; false (nothing done) otherwise, and the caller goes
// to engine::free_backend. A TorchScript model's first inferences free ~700,000 small
// blocks while they record; each was a hash lookup in the slow path.
// Whether the thread's watcher must see the free of block p, not a block of its (the
// filter says it may be one it watches, or counts: Note [Iterations between quiet
// points]), or because this free makes it dormant (Note [A dormant watcher],
// auto_mode.cc: the slow path's free does it; no call here: it would cost every inline
// free a stack frame). Asked by the gate's path below and by the front cache's lists
// (Note [Frees the watcher asks for], host_slow_path.cc).
inline bool watcher_asks(auto_state& a, const void* p) {
  const bool counting_ends = a.in_iteration && a.det.quiet();
  if ((!a.in_iteration || counting_ends) && a.filter.maybe_live(p)) return true;
  return auto_goes_dormant(++a.unwatched_frees, counting_ends);
}

inline bool free_backend_filtered(thread_state& t, void* p) {
  const std::uint32_t g = t.free_gate;
  if ((g & ~(gate_recording | gate_watched)) != 0) return false;
  if ((g & gate_recording) != 0 && t.host.recorder->maybe_live(p)) return false;
  // The watcher: only frees it must see.
  if ((g & gate_watched) != 0 && watcher_asks(*t.autod, p)) return false;
  // The gate is past gate_unready: the backend has a plain free.
  backend::g_plain_free.load(std::memory_order_relaxed)(p);
  return true;
}

}  // namespace replayalloc::detail
