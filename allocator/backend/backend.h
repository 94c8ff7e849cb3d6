// replayalloc/backend/backend.h: where memory comes from when the plan does not serve.
//
// Layer: backend (above support). Two contracts:
//  * the host fallback (jemalloc through its non-standard mallocx/sdallocx API, so it
//    never goes through the interposed malloc of the LD_PRELOAD library), used for
//    misses, pass-through calls and the engine's own containers;
//  * the slab range (slab_range.h): one reserved virtual range carved into slabs.
// Nothing here takes a lock on the fallback path except jemalloc's own arenas.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>

#include "support/config.h"
#include "support/reentry.h"

namespace replayalloc::detail::backend {

// Fault injection, for the tests of out-of-memory handling: the next n allocations
// the engine makes for itself (inside the reentry guard: recorders, plans, slabs and
// their bookkeeping) fail as if the system had no memory. The program's own requests
// are unaffected. One relaxed load on the fallback path when unused.
void fail_engine_allocations(std::int64_t n) noexcept;
extern std::atomic<std::int64_t> g_engine_failures;
inline bool inject_failure() noexcept {
  return g_engine_failures.load(std::memory_order_relaxed) > 0 && in_engine() &&
         g_engine_failures.fetch_sub(1, std::memory_order_relaxed) > 0;
}

// Serves ordinary requests through jemalloc's own malloc/calloc/free (its fast path)
// instead of mallocx/dallocx, once found; false when they could not be found (then
// nothing changes). Call once, under the reentry guard; the engine does, when made.
bool use_fast_entry_points() noexcept;

// The fallback's start (Note [The fallback made when first needed], fallback_start.cc):
// its front cache (`front`; Note [The fallback's front cache]), its settings
// (keep_huge_pages, zero_reused_by_memset) and the narrowing of its plain malloc to
// sizes under `small_limit` (narrow_plain_malloc), made once the fallback has served
// `after` requests, or one of 1 MiB or more, with jemalloc's own malloc; at once when
// `after` is 0. The front cache's range is reserved and joined to the gate's now,
// whatever `after` says. Call once, under the reentry guard, after the slab range is
// reserved and before any thread's gate opens (the engine's constructor).
void start_fallback(bool front, std::uint64_t small_limit, std::uint64_t after) noexcept;
// Makes what start_fallback deferred now, if it has not been made (tests, and whoever
// must see the fallback as it will be).
void start_fallback_now() noexcept;
// Whether the start was made (true where nothing was deferred).
bool fallback_started() noexcept;
// In a child forked while another thread was making the start: jemalloc's mallocs back.
void fallback_start_postfork_child() noexcept;
// True while the start waits for its requests: a calloc or an aligned request, which no
// counting malloc sees, tells it of itself (note_calloc: a large one, 16 KiB or more,
// makes the start, as jemalloc would give a reused one's pages back to zero them: Note
// [Zeroing by memset]; note_aligned: counted as a malloc is, so that a program whose
// requests are all aligned gets the front cache: Note [Aligned requests in the front cache]).
inline constinit std::atomic<bool> g_start_pending{false};
void note_calloc(std::size_t size) noexcept;
void note_aligned(std::size_t size) noexcept;
// A request above the boot heap's largest while it is open and the start pending: pages
// of its own (zero), counted as one request (Note [A short process's large requests],
// boot_heap.cc); null where it cannot be, and the request goes on as before.
void* large_before_start(std::size_t size) noexcept;
// A calloc of up to 256 KiB while the boot heap is open and the start pending: the heap's
// block, zeroed, counted as one request (Note [A short process's callocs],
// fallback_start.cc); null where the heap cannot serve it.
void* calloc_before_start(std::size_t size) noexcept;

// Keeps the pages of freed blocks of 8 MiB and more for the next block, as for every
// other size (jemalloc: Note [The fallback's huge blocks] in jemalloc_backend.cc), unless
// the program's MALLOC_CONF chose otherwise. At the fallback's start.
void keep_huge_pages() noexcept;

// Reserves the front cache's range and joins it to the gate's (no call into jemalloc);
// false where the plain entry points are not jemalloc's own (AddressSanitizer, the
// dlopen build), and then use_front_cache() is not called.
bool reserve_front_cache() noexcept;
// The range reserve_front_cache() reserved (0: none), whose first MiB is the boot heap's.
std::uintptr_t front_boot_base() noexcept;
// The frees that know the front cache's blocks (front_free) in place of jemalloc's own
// (the plain free, and the free outside the gate's range where the cache's is not in it):
// before the cache's first block or the boot heap's is handed out.
void use_front_frees() noexcept;
// Puts the front cache (Note [The fallback's front cache], front_cache.cc) in front of
// the plain malloc and free, for blocks of up to 2 MiB; false (nothing changes) where it
// cannot be made. At the fallback's start, under the reentry guard, after
// reserve_front_cache() succeeded; other threads may be allocating.
bool use_front_cache() noexcept;
// The address space use_front_cache() would reserve (0: it would not be used), for the
// engine to reserve below the slab range first (Note [The gate's range], slab_range.h).
std::size_t front_range_wanted() noexcept;
// The plain malloc (g_plain_malloc) will only be called with sizes under `limit` (the
// inline path below the minimum): the front cache's then skips its test of the size
// where it can (Note [Below the minimum, narrowed], front_classes.cc). At the
// fallback's start, under the reentry guard.
void narrow_plain_malloc(std::uint64_t limit) noexcept;

// Note [Thread caches left to the front cache] (jemalloc_backend.cc): the backend's own
// per-thread caches turned off from its boot on, where the front cache will serve; false
// where there is no such setting (glibc, the C API library). Before the backend boots
// (the engine's constructor); a backend booted already keeps its caches.
bool leave_thread_caches_to_front() noexcept;
// Whether the backend keeps per-thread caches (jemalloc: opt.tcache; glibc: its tcache,
// true). After the fallback's start (it asks jemalloc's controls).
bool fallback_thread_caches_on() noexcept;

// Makes the backend zero a reused large block it callocs by memset, not by giving its
// pages back and faulting them in again (jemalloc: Note [Zeroing by memset] in
// jemalloc_backend.cc; glibc memsets already). At the fallback's start.
void zero_reused_by_memset() noexcept;

// The largest block the backend keeps in a thread's cache for the next request of its
// size, as its settings say (jemalloc: the larger of arenas.tcache_max, 32 KiB unless a
// user's MALLOC_CONF says otherwise, and what the front cache keeps, 128 KiB while it is
// on: front_thread_kept_max(), front_cache.h; glibc: its mmap threshold's default,
// 128 KiB, below which a block freed is the next one of its size, from the heap).
// Auto mode's rule for blocks that never overlap asks it (Note [Blocks that never
// overlap], runtime/auto_mode.cc).
std::size_t thread_cache_max() noexcept;

// Gives the backend's free pages back to the system when they are mostly what a new
// slab of `slab_bytes` replaces (jemalloc: flushes this thread's cache, then purges
// every arena when their dirty pages are at most twice slab_bytes, else this thread's
// arena when its own are at most three times: Note [Purging what a slab replaces];
// glibc, which has no decay: malloc_trim, always). Called once per host slab made
// (replay/slab_pool.cc), so that the pages the slab's iterations used from the backend
// until then (recording, passing through) and the slab's own are not resident at the
// same time. When the slab is small against the backend's free pages, those pages are
// mostly the rest of the program's, which it would fault back in (a TorchScript
// MobileNetV3: ~3,000 page faults for a 0.2 MiB slab): they are left to the backend's
// own decay. Slow when it purges (madvise).
void release_free_memory(std::size_t slab_bytes) noexcept;

// The backend's own malloc and free for ordinary requests (alignment <= malloc_align;
// a request under malloc_align bytes is served as malloc_align: Note [Below the
// minimum, inline]), to call inline: jemalloc's (its malloc through a rounding of those
// requests), once use_fast_entry_points() found them; null otherwise (the libc backend; AddressSanitizer builds, whose blocks
// fallback_alloc must unpoison), and then fallback_alloc/fallback_free serve.
// noexcept, so that the entry points (noexcept themselves) may tail-call them.
// Defined here (inline, so hidden in the libraries as their other definitions are)
// rather than declared: the inline entry points jump through them with one
// instruction, where an extern declaration costs a GOT load first.
using plain_malloc_fn = void* (*)(std::size_t) noexcept;
using plain_free_fn = void (*)(void*) noexcept;
inline constinit std::atomic<plain_malloc_fn> g_plain_malloc{nullptr};
inline constinit std::atomic<plain_free_fn> g_plain_free{nullptr};
// The plain malloc of a request passed through (at or above the minimum, or any size
// from the slow path): g_plain_malloc's, or the front cache's once it is on (Note [The
// fallback's front cache]); then g_plain_malloc and g_plain_free are the front cache's
// too (Note [Small blocks in the front cache]). A block either malloc made is freed by
// its address (the gate's range, then the cache's), whichever malloc was current.
// Loaded with acquire order (a plain load on x86-64): the fallback's start stores the
// cache's frees before its mallocs (Note [The fallback made when first needed]), so a
// thread that gets a block of the cache's frees it, or hands it to one that does, with
// the cache's free.
inline constinit std::atomic<plain_malloc_fn> g_pass_malloc{nullptr};
// An aligned request below the minimum, for the inline entry point to call (Note
// [Aligned requests in the front cache], backend/front_classes.cc): the front cache's
// front_memalign once it serves, null before and wherever it is off (check mode,
// REPLAYALLOC_FRONT_CACHE=0); its null answer sends the request on to the slow path.
using plain_memalign_fn = void* (*)(std::size_t, std::size_t) noexcept;
inline constinit std::atomic<plain_memalign_fn> g_plain_memalign{nullptr};
// The free of a block outside the gate's range (Note [The gate's range],
// slab_range.h), for the inline free to call: g_plain_free's, or jemalloc's own when
// the front cache's range lies inside the gate's, so no block outside it is the cache's.
inline constinit std::atomic<plain_free_fn> g_outside_free{nullptr};

// pre: align is a power of two. Returns null on failure (errno untouched).
void* fallback_alloc(std::size_t size, std::size_t align) noexcept;
void* fallback_calloc(std::size_t size) noexcept;
// pre: p came from fallback_alloc/fallback_realloc (not null).
void fallback_free(void* p) noexcept;
// pre: size and align as passed to fallback_alloc.
void fallback_free_sized(void* p, std::size_t size, std::size_t align) noexcept;
// Null with errno ENOMEM where no block is had (p stays valid), as realloc(3).
void* fallback_realloc(void* p, std::size_t size) noexcept;
std::size_t fallback_usable_size(const void* p) noexcept;
// Whether p is a block the fallback knows, without asking jemalloc, to be smaller than
// `bytes` (a block of the front cache's runs: Note [Small blocks the filters let
// through], runtime/host_slow_path.cc); false where it does not know.
bool fallback_block_below(const void* p, std::size_t bytes) noexcept;
// Bytes the fallback allocator has handed out and not had back, process-wide as it
// counts them (jemalloc: stats.allocated after an epoch; the C library: mallinfo2's
// in-use bytes); 0 when it cannot say. Slow: for statistics only.
std::size_t fallback_allocated_bytes() noexcept;
// Bytes of memory the fallback allocator holds resident now, its metadata and the free
// pages it has not given back included (jemalloc: stats.resident after an epoch; the
// C library: mallinfo2's arena and mmapped bytes, an upper bound); 0 when it cannot say.
// Slow: for statistics only.
std::size_t fallback_resident_bytes() noexcept;

// Note [Frees the watcher asks for] (front_idle.cc): from now on the calling thread's
// frees of the front cache's blocks of classes of `least` bytes and up go to its slow
// free, which calls `hook` first; the other classes' frees need not be asked. False
// where the front cache does not serve (then nothing changed). Undone by
// unwatch_front_frees().
bool watch_front_frees(std::size_t least, void (*hook)(void*) noexcept) noexcept;
void unwatch_front_frees() noexcept;

// The engine's own memory (its containers, and what it asks of the interposed malloc
// from inside the engine): the fallback's, but a request of engine_own_least bytes or
// more comes from jemalloc's own malloc, outside the front cache (Note [The engine's
// large buffers], jemalloc_backend.cc). Null on failure (errno untouched).
inline constexpr std::size_t engine_own_least = 32 * 1024;
void* engine_alloc(std::size_t size, std::size_t align) noexcept;
// The engine's own zeroed memory (malloc_align): fallback_calloc's blocks, never counted
// towards the fallback's start (a program's calloc is: Note [The fallback made when
// first needed]): not written where jemalloc knows it is zero (fresh from the kernel),
// zeroed by memset where reused (Note [Zeroing by memset]; Note [A watcher's filter
// zeroed by the kernel]). Null on failure.
void* engine_calloc(std::size_t size) noexcept;

// A standard allocator over the fallback, for the engine's own containers
// (invariant 5: they never call the interposed malloc).
template <class T>
struct internal_allocator {
  using value_type = T;
  internal_allocator() noexcept = default;
  template <class U>
  internal_allocator(const internal_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_alloc();
    void* p = engine_alloc(n * sizeof(T) == 0 ? 1 : n * sizeof(T), alignof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    fallback_free_sized(p, n * sizeof(T) == 0 ? 1 : n * sizeof(T), alignof(T));
  }
  template <class U>
  bool operator==(const internal_allocator<U>&) const noexcept { return true; }
};

}  // namespace replayalloc::detail::backend
