// The fallback's statistics and purges, through jemalloc's controls (moved from
// jemalloc_backend.cc, unchanged).
#include "backend/jemalloc_names.h"

#include <cstdint>
#include <cstdio>

#include "backend/backend.h"
#include "backend/front_cache.h"

namespace replayalloc::detail::backend {
namespace {
template <class T>
bool read_ctl(const char* name, T* value) noexcept {
  std::size_t len = sizeof *value;
  return mallctl(name, value, &len, nullptr, 0) == 0 && len == sizeof *value;
}

// A jemalloc statistic after refreshing them (an epoch); 0 when it cannot be read.
std::size_t fresh_stat(const char* name) {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  std::size_t value = 0;
  if (mallctl("epoch", &epoch, &len, &epoch, len) != 0 || !read_ctl(name, &value)) return 0;
  return value;
}
}  // namespace

std::size_t fallback_allocated_bytes() noexcept { return fresh_stat("stats.allocated"); }

std::size_t fallback_resident_bytes() noexcept { return fresh_stat("stats.resident"); }

// Note [Purging what a slab replaces]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A slab takes over iterations the backend served until then: the recordings, and on
// every thread the iterations it passed through while other threads held the slabs.
// Their blocks are free in jemalloc, their pages dirty, and jemalloc's decay returns
// dirty pages only as the arena is used, which a replaying thread hardly does: purge
// them before the slab is faulted in, or peak RSS holds both (ResNet-50, 4 threads:
// 410 MiB against jemalloc alone's 364). jemalloc purges whole arenas, not a number of
// bytes, so the purge is sized by choosing what to purge:
//  - every arena, when their dirty pages are at most twice the slab (one thread
//    recorded: what it recorded is most of what is free);
//  - else this thread's arena, when its dirty pages are at most three times the slab
//    for each thread using that arena: each thread of a multi-threaded service has an
//    arena under jemalloc's defaults (the LD_PRELOAD library's: one for all, Note [The
//    fallback's shared arena]), and the pages there are what its threads' iterations
//    used (ResNet-50, 4 threads: 21-25 MiB dirty in each inference thread's arena,
//    against an 11 MiB slab and 75-94 MiB in all arenas together; MobileNetV3:
//    10-11 MiB against 7 MiB and 41 MiB); and by the same rule the arena of the
//    thread's front cache, which the blocks of 64 KiB-2 MiB come from (Note [Large
//    blocks in the front cache]), counting the caches that share it;
//  - else nothing: the free pages are mostly the rest of the program's (the model's
//    loading, a cache it freed), which it would fault back in (a TorchScript
//    MobileNetV3's first 0.2 MiB slab against 10 MiB: ~3,000 page faults), and which
//    jemalloc's decay returns as the program goes on.
namespace {
// stats.arenas.<arena>.<field> (statistics as of the last epoch); false if unreadable.
template <class T>
bool arena_stat(unsigned arena, const char* field, T* value) noexcept {
  char name[64];
  std::snprintf(name, sizeof name, "stats.arenas.%u.%s", arena, field);
  return read_ctl(name, value);
}

void purge(unsigned arena) noexcept {
  char name[48];
  std::snprintf(name, sizeof name, "arena.%u.purge", arena);
  mallctl(name, nullptr, nullptr, nullptr, 0);
}
}  // namespace

void release_free_memory(std::size_t slab_bytes) noexcept {
  front_cache_release();  // Note [The fallback's front cache]: its blocks' pages too
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  std::size_t page = 0;
  if (mallctl("epoch", &epoch, &len, &epoch, len) != 0 || !read_ctl("arenas.page", &page) || page == 0) {
    purge(MALLCTL_ARENAS_ALL);  // statistics unreadable: purge as if the pages were few
    return;
  }
  const std::size_t slab_pages = slab_bytes / page;
  std::size_t all = 0;
  if (!arena_stat(MALLCTL_ARENAS_ALL, "pdirty", &all) || all <= 2 * slab_pages) {
    purge(MALLCTL_ARENAS_ALL);
    return;
  }
  // The thread's own arena and its front cache's (Note [Large blocks in the front
  // cache]: the blocks of 64 KiB-2 MiB it passed through or recorded are there).
  // Threads share an arena when there are more of them than arenas (jemalloc makes four
  // per CPU; the front cache one per CPU): each may have left an iteration's pages there.
  unsigned own = 0;
  std::size_t mine = 0;
  unsigned sharing = 1;
  if (read_ctl("thread.arena", &own) && arena_stat(own, "pdirty", &mine) && mine != 0) {
    if (!arena_stat(own, "nthreads", &sharing) || sharing == 0) sharing = 1;
    if (mine <= 3 * slab_pages * sharing) purge(own);
  }
  unsigned front = 0;
  std::size_t front_dirty = 0;
  if (front_cache_arena(&front, &sharing) && front != own && arena_stat(front, "pdirty", &front_dirty) &&
      front_dirty != 0 && front_dirty <= 3 * slab_pages * sharing) {
    purge(front);
  }
}

}  // namespace replayalloc::detail::backend
