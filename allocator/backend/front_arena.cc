// The front cache's arena: a jemalloc arena of the fallback's own whose memory comes
// from one reserved address range, so that a free knows a front block by one compare.
//
// Note [The front cache's arena]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The front cache (Note [The fallback's front cache]) must know, at every free, whether
// the block is one it serves, and of which class; asking jemalloc (sallocx: its radix
// tree) costs ~38 instructions, as much again as jemalloc's own free, and most frees are
// of small blocks the cache does not serve. So the blocks it serves (16 B-2 MiB) come from
// arenas made for it (`arenas.create`; one per CPU, at most 8, each thread's cache
// taking its blocks from one of them, so that threads do not all wait on one arena's
// locks) whose extent hooks are jemalloc's defaults but
// for the allocation of address space, which is carved from one range reserved at
// start-up (PROT_NONE, MAP_NORESERVE; made readable and writable an extent at a time):
// a free outside that range is passed to jemalloc's free after one subtraction and one
// compare (where the range lies directly below the slab range, by the inline free's
// gate without even that: Note [The gate's range]), and only a block inside it is
// asked its size. jemalloc retains what it gets
// (its dalloc hook declines, so the addresses stay the arena's, reused by it), purges
// and decommits with its own default hooks, which work on any address, and decays the
// arena's dirty pages as any other's, over a second, decayed by the depot's sweeps (Note
// [Idle lists given back]). The arenas have no thread bound to them, so no thread's
// exit purges them (jemalloc purges an arena its last thread leaves: Note [The fallback's
// shared arena]), and blocks go to and come from it without any thread cache
// (MALLOCX_TCACHE_NONE): the front cache is that cache. Where the range or the arena
// cannot be made the front cache stays off, saying so at REPLAYALLOC_VERBOSE=2.
//
// Note [Arenas made when first used]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A jemalloc arena touches ~21 pages when it is made (its bins and metadata), and every
// process the LD_PRELOAD library enters pays for those it makes at start-up: one per
// CPU, at most 8, was ~170 page faults on a 16-core host before the program's first
// instruction, most for arenas a single-threaded program never uses. Only slot 0's
// arena is made when the fallback starts (Note [The fallback made when first needed];
// the front cache stays off when it cannot be); another slot's is made by the first
// thread whose block needs it, which claims the slot by a compare-
// and-swap and makes it with no lock held (a thread that finds it being made, or failed,
// uses slot 0's meanwhile; a child forked while it was being made keeps using slot 0's).
#include <sched.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"
#include "backend/jemalloc_names.h"
#include "backend/slab_range.h"
#include "support/log.h"

namespace replayalloc::detail::backend {
namespace {

constexpr std::size_t range_bytes = front_range_bytes;

// Arenas, not one: 8 threads on 2 cores waited on one arena's locks (jemalloc's mutex
// spin ~8% of the samples of producer/consumer at 8 threads); each thread's cache
// takes its blocks from one of them (front_cache.cc).
constexpr unsigned max_arenas = front_max_arenas;
// Note [Idle lists given back]: the arenas' dirty pages are purged over a second (10 s,
// jemalloc's default, for the others), decayed by the depot's sweeps (and an idle arena
// 0's: Note [An idle arena 0 decays]).
constexpr ssize_t decay_ms = 1000;

std::uintptr_t g_base = 0;
std::uintptr_t g_meta_next = 0;  // the tables' next (Note [The front cache's tables in its range])
std::atomic<std::uintptr_t> g_next{0};
unsigned g_slots = 1;  // as many as CPUs, at most max_arenas
// Per slot (Note [Arenas made when first used]): its flags, MALLOCX_ARENA(arena) |
// MALLOCX_TCACHE_NONE, never 0 once made; its arena; whether it is made.
enum : unsigned char { slot_none, slot_making, slot_made, slot_failed };
std::atomic<int> g_flags[max_arenas] = {};
std::atomic<unsigned> g_arena[max_arenas] = {};
std::atomic<unsigned char> g_state[max_arenas] = {};
char g_decay_name[max_arenas][32] = {};  // "arena.<i>.decay", written before slot_made
extent_hooks_t g_hooks{};

// Makes slot i's arena; its flags, or 0 when another thread is making it or it failed.
int make_arena(unsigned i) noexcept {
  // Slot 0's first (start_front_arena): it was made after g_hooks was written.
  if (i != 0 && g_state[0].load(std::memory_order_acquire) != slot_made) return 0;
  unsigned char expected = slot_none;
  if (!g_state[i].compare_exchange_strong(expected, slot_making, std::memory_order_acq_rel)) return 0;
  unsigned arena = 0;
  std::size_t len = sizeof arena;
  extent_hooks_t* hooks = &g_hooks;
  if (mallctl("arenas.create", &arena, &len, &hooks, sizeof hooks) != 0 || arena == 0) {
    g_state[i].store(slot_failed, std::memory_order_release);
    return 0;
  }
  char name[48];
  std::snprintf(name, sizeof name, "arena.%u.dirty_decay_ms", arena);
  ssize_t ms = decay_ms;
  mallctl(name, nullptr, nullptr, &ms, sizeof ms);
  std::snprintf(g_decay_name[i], sizeof g_decay_name[0], "arena.%u.decay", arena);
  const int flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
  g_arena[i].store(arena, std::memory_order_relaxed);
  g_flags[i].store(flags, std::memory_order_release);
  g_state[i].store(slot_made, std::memory_order_release);
  return flags;
}

int flags_of(unsigned slot) noexcept {
  const unsigned i = slot % g_slots;
  int flags = g_flags[i].load(std::memory_order_acquire);
  if (flags == 0) [[unlikely]] {
    flags = make_arena(i);
    if (flags == 0) flags = g_flags[0].load(std::memory_order_relaxed);  // made at start-up
  }
  return flags;
}

unsigned arena_of(unsigned slot) noexcept { return g_arena[slot % g_slots].load(std::memory_order_relaxed); }

// Address space for jemalloc, from the range, in order; null when the range is spent
// (jemalloc then fails the allocation, and the front cache's miss falls back to
// jemalloc's own malloc). Never at an address jemalloc names (it asks that only to grow
// an extent in place, which it may be refused).
void* take_range(std::size_t size, std::size_t alignment) noexcept {
  if (alignment < 4096) alignment = 4096;
  std::uintptr_t cur = g_next.load(std::memory_order_relaxed);
  std::uintptr_t start = 0;
  do {
    start = (cur + alignment - 1) & ~(alignment - 1);
    if (start < cur || start + size < start || start + size > g_base + range_bytes) return nullptr;
  } while (!g_next.compare_exchange_weak(cur, start + size, std::memory_order_relaxed));
  if (::mprotect(reinterpret_cast<void*>(start), size, PROT_READ | PROT_WRITE) != 0) return nullptr;
  return reinterpret_cast<void*>(start);
}

void* extent_alloc(extent_hooks_t*, void* new_addr, std::size_t size, std::size_t alignment, bool* zero,
                   bool* commit, unsigned) {
  if (new_addr != nullptr || size == 0) return nullptr;
  void* p = take_range(size, alignment);
  *zero = true;  // fresh anonymous pages
  *commit = true;
  return p;
}

// Declined: jemalloc keeps the extent (retained) and reuses it; the range is never
// given back.
bool extent_dalloc(extent_hooks_t*, void*, std::size_t, bool, unsigned) { return true; }
void extent_destroy(extent_hooks_t*, void*, std::size_t, bool, unsigned) {}

void* block(std::size_t size, unsigned slot) noexcept { return mallocx(size, flags_of(slot)); }
// Note [Runs for medium blocks]: a run, aligned to its slot's size (a power of two), a
// size step short of it from 256 KiB (Note [A run a size step short of its slot]).
void* run(std::size_t bytes, unsigned slot) noexcept {
  return mallocx(run_extent_bytes(bytes), flags_of(slot) | MALLOCX_ALIGN(bytes));
}
void release(void* p) noexcept { dallocx(p, MALLOCX_TCACHE_NONE); }
// jemalloc 5's size class of n bytes (16 <= n <= 2 MiB), without asking it (nallocx
// boots it: Note [A short process's first requests]): a multiple of 16 up to 64, then four
// classes a doubling. start_front_arena() checks it against nallocx at the start.
std::size_t size_class_of(std::size_t n) noexcept {
  if (n <= 64) return n <= 16 ? 16 : (n + 15) & ~std::size_t{15};
  const std::size_t delta = std::size_t{1} << (std::bit_width(n - 1) - 3);
  return (n + delta - 1) & ~(delta - 1);
}
std::size_t usable(const void* p) noexcept { return sallocx(const_cast<void*>(p), 0); }
// Note [Idle lists given back]: the front arenas' dirty pages decayed now, as jemalloc's
// own ticks would have had them (their time 1 s), and at a window arena 0's where it is
// idle (Note [An idle arena 0 decays]).
//
// Note [An idle arena 0 decays]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc decays an arena's dirty pages only as it ticks, at that arena's own
// allocations and frees. Where the front cache serves, what still reaches arena 0 is what
// the cache does not take (blocks above 2 MiB, aligned requests of 64 KiB and more, the
// engine's own buffers), and a program may make such blocks only while it starts: ONNX
// Runtime's session under Node.js reads its weights into blocks of up to 8 MB and copies
// them twice into aligned ones (~13 MiB a copy), freeing the first two. Their pages
// stayed dirty in arena 0 to the end of the run: nothing else asked arena 0 for memory
// (jemalloc alone would have served the cache's requests from them), so it never ticked,
// and its 10 s never came (arena 0's dirty_decay_ms at 0: the loop's resident memory 172
// -> 160 MiB from its first second on, with 3,000 more faults in 60 requests). So a sweep
// of the depot that begins a window (at most once a second: Note [Idle lists given back,
// a quarter second]) decays arena 0 where it made no block since the window before (its
// statistics' count of allocations, read after an `epoch`): its dirty pages leave over
// its own dirty_decay_ms (jemalloc's 10 s, or MALLOC_CONF's) as jemalloc promises. An
// arena 0 that serves blocks ticks of itself and is left to it: decayed at every sweep
// (every arena, `arena.<MALLCTL_ARENAS_ALL>.decay`), ResNet-50's purged pages its next
// inferences faulted back (median faults per inference at 1, 8 and 16 threads 708 ->
// 1,031, 105 -> 582, 173 -> 555; at every window 707 -> 1,352, 203 -> 324, 176 -> 599;
// 4 rounds; where idle, as before: 706, 347 and 91 against 708, 173 and 129, within the
// rounds' spread). Fewer than 64 blocks a window taken for idle (ONNX Runtime's arena
// 0 in auto mode makes 46, 8, 1, 3, then none, the engine's own buffers: its pages then
// leave from the second second, not the fifth to seventh) left ResNet-50's faults as
// they were but its peak at 16 threads 491 -> 503 MiB (medians of 10 rounds, ranges
// 473-500 and 484-516), the cause not found: not kept. Arena 0's decay made 1 s as well,
// as the front arenas', took ResNet-50 from 1,000 to 2,300 faults per inference at one
// thread and its peak RSS 1.5-3.5% higher at 1, 8 and 16 threads (its tensors are arena
// 0's, aligned to 64), so it keeps jemalloc's.
// Not changed: the peak of a program's start (one copy freed while the next is made:
// ONNX Runtime's 177 MiB at 0.6 s). Measured side by side in bench/RESULTS.md ("An idle
// arena 0 decays").
std::atomic<std::uint64_t> g_zero_asked{0};  // arena 0's allocations at the last window
bool arena_zero_idle() noexcept {
  std::uint64_t epoch = 1, small = 0, large = 0;
  std::size_t len = sizeof epoch;
  if (mallctl("epoch", &epoch, &len, &epoch, len) != 0) return false;
  len = sizeof small;
  if (mallctl("stats.arenas.0.small.nmalloc", &small, &len, nullptr, 0) != 0) return false;
  len = sizeof large;
  if (mallctl("stats.arenas.0.large.nmalloc", &large, &len, nullptr, 0) != 0) return false;
  return g_zero_asked.exchange(small + large, std::memory_order_relaxed) == small + large;
}
void decay(bool window) noexcept {
  if (window && arena_zero_idle()) mallctl("arena.0.decay", nullptr, nullptr, nullptr, 0);
  for (unsigned i = 0; i < g_slots; ++i) {
    if (g_state[i].load(std::memory_order_acquire) == slot_made) mallctl(g_decay_name[i], nullptr, nullptr, nullptr, 0);
  }
}

}  // namespace

// Note [The front cache's tables in its range]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The cache's two tables, its page map (4 MiB: Note [The front cache's page map]) and
// its runs' table (8 MiB: Note [Runs for medium blocks]), and the boot heap's MiB (Note
// [A short process's first requests]) are the first 14 MiB of the range
// (front_meta_bytes), made readable and writable once, when the range is reserved, and
// never taken by the arenas: one system call where each was a mapping of its own (two
// mmaps and an mprotect, in every process the LD_PRELOAD library enters), and one
// mapping. The pages a process touches in them are the first few of each (the
// range's first blocks are the ones in use): the boot heap's and the page map's first
// ones now lie in one 2 MiB block, the runs' table's in the next but one, where they lay
// in three blocks apart, each with a page table of its own that every fork() copies and
// every exit frees (a fork and wait of a process with one page touched in each of ten
// such blocks took ~30 us more than with none: bench/RESULTS.md, "The front cache's tables
// in its range"). A table is zero where it was never written, as a fresh mapping was.
void* take_front_meta(std::size_t bytes) noexcept {
  bytes = (bytes + 4095) & ~std::size_t{4095};
  if (g_base == 0 || bytes > g_base + front_meta_bytes - g_meta_next) return nullptr;
  void* p = reinterpret_cast<void*>(g_meta_next);
  g_meta_next += bytes;
  return p;
}

void* take_front_pages(std::size_t bytes) noexcept {
  if (g_base == 0 || bytes == 0 || (bytes & 4095) != 0) return nullptr;
  return take_range(bytes, 4096);
}

void front_arena_counts(unsigned* slots, unsigned* made) noexcept {
  *slots = g_base == 0 ? 0 : g_slots;
  *made = 0;
  for (unsigned i = 0; i < *slots; ++i) *made += g_state[i].load(std::memory_order_acquire) == slot_made ? 1 : 0;
}

bool reserve_front_range(std::uintptr_t* base) noexcept {
  if (g_base != 0) {
    *base = g_base;
    return true;
  }
  // Below the slab range where the engine reserved it there (Note [The gate's range]).
  void* range = take_range_below(range_bytes);
  if (range == nullptr) {  // on a multiple of range_align (slab_range.h): the head and tail beyond it unmapped
    void* raw =
        ::mmap(nullptr, range_bytes + range_align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    range = raw;
    if (raw != MAP_FAILED) {
      const auto r = reinterpret_cast<std::uintptr_t>(raw);
      const std::uintptr_t at = (r + range_align - 1) & ~(std::uintptr_t{range_align} - 1);
      if (at != r) ::munmap(raw, at - r);
      if (at - r != range_align) ::munmap(reinterpret_cast<void*>(at + range_bytes), range_align - (at - r));
      range = reinterpret_cast<void*>(at);
    }
  }
  if (range == MAP_FAILED) {
    REPLAYALLOC_LOG(info, "front cache: off (%zu GiB of address space could not be reserved)", range_bytes >> 30);
    return false;
  }
  // Note [The front cache's tables in its range]
  if (::mprotect(range, front_meta_bytes, PROT_READ | PROT_WRITE) != 0) {
    REPLAYALLOC_LOG(info, "front cache: off (its tables could not be made: %s)", std::strerror(errno));
    return false;  // the range stays reserved, unused
  }
  *base = reinterpret_cast<std::uintptr_t>(range);
  g_base = *base;
  g_meta_next = g_base + boot_range_bytes;
  g_next.store(g_base + front_meta_bytes, std::memory_order_relaxed);
  return true;
}

bool make_front_arena(front_backend* b) noexcept {
  if (g_base == 0) return false;  // reserve_front_range first
  // As many slots as CPUs, at most max_arenas; their arenas made when the fallback
  // starts (slot 0's: start_front_arena) or first used (Note [Arenas made when first used]).
  // The CPUs the process may run on, as jemalloc counts them (one system call; the CPUs
  // online are a file of sysfs opened, read and closed, at every process's start).
  long cpus = 0;
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  g_slots = cpus < 1 ? 1 : cpus > max_arenas ? max_arenas : static_cast<unsigned>(cpus);
  b->base = g_base;
  b->span = range_bytes;
  b->block = &block;
  b->run = &run;
  b->slots = g_slots;
  b->arena = &arena_of;
  b->release = &release;
  b->size_class = &size_class_of;
  b->usable = &usable;
  b->decay = &decay;
  return true;
}

bool start_front_arena() noexcept {
  if (g_base == 0) return false;
  // The classes the cache was numbered with (size_class_of) are jemalloc's: every class up
  // to 2 MiB is one of nallocx's, and the smallest request of each (one above the class
  // below) is of it, so the two step functions agree everywhere between.
  for (std::size_t below = 0, c = 16; c <= (std::size_t{2} << 20); below = c, c = size_class_of(c + 1)) {
    if (nallocx(c, 0) != c || (below != 0 && nallocx(below + 1, 0) != c)) {
      REPLAYALLOC_LOG(warning, "front cache: off (jemalloc's size class of %zu bytes is %zu, not %zu)", below + 1,
                      nallocx(below + 1, 0), c);
      return false;
    }
  }
  if (g_state[0].load(std::memory_order_acquire) == slot_made) return true;
  extent_hooks_t* defaults = nullptr;
  std::size_t len = sizeof defaults;
  if (mallctl("arena.0.extent_hooks", &defaults, &len, nullptr, 0) != 0 || defaults == nullptr) {
    REPLAYALLOC_LOG(info, "front cache: off (jemalloc's extent hooks cannot be read)");
    return false;
  }
  g_hooks = *defaults;
  g_hooks.alloc = &extent_alloc;
  g_hooks.dalloc = &extent_dalloc;
  g_hooks.destroy = &extent_destroy;
  if (make_arena(0) == 0) {  // the range stays reserved: the gate's range may hold it
    REPLAYALLOC_LOG(info, "front cache: off (jemalloc made no arena for it)");
    return false;
  }
  return true;
}

}  // namespace replayalloc::detail::backend
