// replayalloc/backend/front_thread.h: a thread's lists in the front cache (Note [The
// fallback's front cache], front_cache.cc), and what gives their idle blocks back
// (front_idle.cc).
//
// Layer: backend, private to the front cache (front_cache.cc and front_idle.cc). Only
// the thread that owns a cache reads or writes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/front_cache.h"
#include "backend/front_classes.h"
#include "backend/front_depot.h"
#include "support/config.h"

namespace replayalloc::detail::backend::front {

struct thread_cache {
  free_list lists[max_classes];
  unsigned slot;  // the arena its blocks come from (Note [The front cache's arena])
  std::size_t large_bytes;  // on its lists of the classes above 64 KiB
  class_recency recency;    // of those classes (Note [Classes a stream has left])
  // Note [Runs for medium blocks]: a class whose list missed into the runs since it last
  // overflowed (a burst): its next miss fills the whole list.
  bool burst[max_classes];
  // Note [A burst's lists twice as long] (front_classes.cc): a class the thread has
  // handed a list of on (it frees the class in numbers, not only allocates it).
  bool frees_too[max_classes];
  // Note [Half a list handed on] (front_depot.cc): the class's lists handed on since the
  // thread last missed on it, up to whole_after (whole lists from there).
  std::uint8_t handed[max_classes];
  // Note [Large blocks in the front cache]: the thread's frees of the classes above 64
  // KiB, and their count + 1 at each such class's last miss into its runs.
  std::uint32_t large_frees;
  std::uint32_t large_missed_at[max_classes];
  std::uint8_t large_streak[max_classes];  // such misses in a row (a burst's batches double)
  // Note [Idle lists given back] (front_idle.cc): the depot's windows (g_sweeps) and
  // recency.asked at the cache's last sweep.
  std::uint32_t swept;
  std::uint32_t asked_at_sweep;
  // Note [Frees the watcher asks for] (front_idle.cc): the lists closed to the inline
  // free (max 0) while the thread is watched, and their max meanwhile.
  bool closed[max_classes];
  std::uint32_t open_max[max_classes];
};

// Note [Frees the watcher asks for]: the least class size whose frees the thread's
// watcher asks for (0: none), and what asks.
extern constinit thread_local std::uint32_t t_watch_least REPLAYALLOC_TLS_IE;
void watched_free(void* p) noexcept;
// Closes c's lists of the classes of t_watch_least bytes and up (open_cache, when set).
void close_watched_lists(thread_cache& c) noexcept;
// The max of c's list k, its open one while it is closed.
inline std::uint32_t& max_of(thread_cache& c, unsigned k) noexcept {
  return c.closed[k] ? c.open_max[k] : c.lists[k].max;
}
// The calling thread's cache where it is open, else null (front_cache.cc).
thread_cache* open_thread_cache() noexcept;

// Once, as the cache is enabled: the classes' sizes and the first above 64 KiB.
void configure_idle(const std::uint32_t* class_size, unsigned first_large) noexcept;

// Note [Large blocks in the front cache]: before the arena makes a block of class k, c's
// lists of the classes it has left go back to it (Note [Classes a stream has left],
// front_classes.cc), and its cached blocks of larger classes, `bytes` of them or more
// where it has them, so that it can serve k from their pages instead of new ones.
void give_back_larger(thread_cache& c, unsigned k, std::size_t bytes) noexcept;

// Note [Idle lists given back]: c's lists of the classes above 64 KiB that it did not ask
// for since its last sweep given back to their runs or the arena. The owner calls it at
// a slow path once the depot began a window since (c.swept != g_sweeps).
void sweep_thread(thread_cache& c) noexcept;

// Blocks of larger classes given back at a miss, and lists given back by sweep_thread,
// into c (front_cache_stats).
void idle_counts(front_cache_counts* c) noexcept;

}  // namespace replayalloc::detail::backend::front
