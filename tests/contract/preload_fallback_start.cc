// The fallback's start deferred (Note [The fallback made when first needed],
// backend/fallback_start.cc) in the LD_PRELOAD library's build: until a process has made
// REPLAYALLOC_FALLBACK_AFTER requests, or one of 1 MiB or more, the fallback is
// jemalloc's own malloc with its defaults; then the front cache and the settings are
// made while the program's threads go on allocating and freeing. What a user relies on:
// a short process never makes them; a long one gets them; and no block is lost,
// corrupted or handed out twice across the switch, whichever thread frees a block made
// before it. Each case runs in a fresh process (this binary again, whose constructor
// below runs the case and exits), so that the start has not been made yet.
#include <sched.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"
#include "gtest/gtest.h"
#include "replayalloc/replayalloc.hpp"

extern char** environ;

namespace replayalloc::contract {
namespace {

namespace be = detail::backend;
constexpr const char* kCaseVariable = "FALLBACK_START_TEST_CASE";

int g_failures = 0;
#define CHILD_EXPECT(cond, ...)                          \
  do {                                                   \
    if (!(cond)) {                                       \
      std::fprintf(stderr, "child: failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                 \
      std::fputc('\n', stderr);                          \
      ++g_failures;                                      \
    }                                                    \
  } while (0)

// The front cache is expected on once started unless the environment turned it off.
bool front_wanted() {
  const char* off = std::getenv("REPLAYALLOC_FRONT_CACHE");
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  return !(off != nullptr && std::strcmp(off, "0") == 0) && !(check != nullptr && std::strcmp(check, "0") != 0);
}

bool in_front_range(const void* p) {
  const be::front_cache_counts c = be::front_cache_stats();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return c.span != 0 && a - c.base < c.span;
}

// The cache says it is on, and serves a small block, unless the environment turned it off.
void expect_served_as_wanted(const char* when) {
  const bool front = be::front_cache_stats().largest != 0;
  CHILD_EXPECT(front == front_wanted(), "the front cache is %s %s", front ? "on" : "off", when);
  void* p = std::malloc(64);
  CHILD_EXPECT(in_front_range(p) == front_wanted(), "a small block %s %s the front cache's", when,
               in_front_range(p) ? "is" : "is not");
  std::free(p);
}

// Live blocks of every thread, checked for overlap as they are made.
std::mutex g_live_mu;
std::map<std::uintptr_t, std::size_t>* g_live = nullptr;

struct block {
  unsigned char* p = nullptr;
  std::size_t n = 0;
  unsigned char tag = 0;
};

block made(void* p, std::size_t n, unsigned char tag) {
  CHILD_EXPECT(p != nullptr, "no block of %zu bytes", n);
  if (p == nullptr) return {};
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    auto next = g_live->lower_bound(a);
    CHILD_EXPECT(next == g_live->end() || next->first >= a + n, "a block of %zu bytes overlaps a live one", n);
    if (next != g_live->begin()) {
      auto prev = std::prev(next);
      CHILD_EXPECT(prev->first + prev->second <= a, "a block of %zu bytes overlaps a live one", n);
    }
    (*g_live)[a] = n;
  }
  std::memset(p, tag, n);
  return {static_cast<unsigned char*>(p), n, tag};
}

void release(const block& b) {
  if (b.p == nullptr) return;
  for (std::size_t i = 0; i < b.n; i += 61) {
    if (b.p[i] != b.tag) {
      CHILD_EXPECT(false, "a block of %zu bytes was overwritten at byte %zu", b.n, i);
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live->erase(reinterpret_cast<std::uintptr_t>(b.p));
  }
  std::free(b.p);
}

// 16 B-384 KiB, most of them small, through malloc, calloc and realloc; callocs under
// 16 KiB before the start (one of 16 KiB or more would make it).
block any_block(std::mt19937& rng, unsigned char tag) {
  const std::size_t n = std::size_t{16} << (rng() % 15);
  const std::size_t size = n / 2 + rng() % n;
  switch (rng() % 4) {
    case 0: {
      const std::size_t c = be::fallback_started() ? size : size % (std::size_t{16} << 10);
      return made(std::calloc(1, c), c, tag);
    }
    case 1: {
      void* p = std::malloc(size / 2 + 1);
      return made(std::realloc(p, size), size, tag);
    }
    default: return made(std::malloc(size), size, tag);
  }
}

// Four threads allocate and free through the start, each handing a share of its live
// blocks, some made before it, to the next thread to free after it.
void case_threads() {
  g_live = new std::map<std::uintptr_t, std::size_t>();
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  void* before = std::malloc(64);
  std::size_t usable = 0;
  // Note [A short process's first requests]: the boot heap's (the front cache's range's
  // first MiB) where the cache is wanted, while the process has one thread; never a list's.
  CHILD_EXPECT(be::boot_block(before, &usable) == front_wanted(), "a block before the start is %s the boot heap's",
               be::boot_block(before, &usable) ? "" : "not");
  CHILD_EXPECT(!in_front_range(before) || be::boot_block(before, &usable), "the front cache served before the start");
  std::free(before);
  if (front_wanted()) {
    CHILD_EXPECT(be::thread_cache_max() == (std::size_t{128} << 10), "auto mode's rule sees %zu bytes kept, not the cache's",
                 be::thread_cache_max());
  }
  constexpr int kThreads = 4;
  constexpr int kRounds = 6000;
  std::vector<std::vector<block>> handed(kThreads);
  std::mutex handed_mu;
  std::atomic<int> past_half{0};
  std::atomic<bool> started{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<block> live;
      for (int r = 0; r < kRounds; ++r) {
        if (r == kRounds / 2) {
          past_half.fetch_add(1);
          while (!started.load()) std::this_thread::yield();  // every thread holds blocks made before
          std::lock_guard<std::mutex> lock(handed_mu);
          auto& next = handed[(t + 1) % kThreads];
          for (std::size_t i = 0; i < live.size(); i += 2) next.push_back(live[i]);
          std::vector<block> kept;
          for (std::size_t i = 1; i < live.size(); i += 2) kept.push_back(live[i]);
          live.swap(kept);
        }
        live.push_back(any_block(rng, static_cast<unsigned char>(t * 50 + r % 50)));
        if (live.size() > 48) {
          const std::size_t i = rng() % live.size();
          release(live[i]);
          live[i] = live.back();
          live.pop_back();
        }
      }
      for (const block& b : live) release(b);
    });
  }
  while (past_half.load() < kThreads) std::this_thread::yield();
  CHILD_EXPECT(!be::fallback_started(), "the start was made before the request that makes it");
  // A request of 1 MiB starts it at once (a block jemalloc would purge at its free).
  const block big = made(std::malloc(std::size_t{1} << 20), std::size_t{1} << 20, 0xab);
  CHILD_EXPECT(be::fallback_started(), "a request of 1 MiB did not make the start");
  started.store(true);
  for (std::thread& th : threads) th.join();
  for (const auto& list : handed) {
    for (const block& b : list) release(b);  // made before the start, freed after, on another thread
  }
  release(big);
  CHILD_EXPECT(g_live->empty(), "%zu blocks were never freed", g_live->size());
  expect_served_as_wanted("after the start");
  if (front_wanted()) {
    CHILD_EXPECT(be::thread_cache_max() == (std::size_t{128} << 10), "auto mode's rule changed at the start");
  }
}

// Small requests on the inline path count, one at a time, and the start comes within
// REPLAYALLOC_FALLBACK_AFTER of them; none before this case's first (the process's own
// start made far fewer).
void case_count() {
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  const long after = std::strtol(std::getenv("REPLAYALLOC_FALLBACK_AFTER"), nullptr, 10);
  long made_here = 0;
  void* volatile sink = nullptr;  // the compiler may not drop a pair
  while (!be::fallback_started() && made_here <= after) {
    sink = std::malloc(48);
    std::free(sink);
    ++made_here;
  }
  CHILD_EXPECT(be::fallback_started(), "no start after %ld requests", made_here);
  CHILD_EXPECT(made_here > after / 2, "the start came after %ld of %ld requests", made_here, after);
  expect_served_as_wanted("after the start");
}

// Note [Aligned requests in the front cache] (backend/front_classes.cc): a program whose
// requests are all aligned (posix_memalign(64), as libtorch's tensors) counts them as
// malloc's, so it gets the front cache after as many; its aligned blocks then come from
// the cache's runs, aligned as asked.
void case_aligned() {
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  const long after = std::strtol(std::getenv("REPLAYALLOC_FALLBACK_AFTER"), nullptr, 10);
  if (front_wanted()) {
    // A large aligned request while the boot heap is open is its pages of their own,
    // counted as one request, as a malloc's is: it does not make the start.
    void* big = nullptr;
    CHILD_EXPECT(posix_memalign(&big, 4096, std::size_t{8} << 20) == 0 && big != nullptr, "no 8 MiB aligned block");
    CHILD_EXPECT(reinterpret_cast<std::uintptr_t>(big) % 4096 == 0, "an 8 MiB block of posix_memalign(4096) at %p", big);
    std::size_t usable = 0;
    CHILD_EXPECT(be::boot_block(big, &usable), "an aligned request of 8 MiB was not the boot heap's");
    CHILD_EXPECT(!be::fallback_started() && be::boot_heap_open(), "a large aligned request made the start");
    std::memset(big, 0x3c, std::size_t{8} << 20);
    std::free(big);
  }
  long made_here = 0;
  while (!be::fallback_started() && made_here <= after) {
    void* p = nullptr;
    CHILD_EXPECT(posix_memalign(&p, 64, 200 + made_here % 3000) == 0 && p != nullptr, "no aligned block");
    CHILD_EXPECT(reinterpret_cast<std::uintptr_t>(p) % 64 == 0, "a block of posix_memalign(64) at %p", p);
    std::free(p);
    ++made_here;
  }
  CHILD_EXPECT(be::fallback_started(), "no start after %ld aligned requests", made_here);
  CHILD_EXPECT(made_here > after / 2, "the start came after %ld of %ld requests", made_here, after);
  void* p = nullptr;
  CHILD_EXPECT(posix_memalign(&p, 64, 1000) == 0 && reinterpret_cast<std::uintptr_t>(p) % 64 == 0,
               "posix_memalign(64, 1000) after the start: %p", p);
  CHILD_EXPECT(in_front_range(p) == front_wanted(), "an aligned block after the start %s the front cache's",
               in_front_range(p) ? "is" : "is not");
  std::free(p);
}

// Note [A short process's first requests] (backend/boot_heap.cc): before the start, in a
// process of one thread, malloc, calloc and realloc of up to 256 KiB are the boot heap's;
// its blocks keep their bytes through every entry point, a calloc is zeroed where a freed
// block is reused, a second thread closes it, and a block it made, freed on that thread or
// after, is never handed out again.
bool boot(const void* p) {
  std::size_t usable = 0;
  return be::boot_block(p, &usable);
}

void case_boot() {
  g_live = new std::map<std::uintptr_t, std::size_t>();
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  if (!front_wanted()) {  // off with the front cache
    void* p = std::malloc(64);
    CHILD_EXPECT(!be::boot_heap_open() && !boot(p), "the boot heap is open without the front cache");
    std::free(p);
    return;
  }
  CHILD_EXPECT(be::boot_heap_open(), "the boot heap is not open in a process of one thread");
  const std::uint64_t served_at_entry = be::boot_heap_counts().requests;
  CHILD_EXPECT(served_at_entry > 0, "the process's start (the engine's and libstdc++'s own blocks) was not served");
  std::mt19937 rng(7);
  std::vector<block> live;
  for (int i = 0; i < 300; ++i) {  // a short command's requests: 16 B-16 KiB, some freed
    const std::size_t n = (std::size_t{16} << (rng() % 11)) / 2 + rng() % 64 + 1;
    live.push_back(made(rng() % 3 == 0 ? std::calloc(1, n) : std::malloc(n), n, static_cast<unsigned char>(i)));
    CHILD_EXPECT(boot(live.back().p), "a request of %zu bytes was not the boot heap's", n);
    if (rng() % 3 == 0) {
      const std::size_t j = rng() % live.size();
      release(live[j]);
      live[j] = live.back();
      live.pop_back();
    }
  }
  // A calloc that reuses a freed block is zeroed (a small one: 200 bytes, from a list; one
  // above 4 KiB: the last block made, given back to the bump pointer); malloc_usable_size
  // says at least the request. (volatile: the compiler may not drop a pair.)
  // (40,000 bytes: a calloc of 16 KiB or more made the start; Note [A short process's callocs].)
  for (const std::size_t n : {std::size_t{200}, std::size_t{8000}, std::size_t{40000}}) {
    unsigned char* volatile dirty = static_cast<unsigned char*>(std::malloc(n));
    std::memset(dirty, 0x5a, n);
    std::free(dirty);
    unsigned char* volatile zeroed = static_cast<unsigned char*>(std::calloc(1, n));
    CHILD_EXPECT(zeroed == dirty, "the freed block of %zu bytes was not reused", n);
    bool all_zero = true;
    for (std::size_t i = 0; i < n; ++i) all_zero = all_zero && zeroed[i] == 0;
    CHILD_EXPECT(all_zero, "a calloc of %zu bytes reusing a freed block is not zeroed", n);
    CHILD_EXPECT(malloc_usable_size(zeroed) >= n, "usable size %zu of a %zu-byte block", malloc_usable_size(zeroed), n);
    CHILD_EXPECT(boot(zeroed) && !be::fallback_started(), "a calloc of %zu bytes left the boot heap or made the start", n);
    std::free(zeroed);
  }
  // realloc: grows in place where the block is the last made, moves otherwise, the bytes kept.
  auto* grow = static_cast<unsigned char*>(std::malloc(1000));
  std::memset(grow, 0x11, 1000);
  auto* grown = static_cast<unsigned char*>(std::realloc(grow, 40000));
  CHILD_EXPECT(grown == grow, "the last block made did not grow in place");
  void* after = std::malloc(5000);  // above the sizes kept on lists: made after it
  auto* moved = static_cast<unsigned char*>(std::realloc(grown, 80000));
  CHILD_EXPECT(moved != grown && boot(moved), "a block not the last made grew in place, or left the boot heap (%p, %p, %p)",
               static_cast<void*>(grown), after, static_cast<void*>(moved));
  bool kept = true;
  for (int i = 0; i < 1000; ++i) kept = kept && moved[i] == 0x11;
  CHILD_EXPECT(kept, "realloc lost the block's bytes");
  std::free(after);
  std::free(moved);
  // A double free is ignored: the block is handed out once.
  void* volatile twice = std::malloc(48);
  std::free(twice);
  std::free(twice);
  void* volatile a = std::malloc(48);
  void* volatile b = std::malloc(48);
  CHILD_EXPECT(a != b, "a block freed twice was handed out twice");
  std::free(a);
  std::free(b);
  // Above 256 KiB, pages of its own (case_large). Aligned to at most a page, the heap's
  // (Note [A short process's aligned requests]: `cat`'s buffer, 128 KiB aligned to a
  // page); to more, jemalloc's. Each keeps its bytes while the others are made and freed.
  void* large = std::malloc(std::size_t{300} << 10);
  CHILD_EXPECT(boot(large), "a request of 300 KiB was not the boot heap's pages of its own");
  std::free(large);
  void* buffer = nullptr;
  CHILD_EXPECT(posix_memalign(&buffer, 4096, std::size_t{128} << 10) == 0, "posix_memalign failed");
  const block paged = made(buffer, std::size_t{128} << 10, 0x61);
  const block small = made(std::aligned_alloc(256, 512), 512, 0x62);
  const block wide = made(std::aligned_alloc(8192, 8192), 8192, 0x63);
  const block odd = made(memalign(64, 100), 100, 0x64);
  CHILD_EXPECT(boot(paged.p) && boot(small.p) && boot(odd.p), "a request aligned to 64-4096 bytes was not the boot heap's");
  CHILD_EXPECT(reinterpret_cast<std::uintptr_t>(paged.p) % 4096 == 0 && reinterpret_cast<std::uintptr_t>(small.p) % 256 == 0 &&
                   reinterpret_cast<std::uintptr_t>(odd.p) % 64 == 0 && reinterpret_cast<std::uintptr_t>(wide.p) % 8192 == 0,
               "an aligned request is not aligned");
  CHILD_EXPECT(!boot(wide.p), "the boot heap served a request aligned to 8 KiB");
  CHILD_EXPECT(malloc_usable_size(small.p) >= 512, "usable size %zu of an aligned 512-byte block", malloc_usable_size(small.p));
  release(small);
  const block after_small = made(std::malloc(500), 500, 0x65);  // may reuse it (a list of its size)
  release(paged);
  release(wide);
  release(odd);
  release(after_small);
  // A child forked now frees, reallocs and allocates in its copy of the heap.
  const pid_t pid = fork();
  if (pid == 0) {
    for (const block& k : live) release(k);
    void* p = std::malloc(64);
    _exit(g_failures == 0 && boot(p) ? 0 : 1);
  }
  int status = 0;
  CHILD_EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the forked child failed");
  // A second thread closes it: its requests and this thread's go to jemalloc from then
  // on, and the boot heap's blocks, freed on that thread, are never handed out again.
  const std::uint64_t served = be::boot_heap_counts().requests;
  CHILD_EXPECT(served > served_at_entry + 300, "the boot heap served %llu requests of this case's 300 and more",
               static_cast<unsigned long long>(served - served_at_entry));
  std::vector<block> half(live.begin(), live.begin() + static_cast<long>(live.size() / 2));
  std::thread other([&] {
    void* p = std::malloc(64);
    CHILD_EXPECT(!boot(p), "another thread's request was the boot heap's");
    std::free(p);
    for (const block& k : half) release(k);
  });
  other.join();
  CHILD_EXPECT(!be::boot_heap_open(), "the boot heap stays open beside a second thread");
  const std::uint64_t closed_at = be::boot_heap_counts().requests;
  std::vector<void*> later;
  for (int i = 0; i < 2000; ++i) {
    void* p = std::malloc(16 + (i % 64) * 16);
    CHILD_EXPECT(!boot(p), "the boot heap served after it closed");
    later.push_back(p);
  }
  for (void* p : later) std::free(p);
  for (std::size_t i = live.size() / 2; i < live.size(); ++i) release(live[i]);
  CHILD_EXPECT(be::boot_heap_counts().requests == closed_at, "the boot heap served after it closed");
  CHILD_EXPECT(!be::fallback_started(), "the boot heap's close made the fallback's start");
}

// The process's resident bytes (/proc/self/statm).
std::size_t resident_bytes() {
  unsigned long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%lu %lu", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// Note [A short process's large requests] (backend/boot_heap.cc): while the boot heap is
// open, a malloc above 256 KiB gets pages of its own and makes no start; its
// bytes are kept through realloc; its free gives its pages back to the kernel, whichever
// thread frees it; after one was freed, the next such request makes the start.
void case_large() {
  g_live = new std::map<std::uintptr_t, std::size_t>();
  if (!front_wanted()) return;  // no boot heap: the 1 MiB request makes the start, as case_threads checks
  CHILD_EXPECT(be::boot_heap_open(), "the boot heap is not open in a process of one thread");
  constexpr std::size_t big = std::size_t{8} << 20;  // `sort`'s buffer is 8.5 MB
  const block a = made(std::malloc(big + 1234), big + 1234, 0x21);
  CHILD_EXPECT(boot(a.p), "a request of 8 MiB was not the boot heap's");
  CHILD_EXPECT(reinterpret_cast<std::uintptr_t>(a.p) % 4096 == 0, "a large block is not page-aligned");
  CHILD_EXPECT(malloc_usable_size(a.p) >= a.n, "usable size %zu of a %zu-byte block", malloc_usable_size(a.p), a.n);
  CHILD_EXPECT(!be::fallback_started() && be::boot_heap_open(), "a large request made the start");
  // realloc: within the block, it stays; beyond it, it moves with its bytes.
  const block b = made(std::malloc(std::size_t{600} << 10), std::size_t{600} << 10, 0x42);
  CHILD_EXPECT(std::realloc(b.p, std::size_t{500} << 10) == b.p, "a large block shrunk within its pages moved");
  g_live->erase(reinterpret_cast<std::uintptr_t>(b.p));
  auto* moved = static_cast<unsigned char*>(std::realloc(b.p, std::size_t{4} << 20));
  bool kept = moved != nullptr;
  for (std::size_t i = 0; kept && i < (std::size_t{500} << 10); i += 61) kept = moved[i] == 0x42;
  CHILD_EXPECT(kept && moved != b.p && boot(moved), "realloc of a large block lost its bytes, did not move or left the heap");
  if (moved != nullptr) std::memset(moved, 0x43, std::size_t{4} << 20);
  // A forked child frees its copy of a large block; the parent's stays.
  const pid_t pid = fork();
  if (pid == 0) {
    release(a);
    _exit(g_failures == 0 ? 0 : 1);
  }
  int status = 0;
  CHILD_EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "the forked child failed");
  // Its free gives the pages back; a second free is ignored.
  std::size_t before = resident_bytes();
  release(a);
  std::size_t after = resident_bytes();
  CHILD_EXPECT(after + (std::size_t{6} << 20) < before, "freeing 8 MiB written gave back %zu bytes",
               before > after ? before - after : 0);
  std::free(a.p);
  // With a large block freed, the next request above 256 KiB makes the start (the program
  // may repeat them: the front cache keeps their pages) and is the front cache's
  // (Note [The start once the boot heap stops serving]).
  CHILD_EXPECT(!be::fallback_started(), "a large block's free made the start");
  void* next = std::malloc(std::size_t{512} << 10);
  CHILD_EXPECT(!boot(next) && be::fallback_started(), "a request of 512 KiB after a large block's free made no start");
  CHILD_EXPECT(in_front_range(next), "a request of 512 KiB after a large block's free is not the front cache's");
  std::free(next);
  // A large block made before the start, freed on another thread after it: its pages go back.
  before = resident_bytes();
  std::thread other([moved] { std::free(moved); });
  other.join();
  after = resident_bytes();
  CHILD_EXPECT(after + (std::size_t{3} << 20) < before, "freeing 4 MiB written on another thread gave back %zu bytes",
               before > after ? before - after : 0);
  CHILD_EXPECT(g_live->empty(), "%zu blocks were never freed", g_live->size());
  expect_served_as_wanted("after the start");
}

// Note [The start once the boot heap stops serving] (backend/fallback_start.cc): with
// REPLAYALLOC_FALLBACK_AFTER=4096, requests the boot heap serves do not make the start
// before 4,096; once a second thread has closed the heap, the start comes within a
// quarter of that (1,024) counted from the process's first request: at once where 2,000
// were made, within the rest of the 1,024 where this case made 100 (the process's own
// start made some before).
void case_stopped(int before_thread) {
  if (!front_wanted()) return;  // no boot heap
  void* volatile sink = nullptr;  // the compiler may not drop a pair
  for (int i = 0; i < before_thread; ++i) {
    sink = std::malloc(48);
    std::free(sink);
  }
  CHILD_EXPECT(!be::fallback_started(), "the start came within %d requests the boot heap served", before_thread);
  std::thread([] {}).join();  // the process has had a second thread: the heap closes
  int after_thread = 0;
  while (!be::fallback_started() && after_thread < 4096) {
    sink = std::malloc(48);
    std::free(sink);
    ++after_thread;
  }
  CHILD_EXPECT(be::fallback_started(), "no start in 4,096 requests after the boot heap closed");
  const int most = before_thread >= 1024 ? 1 : 1024 - before_thread;
  CHILD_EXPECT(after_thread <= most, "the start came %d requests after the boot heap closed, %d made before (at most %d)",
               after_thread, before_thread, most);
}

// Note [The start once the boot heap stops serving]: where the boot heap's MiB is spent
// by the process's one thread, the start comes at that request, and that request and
// every one after it are the front cache's (none jemalloc's arena 0, whose pages the
// cache never reuses); the boot heap's blocks keep their bytes and are freed after.
void case_spent() {
  if (!front_wanted()) return;  // no boot heap
  g_live = new std::map<std::uintptr_t, std::size_t>();
  static block kept[8192];  // not a vector: its growth would be a large request of its own
  std::size_t n = 0;
  std::size_t usable = 0;
  block first_after{};
  while (n < std::size(kept)) {
    const std::size_t size = 200 + n % 300;
    const block b = made(std::malloc(size), size, static_cast<unsigned char>(n % 251));
    if (!be::boot_block(b.p, &usable)) {
      first_after = b;
      break;
    }
    kept[n++] = b;
    if (be::fallback_started()) {
      // The request the heap refused was made()'s own, its map's node (48 bytes, a
      // header besides) after the block: so the heap had less room than that left, and
      // the next request is the first after the start.
      const std::size_t used = be::boot_heap_counts().bytes;
      CHILD_EXPECT(used + 64 > be::boot_range_bytes, "the start came while the boot heap served (%zu blocks, %zu bytes used)",
                   n, used);
      first_after = made(std::malloc(size), size, 0x3c);
      break;
    }
  }
  CHILD_EXPECT(first_after.p != nullptr, "the boot heap served %zu blocks of 200-500 bytes", n);
  CHILD_EXPECT(be::fallback_started(), "no start at the request the spent boot heap did not serve (%zu blocks)", n);
  CHILD_EXPECT(in_front_range(first_after.p), "the first request after the boot heap was spent is not the front cache's");
  for (int i = 0; i < 64; ++i) {
    const block b = made(std::malloc(64 + 97 * i), 64 + 97 * i, 0x5a);
    CHILD_EXPECT(in_front_range(b.p), "a block of %d bytes after the start is not the front cache's", 64 + 97 * i);
    release(b);
  }
  release(first_after);
  for (std::size_t i = 0; i < n; ++i) release(kept[i]);
  CHILD_EXPECT(g_live->empty(), "%zu blocks were never freed", g_live->size());
}

// REPLAYALLOC_FALLBACK_AFTER=0: made with the engine, as before the deferral.
void case_at_once() {
  CHILD_EXPECT(be::fallback_started(), "REPLAYALLOC_FALLBACK_AFTER=0 deferred the start");
  expect_served_as_wanted("at start-up");
}

// Note [Arenas made when first used] (front_arena.cc): the front cache has a slot, and in
// time an arena, per CPU the process may run on, at most front_max_arenas: started on
// one CPU (a container's cpuset, `taskset -c 0`), one, though the host has more online.
void case_one_cpu() {
  unsigned slots = 0, made = 0;
  be::front_arena_counts(&slots, &made);
  CHILD_EXPECT(slots == 1, "a process that may run on one CPU has %u slots", slots);
}

// The case named in the environment, in this fresh process, before main.
[[gnu::constructor]] void run_case() {
  const char* which = std::getenv(kCaseVariable);
  if (which == nullptr) return;
  (void)replayalloc::stats();  // the engine made
  if (std::strcmp(which, "threads") == 0) case_threads();
  else if (std::strcmp(which, "count") == 0) case_count();
  else if (std::strcmp(which, "aligned") == 0) case_aligned();
  else if (std::strcmp(which, "at_once") == 0) case_at_once();
  else if (std::strcmp(which, "boot") == 0) case_boot();
  else if (std::strcmp(which, "one_cpu") == 0) case_one_cpu();
  else if (std::strcmp(which, "large") == 0) case_large();
  else if (std::strcmp(which, "stopped_late") == 0) case_stopped(2000);
  else if (std::strcmp(which, "stopped_early") == 0) case_stopped(100);
  else if (std::strcmp(which, "spent") == 0) case_spent();
  else CHILD_EXPECT(false, "no case %s", which);
  std::fflush(stderr);
  _exit(g_failures == 0 ? 0 : 1);
}

// Runs this binary again with the case and REPLAYALLOC_FALLBACK_AFTER set (where
// `one_cpu`, on the first CPU this process may run on, alone); its exit status.
int run_in_fresh_process(const char* which, const char* after, bool one_cpu = false) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "REPLAYALLOC_FALLBACK_AFTER=", 27) != 0) env.emplace_back(*e);
  }
  env.push_back(std::string(kCaseVariable) + "=" + which);
  env.push_back(std::string("REPLAYALLOC_FALLBACK_AFTER=") + after);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char filter[] = "--gtest_filter=-*";
  char* argv[] = {self, filter, nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    cpu_set_t allowed, one;
    CPU_ZERO(&one);
    if (one_cpu && sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) {
          CPU_SET(c, &one);
          break;
        }
      }
    }
    if (one_cpu && (CPU_COUNT(&one) != 1 || sched_setaffinity(0, sizeof one, &one) != 0)) _exit(126);
    execve(self, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(FallbackStart, ThreadsAllocatingThroughTheStartNeverShareOrLoseABlock) {
  EXPECT_EQ(run_in_fresh_process("threads", "1000000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, ComesAfterItsRequestsAndNotBefore) {
  EXPECT_EQ(run_in_fresh_process("count", "20000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, AlignedRequestsCountAsMallocsDo) {
  EXPECT_EQ(run_in_fresh_process("aligned", "5000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, AShortProcesssRequestsAreTheBootHeapsUntilASecondThread) {
  EXPECT_EQ(run_in_fresh_process("boot", "1000000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, AShortProcesssLargeRequestsArePagesOfTheirOwn) {
  EXPECT_EQ(run_in_fresh_process("large", "1000000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, OnceTheBootHeapClosesItComesWithinAQuarterOfItsRequests) {
  EXPECT_EQ(run_in_fresh_process("stopped_late", "4096"), 0) << "the child's messages above say what failed";
  EXPECT_EQ(run_in_fresh_process("stopped_early", "4096"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, OnceItsOneThreadHasSpentTheBootHeapItComesAtOnce) {
  EXPECT_EQ(run_in_fresh_process("spent", "1000000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, AProcessOnOneCpuHasOneSlot) {
  if (!front_wanted()) GTEST_SKIP() << "the front cache is off in this environment";
  EXPECT_EQ(run_in_fresh_process("one_cpu", "1024", true), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, ZeroMakesItWithTheEngine) {
  EXPECT_EQ(run_in_fresh_process("at_once", "0"), 0) << "the child's messages above say what failed";
}

}  // namespace
}  // namespace replayalloc::contract
