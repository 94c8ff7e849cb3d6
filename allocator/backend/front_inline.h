// replayalloc/backend/front_inline.h: the front cache's list hits, inline in the entry
// points (Note [The front cache's lists inline], below).
//
// Layer: backend. Included by front_cache.cc and runtime/entry.h; the rest of the front
// cache stays behind front_cache.h.
//
// Note [The front cache's lists inline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Below the minimum the inline malloc jumped through g_plain_malloc to the front cache's
// narrowed malloc and the inline free called front_free_at: a pair of 51-52 instructions,
// fewer than tcmalloc's 76, took 1.07-1.18x the best general-purpose allocator's time on
// one thread (bench/RESULTS.md, "Small path"). With no hardware counters on the hosts the
// likely cause is the front end, not the instructions: a pair ran eleven taken branches
// (the program's call and PLT jump of each, the indirect jump, the jumps to the front
// cache's part and to front_free_at, the two returns, the loop), tcmalloc's seven or
// eight. So the hits are here, inline in the entry points (runtime/entry.h): the malloc
// compares the plain malloc with front_malloc_narrowed's address (the state
// narrow_plain_malloc keeps already, no second flag to keep in step with it; any other
// plain malloc is still called through the pointer) and pops the list itself; the free,
// in the front cache's part of the gate's range, pushes onto it; a request passed through
// with a pass granted ahead (runtime/shortcuts.h) of a size the lists serve (4-64 KiB
// in the LD_PRELOAD library) pops its list the same way where the passing malloc is
// front_malloc. The misses stay calls
// (malloc_miss, free_slow), as front_malloc and front_free, which the other paths call,
// run the same code. The popped block is pinned to the return register (an empty asm):
// without it the compiler joined this return with the replayed hit's and copied that
// one's pointer through another register, one instruction more on the replayed pair.
// Per pair (tests/perf/instruction_budget.txt): below the minimum 52.1 -> 51.1, new +
// sized delete 60.1 -> 58.1; the replayed pairs unchanged; two taken branches fewer: one
// thread's 64 B-1 KiB pair 0.86-0.88x its time, 0.99-1.01x tcmalloc's (bench/RESULTS.md,
// "Small path with the front cache's lists inline"). A 4 KiB pass: 70.1 -> 68.1 with the
// free's push inline, 69.1 with the malloc's pop too (a compare more, the jump through
// the pointer gone), 0.89-0.96x its time ("Passes popped inline"). The two pops were
// one code, the pass's a taken jump back into the plain malloc's (GCC joins identical
// tails): the pass's has an asm of another text (a comment, no instruction), so it
// runs on to its own return, the instructions the same (4 KiB passed: 3.276 -> 3.168
// ns a pair, tcmalloc 2.950; bench/RESULTS.md, "A pass's pop apart"). The libc
// backend's builds (the dlopen library) have no front cache and keep the calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "backend/front_runs.h"
#include "backend/front_thread.h"
#include "backend/slab_range.h"
#include "support/config.h"

namespace replayalloc::detail::backend {
namespace front {

// The calling thread's cache: g_closed (front_cache.cc, its lists empty and full) until
// the thread opens one, and again once it exited.
extern constinit thread_local thread_cache* t_cache REPLAYALLOC_TLS_IE;
// Written once, as the cache is enabled, before any malloc can reach these; defined here
// (inline, so hidden in the libraries) for the entry points to read with one instruction.
// (size + 15) / 16 -> class, for the sizes up to front_limit.
inline constinit std::uint8_t g_class_of[front_limit / 16 + 1] = {};
// Note [The front cache's page map] (front_cache.cc): one byte per page of the range,
// that of the page at address a at ((a >> 12) + page_map_skew) mod 4096 in the map's
// pages (below).
inline constinit std::atomic<std::uint8_t>* g_page_class = nullptr;
//
// Note [The page map's bytes off their pages' starts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A free reads its block's byte, then writes the block's first word (the list's link);
// a pair on one block in a loop reads the byte while the last pair's write of the link
// may still wait to be committed. The processor tells a load from the stores before it
// by the addresses' low 12 bits first: where the byte and the link agree in them, the
// load waits as if it read what the store wrote (4K aliasing). With the map at the
// start of its pages, the byte of page i lay at offset i mod 4096 of the map's page, so
// the first page of every 16 MiB of the range had its byte at offset 0, where a block
// that begins the page writes its link; and the arenas' first runs began there, 16 MiB
// past the range's start (after its 14 MiB of tables), with a process's first blocks. So a
// size a process used first could run 8-9% slower a pair than after (bench/micro/
// pair_bench with 1 KiB measured first, by hand: 2.77 ns against tcmalloc's 2.54; 2.55
// with the byte off the page's start, as with the fallback started at the first
// request, whose first runs begin 256 KiB further on; pair_bench's 8 B, slow as its
// first size too, has another cause, not found: RESULTS "The page map's bytes off their
// pages' starts"). So the map is taken 4 KiB longer and g_page_class set into its
// first page so that the byte of the page at address a lies at ((a >> 12) +
// page_map_skew) mod 4096 in the map's pages (2,088: wherever the range begins): the
// page that begins each 16 MiB, and each 2 MiB, has its byte at 40 mod 64, and each 64
// KiB (a run's start: runs are aligned to their size) at 8, 24, 40 or 56 mod 64, past
// every 32 bytes that a block of 32 B or more begins at; the pages whose byte lies in
// the first 32 bytes of a page are those 7.8 MiB into each 16 MiB. No instruction is
// added: the offset is in g_page_class.
inline constexpr std::uintptr_t page_map_skew = 2048 + 40;
//
// Note [A free's class from its pointer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A free read its block's byte at g_page_class[offset >> 12], the offset being the one
// its range test made (p - look_from + look_front in the plain free, p - the gate's
// start in the sized one): two instructions between the pointer and the byte, on the path
// a pair waits on (the free's list is known once the byte is, and the next malloc's pop
// reads what the free's push wrote). The byte's address is g_page_class_at + (p >> 12)
// now, the range's first page taken off once (the range begins on a page: checked where
// the cache is made); the tests only branch. GCC also lays the plain free's push out
// after the test that sends a block outside the front cache's part away (before, that
// jump came first and the push was a taken branch further on). One thread's pair
// (bench/micro/pair_bench, by hand, 9 rounds alternated): 64 B-1 KiB 2.70-2.71 -> 2.50-2.52
// ns (tcmalloc 2.51-2.54), 8 B 2.76 -> 2.66 (mimalloc 2.55); with the section's script
// 64 B-4 KiB 0.93-1.01x the best's at 1, 2 and 4 threads (bench/RESULTS.md, "Small path
// with a free's class from its pointer"). One instruction more a pair: the pointer is
// copied before its shift (the push still needs it).
inline constinit std::uintptr_t g_page_class_at = 0;

// The largest size class the lists serve (front_limit; the classes above are the large
// ones of Note [Large blocks in the front cache]).
inline constinit std::size_t g_largest = 0;

// The misses (front_cache.cc): an empty list (class 0: a size the lists do not serve),
// and a free the list cannot take (class 0: not known; the list full; no cache open).
// Each finds the class again (from the size; from the page map), so that the hits need
// not keep it in a second register for them: a pair below the minimum 2 instructions
// shorter (bench/RESULTS.md, "The misses find their class again").
void* malloc_miss(std::size_t size) noexcept;
void free_slow(void* p) noexcept;
// A request above g_largest (Note [Large blocks in the front cache], front_cache.cc).
void* large_malloc(std::size_t size) noexcept;

// A block of a size up to front_limit from the thread's list of its class. `Apart`:
// the pop of a pass (any_malloc), kept from being merged with the plain one's.
template <bool Apart = false>
[[gnu::always_inline]] inline void* list_malloc(std::size_t size) noexcept {
  const unsigned k = g_class_of[(size + 15) >> 4];
  free_list& l = t_cache->lists[k];
  if (void* p = l.head) [[likely]] {
    l.head = *static_cast<void**>(p);
    --l.count;
#if defined(__x86_64__)
    // In the return register; a pass's pop with an asm text of its own (no instruction):
    // Note [The front cache's lists inline].
    if constexpr (Apart) {
      asm("# pass" : "+a"(p));
    } else {
      asm("" : "+a"(p));
    }
#endif
    return p;
  }
  return malloc_miss(size);
}

// A block of any size the cache serves (front_malloc's, and a pass's inline): the
// thread's list of its class, or above g_largest its large class.
[[gnu::always_inline]] inline void* any_malloc(std::size_t size) noexcept {
  if (size <= g_largest) [[likely]] return list_malloc<true>(size);
  return large_malloc(size);
}

// The page map's byte of block p, in the cache's range (Note [A free's class from its pointer]).
[[gnu::always_inline]] inline unsigned page_class_of(const void* p) noexcept {
  const auto* byte = reinterpret_cast<const std::atomic<std::uint8_t>*>(
      g_page_class_at + (reinterpret_cast<std::uintptr_t>(p) >> page_map_shift));
  return byte->load(std::memory_order_relaxed);
}

// Block p, in the cache's range, onto the thread's list of its class.
[[gnu::always_inline]] inline void list_free(void* p) noexcept {
  // Class 0 (not known) has lists empty and full: to free_slow.
  const unsigned k = page_class_of(p);
  free_list& l = t_cache->lists[k];
  if (l.count < l.max) [[likely]] {
    *static_cast<void**>(p) = l.head;
    l.head = p;
    ++l.count;
    return;
  }
  free_slow(p);
}

// Note [A run's block resized inline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A realloc of a run's block went from the fallback's realloc to front_run_block (a
// call: the range, the table's, the byte, the class's sizes) and, where it moved, through
// fallback_alloc (the failure test, the alignment's, the pass malloc through its
// pointer, front_malloc) and fallback_free (the plain free through its pointer,
// front_free's range test) to a list's pop and push: ~140 instructions a realloc beside
// the copy (Perl's hash.pl, 520,000 of them; mimalloc's ~85). Where the block lies in
// the gate's front part (Note [The gate's range], slab_range.h) the fallback's realloc
// asks here first, where the fallback's malloc and free are the cache's own: its byte,
// its class's sizes, and where the new size is of another class, the pop and the push
// inline. What it hands out and where the old block goes are what the long way's were;
// anything else (not a run's block, the cache's entry points not stored yet, a failure
// injected, no block) takes the long way. (bench/RESULTS.md, "A run's block resized
// inline".)
// n: the new size, at least the minimum. p, or a block of the cache's with p's bytes (p
// onto its list); null: the long way.
[[gnu::always_inline]] inline void* run_realloc(void* p, std::size_t n) noexcept {
  if (reinterpret_cast<std::uintptr_t>(p) - g_gate_range.from >= g_gate_range.front) return nullptr;
  // The pass malloc is front_malloc only once the cache serves (use_front_cache): its page
  // map is made, which the gate's range being joined does not say (a boot heap's block).
  if (g_pass_malloc.load(std::memory_order_relaxed) != &front_malloc ||
      g_plain_free.load(std::memory_order_relaxed) != &front_free || inject_failure()) [[unlikely]] {
    return nullptr;
  }
  const unsigned k = page_class_of(p);
  const std::size_t usable = g_run_size[k];
  if (usable == 0) return nullptr;  // class 0's too: not a run's
  if (n <= usable && n > g_run_size[k - 1]) return p;
  void* q = any_malloc(n);
  if (q == nullptr) [[unlikely]] return nullptr;
  std::memcpy(q, p, n < usable ? n : usable);
  list_free(p);
  return q;
}

// Note [Callocs of up to 32 KiB from the front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A calloc at or above the minimum that no slab serves went to jemalloc (Note [Zeroing
// by memset], jemalloc_backend.cc): below 16 KiB its calloc, above it an arena of the
// fallback's own, each block an extent split from the arena's free ones and coalesced
// back at its free, ~3,000 instructions a calloc and its free beside the memset. A
// Node.js program making Buffers (Buffer.alloc: a zero-filled ArrayBuffer, calloc'd) of
// 1-65 KiB, 512 live at a time, took 1.26x mimalloc's CPU, and 1.39x tcmalloc's
// instructions outside memset. So a calloc of up to 32 KiB is the front cache's where
// the cache serves (the pass malloc front_malloc, as run_realloc asks): its class's
// block, and a memset of the bytes asked (a list's block is dirty). Above 32 KiB they
// stay jemalloc's: ONNX Runtime's loop under Node.js copies its key/value caches into
// callocs a row longer each step, and where every calloc up to 64 KiB was the front
// cache's, its classes of 40-64 KiB (runs of 1 MiB) held 11-13 MiB more at the peak;
// 0-2 MiB more with the bound at 32 KiB. (bench/RESULTS.md, "Callocs of up to 32 KiB
// from the front cache".)
inline constexpr std::size_t calloc_front_most = 32 * 1024;
// A zeroed block of n bytes (at most calloc_front_most) from the cache; null (with
// `served` false) where the cache does not serve, the caller's way then.
[[gnu::always_inline]] inline void* front_calloc(std::size_t n, bool* served) noexcept {
  *served = g_pass_malloc.load(std::memory_order_relaxed) == &front_malloc;
  if (!*served) return nullptr;
  void* p = any_malloc(n < 16 ? 16 : n);
  if (p != nullptr) [[likely]] std::memset(p, 0, n);
  return p;
}

}  // namespace front

// The plain malloc below the minimum where every such size is one of the lists' (Note
// [Below the minimum, narrowed], front_classes.cc): front::list_malloc. The entry points
// compare g_plain_malloc with its address and run it inline.
void* front_malloc_narrowed(std::size_t size) noexcept;

// What the entry points call below the minimum (`plain`: g_plain_malloc) and for a block
// in the front cache's part of the gate's range: the list hits inline,
// or, in the libc backend's builds (the dlopen library), which have no front cache, the
// calls (front_free_at is never reached there).
#if defined(REPLAYALLOC_DLOPEN) && REPLAYALLOC_DLOPEN
[[gnu::always_inline]] inline void* plain_malloc_inline(plain_malloc_fn plain, std::size_t size) noexcept {
  return plain(size);
}
[[gnu::always_inline]] inline void* pass_malloc_inline(plain_malloc_fn pass, std::size_t size) noexcept {
  return pass(size);
}
[[gnu::always_inline]] inline void front_free_inline(void* p) noexcept { front_free_at(p); }
#else
[[gnu::always_inline]] inline void* plain_malloc_inline(plain_malloc_fn plain, std::size_t size) noexcept {
  if (plain == &front_malloc_narrowed) [[likely]] return front::list_malloc(size);
  return plain(size);
}
// A request passed through (`pass`: g_pass_malloc; Note [Passes granted ahead],
// runtime/shortcuts.h): where it is front_malloc, front_malloc's body without the call.
[[gnu::always_inline]] inline void* pass_malloc_inline(plain_malloc_fn pass, std::size_t size) noexcept {
  if (pass == &front_malloc) [[likely]] return front::any_malloc(size);
  return pass(size);
}
[[gnu::always_inline]] inline void front_free_inline(void* p) noexcept { front::list_free(p); }
#endif

}  // namespace replayalloc::detail::backend
