// The front cache's depot (Note [The fallback's front cache], front_cache.cc): per size
// class a stack of whole lists of free blocks under a spin lock, which a thread's full
// list goes to and an empty one takes from, bounded in bytes, and swept of the lists no
// thread took for a second (Note [Idle lists given back], front_idle.cc).
#include "backend/front_depot.h"

#include <sched.h>

namespace replayalloc::detail::backend::front {
namespace {

constexpr unsigned depot_lists = 64;
// The depot's bytes, the classes of 4 KiB and up together, and those below apart (lists
// over it go to the underlying free): a small class's lists, a few KiB each, would
// otherwise find the budget spent by the large ones' (Note [Small blocks in the front
// cache]). The others' budget grows with the threads that have a cache open, 512 KiB
// each, from 1 MiB to 4 MiB: 8 threads on 2 cores handing blocks to each other gave a
// list in four back to the arena at 1 MiB, while a program of one thread only keeps in
// the depot what jemalloc would have kept (planning_latency: peak RSS 17 -> 20-22 MiB
// at a fixed 4 MiB).
constexpr std::size_t depot_budget_least = 1024 * 1024;
constexpr std::size_t depot_budget_most = 4096 * 1024;
constexpr std::size_t depot_budget_per_thread = 512 * 1024;
constexpr std::size_t small_depot_budget = 256 * 1024;
// Note [Large blocks in the front cache]: the depot's bytes of the classes above 64 KiB.
constexpr std::size_t large_depot_budget = 8192 * 1024;

std::uint32_t g_class_size[max_classes];
std::uint8_t g_part[max_classes];
list_free_fn g_release_list = nullptr;
sweep_clock_fn g_now = nullptr;
swept_fn g_swept = nullptr;
constexpr std::uint64_t sweep_ms = 1000;
std::atomic<std::uint64_t> g_next_sweep{0};  // ms: no sweep before

std::size_t depot_budget() noexcept {
  const std::size_t b = depot_budget_per_thread * g_open_caches.load(std::memory_order_relaxed);
  return b < depot_budget_least ? depot_budget_least : b > depot_budget_most ? depot_budget_most : b;
}

struct alignas(64) depot {
  std::atomic<bool> locked{false};
  std::atomic<unsigned> n{0};  // written under the lock, peeked without it
  unsigned low = 0;  // the fewest lists held since the last sweep (Note [Idle lists given back])
  free_list lists[depot_lists] = {};
};
// Constant-initialized (zeros in .bss): the front cache is used from the first static
// constructor that allocates, which may run before this file's own would (a dynamic
// initializer here once emptied a depot holding a list, leaving its bytes counted).
constinit depot g_depot[max_classes];

// The depot's bytes of the classes below 4 KiB, up to 64 KiB, and above.
std::atomic<std::size_t> g_depot_bytes[parts] = {};
unsigned part_of(unsigned k) noexcept { return g_part[k]; }
std::size_t budget_of_part(unsigned part) noexcept {
  return part == part_small ? small_depot_budget : part == part_large ? large_depot_budget : depot_budget();
}
std::atomic<std::size_t>& depot_bytes(unsigned k) noexcept { return g_depot_bytes[part_of(k)]; }
std::size_t depot_budget_of(unsigned k) noexcept { return budget_of_part(part_of(k)); }
std::atomic<std::uint64_t> g_puts{0};
std::atomic<std::uint64_t> g_takes{0};
std::atomic<std::uint64_t> g_frees{0};
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
      d.lists[n] = free_list{head, count, 0};
      d.n.store(n + 1, std::memory_order_relaxed);
    }
    unlock(d);
    if (!kept) used.fetch_sub(bytes, std::memory_order_relaxed);
  }
  if (kept) {
    if (counted) g_puts.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_frees.fetch_add(1, std::memory_order_relaxed);
  free_all(head);
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
    l = d.lists[n - 1];
    d.n.store(n - 1, std::memory_order_relaxed);
    if (n - 1 < d.low) d.low = n - 1;
    depot_bytes(k).fetch_sub(std::size_t{l.count} * g_class_size[k], std::memory_order_relaxed);
  }
  unlock(d);
  if (l.head != nullptr && counted) g_takes.fetch_add(1, std::memory_order_relaxed);
  return l;
}

std::atomic<std::size_t> g_open_caches{0};

void configure_depot(const std::uint32_t* class_size, const std::uint8_t* part, list_free_fn release,
                     sweep_clock_fn now, swept_fn swept) noexcept {
  for (unsigned k = 0; k < max_classes; ++k) {
    g_class_size[k] = class_size[k];
    g_part[k] = part[k];
  }
  g_release_list = release;
  g_swept = swept;
  g_next_sweep.store(now != nullptr ? now() + sweep_ms : 0, std::memory_order_relaxed);
  g_now = now;
}

std::atomic<std::uint32_t> g_sweeps{0};

bool sweep_depot(std::uint64_t now) noexcept {
  std::uint64_t next = g_next_sweep.load(std::memory_order_relaxed);
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
    for (unsigned i = 0; i < m; ++i) idle[i] = d.lists[i];
    for (unsigned i = m; i < n; ++i) d.lists[i - m] = d.lists[i];
    d.n.store(n - m, std::memory_order_relaxed);
    d.low = n - m;
    unlock(d);
    for (unsigned i = 0; i < m; ++i) {
      depot_bytes(k).fetch_sub(std::size_t{idle[i].count} * g_class_size[k], std::memory_order_relaxed);
      free_all(idle[i].head);
    }
    g_idle.fetch_add(m, std::memory_order_relaxed);
  }
  g_sweeps.fetch_add(1, std::memory_order_relaxed);
  if (g_swept != nullptr) g_swept();
  return true;
}

void thread_opened() noexcept { g_open_caches.fetch_add(1, std::memory_order_relaxed); }

void thread_closed() noexcept {
  g_closed_threads.fetch_add(1, std::memory_order_relaxed);
  g_open_caches.fetch_sub(1, std::memory_order_relaxed);
}

void release_depot() noexcept {
  for (depot& d : g_depot) {
    lock(d);
    const unsigned n = d.n.load(std::memory_order_relaxed);
    free_list lists[depot_lists];
    for (unsigned i = 0; i < n; ++i) {
      lists[i] = d.lists[i];
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
  for (depot& d : g_depot) lock(d);
}

void unlock_depot() noexcept {
  for (depot& d : g_depot) unlock(d);
}

void depot_counts(front_cache_counts* c, bool enabled) noexcept {
  c->depot_puts = g_puts.load(std::memory_order_relaxed);
  c->depot_takes = g_takes.load(std::memory_order_relaxed);
  c->depot_frees = g_frees.load(std::memory_order_relaxed);
  c->depot_idle = g_idle.load(std::memory_order_relaxed);
  c->threads_closed = g_closed_threads.load(std::memory_order_relaxed);
  for (unsigned part = 0; part < parts; ++part) {
    c->depot_bytes[part] = g_depot_bytes[part].load(std::memory_order_relaxed);
    c->depot_budget[part] = enabled ? budget_of_part(part) : 0;
  }
}

}  // namespace replayalloc::detail::backend::front
