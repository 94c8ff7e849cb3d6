// The front cache's depot (Note [The fallback's front cache], front_cache.cc): per size
// class a stack of whole lists of free blocks under a spin lock, which a thread's full
// list goes to and an empty one takes from, bounded in bytes, and swept of the lists no
// thread took for a second (Note [Idle lists given back], front_idle.cc).
#include "backend/front_depot.h"

#include <sched.h>

#include "support/config.h"

namespace replayalloc::detail::backend::front {
namespace {

constexpr unsigned depot_lists = 64;
// The depot's bytes, the classes of 4 KiB and up together, and those below apart (lists
// over it go to the underlying free): a small class's lists, a few KiB each, would
// otherwise find the budget spent by the large ones' (Note [Small blocks in the front
// cache]).
//
// Note [The depot's budget follows the threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The budget of the classes of 4-64 KiB is 1 MiB, and 2 MiB more for each thread beyond
// the first, up to 32 MiB, counting the most threads that had a cache open at once since
// the depot's last window began or between the two windows before (a window begins at a
// sweep, at puts and takes, at most once a second). In a child after fork the count is the
// forking thread's alone (the parent's other threads never close their caches there). A
// program of one thread keeps in the depot what jemalloc would have kept
// (planning_latency: peak RSS 17 -> 20-22 MiB with 4 MiB at one thread). Threads that
// hand blocks to each other need more: it was 512 KiB a thread (1-4 MiB) of the threads
// open at that moment, and at 8 threads on 2 cores a list in four to seven the depot
// was handed went back to its runs (larson 14,832 of 62,107), where the next miss walked
// it again, block by block, under the run pool's lock, and runs made for the next
// burst while emptied ones waited in the stashes (61 MiB of them as larson ended). A
// thread ending hands its lists on as its count goes down, so larson's rounds of threads
// that end and start gave them back at the very moment their successors would take them;
// the window keeps the budget of the threads just gone. With it and Note [The depot's
// counts], 8 threads on 2 cores, 10 rounds (bench/RESULTS.md, "Threaded stress: the
// depot's counts and budget"): larson, rptest and producer/consumer 0.93x the CPU of the
// depot before, peak RSS 0.91x, 0.87x and 0.81x; the small loop, ResNet-50 at 8 and 16
// threads and planning_latency within their spread. The 64 lists a class's stack holds
// and the sweep of lists no thread took for 250 ms (Note [Idle lists given back])
// bound what it keeps.
constexpr std::size_t depot_budget_least = 1024 * 1024;
constexpr std::size_t depot_budget_most = 32768 * 1024;
constexpr std::size_t depot_budget_per_thread = 2048 * 1024;
// Note [The small classes' budget follows the threads]: the classes below 4 KiB, 256 KiB
// and 128 KiB for each thread beyond the first, up to 4 MiB.
constexpr std::size_t small_budget_least = 256 * 1024;
constexpr std::size_t small_budget_per_thread = 128 * 1024;
constexpr std::size_t small_budget_most = 4096 * 1024;
// Note [Large blocks in the front cache]: the depot's bytes of the classes above 64 KiB.
constexpr std::size_t large_depot_budget = 8192 * 1024;

std::uint32_t g_class_size[max_classes];
std::uint8_t g_part[max_classes];
list_free_fn g_release_list = nullptr;
sweep_clock_fn g_now = nullptr;
swept_fn g_swept = nullptr;
// Note [Idle lists given back, a quarter second] (front_idle.cc): the depot is swept
// every 250 ms, and a window of the threads open (the budgets') and the threads' own
// sweeps (g_sweeps) begin at most once a second, at a sweep.
constexpr std::uint64_t sweep_ms = 250;
constexpr std::uint64_t window_ms = 1000;
// ms: the next window's earliest sweep (written by the sweeping thread, one at a time).
std::atomic<std::uint64_t> g_next_window{0};
// ms: no sweep before; 0 until the depot's first put, take or sweep, which sets it
// sweep_ms on (configure_depot reads no clock: a clock read at start-up is two page faults
// of every process's, libc's code and the vDSO's data, and the depot is empty until then).
std::atomic<std::uint64_t> g_next_sweep{0};

// The most caches open at once since the last window began, and in the window before.
alignas(64) std::atomic<std::size_t> g_open_most{0};
std::atomic<std::size_t> g_open_most_before{0};
void raise_to(std::atomic<std::size_t>& most, std::size_t n) noexcept {
  std::size_t was = most.load(std::memory_order_relaxed);
  while (was < n && !most.compare_exchange_weak(was, n, std::memory_order_relaxed)) {
  }
}

// `least`, and `per_thread` for each thread beyond the first of the most caches open at
// once of the window (Note [The depot's budget follows the threads]), up to `most`.
std::size_t follow_threads(std::size_t least, std::size_t per_thread, std::size_t most) noexcept {
  const std::size_t now = g_open_most.load(std::memory_order_relaxed);
  const std::size_t before = g_open_most_before.load(std::memory_order_relaxed);
  const std::size_t open = now > before ? now : before;
  const std::size_t b = least + per_thread * (open > 1 ? open - 1 : 0);
  return b > most ? most : b;
}

std::size_t depot_budget() noexcept {
  return follow_threads(depot_budget_least, depot_budget_per_thread, depot_budget_most);
}

// Note [The small classes' budget follows the threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The classes below 4 KiB had 256 KiB of the depot whatever the threads: 16 lists of 16
// KiB for some thirty classes. Four consumers freeing another four threads' blocks of
// 16 B-64 KiB (threaded_stress prodcons, 8 threads) hand on lists of every small class
// at once, and their producers take them a moment later: the budget was spent at most
// puts, and 9,000 lists a run (of 72,000 handed on) went back to their runs, block by
// block under a pool's lock, to be carved out again for the producers' next misses (10%
// of replayalloc's samples in perf). So the small classes' budget follows the threads as
// the others' does (the same window of the most caches open at once): 256 KiB, and 128
// KiB for each thread beyond the first, up to 4 MiB (29 threads). A program of one thread
// keeps what it kept. producer/consumer at 8 threads: lists given back 9,576 -> 207, CPU
// 1.169x -> 1.150x mimalloc's, peak RSS as before (bench/RESULTS.md, "Threaded stress
// with the small classes' budget following the threads"; at T = 8 and 16 end to end, "...
// with the session's three changes").
std::size_t small_budget() noexcept {
  return follow_threads(small_budget_least, small_budget_per_thread, small_budget_most);
}

// Note [The depot's counts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every list handed on between threads passes through the depot twice (a put, a take):
// at 8 threads handing blocks to each other, ~70,000 lists in under a second. Each
// counted itself in atomics shared by every class (lists put and taken, the part's
// bytes), on one line with the count of open caches that every put of a class of 4-64
// KiB reads: a line written by both cores at every step, so each put and take missed
// on it, a locked add and a compare-exchange besides its own class's lock. So a
// class's counts of lists put and taken are its own, beside its lock (written under
// it, plain stores; the statistics add them up), each part's bytes and the count of
// open caches have lines of their own, and a take gives its bytes back after its lock.
// Threaded stress, 8 threads on 2 cores, two batches of 8 and 10 rounds alternated
// (bench/RESULTS.md, "Threaded stress: the depot's counts and budget"): producer/consumer
// 0.95-0.99x the CPU of the counts before, rptest 0.97-0.98x, larson 0.98-0.99x.
struct alignas(64) depot {
  std::atomic<bool> locked{false};
  std::atomic<unsigned> n{0};  // written under the lock, peeked without it
  unsigned low = 0;  // the fewest lists held since the last sweep (Note [Idle lists given back])
  std::atomic<std::uint64_t> puts{0};   // lists put (counted) and kept
  std::atomic<std::uint64_t> takes{0};  // lists taken (counted)
  free_list* lists() noexcept;          // its lists, apart (g_depot_lists)
};
void bump(std::atomic<std::uint64_t>& c) noexcept {  // under the depot's lock: no locked add
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
// Constant-initialized (zeros, in .lbss: Note [Large zeroed tables last]): the front
// cache is used from the first static constructor that allocates, which may run before
// this file's own would (a dynamic initializer here once emptied a depot holding a list,
// leaving its bytes counted).
REPLAYALLOC_LARGE_ZEROED constinit depot g_depot[max_classes];
// The lists, apart from the locks: fork() writes every lock (lock_depot), and each page
// it writes is copied in the parent and in the child; with the lists beside them the
// locks spanned 19 pages (a shell script forks hundreds of times: 36 of a fork's page
// faults were those), now 2. Each lock still has a line of its own.
REPLAYALLOC_LARGE_ZEROED constinit free_list g_depot_lists[max_classes][depot_lists] = {};
free_list* depot::lists() noexcept { return g_depot_lists[this - g_depot]; }

// The depot's bytes of the classes below 4 KiB, up to 64 KiB, and above.
// Each on a line of its own (Note [The depot's counts]).
struct alignas(64) part_bytes {
  std::atomic<std::size_t> bytes{0};
};
constinit part_bytes g_depot_bytes[parts];
unsigned part_of(unsigned k) noexcept { return g_part[k]; }
std::size_t budget_of_part(unsigned part) noexcept {
  return part == part_small ? small_budget() : part == part_large ? large_depot_budget : depot_budget();
}
std::atomic<std::size_t>& depot_bytes(unsigned k) noexcept { return g_depot_bytes[part_of(k)].bytes; }
std::size_t depot_budget_of(unsigned k) noexcept { return budget_of_part(part_of(k)); }
// Lists given back for want of room: not under a lock, and rarer than puts and takes.
alignas(64) std::atomic<std::uint64_t> g_frees{0};
std::atomic<std::uint64_t> g_closed_threads{0};
std::atomic<std::uint64_t> g_idle{0};

void lock(depot& d) noexcept { spin_lock(d.locked); }
void unlock(depot& d) noexcept { spin_unlock(d.locked); }

}  // namespace

void spin_lock(std::atomic<bool>& locked) noexcept {
  for (unsigned spins = 0; locked.exchange(true, std::memory_order_acquire);) {
    while (locked.load(std::memory_order_relaxed)) {
      if (++spins % 64 == 0) sched_yield();
    }
  }
}

void free_all(void* head) noexcept { g_release_list(head); }

// A whole list to the depot of class k (or to the underlying free when it is full).
void put(unsigned k, void* head, std::uint32_t count, bool counted) noexcept {
  if (g_now != nullptr) sweep_depot(g_now());
  depot& d = g_depot[k];
  const std::size_t bytes = std::size_t{count} * g_class_size[k];
  bool kept = false;
  // The budget is shared by the classes of a part, each under its own lock: the bytes
  // are reserved before the list goes in (a check and a later add let two threads that
  // exit at once, putting lists of two classes, both pass the check).
  std::atomic<std::size_t>& used = depot_bytes(k);
  const std::size_t budget = depot_budget_of(k);
  std::size_t was = used.load(std::memory_order_relaxed);
  bool reserved = false;
  while (was + bytes <= budget) {
    if (used.compare_exchange_weak(was, was + bytes, std::memory_order_relaxed)) {
      reserved = true;
      break;
    }
  }
  if (reserved) {
    lock(d);
    const unsigned n = d.n.load(std::memory_order_relaxed);
    kept = n < depot_lists;
    if (kept) {
      d.lists()[n] = free_list{head, count, 0};
      d.n.store(n + 1, std::memory_order_relaxed);
      if (counted) bump(d.puts);
    }
    unlock(d);
    if (!kept) used.fetch_sub(bytes, std::memory_order_relaxed);
  }
  if (kept) return;
  g_frees.fetch_add(1, std::memory_order_relaxed);
  free_all(head);
}

// Note [Half a list handed on]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread that allocates and frees blocks of a class in about equal numbers walks its
// list's length up and down at random, and each time the walk reached the list's length
// a whole list went to the depot, leaving one block, which the walk's next steps spent
// before the thread took a list back from the depot, full, one free short of the length
// again: each visit to the depot, a put or a take, two locks of a line the other threads
// share, put the walk back at an end. The lists of the classes of 12-64 KiB hold four or
// five blocks, those of 2-4 KiB six to eight, and a list went to the depot and came back
// every few steps: 8 threads, each replacing one block of 256 a step (threaded_stress
// aligned; no block freed by another thread than its own), made 67,000 puts and as many
// takes in 1.6 M requests. jemalloc's thread cache and tcmalloc's flush half of a list
// that overflows (jemalloc's tcache_bin_flush, tcmalloc's ReleaseToCentralCache, a
// batch), which leaves the walk halfway. So does this one where the thread also
// allocates the class: where it missed on it (took a list, or asked the runs) since its
// last whole_after hand-ons, the older half of the list (its tail) goes to the depot and
// the half freed last (its head, in the cache) stays; the walk to find the half is over
// blocks the thread has just freed. A thread that only frees the class (a consumer of
// another thread's blocks) hands on whole lists, so that the thread that takes them
// takes as many blocks a lock as before: halves there made producer/consumer's lists
// twice as many (72,000 -> 143,000). A thread's bound (one list's length) is unchanged
// (Note [A burst's lists twice as long] changes it).
// threaded_stress, 8 threads, mode off: puts 67,000 -> 44,000 (aligned), 72,000 ->
// 38,000 (rptest), rptest 1.089x -> 0.985x the best's CPU (bench/RESULTS.md, "Threaded
// stress with half a list handed on").
void hand_on_list(unsigned k, free_list& mine, std::uint8_t& handed) noexcept {
  const std::uint32_t keep = handed < whole_after ? mine.count / 2 : 0;
  if (handed < whole_after) ++handed;
  if (keep == 0) {
    put(k, mine.head, mine.count);
    mine.head = nullptr;
    mine.count = 0;
    return;
  }
  void* last = mine.head;  // the keep-th block
  for (std::uint32_t i = 1; i < keep; ++i) last = *static_cast<void**>(last);
  void* older = *static_cast<void**>(last);
  *static_cast<void**>(last) = nullptr;
  put(k, older, mine.count - keep);
  mine.count = keep;
}

// A whole list of class k from the depot; {nullptr, 0} when it has none.
free_list take(unsigned k, bool counted) noexcept {
  if (g_now != nullptr) sweep_depot(g_now());
  depot& d = g_depot[k];
  // A peek without the lock: a list put meanwhile is found next time.
  if (d.n.load(std::memory_order_relaxed) == 0) return free_list{nullptr, 0, 0};
  lock(d);
  free_list l{nullptr, 0, 0};
  if (const unsigned n = d.n.load(std::memory_order_relaxed); n != 0) {
    l = d.lists()[n - 1];
    d.n.store(n - 1, std::memory_order_relaxed);
    if (n - 1 < d.low) d.low = n - 1;
    if (counted) bump(d.takes);
  }
  unlock(d);
  // After the lock (a fork between leaves the child's count a list high, as put's
  // reservation before its lock may: fewer lists kept there, none lost).
  if (l.head != nullptr) depot_bytes(k).fetch_sub(std::size_t{l.count} * g_class_size[k], std::memory_order_relaxed);
  return l;
}

// Written as threads open and close caches, read at large frees: a line of its own.
alignas(64) std::atomic<std::size_t> g_open_caches{0};

void configure_depot(const std::uint32_t* class_size, const std::uint8_t* part, list_free_fn release,
                     sweep_clock_fn now, swept_fn swept) noexcept {
  for (unsigned k = 0; k < max_classes; ++k) {
    g_class_size[k] = class_size[k];
    g_part[k] = part[k];
  }
  g_release_list = release;
  g_swept = swept;
  g_next_sweep.store(0, std::memory_order_relaxed);
  g_next_window.store(0, std::memory_order_relaxed);
  g_now = now;
}

std::atomic<std::uint32_t> g_sweeps{0};

bool sweep_depot(std::uint64_t now) noexcept {
  std::uint64_t next = g_next_sweep.load(std::memory_order_relaxed);
  if (next == 0) {  // the first: the clock starts (another thread's start wins)
    g_next_sweep.compare_exchange_strong(next, now + sweep_ms, std::memory_order_relaxed);
    return false;
  }
  if (now < next || !g_next_sweep.compare_exchange_strong(next, now + sweep_ms, std::memory_order_relaxed)) {
    return false;
  }
  for (unsigned k = 0; k < max_classes; ++k) {
    depot& d = g_depot[k];
    if (d.n.load(std::memory_order_relaxed) == 0) continue;  // a peek: nothing held (low <= n)
    free_list idle[depot_lists];
    lock(d);
    const unsigned n = d.n.load(std::memory_order_relaxed);
    const unsigned m = d.low < n ? d.low : n;
    for (unsigned i = 0; i < m; ++i) idle[i] = d.lists()[i];
    for (unsigned i = m; i < n; ++i) d.lists()[i - m] = d.lists()[i];
    d.n.store(n - m, std::memory_order_relaxed);
    d.low = n - m;
    unlock(d);
    for (unsigned i = 0; i < m; ++i) {
      depot_bytes(k).fetch_sub(std::size_t{idle[i].count} * g_class_size[k], std::memory_order_relaxed);
      free_all(idle[i].head);
    }
    g_idle.fetch_add(m, std::memory_order_relaxed);
  }
  const bool window = now >= g_next_window.load(std::memory_order_relaxed);
  if (window) {
    g_next_window.store(now + window_ms, std::memory_order_relaxed);
    // Note [The depot's budget follows the threads]: a new window of the most caches open.
    g_open_most_before.store(g_open_most.load(std::memory_order_relaxed), std::memory_order_relaxed);
    g_open_most.store(g_open_caches.load(std::memory_order_relaxed), std::memory_order_relaxed);
    raise_to(g_open_most, g_open_caches.load(std::memory_order_relaxed));
    g_sweeps.fetch_add(1, std::memory_order_relaxed);
  }
  if (g_swept != nullptr) g_swept(window);
  return true;
}

void thread_opened() noexcept { raise_to(g_open_most, g_open_caches.fetch_add(1, std::memory_order_relaxed) + 1); }

REPLAYALLOC_FORK_CHILD_CODE void forked_child(bool open) noexcept {
  // Written only where they change (Note [Pages a fork leaves shared], runtime/lifecycle.cc).
  // The window before only comes down to the child's one thread: the budget takes the
  // larger of the two windows, and the current one is n (a parent that has not swept yet
  // has 0 there, which stays).
  const std::size_t n = open ? 1 : 0;
  for (std::atomic<std::size_t>* c : {&g_open_caches, &g_open_most}) {
    if (c->load(std::memory_order_relaxed) != n) c->store(n, std::memory_order_relaxed);
  }
  if (g_open_most_before.load(std::memory_order_relaxed) > n) g_open_most_before.store(n, std::memory_order_relaxed);
}

void thread_closed() noexcept {
  g_closed_threads.fetch_add(1, std::memory_order_relaxed);
  g_open_caches.fetch_sub(1, std::memory_order_relaxed);
}

void release_depot() noexcept {
  for (depot& d : g_depot) {
    if (g_class_size[&d - g_depot] == 0) continue;  // never locked across fork (lock_depot)
    lock(d);
    const unsigned n = d.n.load(std::memory_order_relaxed);
    free_list lists[depot_lists];
    for (unsigned i = 0; i < n; ++i) {
      lists[i] = d.lists()[i];
      depot_bytes(static_cast<unsigned>(&d - g_depot))
          .fetch_sub(std::size_t{lists[i].count} * g_class_size[&d - g_depot], std::memory_order_relaxed);
    }
    d.n.store(0, std::memory_order_relaxed);
    d.low = 0;
    unlock(d);
    for (unsigned i = 0; i < n; ++i) free_all(lists[i].head);
  }
}

void lock_depot() noexcept {
  for (unsigned k = 0; k < max_classes; ++k) {
    if (g_class_size[k] != 0) lock(g_depot[k]);
  }
}

void unlock_depot() noexcept {
  for (unsigned k = 0; k < max_classes; ++k) {
    if (g_class_size[k] != 0) unlock(g_depot[k]);
  }
}

void depot_counts(front_cache_counts* c, bool enabled) noexcept {
  c->depot_puts = c->depot_takes = 0;
  for (const depot& d : g_depot) {
    c->depot_puts += d.puts.load(std::memory_order_relaxed);
    c->depot_takes += d.takes.load(std::memory_order_relaxed);
  }
  c->depot_frees = g_frees.load(std::memory_order_relaxed);
  c->depot_idle = g_idle.load(std::memory_order_relaxed);
  c->threads_closed = g_closed_threads.load(std::memory_order_relaxed);
  for (unsigned part = 0; part < parts; ++part) {
    c->depot_bytes[part] = g_depot_bytes[part].bytes.load(std::memory_order_relaxed);
    c->depot_budget[part] = enabled ? budget_of_part(part) : 0;
  }
}

}  // namespace replayalloc::detail::backend::front
