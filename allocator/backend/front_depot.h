// replayalloc/backend/front_depot.h: the front cache's depot, the stacks of whole lists
// of free blocks that threads hand to each other (Note [The fallback's front cache],
// front_cache.cc), under budgets of bytes.
//
// Layer: backend, private to the front cache (front_cache.cc and front_depot.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/front_cache.h"

namespace replayalloc::detail::backend::front {

// Size classes the front cache serves, 1..n (0: none), below 4 KiB, up to 64 KiB and
// above (Note [Large blocks in the front cache]).
inline constexpr unsigned max_classes = 72;

// The page map's granule (Note [The front cache's page map]): one byte per 4 KiB.
inline constexpr unsigned page_map_shift = 12;

// The depot's and the runs' spin locks: the holder moves a few pointers, and on an
// oversubscribed machine may be off its CPU, so a waiter yields now and then.
void spin_lock(std::atomic<bool>& locked) noexcept;
inline void spin_unlock(std::atomic<bool>& locked) noexcept { locked.store(false, std::memory_order_release); }

struct free_list {
  void* head;  // linked through the blocks' first word
  std::uint32_t count;
  std::uint32_t max;  // the count at which a thread's list goes to the depot
};

// Which of the depot's budgets a class's bytes count against.
enum depot_part : std::uint8_t { part_small, part_medium, part_large, parts };

// Once, as the cache is enabled: each class's size and part, the free of a list of
// blocks (linked through their first words) given back to their runs or the arena, and
// for the depot's sweep (Note [Idle lists given back], front_idle.cc) a clock in ms and
// what follows each sweep (the arenas' decay, told whether the sweep began a window;
// null: nothing). A null clock: no sweep.
using list_free_fn = void (*)(void* head) noexcept;
using sweep_clock_fn = std::uint64_t (*)() noexcept;
using swept_fn = void (*)(bool window) noexcept;  // `window`: the sweep began one
void configure_depot(const std::uint32_t* class_size, const std::uint8_t* part, list_free_fn release,
                     sweep_clock_fn now = nullptr, swept_fn swept = nullptr) noexcept;

// Threads with a cache open: the budgets that grow or are shared with them read it.
extern std::atomic<std::size_t> g_open_caches;
void thread_opened() noexcept;
void thread_closed() noexcept;

// A whole list to the depot of class k, or to the arena when the class's budget or
// stack is full. Either of put and take first sweeps the depot where a second has passed
// since its last sweep (Note [Idle lists given back]): no caller holds a lock of the
// cache's. `counted` false: a list taken with take(k, false) and put back, which
// the statistics (depot_puts, depot_takes) never saw move.
void put(unsigned k, void* head, std::uint32_t count, bool counted = true) noexcept;
// A thread's full list of class k to the depot (put): its older half, where the thread
// handed on fewer than whole_after lists of it since it last missed on it (`handed`,
// counted here; the thread sets it to 0 at a miss), else the whole list (Note [Half a
// list handed on]).
inline constexpr std::uint8_t whole_after = 4;
void hand_on_list(unsigned k, free_list& mine, std::uint8_t& handed) noexcept;
// A whole list of class k from the depot; {nullptr, 0, 0} when it has none.
free_list take(unsigned k, bool counted = true) noexcept;
// Every block of a list back to the arena.
void free_all(void* head) noexcept;
// The lists every class held all through the last 250 ms (its stack's bottom ones) given
// back as free_all does, then `swept` called; nothing (false) where `now` is less than
// 250 ms after the last sweep, or another thread sweeps. A sweep a second or more after
// the last window's begins a new one (Note [The depot's budget follows the threads]; its
// count, g_sweeps). put and take call it. The first call after configure_depot sweeps
// nothing: it starts the clock (the first sweep 250 ms after the depot's first use, a
// window's too). Note [Idle lists given back, a quarter second] (front_idle.cc).
bool sweep_depot(std::uint64_t now) noexcept;
// The depot's windows so far (a thread's lists are swept once per window: at most once a
// second).
extern std::atomic<std::uint32_t> g_sweeps;
// Every list of the depot back to the arena (front_cache_release).
void release_depot() noexcept;
// Fork: every class's lock held (front_cache_prefork / postfork); a class that does not
// exist (its size 0) has no lists, and its lock is never taken.
void lock_depot() noexcept;
void unlock_depot() noexcept;
// In the child after fork: the caches open, and the most at once, are the forking
// thread's alone, 1 with a cache (`open`), else 0 (Note [The depot's budget follows the
// threads]: the parent's other threads never close theirs there).
void forked_child(bool open) noexcept;
// Its counts and budgets into c (front_cache_stats).
void depot_counts(front_cache_counts* c, bool enabled) noexcept;

}  // namespace replayalloc::detail::backend::front
