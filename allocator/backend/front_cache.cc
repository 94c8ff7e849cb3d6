// The fallback's front cache: per-thread lists of free blocks of 16 B-2 MiB, and a
// depot that moves whole lists between threads.
//
// Note [The fallback's front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where no plan serves, the fallback is jemalloc 5.3, and where threads hand blocks to
// each other jemalloc decides the result: a block freed by another thread than its
// allocator's goes to the freeing thread's cache, which flushes it, block by block, to
// the arena that owns it under a lock, while the allocating thread refills from the
// same arena (producer/consumer: 2.7x mimalloc's time); and a thread that exits
// flushes its cache and, as the last thread of its arena, has jemalloc purge the
// arena's pages, which its successor faults back in (larson: 3.5x the best, 33,000
// faults). tcmalloc and mimalloc move such blocks between threads in lists. So the
// fallback keeps a cache of its own in front of jemalloc for the blocks of 4 KiB to
// 64 KiB (jemalloc's size classes there; what the pages and faults are made of), and
// for the smaller ones (Note [Small blocks in the front cache]) and the larger ones up
// to 2 MiB (Note [Large blocks in the front cache], bounded by bytes) too:
//  * a list of free blocks per class and thread, linked through the blocks' first
//    word; malloc pops, free pushes. The blocks come from an arena of the cache's own
//    whose memory is one reserved range (Note [The front cache's arena]), so a free
//    tells them from every other block by one compare (jemalloc's own blocks, made
//    before the cache or by jemalloc's calloc and realloc, go to jemalloc's free). A
//    free in the range learns its block's class from the page map (Note [The front
//    cache's page map]), not from jemalloc;
//  * a list that reaches its length (64 KiB of blocks, at least four) goes to the
//    depot (whole, or its older half where the thread also allocates the class: Note
//    [Half a list handed on], front_depot.cc), a stack of lists per class under a spin
//    lock; a thread whose list is empty takes a whole list from there before it asks
//    the arena for a block of exactly the class's size (so every block the cache holds
//    is of its class: a block that jemalloc's realloc resized goes back to the arena at
//    its free);
//  * a thread's lists go to the depot when it exits (a pthread key's destructor), so its
//    successors reuse its blocks; the arena has no thread to leave it, so nothing purges
//    its pages but jemalloc's decay.
// Bounded: a thread holds at most 64 KiB per class (four blocks of the classes above;
// twice that in a burst of a class it also frees, Note [A burst's lists twice as long];
// lists of 16 KiB, one block above 16 KiB, made 8 threads on 2 cores wait on the arena:
// RESULTS "The fallback's front cache"), 16 KiB below 4 KiB (at most 64 blocks; 64 KiB
// there took larson's peak RSS at 2 threads from 36 to 40 MiB); the depot at most 1-32
// MiB for the classes of 4-64 KiB (Note [The depot's budget follows the threads]),
// 256 KiB-4 MiB below (Note [The small classes' budget follows the threads]), 8 MiB for
// those above 64 KiB; what does not fit goes back to the arena, whose dirty
// pages decay as jemalloc's others do. Before a slab is made (Note [Purging what a slab
// replaces]) the thread's lists and the depot go back to the arena, so that its purge
// finds their pages. Fork: the depot's locks are held across fork() (engine::prefork).
// Requests passed through (Note [Pass-through]) and the engine's own and missed ones
// (fallback_alloc) come here, and so does the inline path below the minimum (through
// g_plain_malloc). REPLAYALLOC_FRONT_CACHE=0 leaves the fallback to jemalloc alone.
// Measured side by side in bench/RESULTS.md ("The fallback's front cache").
#include "backend/front_cache.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>

#include "backend/boot_heap.h"
#include "backend/front_classes.h"
#include "backend/front_depot.h"
#include "backend/front_inline.h"
#include "backend/front_runs.h"
#include "backend/front_thread.h"
#include "support/config.h"

namespace replayalloc::detail::backend {
using namespace front;
namespace {

constexpr unsigned map_shift = page_map_shift;  // one byte of the page map per 4 KiB of the range
// Note [Large blocks in the front cache]: the bytes of the classes above 64 KiB the
// threads' lists keep, shared by those with a cache open (each at least the least).
constexpr std::size_t threads_large_budget = 16384 * 1024;
constexpr std::size_t thread_large_least = 512 * 1024;
// Blocks of those classes moved at once (a burst's), the most bytes of a list a free sends to the depot.
constexpr unsigned large_batch = 16;
constexpr std::size_t large_batch_bytes = 1024 * 1024;
std::size_t thread_large_budget() noexcept {
  const std::size_t open = g_open_caches.load(std::memory_order_relaxed);
  const std::size_t b = threads_large_budget / (open == 0 ? 1 : open);
  return b < thread_large_least ? thread_large_least : b;
}

// Every thread starts with (and an exited one returns to) this cache, whose lists are empty
// and full at once (max 0): both fast paths miss into the slow ones, which make its own.
REPLAYALLOC_LARGE_ZEROED constinit thread_cache g_closed{};
}  // namespace
constinit thread_local thread_cache* front::t_cache REPLAYALLOC_TLS_IE = &g_closed;
namespace {
enum : std::uint8_t { cache_none, cache_making, cache_open, cache_exited };
constinit thread_local std::uint8_t t_state REPLAYALLOC_TLS_IE = cache_none;

// Read only once enabled. The classes served are 1..n; class 0 (its size 0, its lists
// empty and full) stands for the requests of sizes whose class the cache does not serve,
// and in the page map for a page whose blocks' class is not known.
// (g_largest, the largest size class served by the lists' fast paths: front_inline.h)
std::size_t g_large_largest = 0;  // the largest served (Note [Large blocks in the front cache])
unsigned g_first_large = max_classes;  // the first class above front_limit
std::uint8_t g_large_class_of[(large_limit >> large_shift) + 1];  // size / 16 KiB -> class
// The class of a size above g_largest, up to g_large_largest.
[[gnu::always_inline]] inline unsigned large_class(std::size_t size) noexcept {
  return g_large_class_of[(size + (std::size_t{1} << large_shift) - 1) >> large_shift];
}
bool g_enabled = false;
std::uint32_t g_class_size[max_classes];
std::uint32_t g_list_max[max_classes];
std::uint32_t g_fill[max_classes];  // blocks asked of the arena at a miss
// Note [A burst's lists twice as long] (front_classes.cc): a list's length in a burst.
std::uint32_t g_burst_max[max_classes];
front_malloc_fn g_malloc = nullptr;
front_free_fn g_free = nullptr;
std::uintptr_t g_base = 0;
std::size_t g_span = 0;
front_block_fn g_block = nullptr;
unsigned g_slots = 1;
unsigned (*g_arena_of_slot)(unsigned) noexcept = nullptr;
std::atomic<unsigned> g_next_slot{0};
front_free_fn g_release = nullptr;
std::size_t (*g_usable)(const void*) noexcept = nullptr;
pthread_key_t g_exit_key;

// Note [The front cache's page map]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A free in the cache's range must know its block's class. jemalloc knows (sallocx, its
// radix tree: 39 instructions and a walk of two levels of a tree the other threads
// write), which was half of a passed-through 4 KiB pair's cost. The cache keeps its own
// answer instead: one byte per 4 KiB page of the range (4 MiB, in the range's first part:
// Note [The front cache's tables in its range]; its pages made as they are written), the class of the
// blocks that begin in that page, 0 where not known. A page holds the beginnings of
// blocks of one class only: jemalloc's extents are whole pages, and a slab holds blocks
// of one class, a large extent one block. The byte is written where a block enters the
// cache (a block the arena made for it, at a list's miss; a block a free found of a
// class served by asking jemalloc, where the byte said 0), so every block on a list or
// handed out has its page's byte. A block changes class in place only through jemalloc's
// realloc, which the fallback's realloc precedes by clearing its page's byte
// (front_resizing): its next free asks jemalloc again. A page jemalloc gives to another
// extent keeps a stale byte only until a block of the new extent enters the cache, and
// no block begins there before that. The free of a block whose byte is 0 asks jemalloc,
// as every free in the range did before the map (a block made before the cache or by
// jemalloc's own realloc).
// (g_page_class: front_inline.h, and Note [The page map's bytes off their pages' starts] there)

// The page map's byte of block p, class k; nothing for a block outside the range (the
// arena's jemalloc may serve one from another arena: at a thread's exit, once
// jemalloc's per-thread state is gone, it ignores the arena asked for), which is an
// ordinary jemalloc block, freed by jemalloc's free.
void map_block(const void* p, unsigned k) noexcept {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) - g_base;
  if (offset >= g_span) return;
  std::atomic<std::uint8_t>& b = g_page_class[offset >> map_shift];
  if (b.load(std::memory_order_relaxed) != k) b.store(static_cast<std::uint8_t>(k), std::memory_order_relaxed);
}

// A block of class k (one not served from runs) made by the thread's arena, whose
// stashed runs go back to it first (Note [Empty runs kept]: their pages for this block);
// jemalloc's own malloc where the range is spent.
void* arena_block(unsigned k, std::size_t size) noexcept {
  release_stashed_runs(t_cache->slot);
  if (void* p = g_block(g_class_size[k], t_cache->slot)) {
    map_block(p, k);
    return p;
  }
  return g_malloc(size);
}

// The thread's lists to the depot, its cache closed for good (a pthread key's
// destructor; later requests of the thread go to the underlying malloc and free).
void close_thread(void* arg) noexcept {
  auto* c = static_cast<thread_cache*>(arg);
  t_cache = &g_closed;
  t_state = cache_exited;
  for (unsigned k = 0; k < max_classes; ++k) {
    if (c->lists[k].head != nullptr) put(k, c->lists[k].head, c->lists[k].count);
  }
  thread_closed();
  g_free(c);
}

// The thread's cache, made at its first miss; false where it cannot (being made, exited, no memory).
[[gnu::noinline]] bool open_cache() noexcept {
  if (t_state != cache_none) return t_state == cache_open;
  t_state = cache_making;  // pthread_setspecific may allocate: those requests pass
  auto* c = static_cast<thread_cache*>(g_malloc(sizeof(thread_cache)));
  if (c == nullptr || pthread_setspecific(g_exit_key, c) != 0) {
    if (c != nullptr) g_free(c);
    t_state = cache_exited;
    return false;
  }
  for (unsigned k = 0; k < max_classes; ++k) {
    c->lists[k] = free_list{nullptr, 0, g_list_max[k]};
    c->burst[k] = false;
    c->frees_too[k] = false;
    c->handed[k] = whole_after;  // lists handed on whole until the thread allocates the class
    c->large_missed_at[k] = 0;
    c->large_streak[k] = 0;
    c->closed[k] = false;
  }
  c->swept = g_sweeps.load(std::memory_order_relaxed);
  c->asked_at_sweep = 0;
  c->large_frees = 0;
  c->slot = g_next_slot.fetch_add(1, std::memory_order_relaxed) % g_slots;
  c->large_bytes = 0;
  c->recency = class_recency{};
  if (t_watch_least != 0) close_watched_lists(*c);  // Note [Frees the watcher asks for]
  t_cache = c;
  t_state = cache_open;
  thread_opened();
  return true;
}

// Note [Idle lists given back] (front_idle.cc): the thread's idle lists, once a sweep.
inline void sweep_if_due() noexcept {
  if (t_state == cache_open && t_cache->swept != g_sweeps.load(std::memory_order_relaxed)) sweep_thread(*t_cache);
}

// Note [Small blocks in the front cache] (front_classes.cc): a small class's list is
// filled half at once, from its arena's runs (a block of the arena each without them).
[[gnu::noinline]] void* fill(unsigned k, std::size_t size) noexcept {
  void* first = g_block(g_class_size[k], t_cache->slot);
  if (first == nullptr) return g_malloc(size);  // the range spent
  map_block(first, k);
  free_list& mine = t_cache->lists[k];
  for (std::uint32_t i = 1; i < g_fill[k]; ++i) {
    void* p = g_block(g_class_size[k], t_cache->slot);
    if (p == nullptr) break;
    map_block(p, k);
    *static_cast<void**>(p) = mine.head;
    mine.head = p;
    ++mine.count;
  }
  return first;
}

// Note [Runs for medium blocks]: blocks of a run class from the thread's arena's runs,
// g_fill[k] of them where the thread has its lists (the first handed out, the others on
// its list; 1 for the classes counted in bytes), one where it has not. A second miss
// with no overflow of the list between (a burst, allocated before any is freed) fills
// the whole list: half a list a miss cost a burst of 1 KiB blocks 19-20 ns a block
// against 13 with whole lists (RESULTS "Bursts"), where a list that overflows again
// goes back to half.
[[gnu::noinline]] void* run_miss(unsigned k, std::size_t size) noexcept {
  unsigned want = 1;
  if (t_state == cache_open) {
    // Note [A burst's lists twice as long]: the list is empty here, so its max may change.
    std::uint32_t& max = max_of(*t_cache, k);  // Note [Frees the watcher asks for]
    const bool burst = g_fill[k] > 1 && t_cache->burst[k];
    max = burst && t_cache->frees_too[k] ? g_burst_max[k] : g_list_max[k];
    want = burst ? max : g_fill[k];
    t_cache->burst[k] = true;
  }
  void* p = run_take(k, t_cache->slot, &t_cache->lists[k], want);
  return p != nullptr ? p : g_malloc(size);  // no run: jemalloc's own block, outside the range
}

}  // namespace

[[gnu::noinline]] void* front::malloc_miss(std::size_t size) noexcept {
  const unsigned k = g_class_of[(size + 15) >> 4];
  if (k == 0) return g_malloc(size);
  sweep_if_due();
  if (t_state == cache_open || open_cache()) {
    t_cache->handed[k] = 0;  // it allocates the class: Note [Half a list handed on]
    free_list l = take(k);
    if (l.head != nullptr) {
      free_list& mine = t_cache->lists[k];
      void* p = l.head;
      mine.head = *static_cast<void**>(p);
      mine.count = l.count - 1;
      return p;
    }
  }
  if (run_class(k)) return run_miss(k, size);
  if (g_fill[k] > 1 && t_state == cache_open) return fill(k, size);
  return arena_block(k, size);
}

namespace {
// The thread's full list of class k to the depot, whole or its older half (Note [Half a
// list handed on], front_depot.cc; Note [Idle lists given back]: its idle lists first,
// once a sweep).
[[gnu::noinline]] void hand_on(unsigned k) noexcept {
  sweep_if_due();
  hand_on_list(k, t_cache->lists[k], t_cache->handed[k]);
  t_cache->burst[k] = false;
  t_cache->frees_too[k] = true;  // Note [A burst's lists twice as long]
}

// A free in the range that the list cannot take: its class unknown (0; the boot heap's,
// or asked of jemalloc: Note [The front cache's page map]), its list full, or the
// thread's cache not open yet or closed.
}  // namespace

thread_cache* front::open_thread_cache() noexcept { return t_state == cache_open ? t_cache : nullptr; }

[[gnu::noinline]] void front::free_slow(void* p) noexcept {
  if (t_watch_least != 0) [[unlikely]] watched_free(p);  // Note [Frees the watcher asks for]
  unsigned k = page_class_of(p);  // in the range: the caller asked
  if (k == 0) {
    if (boot_release(p)) return;  // Note [A short process's first requests]
    const std::size_t u = g_usable(p);
    if (u <= g_largest) {
      k = g_class_of[(u + 15) >> 4];
    } else if (u <= g_large_largest) {
      k = large_class(u);
    }
    // A block of a size the cache does not serve (one jemalloc's realloc grew or shrank
    // in place to another), or of a class its runs serve (Note [Runs for medium
    // blocks]: a byte of a run class says a run's block), goes back to the arena.
    if (k == 0 || g_class_size[k] != u || run_class(k)) return g_release(p);
    map_block(p, k);
  }
  if (t_state != cache_open && !open_cache()) return give_back(p);
  free_list& mine = t_cache->lists[k];
  if (k >= g_first_large) {
    // Note [Large blocks in the front cache]: the thread keeps what its budget allows,
    // the depot what its own does, the arena the rest.
    ++t_cache->large_frees;
    const std::size_t bytes = g_class_size[k];
    *static_cast<void**>(p) = mine.head;
    if (t_cache->large_bytes + bytes <= thread_large_budget()) {
      t_cache->large_bytes += bytes;
      mine.head = p;
      ++mine.count;
      return;
    }
    // Past it: up to large_batch - 1 blocks of the class's list go with it, at most 1 MiB
    // in all, as one list (a burst's frees take one lock a batch, not one a block).
    std::uint32_t n = 1;
    void* last = p;
    while (n < large_batch && mine.head != nullptr && std::size_t{n + 1} * bytes <= large_batch_bytes) {
      last = mine.head;
      mine.head = *static_cast<void**>(last);
      --mine.count;
      ++n;
    }
    *static_cast<void**>(last) = nullptr;
    t_cache->large_bytes -= std::size_t{n - 1} * bytes;
    return put(k, p, n);
  }
  if (mine.count >= max_of(*t_cache, k)) hand_on(k);  // above it: a longer list from the depot
  *static_cast<void**>(p) = mine.head;
  mine.head = p;
  ++mine.count;
}

namespace {
// Note [Idle blocks before a new run] (front_runs.h): class k's blocks on the thread's
// list and in the depot back to their runs where they are all of a run's out of it (a
// large class's only where the thread has left it: Note [Classes a stream has left]).
void idle_to_runs(unsigned k) noexcept {
  const bool large = k >= g_first_large;
  if (large && (t_state != cache_open || !t_cache->recency.left(k))) return;
  free_list none{nullptr, 0, 0}, &mine = t_state == cache_open ? t_cache->lists[k] : none;
  void* heads[65] = {mine.head};
  std::uint32_t counts[65];
  unsigned n = 1;
  for (free_list l; n < 65 && (l = take(k, false)).head != nullptr; ++n) {
    heads[n] = l.head;
    counts[n] = l.count;
  }
  if (!empties_a_run(k, heads, n)) {
    for (unsigned i = 1; i < n; ++i) put(k, heads[i], counts[i], false);
    return;
  }
  for (unsigned i = 1; i < n; ++i) give_back_list(heads[i]);
  if (mine.head == nullptr) return;
  if (large) {
    t_cache->large_bytes -= std::size_t{mine.count} * g_class_size[k];
    t_cache->recency.gave_back(k);
  }
  give_back_list(mine.head);
  mine.head = nullptr;
  mine.count = 0;
}

// Note [Large blocks in the front cache]: a run class's second miss with no large free
// between (a burst) takes 2 blocks, the next in a row 4, 8, then up to large_batch, within
// the thread's budget (at once, 16 each: never_repeats 10000 peak RSS 54.1 -> 58.3 MiB).
// Sizes that grow free the class before at each request: one block each.
void* large_run_miss(unsigned k, std::size_t size) noexcept {
  if (t_state != cache_open) return run_miss(k, size);
  thread_cache* c = t_cache;
  const std::size_t bytes = g_class_size[k];
  unsigned want = 1;
  std::uint8_t& streak = c->large_streak[k];
  if (c->large_missed_at[k] == c->large_frees + 1) {
    if ((1u << streak) < large_batch) ++streak;
    const std::size_t budget = thread_large_budget();
    const std::size_t room = budget > c->large_bytes ? (budget - c->large_bytes) / bytes : 0;
    const unsigned most = (1u << streak) - 1;
    want += static_cast<unsigned>(room < most ? room : most);
  } else {
    streak = 0;
  }
  c->large_missed_at[k] = c->large_frees + 1;
  free_list& mine = c->lists[k];
  const std::uint32_t had = mine.count;
  void* p = run_take(k, c->slot, &mine, want, 1);
  if (p == nullptr) return g_malloc(size);  // no run: jemalloc's own block, outside the range
  c->large_bytes += std::size_t{mine.count - had} * bytes;
  return p;
}

// Note [Large blocks in the front cache]: a block of one of the next two classes (at
// most 1.5x the request) from the thread's own lists, for a request of class k that its
// list and the depot could not serve; null when it has none. Its page map byte stays
// its own class: its free puts it back on that class's list.
constexpr unsigned larger_taken = 2;
void* take_larger(thread_cache& c, unsigned k) noexcept {
  for (unsigned j = k + 1; j <= k + larger_taken && j < max_classes && g_class_size[j] != 0; ++j) {
    free_list& l = c.lists[j];
    if (void* p = l.head) {
      l.head = *static_cast<void**>(p);
      --l.count;
      c.large_bytes -= g_class_size[j];
      return p;
    }
  }
  return nullptr;
}

}  // namespace

[[gnu::noinline]] void* front::large_malloc(std::size_t size) noexcept {
  if (size > g_large_largest) return g_malloc(size);
  const unsigned k = large_class(size);
  const std::size_t bytes = g_class_size[k];
  if (t_state == cache_open || open_cache()) {
    thread_cache* c = t_cache;
    c->recency.ask(k);
    free_list& mine = c->lists[k];
    if (void* p = mine.head) {
      mine.head = *static_cast<void**>(p);
      --mine.count;
      c->large_bytes -= bytes;
      return p;
    }
    c->recency.missed(k);
    sweep_if_due();
    const free_list l = take(k);
    if (void* p = l.head) {
      mine.head = *static_cast<void**>(p);
      mine.count = l.count - 1;
      c->large_bytes += bytes * mine.count;
      return p;
    }
    if (c->large_bytes != 0) {
      if (void* p = take_larger(*c, k)) return p;
    }
  }
  if (t_state == cache_open && t_cache->large_bytes != 0) give_back_larger(*t_cache, k, bytes);
  if (run_class(k)) return large_run_miss(k, size);
  return arena_block(k, size);
}

bool enable_front_cache(const front_backend& b) noexcept {
  if (g_enabled || b.malloc == nullptr || b.free == nullptr || b.block == nullptr || b.release == nullptr ||
      b.size_class == nullptr || b.usable == nullptr || b.span == 0 || (b.base & 4095) != 0) {
    return false;
  }
  front_classes cls;
  if (!number_classes(b.size_class, &cls)) return false;
  const unsigned first_large = cls.first_large;
  // Note [The front cache's page map]
  const std::size_t map_bytes = b.span >> map_shift;
  // Note [The front cache's tables in its range]; Note [The page map's bytes off their pages' starts] (front_inline.h).
  void* map = take_front_meta(map_bytes + 4096);
  if (map == nullptr || pthread_key_create(&g_exit_key, close_thread) != 0) return false;
  const std::uintptr_t skew = ((b.base >> map_shift) + page_map_skew) & 4095;  // the map's pages begin pages
  g_page_class = reinterpret_cast<std::atomic<std::uint8_t>*>(static_cast<char*>(map) + skew);
  // Note [A free's class from its pointer] (front_inline.h).
  g_page_class_at = reinterpret_cast<std::uintptr_t>(g_page_class) - (b.base >> map_shift);
  // Note [Runs for medium blocks] (none without a table; give_back serves either way).
  void* table = take_front_meta(run_table_bytes(b.span));  // Note [The front cache's tables in its range]
  configure_runs(cls.class_size, b.base, b.span, g_page_class, table, b.run, b.release, &coarse_clock_ms, &idle_to_runs);
  for (unsigned k = 0; k < max_classes; ++k) {
    const std::uint32_t c = cls.class_size[k];
    g_class_size[k] = c;
    g_list_max[k] = cls.list_max_of[k];
    const bool halves = c != 0 && (c < fill_below || (run_class(k) && k < first_large));
    g_fill[k] = halves ? cls.list_max_of[k] / 2 : 1;
    const std::uint32_t m = std::min({2 * g_list_max[k], list_max, run_class(k) ? run_blocks(k) : list_max});
    g_burst_max[k] = std::max(m, g_list_max[k]);
  }
  for (std::size_t i = 0; i <= front_limit / 16; ++i) g_class_of[i] = cls.class_of[i];
  for (std::size_t i = 0; i <= (large_limit >> large_shift); ++i) g_large_class_of[i] = cls.large_class_of[i];
  g_first_large = first_large;
  std::uint8_t part[max_classes];
  for (unsigned k = 0; k < max_classes; ++k) {
    part[k] = k >= first_large ? part_large : cls.class_size[k] < fill_below ? part_small : part_medium;
  }
  configure_depot(cls.class_size, part, &give_back_list, &coarse_clock_ms, b.decay);  // Note [Idle lists given back]
  configure_idle(cls.class_size, first_large);
  g_large_largest = cls.large_largest;
  g_malloc = b.malloc;
  g_free = b.free;
  g_base = b.base;
  g_span = b.span;
  g_block = b.block;
  g_slots = b.slots == 0 ? 1 : b.slots > front_max_arenas ? front_max_arenas : b.slots;
  g_arena_of_slot = b.arena != nullptr ? b.arena : [](unsigned) noexcept { return 0u; };
  g_release = b.release;
  g_usable = b.usable;
  g_largest = cls.largest;
  g_enabled = true;
  return true;
}

void* front_malloc(std::size_t size) noexcept { return any_malloc(size); }
void* front_malloc_narrowed(std::size_t size) noexcept { return list_malloc(size); }
front_malloc_fn front_malloc_below(std::uint64_t limit) noexcept {
  return g_enabled && limit - 1 <= g_largest ? &front_malloc_narrowed : &front_malloc;
}

void front_free(void* p) noexcept {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) - g_base;
  // Most frees (every block the cache does not serve) end here, at jemalloc's free: the
  // one test they pay for the cache (Note [The front cache's arena]), unless the
  // inline free asked it already (Note [The gate's range]).
  if (offset >= g_span) [[likely]] return g_free(p);
  list_free(p);
}

void front_free_at(void* p) noexcept { list_free(p); }

void front_resizing(const void* p) noexcept {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) - g_base;
  if (offset >= g_span) return;
  // A block of a class below 4 KiB (where runs cannot be made) is one of a jemalloc
  // slab's regions, which jemalloc's realloc never resizes in place to another class (it
  // moves it): its page, shared with the slab's other blocks, keeps its byte, and their
  // frees do not ask jemalloc.
  std::atomic<std::uint8_t>& b = g_page_class[offset >> map_shift];
  // A run's block never reaches jemalloc's realloc (front_run_block): its page's byte says what it is.
  const unsigned k = b.load(std::memory_order_relaxed);
  if (g_class_size[k] >= fill_below && !run_class(k)) b.store(0, std::memory_order_relaxed);
}

void front_cache_release() noexcept {
  if (!g_enabled) return;
  if (t_state == cache_open) {
    for (free_list& l : t_cache->lists) {
      free_all(l.head);
      l.head = nullptr;
      l.count = 0;
    }
    t_cache->large_bytes = 0;
  }
  release_depot();
  release_empty_runs();  // Note [Runs for medium blocks]
}

bool front_cache_arena(unsigned* arena, unsigned* sharing) noexcept {
  if (!g_enabled || t_state != cache_open) return false;
  if ((*arena = g_arena_of_slot(t_cache->slot)) == 0) return false;  // Note [Arenas made when first used]
  const std::size_t open = g_open_caches.load(std::memory_order_relaxed);
  *sharing = open == 0 ? 1 : static_cast<unsigned>((open + g_slots - 1) / g_slots);
  return true;
}

void front_cache_prefork() noexcept {
  if (!g_enabled) return;
  lock_depot();
  lock_runs(g_slots);
}

REPLAYALLOC_FORK_CHILD_CODE void front_cache_postfork(bool child, bool locked) noexcept {
  if (!g_enabled) return;
  if (locked) {
    unlock_runs(g_slots);
    unlock_depot();
  }
  if (child) forked_child(t_state == cache_open);
}

std::uint32_t front_thread_list_count(std::size_t size) noexcept {
  if (!g_enabled || t_state != cache_open || size > g_largest) return 0;
  return t_cache->lists[g_class_of[(size + 15) >> 4]].count;
}

std::size_t front_thread_kept_max() noexcept { return g_enabled && !front_unused() ? thread_large_least / 4 : 0; }

front_cache_counts front_cache_stats() noexcept {
  front_cache_counts c;
  depot_counts(&c, g_enabled);
  c.largest = g_enabled && !front_unused() ? g_large_largest : 0;
  c.base = g_base;
  c.span = g_span;
  c.thread_large_budget = g_enabled ? thread_large_budget() : 0;
  c.thread_large_bytes = g_enabled && t_state == cache_open ? t_cache->large_bytes : 0;
  idle_counts(&c);
  run_counts(&c);
  return c;
}

}  // namespace replayalloc::detail::backend
