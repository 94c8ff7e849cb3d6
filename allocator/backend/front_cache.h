// replayalloc/backend/front_cache.h: per-thread lists of free blocks of 16 B-2 MiB in
// front of the fallback's jemalloc (Note [The fallback's front cache], front_cache.cc).
//
// Layer: backend. The fallback's malloc for requests passed through and below the
// minimum and its free (backend::g_pass_malloc, g_plain_malloc, g_plain_free) become
// front_malloc and front_free at the fallback's start, after enable_front_cache() (Note
// [The fallback made when first needed]; the plain malloc then narrowed: Note [Below the
// minimum, narrowed], front_classes.cc). The
// blocks of 4-128 KiB it hands out are carved from runs (Note [Runs for medium blocks], front_runs.h), which
// jemalloc does not know: they are freed by front_free (every free of a block in the
// range is), realloc'd and sized by the fallback's own (front_run_block). Any other block
// it hands out is one of its arena's, which any of jemalloc's frees takes. It keeps only
// blocks of its own range whose size is exactly one of its classes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace replayalloc::detail::backend {

using front_malloc_fn = void* (*)(std::size_t) noexcept;
using front_free_fn = void (*)(void*) noexcept;
using front_block_fn = void* (*)(std::size_t, unsigned) noexcept;

// The most arenas the cache's blocks come from (Note [The front cache's arena]).
inline constexpr unsigned front_max_arenas = 8;

// What the front cache stands on (jemalloc, through jemalloc_backend.cc and
// front_arena.cc).
struct front_backend {
  front_malloc_fn malloc = nullptr;  // the thread caches' own memory, other requests (under 16 bytes: aligned to 16)
  front_free_fn free = nullptr;      // blocks outside the range
  // The range the cache's blocks come from (Note [The front cache's arena]).
  std::uintptr_t base = 0;
  std::size_t span = 0;
  front_block_fn block = nullptr;    // a block of a class served, from the range's arena `slot`
  front_block_fn run = nullptr;      // a run's slot of `bytes`: run_extent_bytes(bytes), aligned to bytes
  unsigned slots = 1;                // its arenas (Note [The front cache's arena])
  front_free_fn release = nullptr;   // a block from the range given back
  unsigned (*arena)(unsigned slot) noexcept = nullptr;  // a slot's jemalloc arena, 0 while none is made
  std::size_t (*size_class)(std::size_t) noexcept = nullptr;  // the class of a request
  std::size_t (*usable)(const void*) noexcept = nullptr;      // the class of a block
  // The front arenas' dirty pages decayed now (Note [Idle lists given back]); at a
  // `window`, arena 0's too where idle (Note [An idle arena 0 decays], front_arena.cc).
  void (*decay)(bool window) noexcept = nullptr;
};

// Note [A run a size step short of its slot]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run lies in a slot of its size, aligned to it (Note [Runs for medium blocks]), and
// is one of jemalloc's large extents, each of which jemalloc makes a page longer than
// its size, aligned ones too (its cache-oblivious offset; Debian's jemalloc 5.3 takes no
// setting for it). So a run of its slot's whole size took one page of the next slot, and
// the next run the slot after: runs lay one every two slots, their address space and
// jemalloc's radix tree (a page of it per MiB) twice their size. A run of 256 KiB or more
// is its slot less an eighth (a size jemalloc has: four a doubling), which with that
// page fits the slot, and holds the blocks that fit in that: the runs of a burst lie one
// after another. Below 256 KiB a run keeps its whole slot: the 4 KiB class's lists of 16
// would span two runs of 14 (its bursts' later rounds 32.1 -> 41.6 ns a malloc and a
// free, tried). Bursts' later rounds, RESULTS "A run a size step short of its slot".
inline constexpr std::size_t run_short_least = std::size_t{256} << 10;
constexpr std::size_t run_extent_bytes(std::size_t bytes) noexcept {
  return bytes >= run_short_least ? bytes - bytes / 8 : bytes;
}
// A class whose 16 blocks want a slot of 128 KiB (5-8 KiB) takes one of 256 KiB, less an
// eighth (28-43 blocks a run): at 128 KiB its runs lay one every two slots, and each cost
// jemalloc an extent (~2,700 instructions, and a share of a page of its radix tree and
// of its extent records). Bursts of 40,000 blocks of 8 KiB, the first round: 1.399 ->
// 1.327 us a pair (mimalloc 1.288), 40,913 -> 40,592 faults; later rounds 15.8 / 14.6 ->
// 14.9 / 16.3 ns a malloc / free (runs of 28 for lists of 16). The classes of 64 KiB
// slots keep theirs (the 4 KiB class's lists of 16 fill its runs exactly).
inline constexpr std::size_t run_widened = std::size_t{128} << 10;
constexpr std::size_t run_slot_bytes(std::size_t wanted) noexcept {
  return wanted == run_widened ? 2 * wanted : wanted;
}

// The address space the arena's blocks come from (Note [The front cache's arena]):
// reserved once, never committed but an extent at a time.
inline constexpr std::size_t front_range_bytes = std::size_t{16} << 30;

// The range the arena's blocks will come from, reserved (PROT_NONE but its first
// front_meta_bytes, made readable and writable) with no call into jemalloc, so that it
// joins the gate's range before any thread's gate opens (Note [The fallback made when
// first needed], fallback_start.cc); its base. Idempotent; false (logged) when no
// address space could be had. front_arena.cc.
bool reserve_front_range(std::uintptr_t* base) noexcept;
// The part of the range the arenas never take (Note [The front cache's tables in its
// range], front_arena.cc): the boot heap's MiB, then the page map and the runs' table,
// made readable and writable with the range's reservation.
inline constexpr std::size_t front_meta_bytes = std::size_t{14} << 20;
// `bytes` of that part after the boot heap's MiB, in order, page-aligned, zero (never
// written before); null when it is spent or the range was not reserved. Only while the
// engine configures the cache (one thread). front_arena.cc.
void* take_front_meta(std::size_t bytes) noexcept;
// `bytes` (a multiple of 4 KiB) of the range, page-aligned, after what the arenas took
// and never theirs, made readable and writable; null when the range is spent or was not
// reserved (Note [A short process's large requests], boot_heap.cc). front_arena.cc.
void* take_front_pages(std::size_t bytes) noexcept;
// The arenas the blocks come from, in the range reserved, filling base..decay with no
// call into jemalloc; false when no range was reserved. front_arena.cc.
bool make_front_arena(front_backend* b) noexcept;
// Makes the first arena (slot 0's), before the cache's entry points are stored (the
// fallback's start); false (logged) when it cannot be made: the cache then stays unused.
bool start_front_arena() noexcept;
// Set when the start could not make the first arena: the cache, configured, never serves,
// and says so (front_cache_stats().largest 0, front_thread_kept_max() 0).
inline constinit std::atomic<bool> g_front_unused{false};
inline bool front_unused() noexcept { return g_front_unused.load(std::memory_order_relaxed); }

// Serves requests of 16 B-2 MiB from per-thread lists; false (nothing changes) when b is
// incomplete, or when called twice. Once, under the reentry guard, in the engine's
// constructor (reserve_front_cache in jemalloc_backend.cc); it serves once its entry
// points are stored, at the fallback's start (use_front_cache, fallback_start.cc).
bool enable_front_cache(const front_backend& b) noexcept;

void* front_malloc(std::size_t size) noexcept;
// Note [Below the minimum, narrowed] (front_classes.cc): the plain malloc for sizes under
// `limit` only: front_malloc without its test of the size where every such size is one
// of the lists', else front_malloc.
front_malloc_fn front_malloc_below(std::uint64_t limit) noexcept;
void front_free(void* p) noexcept;
// A block of `size` bytes aligned to `align` (a power of two above 16), of the class
// whose blocks all are (Note [Aligned requests in the front cache], front_classes.cc);
// null where the cache does not serve it (align above 4 KiB, size of 64 KiB or more), the
// block made was not aligned, or there is no memory. Only once the cache serves.
void* front_memalign(std::size_t size, std::size_t align) noexcept;
// front_free of a block known to be inside the range (Note [The gate's range], slab_range.h).
void front_free_at(void* p) noexcept;

// Whether p is a block of one of the cache's runs (Note [Runs for medium blocks]), which
// jemalloc does not know: then *usable is its class's size and *below (where asked) the
// size of the class below (0 for the first): its class's requests are (below, usable].
bool front_run_block(const void* p, std::size_t* usable, std::size_t* below = nullptr) noexcept;

// Before jemalloc's realloc of p (which may change its class in place): p's next free
// asks jemalloc its class (Note [The front cache's page map]). Nothing for a block
// outside the range, or while the cache is off.
void front_resizing(const void* p) noexcept;

// The largest class of which every thread with a cache keeps four blocks for its next
// requests (its least share of the large classes' budget over four: 128 KiB; Note
// [Large blocks in the front cache]); 0 while the cache is off (before the fallback's
// start it is on where it will serve). thread_cache_max() (backend.h) is at least this.
std::size_t front_thread_kept_max() noexcept;

// This thread's lists and the shared depot given back to the underlying free (before a
// purge: Note [Purging what a slab replaces]). Nothing when the cache is off.
void front_cache_release() noexcept;

// The jemalloc arena this thread's cache takes its blocks from (Note [The front cache's
// arena]), and how many threads' caches share it; false while the thread has no cache.
bool front_cache_arena(unsigned* arena, unsigned* sharing) noexcept;

// Fork: the depot's locks held across fork(), released in both processes
// (engine::prefork and its postfork handlers).
// In the child (`child`), the caches open are the forking thread's alone (Note [The
// depot's budget follows the threads]).
void front_cache_prefork() noexcept;
// `locked`: front_cache_prefork took them (not in a process of one thread: Note [Fork in
// a process of one thread], runtime/lifecycle.cc).
void front_cache_postfork(bool child, bool locked = true) noexcept;

// The blocks on the calling thread's list of the class of `size` now (tests: Note [Runs
// for medium blocks]); 0 where it has no cache or the class is not served from lists.
std::uint32_t front_thread_list_count(std::size_t size) noexcept;

struct front_cache_counts {
  std::uint64_t depot_puts = 0;    // lists a thread handed to the depot (full, or exiting)
  std::uint64_t depot_takes = 0;   // lists a thread took from it (its own empty)
  std::uint64_t depot_frees = 0;   // lists given back to the underlying free (depot full)
  std::uint64_t depot_idle = 0;    // lists given back after a second in it (Note [Idle lists given back])
  std::uint64_t thread_lists_idle = 0;  // threads' lists of classes they left a second (the same Note)
  std::uint64_t threads_closed = 0;  // threads whose lists were handed on at their exit
  std::size_t largest = 0;         // the largest request served (0: off)
  std::uintptr_t base = 0;         // the range its blocks come from
  std::size_t span = 0;
  // Held in the depot: the classes below 4 KiB, up to 64 KiB, and above (Note [Large
  // blocks in the front cache]).
  std::size_t depot_bytes[3] = {};
  std::size_t depot_budget[3] = {};  // their budgets (lists beyond go back to the arena)
  std::size_t thread_large_budget = 0;  // a thread's lists' bytes of the classes above 64 KiB
  std::size_t thread_large_bytes = 0;   // the calling thread's, now
  std::uint64_t large_given_back = 0;   // blocks of larger classes given back at a miss
  // Note [Runs for medium blocks]: runs made, given back to the arena, and their bytes now
  // (those kept empty included).
  std::uint64_t runs_made = 0;
  std::uint64_t runs_given_back = 0;
  std::size_t run_bytes = 0;
  // Note [Empty runs kept]: runs taken from a stash again, and the stashes' bytes now.
  std::uint64_t runs_reused = 0;
  std::size_t stashed_bytes = 0;
};
front_cache_counts front_cache_stats() noexcept;
// Note [Arenas made when first used] (front_arena.cc): the front cache's slots, and how
// many of them have their arena now.
void front_arena_counts(unsigned* slots, unsigned* made) noexcept;

}  // namespace replayalloc::detail::backend
