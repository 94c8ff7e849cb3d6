// The front cache's empty runs kept: per arena and run size, a stack of the runs no
// block is out of beyond each pool's one, and their decay.
//
// Note [Empty runs kept]
// ~~~~~~~~~~~~~~~~~~~~~~
// A burst (a batch's tensors, a request's buffers, allocated together and freed together)
// empties every run it made, and a run given back to the arena was made again by the next
// burst: ~2,700 instructions for jemalloc to make a run aligned to its size and ~1,300 to
// take it back, 25 M of the 109 M instructions of 4 rounds of 100,000 blocks of 1 KiB
// (bench/micro/bursts.cc: 1,563 runs a round), where mimalloc and tcmalloc keep their pages
// and spans. So a run no block is out of, its pool keeping one already, goes to a stash
// of its arena and run size (64 KiB-1 MiB; a stack linked through the runs' first words,
// under a spin lock), its page map bytes kept (the class that takes it again is mostly its own; a
// run taken by another class has them rewritten, one given back has them cleared), and a
// class needing a run takes one from there before anything else. The stash decays by
// use, as tcmalloc's thread caches are scavenged: when a run is stashed, at most once a
// second (the vDSO's coarse clock, read once per run stashed, never per block), the runs
// the stash held all through the last second (its low mark) go back to the arena, whose
// dirty pages then decay as any others; runs that a burst a second took out are kept.
// The pages never wait in a stash where the arena could use them: before the arena makes
// a run of another size (none of its own size stashed), the stashed runs it could be
// made of go back to it (stash_room_for): one of the smallest larger size stashed (a run
// of 2^k bytes aligned to them fits at the start of any larger run, which is aligned to
// its own), or, where none is larger, every run of the smaller sizes (their pages may
// coalesce into it); all of them before it makes a block above the runs' classes (whose
// pages jemalloc may make of theirs, as it would without the stash); front_cache_release
// (before a slab's purge) gives every one back. Every stash of the other sizes went
// back before each run of another size at first: between two rounds of bursts of
// 100,000-byte blocks (bench/micro/bursts.cc 2000 100000 20) auto mode's table of
// watched blocks grew into a new run of 64 KiB, and the 196 runs of 1 MiB the stash
// kept for the next round went back and were made again (461 runs made in the 20
// rounds against 251 with REPLAYALLOC_MODE=off; 1.3 M of 22.6 M instructions).
// Peak RSS does not grow by it: a stash holds only runs that were out at once. A program
// that stops freeing runs keeps its stash until the arena's next run or large block, or a
// purge: no thread of the library's own decays it (jemalloc's own dirty pages, without its
// background threads, wait for its next use too). Measured side by side in
// bench/RESULTS.md ("Bursts").
#include "backend/front_stash.h"

#include <time.h>

#include <atomic>
#include <bit>

#include "backend/front_depot.h"
#include "support/config.h"

namespace replayalloc::detail::backend::front {
namespace {

constexpr unsigned least_shift = 16;  // runs of 64 KiB
constexpr unsigned run_sizes = 5;     // 64 KiB-1 MiB
constexpr std::uint64_t decay_ms = 1000;

struct alignas(64) run_stash {
  std::atomic<bool> locked{false};
  std::uintptr_t top = 0;    // a run's start, linked through its first word; 0 none
  std::uint32_t low = 0;     // the fewest held since `since`
  std::uint64_t since = 0;   // ms, the clock's
  std::atomic<std::uint32_t> count{0};  // written under the lock, peeked without it
};
REPLAYALLOC_LARGE_ZEROED constinit run_stash g_stash[front_max_arenas][run_sizes];
run_clock_fn g_now = nullptr;
run_give_fn g_give = nullptr;
std::atomic<std::uint64_t> g_reused{0};
std::atomic<std::size_t> g_bytes{0};

unsigned size_index(std::size_t bytes) noexcept {
  return static_cast<unsigned>(std::countr_zero(bytes)) - least_shift;
}
std::uintptr_t& link_of(std::uintptr_t start) noexcept { return *reinterpret_cast<std::uintptr_t*>(start); }

// The runs of a chain (linked through their first words) to the arena.
void give_chain(std::uintptr_t top, std::size_t bytes) noexcept {
  while (top != 0) {
    const std::uintptr_t start = top;
    top = link_of(start);
    g_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    g_give(start, bytes);
  }
}

void empty_stash(unsigned slot, unsigned z) noexcept {
  run_stash& s = g_stash[slot][z];
  if (s.count.load(std::memory_order_relaxed) == 0) return;  // a peek: a run stashed meanwhile stays
  spin_lock(s.locked);
  const std::uintptr_t top = s.top;
  s.top = 0;
  s.low = 0;
  s.count.store(0, std::memory_order_relaxed);
  spin_unlock(s.locked);
  give_chain(top, std::size_t{1} << (least_shift + z));
}

// The top run of arena slot's stash of size index z; 0 when it keeps none.
std::uintptr_t pop(unsigned slot, unsigned z) noexcept {
  run_stash& s = g_stash[slot][z];
  if (s.count.load(std::memory_order_relaxed) == 0) return 0;  // a peek
  spin_lock(s.locked);
  const std::uintptr_t start = s.top;
  if (start != 0) {
    s.top = link_of(start);
    const std::uint32_t n = s.count.load(std::memory_order_relaxed) - 1;
    s.count.store(n, std::memory_order_relaxed);
    if (n < s.low) s.low = n;
  }
  spin_unlock(s.locked);
  if (start != 0) g_bytes.fetch_sub(std::size_t{1} << (least_shift + z), std::memory_order_relaxed);
  return start;
}

}  // namespace

std::uint64_t coarse_clock_ms() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000 + static_cast<std::uint64_t>(ts.tv_nsec) / 1000000;
}

void configure_stash(run_clock_fn now, run_give_fn give) noexcept {
  g_now = now;
  g_give = give;
}

bool stashing() noexcept { return g_now != nullptr; }

std::uintptr_t unstash(unsigned slot, std::size_t bytes) noexcept {
  const std::uintptr_t start = pop(slot, size_index(bytes));
  if (start != 0) g_reused.fetch_add(1, std::memory_order_relaxed);
  return start;
}

void stash(std::uintptr_t start, unsigned slot, std::size_t bytes) noexcept {
  run_stash& s = g_stash[slot][size_index(bytes)];
  const std::uint64_t now = g_now();
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
  spin_lock(s.locked);
  link_of(start) = s.top;
  s.top = start;
  std::uint32_t n = s.count.load(std::memory_order_relaxed) + 1;
  std::uintptr_t idle = 0;  // the chain of runs held all through the last second
  if (now - s.since >= decay_ms) {
    if (const std::uint32_t m = s.low < n ? s.low : n; m != 0) {
      idle = s.top;
      std::uintptr_t last = s.top;
      for (std::uint32_t r = 1; r < m; ++r) last = link_of(last);
      s.top = link_of(last);
      link_of(last) = 0;
      n -= m;
    }
    s.low = n;
    s.since = now;
  }
  s.count.store(n, std::memory_order_relaxed);
  spin_unlock(s.locked);
  give_chain(idle, bytes);
}

void empty_stashes(unsigned slot) noexcept {
  for (unsigned z = 0; z < run_sizes; ++z) empty_stash(slot, z);
}

void stash_room_for(unsigned slot, std::size_t bytes) noexcept {
  const unsigned want = size_index(bytes);
  for (unsigned z = want + 1; z < run_sizes; ++z) {
    if (const std::uintptr_t start = pop(slot, z); start != 0) return g_give(start, std::size_t{1} << (least_shift + z));
  }
  for (unsigned z = 0; z < want; ++z) empty_stash(slot, z);
}

void lock_stashes(unsigned slots) noexcept {
  for (unsigned i = 0; i < slots && i < front_max_arenas; ++i) {
    for (run_stash& s : g_stash[i]) spin_lock(s.locked);
  }
}

void unlock_stashes(unsigned slots) noexcept {
  for (unsigned i = 0; i < slots && i < front_max_arenas; ++i) {
    for (run_stash& s : g_stash[i]) spin_unlock(s.locked);
  }
}

void stash_counts(front_cache_counts* c) noexcept {
  c->runs_reused = g_reused.load(std::memory_order_relaxed);
  c->stashed_bytes = g_bytes.load(std::memory_order_relaxed);
}

}  // namespace replayalloc::detail::backend::front
