// The front cache's idle blocks: lists that no thread used for a second given back to
// their runs or the arena, and the arenas' dirty pages decayed after them; and a
// thread's blocks of larger classes given back at a miss. And the lists a watched thread
// closes to its inline free (Note [Frees the watcher asks for], at the end).
//
// Note [Idle lists given back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The depot is where threads hand lists to each other, and a thread's lists of the
// classes above 64 KiB keep its blocks for its next requests of those classes. A list
// that no thread took for a whole second is not being handed, and blocks of a class a
// thread did not ask for in a second are not being reused: their pages are
// the program's for nothing. ONNX Runtime's session start-up (arena on, one session)
// left 7.7 MiB of lists of blocks above 64 KiB and 2.3 MiB of 4-64 KiB ones in the
// depot and 4 MiB of blocks above 64 KiB on the main thread's lists, none of them used
// again to the end of the run; and giving such blocks back to the arena alone does not
// free their pages: the front arenas' dirty pages decay only as jemalloc ticks, at the
// arenas' own allocations, which the cache makes rarely (14 MiB of dirty pages and not
// one decay sweep over that run). So, as tcmalloc scavenges its thread caches and the
// stashes of empty runs decay (Note [Empty runs kept]):
//  * each class's depot stack keeps its low mark, the fewest lists it held since the
//    last sweep; threads take from the top, so the bottom `low` lists were held all
//    through (front_depot.cc);
//  * at most once a second (every 250 ms since: the Note below), the first put or take
//    after it (the vDSO's coarse clock, read at each put and take, never per block)
//    sweeps every class: the lists held all through go back to their runs or the arena
//    (give_back_list), each class's lock held only to cut them off its stack;
//  * then the front arenas decay (`arena.<i>.decay`; their dirty_decay_ms 1 s, Note
//    [The front cache's arena]; and arena 0 where idle, Note [An idle arena 0 decays],
//    front_arena.cc), whatever ticks jemalloc counted: the pages of the
//    lists given back, of runs the stashes let go and of blocks the depot could not
//    keep are purged over the next second, as jemalloc's background threads would do
//    (not used: a program that calls setuid aborts under them, bench/RESULTS.md
//    "The fallback's thread cache");
//  * each thread, at its next list miss, full list or miss of a class above 64 KiB
//    after a sweep of the depot (one load and one compare there), gives back its lists
//    of the classes above 64 KiB it did not ask for since its own last sweep
//    (sweep_thread: a consumer's blocks, freed but never asked for, included; its next
//    frees keep others). The smaller classes' lists (at most 64 KiB a class, twice that in
//    a burst: Note [A burst's lists twice as long]) are not
//    swept: their blocks go back to runs whose other blocks are mostly out, which frees
//    no page.
// A program that hands lists all the time keeps them (its low marks stay 0), and a
// list put back within a sweep's interval is never swept. A program that stops asking the
// fallback altogether keeps what it holds until it asks again (no thread of the
// library's own), and a thread that never takes a slow path again keeps its lists.
// Measured side by side in bench/RESULTS.md ("Idle lists given back").
//
// Note [Idle lists given back, a quarter second]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The depot's sweeps come every 250 ms now, not every second: a list no thread took for
// a whole 250 ms goes back. Node.js frees what its main thread allocates on V8's
// collector threads, in bursts: their lists wait in the depot for the main thread's
// misses, up to its budget (eight threads open: 15 MiB for the classes of 4-64 KiB, 8
// MiB above), and those the main thread does not take soon hold their pages. ONNX
// Runtime's generation loop under Node.js (arena on, one session) peaked at 182 MiB with
// sweeps every second and 178 with sweeps every 250 ms (REPLAYALLOC_MODE=off: 182-183
// against 176-177; every 100 ms 177-178, every 500 ms 179-180); its other three cells,
// the end-to-end models at 8 and 16 threads and Node.js's Buffers as before. What a
// second measures elsewhere stays a second: a window of the threads open, for the budgets
// (Note [The depot's budget follows the threads]), and a thread's own sweep of its lists
// of the classes above 64 KiB (sweep_thread) begin at a sweep at least a second after the
// last window's, so that a thread whose request takes longer than 250 ms (16 threads on 2
// cores: ~600 ms) keeps its blocks between requests.
// Measured side by side in bench/RESULTS.md ("Idle lists given back every 250 ms").
#include "backend/front_thread.h"

#include <atomic>

#include "backend/front_runs.h"

namespace replayalloc::detail::backend::front {
namespace {

std::uint32_t g_class_size[max_classes];
unsigned g_first_large = max_classes;
std::atomic<std::uint64_t> g_large_given_back{0};
std::atomic<std::uint64_t> g_thread_idle{0};

void give_back_block(thread_cache& c, unsigned j) noexcept {
  free_list& l = c.lists[j];
  void* p = l.head;
  l.head = *static_cast<void**>(p);
  --l.count;
  c.large_bytes -= g_class_size[j];
  g_large_given_back.fetch_add(1, std::memory_order_relaxed);
  give_back(p);
}

}  // namespace

void configure_idle(const std::uint32_t* class_size, unsigned first_large) noexcept {
  for (unsigned k = 0; k < max_classes; ++k) g_class_size[k] = class_size[k];
  g_first_large = first_large;
}

void give_back_larger(thread_cache& c, unsigned k, std::size_t bytes) noexcept {
  for (unsigned j = g_first_large; j < max_classes && g_class_size[j] != 0; ++j) {
    if (j == k || c.lists[j].head == nullptr || !c.recency.left(j)) continue;
    while (c.lists[j].head != nullptr) give_back_block(c, j);
    c.recency.gave_back(j);
  }
  std::size_t given = 0;
  for (unsigned j = k + 1; j < max_classes && g_class_size[j] != 0 && given < bytes; ++j) {
    while (c.lists[j].head != nullptr && given < bytes) {
      give_back_block(c, j);
      given += g_class_size[j];
    }
  }
}

void sweep_thread(thread_cache& c) noexcept {
  c.swept = g_sweeps.load(std::memory_order_relaxed);
  for (unsigned k = g_first_large; k < max_classes && g_class_size[k] != 0; ++k) {
    free_list& l = c.lists[k];
    // Asked since: its last request counted after the sweep's (`asked` wraps after
    // 2^32 requests: a class then looks idle once, and its blocks go back early).
    if (l.head != nullptr && c.recency.asked_at[k] <= c.asked_at_sweep) {
      c.large_bytes -= std::size_t{l.count} * g_class_size[k];
      g_thread_idle.fetch_add(1, std::memory_order_relaxed);
      give_back_list(l.head);
      l.head = nullptr;
      l.count = 0;
    }
  }
  c.asked_at_sweep = c.recency.asked;
}

void idle_counts(front_cache_counts* c) noexcept {
  c->large_given_back = g_large_given_back.load(std::memory_order_relaxed);
  c->thread_lists_idle = g_thread_idle.load(std::memory_order_relaxed);
}

// Note [Frees the watcher asks for]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Auto mode's watcher must see each free of a block it watches (a request of at least
// REPLAYALLOC_MIN_SIZE: its live bytes, its lifetime), and it saw them by widening the
// thread's gate (Note [The plain-free gate], runtime/thread_state.h) to every address:
// each free of a small block, which it never watches, went past the predicted free, the
// slab's range, the gate's bits and the watcher's filter to the backend's free through
// a pointer, ~30 instructions more a pair below the minimum (Note [A dormant watcher],
// runtime/auto_mode.cc). A thread that watches for long paid it at every free: cc1plus
// (g++ -O2) makes 37,745 watched allocations among ~806,000 frees and never rests. In
// the front cache's range only its classes of at least the minimum can hold a watched
// block, and their frees already leave the inline path where a list is full: so while a
// thread is watched its lists of those classes are closed to the inline free (max 0,
// the max kept in open_max; they still hand out their blocks), free_slow calls the
// watcher's hook first (watched_free: the filter, the table) and pushes as before, and
// the thread's gate leaves the front cache's part of the range to the lists as when
// nothing watches (set_free_gate): a small block's free is the list's push again. The
// rest of the address space (the slab's part, jemalloc's blocks outside the range)
// still goes through the gate to the filter. Opened again when the watcher stops (a
// rest, dormancy, the thread's own marks); a thread whose watch began before the front
// cache (the first 4,096 requests) closes them at its next watched allocation.
// Measured (callgrind, the preload library, outputs identical): cc1plus (g++ -O2 on
// bench/micro/threaded_stress.cc) 4,450.3 M -> 4,425.3 M instructions (REPLAYALLOC_MODE=off
// 4,345.7 M, jemalloc 4,404.9 M), sqlite3 (bench/programs/insert.sql) 4,756.9 M -> 4,737.7 M
// (off 4,616.2 M), the same plans, iterations and recordings; tests/perf: realloc 64 B
// 226.7 -> 214.2 a pair, watched 64 B 51.4 -> 50.1, a 256 KiB pair 146.1 -> 150.1 (the
// test of t_watch_least in free_slow, which every free of the larger classes takes).
constinit thread_local std::uint32_t t_watch_least REPLAYALLOC_TLS_IE = 0;
namespace {
std::atomic<void (*)(void*) noexcept> g_watch_hook{nullptr};
}  // namespace

void watched_free(void* p) noexcept {
  if (auto* hook = g_watch_hook.load(std::memory_order_relaxed)) hook(p);
}

void close_watched_lists(thread_cache& c) noexcept {
  for (unsigned k = 1; k < g_first_large; ++k) {  // the larger classes' lists are never taken inline
    if (c.closed[k] || g_class_size[k] < t_watch_least) continue;
    c.open_max[k] = c.lists[k].max;
    c.lists[k].max = 0;
    c.closed[k] = true;
  }
}

}  // namespace replayalloc::detail::backend::front

namespace replayalloc::detail::backend {

bool watch_front_frees(std::size_t least, void (*hook)(void*) noexcept) noexcept {
  if (front::g_first_large == front::max_classes || least == 0) return false;  // the cache not made
  front::g_watch_hook.store(hook, std::memory_order_relaxed);
  front::t_watch_least = least > UINT32_MAX ? UINT32_MAX : static_cast<std::uint32_t>(least);
  if (front::thread_cache* c = front::open_thread_cache()) front::close_watched_lists(*c);
  return true;
}

void unwatch_front_frees() noexcept {
  front::t_watch_least = 0;
  front::thread_cache* c = front::open_thread_cache();
  if (c == nullptr) return;
  for (unsigned k = 1; k < front::max_classes; ++k) {
    if (!c->closed[k]) continue;
    c->lists[k].max = c->open_max[k];
    c->closed[k] = false;
  }
}

}  // namespace replayalloc::detail::backend
