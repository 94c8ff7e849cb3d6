// The host slow path: every host request the inline entry points (runtime/entry.h) do
// not serve, as one ladder, and the frees they pass on.
//
// The ladder (host_alloc_slow; entry_alloc_slow is its entry for malloc's requests),
// top to bottom, each rung asked once. malloc, calloc (zero), aligned_alloc and
// posix_memalign of any alignment, operator new, and realloc's new block all climb it:
//   1. re-entrant (the engine allocating): the backend (invariant 5);
//   2. below REPLAYALLOC_MIN_SIZE: the backend, never recorded, planned or watched
//      (what the inline path did not serve: an alignment, check mode, no plain malloc;
//      Note [Below the minimum, inline]);
//   3. nothing on the thread records, replays or watches (Note [Pass-through]): the
//      backend, counted as pass-through, without the engine; the requests after it
//      that would get the same answer are granted to the inline path (Note [Passes
//      granted ahead]), which serves them until the engine is next entered;
//   4. the engine (engine::alloc_slow: check mode's shadow record around it): a
//      request beyond what a slot can promise (aligned beyond max_slot_align) to the
//      backend, never recorded or watched; register the thread (once: its first
//      request, whose minimum rung 2 could not yet answer, is asked it here), auto
//      mode's watcher (periodic work: it may end an iteration and begin the next),
//      then the replaying cursor's slot (replay_malloc), else the backend (recorded
//      when the thread records; watched when auto mode watches).
// Every rung that ends at the backend, a replay's miss included, does so through
// serve_from_backend() or serve_plain() (runtime/shortcuts.h), which say ENOMEM; the
// first zeroes as calloc does. realloc (runtime/api.cc) asks the backend's own realloc
// only for a backend block outside any iteration, where the ladder would serve the new
// block from the backend too and jemalloc can resize it in place.
#include <cerrno>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "replay/fast_path.h"
#include "runtime/auto_mode.h"
#include "runtime/check.h"
#include "runtime/engine.h"
#include "runtime/entry.h"
#include "runtime/shortcuts.h"
#include "support/reentry.h"

namespace replayalloc::detail {

namespace {

inline slab* host_owner(const void* p) { return static_cast<slab*>(backend::chunk_owner(p)); }

// Rungs 1-4. Zero: calloc's (the one request that climbs with it set).
template <bool Zero>
REPLAYALLOC_ALWAYS_INLINE void* ladder(thread_state& t, std::size_t size, std::size_t align) noexcept {
  if (in_engine()) [[unlikely]] return serve_engine(size, align, Zero);
  // Below the minimum size (nothing is until the thread is registered: its first
  // request asks in the engine).
  if (below_min_size(t.host.cursor, size) && !check::enabled()) [[likely]] {
    return alloc_below_min(size, align, Zero);
  }
  // Note [Pass-through]: ~150 instructions per allocation less than the engine's way,
  // on every allocation at or above the minimum of a program that marks iterations
  // only around some of its work, or whose keys are set aside, or that auto mode has
  // stopped watching for a while (a stream that never repeats spends most of its
  // allocations resting).
  if (passes_through(t, size)) {
    void* p = Zero ? serve_from_backend(size, align, true) : serve_plain(size, align);
    if (p == nullptr) [[unlikely]] return nullptr;
    bump(t.host.backend_bytes, size);
    bump(t.host.passthrough);
    return p;
  }
  return engine::get().alloc_slow(t, size, align, Zero);
}

}  // namespace

// What the inline path does not serve (entry.h). A request under malloc_align bytes no
// longer comes here from it where a plain malloc serves below the minimum (Note [Below
// the minimum, inline]): it was this function's first rung, a shortcut of rung 2.
void* entry_alloc_slow(std::size_t size, std::size_t align) noexcept {
  return ladder<false>(tls_state, size, align);
}

void* host_alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) noexcept {
  return zero ? ladder<true>(t, size, align) : ladder<false>(t, size, align);
}

void entry_free_slow(void* ptr) noexcept {
  if (ptr == nullptr) return;
  thread_state& t = tls_state;
  if (check::enabled() && !in_engine()) [[unlikely]] {
    engine::get().free_checked(t, ptr);
    return;
  }
  if (backend::in_slab_range(ptr)) {
    if (!t.registered) [[unlikely]] engine::get().register_thread(t);  // a remote free
    replay_free_slow(t.host.cursor, ptr, host_owner(ptr));
    return;
  }
  if (in_engine()) [[unlikely]] {
    backend::fallback_free(ptr);
    return;
  }
  engine::get().free_backend(t, ptr);
}

// Rung 4, with check mode's shadow record around it (Note [Check mode]).
void* engine::alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) noexcept {
  try {
    if (!check::enabled() || in_engine()) return alloc_slow_unchecked(t, size, align, zero);
    unmask_plan(t.host);
    void* p = alloc_slow_unchecked(t, size, align, zero);
    mask_plan(t.host);  // the phase may have changed (auto mode begins and ends iterations)
    if (p != nullptr) check::on_alloc(p, size, t.op, t.thread_no, backend::in_slab_range(p));
    return p;
  } catch (const std::bad_alloc&) {
    // The last resort: the engine's own memory ran out where nothing nearer caught it
    // (the recording, the watcher and planning do). The allocation interface never
    // throws, so the backend serves the request, as the engine would have.
    mask_plan(t.host);  // check mode: hidden again if it was shown (a no-op otherwise)
    reentry_guard guard;
    return serve_from_backend(size, align, zero);
  }
}

void engine::free_checked(thread_state& t, void* p) {
  register_thread(t);
  check::on_free(p, t.thread_no);
  if (backend::in_slab_range(p)) {
    // The last free of a retired plan's slab releases the slab and the plan (slab_pool.cc:
    // plan_version::release): engine memory, made under the guard, so freed under it
    // too, to the backend unchecked, as it was made (Note [Check mode]).
    reentry_guard guard;
    unmask_plan(t.host);
    replay_free(t.host.cursor, p, [](void* q) { return static_cast<slab*>(backend::chunk_owner(q)); });
    mask_plan(t.host);
    return;
  }
  free_backend(t, p);
}

void* engine::alloc_slow_unchecked(thread_state& t, std::size_t size, std::size_t align, bool zero) {
  if (size > max_request_bytes) [[unlikely]] {
    errno = ENOMEM;
    return nullptr;
  }
  if (in_engine()) return serve_engine(size, align, zero);
  // The minimum (rung 2) for what the ladder's top could not ask it of: the thread's
  // first request (registered here) and check mode's.
  if (!t.registered || check::enabled()) [[unlikely]] {
    register_thread(t);
    if (below_min_size(t.host.cursor, size)) return alloc_below_min(size, align, zero);
  }
  domain_state& d = t.host;
  // Beyond what a slot can promise (aligned_alloc, posix_memalign, memalign): the
  // backend, never recorded, watched or counted (a plan could not place it; inside an
  // iteration it is neither a slot's miss nor a pass; outside one rung 3 takes it first
  // where it answers, and counts it as it counts every pass).
  if (align > max_slot_align) [[unlikely]] return serve_from_backend(size, align, zero);
  // Note [Auto mode as a client]: the watcher hears of the request first; it may end
  // the thread's iteration here and begin the next. Not on a thread whose program marks
  // its own iterations (step_aside): its watch() returns at once and its track() keeps
  // nothing there, and no iteration of its own is open to count a slot in.
  const bool watched = g_watches_threads && !t.marks_own;
  if (watched) auto_mode::before_alloc(t, size);
  if (d.ph == phase::replay) {
    // A miss: the backend, zeroed by it where asked; a slot's bytes zeroed here.
    void* p = replay_malloc(d.cursor, size, align, [zero](std::size_t n, std::size_t a, backend_kind) {
      return serve_from_backend(n, a, zero);
    });
    if (p == nullptr) return nullptr;
    const bool from_slab = backend::in_slab_range(p);
    if (zero && from_slab) std::memset(p, 0, size);
    // Note [Iterations between quiet points] (runtime/auto_detect.h): an auto
    // iteration that ends where few blocks are live counts its backend blocks.
    if (watched) auto_mode::after_alloc(t, p, size, from_slab);
    return p;
  }
  void* p = serve_from_backend(size, align, zero);
  if (p == nullptr) return nullptr;
  bump(d.backend_bytes, size);
  if (d.no_slab) {
    bump(d.no_slab_fallbacks);
  } else {
    bump(d.passthrough);
  }
  if (d.ph == phase::record) record_alloc(d, p, size, align);
  if (watched) auto_mode::after_alloc(t, p, size, /*slab=*/false);
  return p;
}

// Note [Small blocks the filters let through]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The recording's and the watcher's filters (Note [Live filters]) answer "maybe" more
// often as their tables fill: each block in them marks one bucket in 8,192. Under
// Node.js, ONNX Runtime's outputs are copied into calloc'd buffers the collector frees
// on another thread, which the watcher never sees, so its table only grows (5,889
// blocks after 9,000 watched allocations, its arena on), and 26.6% of the thread's
// small frees came here for nothing (25,413 in 102 tokens, 384 of them of watched
// blocks), each to a hash lookup. A block of the front cache's runs of a class below the
// minimum (t.host.cursor.bypass_below; backend::fallback_block_below asks the cache's
// page map) is in neither table, all of whose blocks are at least that: it goes to the
// backend's free at once, unless it is the free that makes the watcher dormant (Note [A
// dormant watcher], auto_mode.cc). Not in the inline free: a call there gives every
// free a stack frame (+6 instructions a pair on every path, the replayed one's too).
void engine::free_backend(thread_state& t, void* p) {
  if (!t.registered) [[unlikely]] register_thread(t);
  if (backend::fallback_block_below(p, t.host.cursor.bypass_below) &&
      (t.autod == nullptr || t.autod->unwatched_frees < dormant_after)) {
    backend::fallback_free(p);
    return;
  }
  if (t.host.ph == phase::record && !in_engine()) record_free(t.host, p);
  // A thread that marks its own iterations keeps no watched blocks (track() is off
  // there); its watcher hears of a free only to go dormant (Note [A dormant watcher]).
  if (t.autod != nullptr && !in_engine() && (!t.marks_own || t.autod->unwatched_frees >= dormant_after)) {
    auto_mode::on_free(t, p);
  }
  backend::fallback_free(p);
}

namespace {
// Note [Frees the watcher asks for] (backend/front_idle.cc): a free of the front cache's
// block of a class the watcher may watch, on a thread whose gate leaves the cache's part
// of the range to its lists: what free_backend_filtered (runtime/shortcuts.h) asks
// (watcher_asks), before the block goes onto its list. Where another bit is set the free came
// through the gate's path or the engine's, which ask it themselves.
void front_free_watched(void* p) noexcept {
  thread_state& t = tls_state;
  if (t.free_gate != gate_watched || t.autod == nullptr) return;
  if (watcher_asks(*t.autod, p)) [[unlikely]] auto_mode::on_free(t, p);
}
}  // namespace

void watch_front(thread_state& t, bool on) noexcept {
  if (!on) {
    if (t.front_watched) backend::unwatch_front_frees();
    t.front_watched = false;
    return;
  }
  // Not where the minimum is 0 (every class may hold a watched block) or the cache has
  // no part of the gate's range.
  const std::uint64_t least = __atomic_load_n(&g_small_limit, __ATOMIC_ACQUIRE);
  if (t.front_watched || least == 0 || backend::g_gate_range.front == 0) return;
  t.front_watched = backend::watch_front_frees(least, &front_free_watched);
}

}  // namespace replayalloc::detail
