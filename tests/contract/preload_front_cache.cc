// The fallback's front cache (Note [The fallback's front cache], backend/front_cache.cc)
// in the LD_PRELOAD library's build: malloc and free here are the library's (this suite
// links the preload core, as preload_domain.cc says), so requests below the minimum go
// through the front cache as they do under LD_PRELOAD. What a user relies on: blocks
// freed by one thread serve another without jemalloc (a consumer's frees its producer,
// an exiting thread's its successor), no block is ever handed out twice or smaller than
// asked, and a forked child allocates whatever its parent's threads were doing.
#include <jemalloc/jemalloc.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <latch>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "backend/backend.h"
#include "backend/front_cache.h"
#include "support/reentry.h"
#include "backend/slab_range.h"
#include "gtest/gtest.h"
#include "replayalloc/replayalloc.hpp"

namespace replayalloc::contract {
namespace {

// Bytes jemalloc ever handed out to the calling thread (its thread.allocated).
std::uint64_t jemalloc_allocated_here() {
  std::uint64_t n = 0;
  std::size_t len = sizeof n;
  EXPECT_EQ(mallctl("thread.allocated", &n, &len, nullptr, 0), 0);
  return n;
}

// The cache is on unless the environment turned it off; the engine made first (it
// enables the cache).
bool front_cache_on() {
  (void)replayalloc::stats();
  detail::backend::start_fallback_now();  // now, not after the first requests (Note [The fallback made when first needed])
  return detail::backend::front_cache_stats().largest != 0;
}

void expect_on() {
  const char* v = std::getenv("REPLAYALLOC_FRONT_CACHE");
  if (v != nullptr && std::strcmp(v, "0") == 0) GTEST_SKIP() << "REPLAYALLOC_FRONT_CACHE=0";
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  if (check != nullptr && std::strcmp(check, "0") != 0) GTEST_SKIP() << "check mode shadows every block itself";
  ASSERT_TRUE(front_cache_on()) << "the preload build's front cache is not enabled";
  // Each test starts from an empty depot and empty lists on this thread: what earlier
  // tests left there (up to the depot's byte budget) would decide what a list put finds.
  detail::backend::front_cache_release();
  // The cache serves up to jemalloc's class of 2 MiB (Note [Large blocks in the front
  // cache]).
  EXPECT_EQ(detail::backend::front_cache_stats().largest, std::size_t{2} << 20);
}

// expect_on() in a test: a skip or a failure there ends the test.
#define REQUIRE_FRONT_CACHE()                                                        \
  do {                                                                               \
    expect_on();                                                                     \
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return; \
  } while (0)

// A block's usable size as the library says it (malloc_usable_size): jemalloc's class,
// or for a run's block (Note [Runs for medium blocks]), which jemalloc does not know,
// its run's class.
std::size_t block_size(const void* p) { return detail::backend::fallback_usable_size(p); }

void fill(void* p, std::size_t n, std::uint32_t tag) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(tag + i * 7);
}
bool intact(const void* p, std::size_t n, std::uint32_t tag) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>(tag + i * 7)) return false;
  }
  return true;
}

// A block handed between threads: one of the queue's, drawn at random, off it.
using queued = std::pair<void*, std::size_t>;
queued take_random(std::vector<queued>& queue, std::mt19937& rng) {
  const std::size_t k = rng() % queue.size();
  const queued out = queue[k];
  queue[k] = queue.back();
  queue.pop_back();
  return out;
}

// Every request up to past the largest class gets a block at least its size, 16-byte
// aligned, that the program may fill, and jemalloc agrees on its usable size.
TEST(FrontCache, EveryRequestGetsABlockOfAtLeastItsSize) {
  REQUIRE_FRONT_CACHE();
  std::vector<void*> held;
  for (std::size_t n = 0; n <= (std::size_t{66} << 10); n += (n < 4096 ? 1 : 61)) {
    void* p = std::malloc(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n;
    EXPECT_GE(malloc_usable_size(p), n);
    fill(p, n, static_cast<std::uint32_t>(n));
    // Every seventh kept a while, so that freed blocks of each class are reused by the
    // next requests while others of the class are live.
    if (n % 7 == 0) {
      held.push_back(p);
    } else {
      EXPECT_TRUE(intact(p, n, static_cast<std::uint32_t>(n))) << n;
      std::free(p);
    }
    if (held.size() == 64) {
      for (void* h : held) std::free(h);
      held.clear();
    }
  }
  for (void* h : held) std::free(h);
}

// Every block the cache hands out is of the request's own size class, as jemalloc sizes
// it (above 64 KiB, where the thread caches none of that class, it may be one of the
// next two: ALargeMissTakesACachedBlockUpToTwoClassesLarger; the large requests below
// only grow, so none finds a cached block of a larger class), and
// comes from the cache's range (Note [The front cache's arena]); a block of a
// class it serves that jemalloc made elsewhere (mallocx here; a block from before the
// cache was on) and that is freed through the cache's free goes to jemalloc, never to a
// list.
TEST(FrontCache, HandsOutOnlyBlocksOfItsRangeAndOfTheRequestsClass) {
  REQUIRE_FRONT_CACHE();
  const detail::backend::front_cache_counts c = detail::backend::front_cache_stats();
  auto in_range = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) - c.base < c.span; };
  std::vector<void*> outside;
  for (std::size_t size : {std::size_t{64}, std::size_t{1024}, std::size_t{4096}, std::size_t{8192}, std::size_t{20480}}) {
    for (int i = 0; i < 50; ++i) {
      void* p = mallocx(size, 0);  // straight from jemalloc's own arenas
      ASSERT_FALSE(in_range(p));
      outside.push_back(p);
    }
  }
  for (void* p : outside) detail::backend::g_plain_free.load()(p);  // the front cache's free
  const absl::flat_hash_set<void*> freed(outside.begin(), outside.end());
  std::vector<void*> got;
  for (std::size_t want : {std::size_t{16}, std::size_t{24}, std::size_t{64}, std::size_t{100}, std::size_t{1024},
                           std::size_t{3000}, std::size_t{4096}, std::size_t{6000}, std::size_t{8192},
                           std::size_t{14000}, std::size_t{20000}, std::size_t{65536}}) {
    for (int i = 0; i < 100; ++i) {
      void* q = detail::backend::g_pass_malloc.load()(want);
      ASSERT_NE(q, nullptr);
      EXPECT_TRUE(in_range(q)) << want << " bytes served from outside the cache's range";
      EXPECT_FALSE(freed.contains(q)) << "a block jemalloc made elsewhere was put on a list";
      EXPECT_EQ(block_size(q), nallocx(want, 0)) << "a block of another class served " << want << " bytes";
      got.push_back(q);
    }
  }
  for (std::size_t i = 0; i < got.size(); i += 2) detail::backend::g_plain_free.load()(got[i]);
  for (std::size_t i = 1; i < got.size(); i += 2) std::free(got[i]);  // the library's free
  // Blocks below 4 KiB are the cache's too (Note [Small blocks in the front cache]),
  // the inline malloc's included; requests under 16 bytes get 16; blocks above 64 KiB
  // up to 2 MiB too, of their class (Note [Large blocks in the front cache]); above,
  // jemalloc's own.
  for (std::size_t want : {std::size_t{1}, std::size_t{8}, std::size_t{16}, std::size_t{200}, std::size_t{3000}}) {
    void* small = std::malloc(want);
    ASSERT_NE(small, nullptr);
    EXPECT_TRUE(in_range(small)) << want;
    EXPECT_EQ(block_size(small), nallocx(want < 16 ? 16 : want, 0)) << want;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % 16, 0u) << want;
    std::free(small);
  }
  for (std::size_t want : {std::size_t{65537}, std::size_t{100000}, std::size_t{1} << 20, (std::size_t{2} << 20) - 1,
                           std::size_t{2} << 20}) {
    void* large = detail::backend::g_pass_malloc.load()(want);
    ASSERT_NE(large, nullptr);
    EXPECT_TRUE(in_range(large)) << want;
    EXPECT_EQ(block_size(large), nallocx(want, 0)) << want;
    std::free(large);
  }
  void* huge = detail::backend::g_pass_malloc.load()((std::size_t{2} << 20) + 1);
  EXPECT_FALSE(in_range(huge));
  std::free(huge);
}

// Note [The gate's range]: the engine reserves the cache's range directly below the slab
// range, so the inline free's gate covers both: a free outside it goes straight to
// jemalloc's own free (no range test of the cache's), and a cache block's free, while
// the gate is open, to its list (the cache's test already answered). Where no slab
// range is reserved (REPLAYALLOC_MODE=off: ctest runs this test once more so,
// contract.preload.mode_off_gate) the gate's range is the cache's alone. What a user
// relies on, whichever way the free went: a cache block freed through free() serves
// the thread's next request of its class without jemalloc, a block jemalloc made
// elsewhere freed through free() never reaches a list, and small blocks stay jemalloc's.
TEST(FrontCache, TheInlineFreeSendsItsBlocksToTheirListsAndOthersToJemalloc) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  const be::front_cache_counts c = be::front_cache_stats();
  auto in_range = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) - c.base < c.span; };
  const be::gate_range_state g = be::g_gate_range;
  const char* mode = std::getenv("REPLAYALLOC_MODE");
  if (mode != nullptr && std::string_view(mode) == "off") {
    ASSERT_EQ(be::g_slab_range.base, 0u) << "REPLAYALLOC_MODE=off reserves no slab range";
    EXPECT_EQ(g.span, c.span) << "without a slab range the gate's range is the cache's alone";
  } else {
    ASSERT_NE(be::g_slab_range.base, 0u) << "the preload build reserves the slab range";
    EXPECT_EQ(c.base + c.span, be::g_slab_range.base) << "the cache's range is not directly below the slab range";
    EXPECT_EQ(g.from + g.span, be::g_slab_range.base + be::g_slab_range.bytes) << "the gate's range ends elsewhere";
  }
  EXPECT_EQ(g.from, c.base);
  EXPECT_EQ(g.front, c.span);
  EXPECT_NE(be::g_outside_free.load(), &be::front_free) << "a free outside the gate still asks the cache's range";
  // Run on a thread of its own, whose gate opens once the thread is registered (this
  // suite's thread may be watched: then every free takes the filtered path, as before).
  std::thread([&] {
    constexpr std::size_t kSize = 8192;
    void* warm = std::malloc(kSize);  // registers the thread
    std::free(warm);
    for (int round = 0; round < 50; ++round) {
      void* p = be::g_pass_malloc.load()(kSize);
      ASSERT_TRUE(in_range(p));
      fill(p, kSize, round);
      std::free(p);  // the library's free
      const std::uint64_t before = jemalloc_allocated_here();
      void* q = be::g_pass_malloc.load()(kSize);
      EXPECT_EQ(q, p) << "round " << round << ": the block freed did not serve the next request of its class";
      EXPECT_EQ(jemalloc_allocated_here(), before) << "round " << round << ": the request went to jemalloc";
      std::free(q);
    }
    std::vector<void*> outside;
    for (int i = 0; i < 32; ++i) {
      void* r = mallocx(kSize, 0);  // jemalloc's own arenas, outside every range
      ASSERT_FALSE(in_range(r));
      ASSERT_FALSE(be::in_slab_range(r));
      outside.push_back(r);
    }
    for (void* r : outside) std::free(r);
    const absl::flat_hash_set<void*> freed(outside.begin(), outside.end());
    std::vector<void*> got;
    for (int i = 0; i < 200; ++i) got.push_back(be::g_pass_malloc.load()(kSize));
    for (void* q : got) {
      EXPECT_TRUE(in_range(q));
      EXPECT_FALSE(freed.contains(q)) << "a block jemalloc made elsewhere was put on a list";
    }
    for (void* q : got) std::free(q);
    // Small blocks through the inline malloc and free (below the minimum): the cache's,
    // and the block freed serves the thread's next request of its class, without
    // jemalloc (Note [Small blocks in the front cache]).
    for (int i = 0; i < 1000; ++i) {
      const std::size_t n = 64 + static_cast<std::size_t>(i) % 200;
      void* s = std::malloc(n);
      ASSERT_NE(s, nullptr);
      EXPECT_TRUE(in_range(s));
      fill(s, n, i);
      std::free(s);
      const std::uint64_t before = jemalloc_allocated_here();
      void* again = std::malloc(n);
      EXPECT_EQ(again, s) << n << " B: the block freed did not serve the next request of its class";
      EXPECT_EQ(jemalloc_allocated_here(), before) << n << " B: the request went to jemalloc";
      std::free(again);
    }
  }).join();
}

// Producer/consumer: the blocks a consumer thread frees serve its producer's next
// requests through the depot (a list the producer takes), without jemalloc; with
// jemalloc alone each would be a new allocation of the producer's.
TEST(FrontCache, AConsumersFreesServeItsProducer) {
  REQUIRE_FRONT_CACHE();
  constexpr int kBlocks = 32;
  // 8 KiB: at or above the minimum, served by the engine's fallback, which goes through
  // the front cache as the plain path does; 64 B: below it, the inline malloc's (Note
  // [Small blocks in the front cache]).
  for (const std::size_t kSize : {std::size_t{8192}, std::size_t{64}}) {
    std::vector<void*> first(kBlocks);
    // A small class's list is filled ahead (half a list at a miss), so the producer's
    // own list may still hold blocks when the consumer's list arrives: it asks for a
    // whole list more than the consumer freed.
    std::vector<void*> second(kBlocks + 64);
    std::uint64_t taken = 0;
    std::thread producer([&] {
      for (void*& p : first) {
        p = std::malloc(kSize);
        fill(p, kSize, 1);
      }
      std::thread consumer([&] {
        for (void* p : first) {
          EXPECT_TRUE(intact(p, kSize, 1));
          std::free(p);
        }
      });
      consumer.join();  // its lists go to the depot as it exits, the full ones before
      const std::uint64_t before = detail::backend::front_cache_stats().depot_takes;
      for (void*& p : second) {
        p = std::malloc(kSize);
        fill(p, kSize, 2);
      }
      taken = detail::backend::front_cache_stats().depot_takes - before;
      for (void* p : second) {
        EXPECT_TRUE(intact(p, kSize, 2));
        std::free(p);
      }
    });
    producer.join();
    const absl::flat_hash_set<void*> freed(first.begin(), first.end());
    const absl::flat_hash_set<void*> got(second.begin(), second.end());
    EXPECT_EQ(got.size(), second.size()) << kSize << " B: one block handed out twice";
    int reused = 0;
    for (void* p : second) reused += freed.contains(p) ? 1 : 0;
    EXPECT_EQ(reused, kBlocks) << kSize << " B: the consumer's freed blocks did not all reach the producer";
    EXPECT_GE(taken, 1u) << kSize << " B: the producer took no list from the depot";
  }
}

// The depot is bounded (Note [Small blocks in the front cache], Note [The small classes'
// budget follows the threads]): its budget for the classes below 4 KiB is 256 KiB with
// one thread and grows by 128 KiB for each thread open at once beyond the first, up to 4
// MiB; threads that exit holding full lists of small classes hand them to the depot
// until the budget is spent, and the lists after that go back to the arena. 24 threads
// open at once, each with lists of sixteen small classes of 256 B-3.5 KiB (16 KiB each:
// 6 MiB in all), against a budget of 3.25 MiB (4 MiB at most).
TEST(FrontCache, TheDepotKeepsNoMoreThanItsBudget) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kKiB = 1024;
  constexpr std::size_t kSizes[] = {256, 320, 384, 448, 512, 640, 768, 896,
                                    1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584};
  constexpr int kThreads = 24;
  const be::front_cache_counts before = be::front_cache_stats();
  // 256 KiB alone; more where the tests before, in the same process (ctest's
  // synchronous_planning run), had threads open within the last two seconds.
  ASSERT_GE(before.depot_budget[0], 256 * kKiB) << "less than one thread's budget";
  ASSERT_EQ(before.depot_bytes[0], 0u) << "expect_on() released the depot";
  // All hold their blocks at once (a thread would otherwise take its predecessor's lists
  // from the depot), then free them and exit one after another.
  std::latch allocated(kThreads);
  std::mutex turn;
  std::size_t most = 0;
  std::size_t budget = 0;  // the most the threads saw (under `turn`)
  std::size_t budget_joined = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<void*> mine;
      for (std::size_t size : kSizes) {
        for (std::size_t b = 0; b < 16 * kKiB / size; ++b) mine.push_back(std::malloc(size));
      }
      allocated.arrive_and_wait();
      std::lock_guard<std::mutex> one(turn);
      budget = std::max(budget, be::front_cache_stats().depot_budget[0]);
      for (void* p : mine) std::free(p);
    });
  }
  for (std::thread& t : threads) {
    t.join();
    const be::front_cache_counts now = be::front_cache_stats();
    most = std::max(most, now.depot_bytes[0]);
    budget_joined = std::max(budget_joined, now.depot_budget[0]);
    EXPECT_LE(now.depot_bytes[0], now.depot_budget[0]);
  }
  budget = std::max(budget, budget_joined);  // every thread joined: no race on it
  // At least 24 threads open at once (and this one, where its cache is open); at most 4 MiB.
  EXPECT_GE(budget, (256 + 23 * 128) * kKiB) << "the budget did not follow the threads";
  EXPECT_LE(budget, 4096 * kKiB);
  const be::front_cache_counts after = be::front_cache_stats();
  EXPECT_GE(most, budget - 64 * kKiB) << "the exiting threads' lists did not fill the depot";
  // 6 MiB of lists of at most 16 KiB against the budget: the rest went back.
  EXPECT_GE(after.depot_frees - before.depot_frees, (6144 * kKiB - budget) / (16 * kKiB))
      << "the depot kept more than its budget";
  detail::backend::front_cache_release();
  EXPECT_EQ(be::front_cache_stats().depot_bytes[0], 0u) << "the depot's count of its bytes drifted";
}

// The statistics say what the cache holds (Note [Resident memory by owner]): an exiting
// thread's full list of 1 KiB blocks in the depot, their run, and nothing in the depot
// once it is released; current values, which a reset of the statistics leaves.
TEST(FrontCache, TheStatisticsSayWhatItHolds) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kSize = 1000;  // jemalloc's class of 1 KiB: lists of 16 blocks
  be::front_cache_release();
  ASSERT_EQ(replayalloc::stats().front_depot_bytes, 0u);
  std::thread exiting([] {
    std::vector<void*> mine;
    for (int b = 0; b < 16; ++b) mine.push_back(std::malloc(kSize));
    for (void* p : mine) std::free(p);
  });
  exiting.join();
  replayalloc::reset_stats();
  const Stats held = replayalloc::stats();
  const be::front_cache_counts inside = be::front_cache_stats();
  EXPECT_GE(held.front_depot_bytes, std::uint64_t{16} << 10) << "the exiting thread's list is not counted";
  EXPECT_EQ(held.front_depot_bytes, inside.depot_bytes[0] + inside.depot_bytes[1] + inside.depot_bytes[2]);
  EXPECT_GE(held.front_run_bytes, std::uint64_t{64} << 10) << "the blocks' run is not counted";
  EXPECT_EQ(held.front_run_bytes, inside.run_bytes);
  EXPECT_LE(held.front_stashed_bytes, held.front_run_bytes);
  be::front_cache_release();
  EXPECT_EQ(replayalloc::stats().front_depot_bytes, 0u) << "the released depot is still counted";
}

// larson: a thread that exits leaves its free blocks to the next thread: through malloc
// and free (the engine's fallback), and through the plain malloc and free a request
// passed through gets (Note [Pass-through]).
TEST(FrontCache, AnExitingThreadsBlocksServeItsSuccessor) {
  REQUIRE_FRONT_CACHE();
  auto plain_malloc = [](std::size_t n) { return detail::backend::g_pass_malloc.load()(n); };
  auto plain_free = [](void* p) { detail::backend::g_plain_free.load()(p); };
  auto std_malloc = [](std::size_t n) { return std::malloc(n); };
  auto std_free = [](void* p) { std::free(p); };
  struct way {
    std::size_t size;
    int blocks;
    void* (*alloc)(std::size_t);
    void (*free)(void*);
  };
  // 2 blocks of 8,000 bytes: one list (16 KiB), all on the thread's list at its exit;
  // 4 of 20,000: lists of one, the last on the thread's list at its exit.
  for (const way& w : {way{8000, 2, +std_malloc, +std_free}, way{20000, 4, +plain_malloc, +plain_free}}) {
    // The statistics count what the cache did: the exiting thread's lists handed to the
    // depot, the thread closed, and a list its successor took.
    const Stats stats_before = replayalloc::stats();
    std::vector<void*> freed;
    std::thread first([&] {
      std::vector<void*> mine;
      for (int i = 0; i < w.blocks; ++i) mine.push_back(w.alloc(w.size));
      for (void* p : mine) w.free(p);
      freed = mine;
    });
    first.join();
    std::vector<void*> got;
    std::uint64_t jemalloc_bytes = 0;
    std::thread next([&] {
      // The thread's first requests make its engine state (from jemalloc): made first,
      // with a size of another class, so that what is counted is the blocks alone. The
      // runs the cache makes meanwhile for small classes (auto mode's tables grow as it
      // watches: Note [Runs for medium blocks]) are not the blocks', and are not counted.
      got.reserve(w.blocks);
      w.free(w.alloc(100000));
      const std::uint64_t before = jemalloc_allocated_here();
      const std::size_t runs_before = detail::backend::front_cache_stats().run_bytes;
      for (int i = 0; i < w.blocks; ++i) got.push_back(w.alloc(w.size));
      const std::size_t runs_made = detail::backend::front_cache_stats().run_bytes - runs_before;
      jemalloc_bytes = jemalloc_allocated_here() - before - runs_made;
      for (void* p : got) w.free(p);
    });
    next.join();
    const absl::flat_hash_set<void*> old(freed.begin(), freed.end());
    int reused = 0;
    for (void* p : got) reused += old.contains(p) ? 1 : 0;
    EXPECT_EQ(reused, w.blocks) << w.size << " B: the exited thread's blocks were not all reused";
    EXPECT_LT(jemalloc_bytes, w.size) << w.size << " B: the successor's requests went to jemalloc";
    const Stats stats_after = replayalloc::stats();
    EXPECT_GE(stats_after.front_threads_closed, stats_before.front_threads_closed + 2) << w.size;
    EXPECT_GE(stats_after.front_lists_handed, stats_before.front_lists_handed + 1) << w.size;
    EXPECT_GE(stats_after.front_lists_taken, stats_before.front_lists_taken + 1) << w.size;
  }
}

// Blocks handed between four threads through a queue, of every size up to 4 MiB, each
// filled at its malloc and checked at its free by another thread: none is ever live twice
// (a set of live blocks under a lock), none changes while it is live.
TEST(FrontCache, NeverHandsOutALiveBlock) {
  REQUIRE_FRONT_CACHE();
  std::mutex mu;
  std::vector<queued> queue;
  absl::flat_hash_set<void*> live;
  std::atomic<int> bad{0};
  auto worker = [&](int id) {
    std::mt19937 rng(static_cast<unsigned>(id) * 7919u + 1u);
    for (int i = 0; i < 40000; ++i) {
      // Up to 4 MiB: the large classes (Note [Large blocks in the front cache]) and past.
      const std::size_t n = std::size_t{1} << (rng() % 22);
      const std::size_t size = n + rng() % n;
      void* p = std::malloc(size);
      if (p == nullptr) {
        bad.fetch_add(1);
        continue;
      }
      fill(p, size < 64 ? size : 64, static_cast<std::uint32_t>(size));
      queued out{nullptr, 0};
      {
        std::lock_guard<std::mutex> l(mu);
        if (!live.insert(p).second) bad.fetch_add(1);
        queue.emplace_back(p, size);
        if (queue.size() > 512 || (rng() & 1) != 0) {
          out = take_random(queue, rng);
          live.erase(out.first);
        }
      }
      if (out.first != nullptr) {
        if (!intact(out.first, out.second < 64 ? out.second : 64, static_cast<std::uint32_t>(out.second))) {
          bad.fetch_add(1);
        }
        std::free(out.first);
      }
    }
  };
  std::vector<std::thread> ts;
  for (int id = 0; id < 4; ++id) ts.emplace_back(worker, id);
  for (std::thread& t : ts) t.join();
  for (auto& [p, n] : queue) {
    if (!intact(p, n < 64 ? n : 64, static_cast<std::uint32_t>(n))) bad.fetch_add(1);
    std::free(p);
  }
  EXPECT_EQ(bad.load(), 0) << "a block was handed out while live, or changed while live";
  const detail::backend::front_cache_counts c = detail::backend::front_cache_stats();
  EXPECT_GT(c.depot_puts, 0u);
  EXPECT_GT(c.depot_takes, 0u);
}

// Note [Large blocks in the front cache]: a block of 64 KiB-2 MiB a thread frees serves
// its next request of the class without jemalloc, and an exiting thread's serve its
// successor through the depot; every block handed out is of the request's class.
TEST(FrontCache, LargeBlocksAreReusedWithoutJemalloc) {
  REQUIRE_FRONT_CACHE();
  const std::size_t sizes[] = {65537, 100000, 300000, 700000, 1u << 20, (2u << 20) - 4096};
  // The fallback's malloc and free, as a request passed through gets them (those through
  // malloc() are watched by auto mode, whose own tables come from jemalloc).
  auto pass = detail::backend::g_pass_malloc.load();
  auto release = detail::backend::g_plain_free.load();
  std::vector<void*> freed;
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    std::vector<void*> first;
    for (std::size_t n : sizes) {
      void* p = pass(n);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(block_size(p), nallocx(n, 0)) << n;
      fill(p, 4096, static_cast<std::uint32_t>(n));
      first.push_back(p);
    }
    for (void* p : first) release(p);
    std::vector<void*> again;
    again.reserve(std::size(sizes));
    const std::uint64_t before = jemalloc_allocated_here();
    for (std::size_t n : sizes) again.push_back(pass(n));
    EXPECT_EQ(jemalloc_allocated_here(), before) << "a large request went to jemalloc";
    EXPECT_EQ(again, first) << "a block freed did not serve the next request of its class";
    for (void* p : again) release(p);
    freed = again;  // on the thread's lists or in the depot at its exit
  }).join();
  std::thread([&] {
    // The thread's first requests make its engine state and cache (from jemalloc):
    // made first, with a size of another class.
    release(pass(3u << 20));
    std::vector<void*> got;
    got.reserve(std::size(sizes));
    const std::uint64_t before = jemalloc_allocated_here();
    for (std::size_t n : sizes) got.push_back(pass(n));
    EXPECT_EQ(jemalloc_allocated_here(), before) << "the successor's large requests went to jemalloc";
    EXPECT_EQ(got, freed) << "the exited thread's large blocks did not serve its successor";
    for (void* p : got) release(p);
  }).join();
}

// A large request the cache cannot serve gives the thread's cached blocks of larger
// classes back to the arena first, so that the arena serves it from their pages (Note
// [Large blocks in the front cache]); a cached block of a smaller class stays.
TEST(FrontCache, ALargeMissGivesLargerCachedBlocksBack) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    ASSERT_EQ(be::front_cache_stats().thread_large_bytes, 0u);
    void* big = pass(300000);
    release(big);  // cached: within the thread's share (at least 512 KiB)
    ASSERT_EQ(be::front_cache_stats().thread_large_bytes, nallocx(300000, 0));
    const std::uint64_t given = be::front_cache_stats().large_given_back;
    void* small = pass(100000);  // no block of its class anywhere: a miss
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(block_size(small), nallocx(100000, 0));
    EXPECT_EQ(be::front_cache_stats().large_given_back, given + 1) << "the larger cached block was not given back";
    EXPECT_EQ(be::front_cache_stats().thread_large_bytes, 0u);
    fill(small, 100000, 5);
    release(small);  // cached in its turn
    void* other = pass(700000);  // a miss with only a smaller block cached: it stays
    EXPECT_EQ(be::front_cache_stats().large_given_back, given + 1);
    EXPECT_EQ(be::front_cache_stats().thread_large_bytes, nallocx(100000, 0));
    EXPECT_EQ(pass(100000), small) << "the smaller cached block was not kept";
    release(small);
    release(other);
  }).join();
}

// A large request that its class's list and the depot cannot serve takes the thread's
// cached block of one of the next two classes (at most 1.5x its size) instead of making
// one (Note [Large blocks in the front cache]); freed, that block goes back to its own
// class's list. A block three classes up is not taken: the request gets its own class.
TEST(FrontCache, ALargeMissTakesACachedBlockUpToTwoClassesLarger) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  const std::size_t own = nallocx(100000, 0);   // its class (112 KiB)
  const std::size_t up1 = nallocx(own + 1, 0);  // the next (128 KiB)
  const std::size_t up2 = nallocx(up1 + 1, 0);  // the one after (160 KiB)
  const std::size_t up3 = nallocx(up2 + 1, 0);  // three up (192 KiB)
  ASSERT_LE(up2, own * 3 / 2);
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    std::vector<void*> held;  // blocks kept off the lists until the end
    for (std::size_t larger : {up1, up2}) {
      void* cached = pass(larger);
      ASSERT_NE(cached, nullptr);
      release(cached);
      ASSERT_EQ(be::front_cache_stats().thread_large_bytes, larger);
      const std::uint64_t before = jemalloc_allocated_here();
      void* p = pass(100000);
      EXPECT_EQ(p, cached) << "the cached block of " << larger << " B did not serve a request of " << own;
      EXPECT_EQ(jemalloc_allocated_here(), before) << "the request went to jemalloc";
      EXPECT_EQ(block_size(p), larger) << "the block's size is not its own class's";
      EXPECT_EQ(be::front_cache_stats().thread_large_bytes, 0u);
      fill(p, 100000, static_cast<std::uint32_t>(larger));
      release(p);  // back to its own class's list
      EXPECT_EQ(be::front_cache_stats().thread_large_bytes, larger);
      void* again = pass(larger);
      EXPECT_EQ(again, cached) << "the block did not go back to its own class's list";
      held.push_back(again);
    }
    release(pass(up3));  // cached three classes up
    void* p = pass(100000);
    EXPECT_EQ(block_size(p), own) << "a block three classes up served the request";
    held.push_back(p);
    for (void* q : held) release(q);
  }).join();
}

// Note [Classes a stream has left]: at a large request the cache cannot serve, the
// thread's blocks of a class it has not asked for in its last 16 large requests go back
// to the arena, those of the classes it still asks for stay; a class it comes back to
// soon after is given more patience, and its block is kept the next time.
TEST(FrontCache, AClassTheStreamHasLeftGoesBackAtAMiss) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  const std::size_t left = nallocx(150000, 0), steady = nallocx(200000, 0), next = nallocx(250000, 0);
  ASSERT_LT(left, steady);
  ASSERT_LT(steady, next);
  // A few requests of the steady class, each freed: a miss, then hits from the list.
  const auto keep_asking = [&](int n) {
    for (int i = 0; i < n; ++i) {
      void* p = pass(200000);
      ASSERT_NE(p, nullptr);
      fill(p, 4096, 7);
      release(p);
    }
  };
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    ASSERT_GE(be::front_cache_stats().thread_large_budget, 2 * left + steady + next);
    void* a = pass(150000);
    void* b = pass(150000);
    fill(a, 150000, 1);
    fill(b, 150000, 2);
    release(a);
    release(b);
    keep_asking(20);
    ASSERT_EQ(be::front_cache_stats().thread_large_bytes, 2 * left + steady);
    std::uint64_t given = be::front_cache_stats().large_given_back;
    void* q = pass(250000);  // a miss: the class of a and b not asked in 21 requests
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(be::front_cache_stats().large_given_back, given + 2) << "the left class's blocks were kept";
    EXPECT_EQ(be::front_cache_stats().thread_large_bytes, steady) << "the steady class's block was given back";
    // Back to the left class at once (q still live, so that the miss gives no larger
    // block back but the steady class's): it had not been left. Its patience doubles.
    void* r = pass(150000);
    fill(r, 150000, 3);
    release(r);
    keep_asking(20);
    given = be::front_cache_stats().large_given_back;
    void* s = pass(400000);  // a miss: 21 requests since r's class was asked
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(be::front_cache_stats().large_given_back, given) << "the class given more patience lost its block";
    EXPECT_EQ(pass(150000), r);
    release(q);
    release(r);
    release(s);
  }).join();
}

// Note [Classes a stream has left]: a class the thread never asked for itself (blocks
// another thread made, freed here) is never left: however many other large requests the
// thread makes and misses, those blocks stay on its list, for the depot and the thread
// that asks for them.
TEST(FrontCache, BlocksOfAClassTheThreadNeverAskedAreNotLeft) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::vector<void*> made;
  std::thread([&] {
    for (int i = 0; i < 2; ++i) made.push_back(pass(150000));
  }).join();
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    for (void* p : made) release(p);  // another thread's blocks: on this thread's list
    const std::size_t held = be::front_cache_stats().thread_large_bytes;
    ASSERT_EQ(held, 2 * nallocx(150000, 0));
    const std::uint64_t given = be::front_cache_stats().large_given_back;
    // 40 requests of three other classes, each a miss at first, none of the class freed.
    for (int i = 0; i < 40; ++i) {
      void* p = pass(i % 2 == 0 ? 200000 : 250000);
      ASSERT_NE(p, nullptr);
      release(p);
    }
    void* last = pass(400000);
    EXPECT_EQ(be::front_cache_stats().large_given_back, given) << "blocks of a class never asked here were given back";
    EXPECT_GE(be::front_cache_stats().thread_large_bytes, held);
    release(last);
  }).join();
}

// Note [The engine's large buffers]: what the engine asks for itself, of 64 KiB and more,
// comes from jemalloc outside the front cache's range (its containers through
// internal_allocator, and its requests of the interposed malloc from inside the engine),
// so that it never takes a block of a class the program's next request would reuse; its
// smaller requests, and the program's of any size, are the front cache's.
TEST(FrontCache, TheEnginesLargeBuffersComeFromOutsideIt) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  const be::front_cache_counts c = be::front_cache_stats();
  const auto inside = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) - c.base < c.span; };
  std::thread([&] {
    std::free(std::malloc(100));  // the thread's cache made first
    void* program = be::g_pass_malloc.load()(256 * 1024);
    EXPECT_TRUE(inside(program)) << "a passed-through block of 256 KiB is not the front cache's";
    void* small = be::engine_alloc(1000, 16);
    EXPECT_TRUE(inside(small)) << "the engine's small request left the front cache";
    void* big = be::engine_alloc(be::engine_own_least, 16);
    EXPECT_FALSE(inside(big)) << "the engine's buffer of engine_own_least bytes came from the front cache";
    fill(big, be::engine_own_least, 9);
    be::internal_allocator<std::uint64_t> alloc;
    std::uint64_t* table = alloc.allocate(40000);  // 320,000 bytes
    EXPECT_FALSE(inside(table)) << "an internal container's buffer came from the front cache";
    void* interposed = nullptr;
    {
      ++detail::reentry_depth;  // inside the engine (invariant 5's guard)
      interposed = std::malloc(300000);
      --detail::reentry_depth;
    }
    EXPECT_FALSE(inside(interposed)) << "the engine's request of the interposed malloc came from the front cache";
    EXPECT_TRUE(intact(big, be::engine_own_least, 9));
    std::free(interposed);
    alloc.deallocate(table, 40000);
    be::fallback_free(big);
    be::fallback_free(small);
    be::g_plain_free.load()(program);
  }).join();
}

// The large classes are bounded by bytes (Note [Large blocks in the front cache]): a
// thread keeps at most its share of the threads' budget on its lists, the depot at most
// its own, and every block beyond goes back to the arena, so that 48 MiB of 1 MiB blocks
// freed at once are not all kept.
TEST(FrontCache, LargeBlocksAreKeptWithinTheirBudgets) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kSize = std::size_t{1} << 20;
  constexpr int kBlocks = 48;
  std::thread([&] {
    std::free(std::malloc(100));
    const be::front_cache_counts before = be::front_cache_stats();
    ASSERT_EQ(before.depot_bytes[2], 0u) << "expect_on() released the depot";
    ASSERT_GE(before.thread_large_budget, std::size_t{512} << 10);
    std::vector<void*> first;
    for (int i = 0; i < kBlocks; ++i) first.push_back(std::malloc(kSize));
    for (void* p : first) std::free(p);
    const be::front_cache_counts after = be::front_cache_stats();
    EXPECT_LE(after.depot_bytes[2], after.depot_budget[2]);
    EXPECT_GE(after.depot_bytes[2], after.depot_budget[2] - kSize) << "the depot did not take what its budget allows";
    // Kept: the thread's share and the depot's; the rest went back to the arena.
    const std::size_t kept = after.thread_large_budget / kSize + after.depot_budget[2] / kSize;
    ASSERT_LT(kept, static_cast<std::size_t>(kBlocks)) << "the test needs more blocks than the budgets";
    EXPECT_GE(after.depot_frees - before.depot_frees, kBlocks - kept);
    const absl::flat_hash_set<void*> old(first.begin(), first.end());
    std::vector<void*> again;
    for (int i = 0; i < kBlocks; ++i) again.push_back(std::malloc(kSize));
    std::size_t reused = 0;
    for (void* p : again) reused += old.contains(p) ? 1 : 0;
    // The blocks kept are all reused (the arena may hand those given back to it out
    // again too).
    EXPECT_GE(reused, kept) << "the budgets' blocks were not reused";
    for (void* p : again) std::free(p);
  }).join();
  be::front_cache_release();
  EXPECT_EQ(be::front_cache_stats().depot_bytes[2], 0u) << "the depot's count of its large bytes drifted";
}

// Note [Large blocks in the front cache]: a burst of blocks of a run class (100,000 B: 9 a
// run of 1 MiB) moves in batches, from the runs at its misses and to the depot past the
// thread's budget. Every block live at once is distinct, keeps what was written into it
// whole, and the thread's and the depot's bytes stay within their budgets, round after
// round (the second and third take blocks from runs already written, in batches).
TEST(FrontCache, ABurstOfLargeBlocksMovesInBatchesAndNeverSharesABlock) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr std::size_t kSize = 100000;
  constexpr int kBlocks = 240;  // 24 MB: past the thread's budget and the depot's
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    for (int round = 0; round < 3; ++round) {
      std::vector<void*> live;
      for (int i = 0; i < kBlocks; ++i) {
        void* p = pass(kSize);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(block_size(p), nallocx(kSize, 0));
        fill(p, kSize, static_cast<std::uint32_t>(round * kBlocks + i));
        live.push_back(p);
        const be::front_cache_counts c = be::front_cache_stats();
        ASSERT_LE(c.thread_large_bytes, c.thread_large_budget + nallocx(kSize, 0)) << "a batch past the budget";
      }
      const absl::flat_hash_set<void*> distinct(live.begin(), live.end());
      ASSERT_EQ(distinct.size(), live.size()) << "a block handed out twice in round " << round;
      for (int i = 0; i < kBlocks; ++i) {
        ASSERT_TRUE(intact(live[i], kSize, static_cast<std::uint32_t>(round * kBlocks + i)))
            << "block " << i << " of round " << round << " overwritten";
      }
      for (void* p : live) release(p);
      const be::front_cache_counts c = be::front_cache_stats();
      EXPECT_LE(c.thread_large_bytes, c.thread_large_budget);
      EXPECT_LE(c.depot_bytes[2], c.depot_budget[2]);
    }
  }).join();
}

// Note [Callocs of up to 32 KiB from the front cache] (backend/front_inline.h): a calloc of
// up to 32 KiB is the front cache's, zero even where its class's list held dirty blocks
// (the very blocks it hands out again); one of 40-128 KiB is jemalloc's (Note [Zeroing by
// memset], backend/jemalloc_backend.cc), outside the cache's range, so that copies of
// growing sizes freed on another thread reuse jemalloc's extents of any size. A calloc'd
// block freed and asked again is zero again, both ways.
TEST(FrontCache, CallocsUpTo32KiBAreTheCachesAndLargerOnesJemallocsAllZero) {
  REQUIRE_FRONT_CACHE();
  const detail::backend::front_cache_counts c = detail::backend::front_cache_stats();
  auto in_range = [&](const void* p) { return reinterpret_cast<std::uintptr_t>(p) - c.base < c.span; };
  for (const std::size_t n : {std::size_t{4097}, std::size_t{16384}, std::size_t{20000}, std::size_t{32768},
                              std::size_t{32769}, std::size_t{40000}, std::size_t{65536}, std::size_t{100000},
                              std::size_t{131072}}) {
    const bool front = n <= 32768;
    std::vector<void*> dirty;
    for (int i = 0; i < 8; ++i) {
      void* p = std::malloc(n);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(in_range(p)) << n << " B: a malloc outside the cache's range";
      std::memset(p, 0xee, n);
      dirty.push_back(p);
    }
    for (void* p : dirty) std::free(p);
    std::vector<void*> zeroed;
    for (int i = 0; i < 8; ++i) {
      auto* z = static_cast<unsigned char*>(std::calloc(1, n));
      ASSERT_NE(z, nullptr);
      EXPECT_EQ(in_range(z), front) << n << (front ? " B: a calloc not the front cache's" : " B: a calloc the front cache's");
      if (front && i == 0) {
        EXPECT_TRUE(std::find(dirty.begin(), dirty.end(), z) != dirty.end())
            << n << " B: the calloc did not take the block its class's list held first";
      }
      for (std::size_t b = 0; b < n; ++b) ASSERT_EQ(z[b], 0) << n << " B: calloc returned a dirty block";
      std::memset(z, 0xdd, n);
      zeroed.push_back(z);
    }
    for (void* z : zeroed) std::free(z);
    auto* again = static_cast<unsigned char*>(std::calloc(1, n));  // a freed calloc'd block, zeroed again
    ASSERT_NE(again, nullptr);
    for (std::size_t b = 0; b < n; ++b) ASSERT_EQ(again[b], 0) << n << " B: a reused calloc'd block was dirty";
    std::free(again);
  }
}

// A realloc'd front block keeps its bytes; a calloc'd block of a class whose blocks the
// cache holds dirty is zero.
TEST(FrontCache, ReallocKeepsAndCallocZeroes) {
  REQUIRE_FRONT_CACHE();
  std::vector<void*> dirty;
  for (int i = 0; i < 100; ++i) {
    void* p = std::malloc(8192);
    std::memset(p, 0xab, 8192);
    dirty.push_back(p);
  }
  for (void* p : dirty) std::free(p);
  for (int i = 0; i < 100; ++i) {
    auto* z = static_cast<unsigned char*>(std::calloc(1, 8192));
    ASSERT_NE(z, nullptr);
    for (int b = 0; b < 8192; ++b) ASSERT_EQ(z[b], 0) << "calloc returned a dirty block";
    std::free(z);
  }
  // The large classes' too (Note [Large blocks in the front cache]).
  for (const std::size_t n : {std::size_t{100000}, std::size_t{600000}}) {
    std::vector<void*> held;
    for (int i = 0; i < 4; ++i) {
      void* p = std::malloc(n);
      std::memset(p, 0xcd, n);
      held.push_back(p);
    }
    for (void* p : held) std::free(p);
    for (int i = 0; i < 4; ++i) {
      auto* z = static_cast<unsigned char*>(std::calloc(1, n));
      ASSERT_NE(z, nullptr);
      for (std::size_t b = 0; b < n; ++b) ASSERT_EQ(z[b], 0) << n << " B: calloc returned a dirty block";
      held[i] = z;
    }
    for (void* p : held) std::free(p);
  }
  void* p = std::malloc(5000);
  fill(p, 5000, 9);
  p = std::realloc(p, 30000);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(intact(p, 5000, 9));
  p = std::realloc(p, 100);
  EXPECT_TRUE(intact(p, 100, 9));
  std::free(p);
}

// A block that jemalloc's realloc shrank in place (a large block of 300 KB to 200 KB)
// changed class at the same address: freed, it goes to its new class's list, and a
// request of its old class never gets it (Note [The front cache's page map]: the
// fallback's realloc clears its page's byte). Without that, every 300 KB request after
// it could get a block of 200 KB.
TEST(FrontCache, ABlockReallocShrankInPlaceIsNeverServedAsItsOldClass) {
  REQUIRE_FRONT_CACHE();
  auto pass = detail::backend::g_pass_malloc.load();
  auto release = detail::backend::g_plain_free.load();
  // Blocks of the large classes (Note [Large blocks in the front cache]), 300 KB to
  // 200 KB and 1 MiB to 700,000 bytes (the classes of 4-128 KiB are runs' blocks,
  // which jemalloc never resizes: RunBlocksAreNeverJemallocs).
  for (const auto& [from, to] : {std::pair<std::size_t, std::size_t>{300000, 200000}, {1u << 20, 700000}}) {
    void* p = pass(from);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(block_size(p), nallocx(from, 0));
    fill(p, to, 3);
    void* q = detail::backend::fallback_realloc(p, to);
    // jemalloc shrinks a large extent in place (it splits off its tail); the test is
    // about that case.
    ASSERT_EQ(q, p) << "jemalloc moved the block";
    ASSERT_EQ(block_size(q), nallocx(to, 0));
    ASSERT_LT(block_size(q), from);
    EXPECT_TRUE(intact(q, to, 3));
    release(q);
    std::vector<void*> got;
    for (int i = 0; i < 64; ++i) {
      void* r = pass(from);
      ASSERT_NE(r, nullptr);
      EXPECT_NE(r, q) << "a block of " << block_size(q) << " bytes served a request of " << from;
      EXPECT_GE(block_size(r), from);
      got.push_back(r);
    }
    // Its class's list (or, past the thread's budget, the depot) took it.
    void* s = pass(to);
    EXPECT_EQ(s, q) << to;
    release(s);
    for (void* r : got) release(r);
  }
}

// A thread's last requests, made from a thread-specific destructor after jemalloc has
// torn down its own per-thread state and after the front cache closed the thread's
// lists (as the engine's own thread-exit handler does when it ends a recording): the
// cache's arena is asked for a block then, and jemalloc, with the thread's state gone,
// may serve it from another arena, outside the cache's range. Such a block is an
// ordinary jemalloc block: it is handed out, never entered in the page map (whose byte
// for an address outside the range would lie far past the map), and freed by jemalloc.
TEST(FrontCache, AThreadsLastRequestsAfterJemallocsTeardownAreServed) {
  REQUIRE_FRONT_CACHE();
  static std::atomic<int> served{0};
  static std::atomic<int> intact_blocks{0};
  served = 0;
  intact_blocks = 0;
  pthread_key_t key;
  // Made after jemalloc's and the front cache's keys: its destructor runs after theirs.
  ASSERT_EQ(pthread_key_create(&key, [](void*) {
              auto pass = detail::backend::g_pass_malloc.load();
              auto release = detail::backend::g_plain_free.load();
              std::vector<void*> got;
              for (std::size_t size : {std::size_t{4096}, std::size_t{9312}, std::size_t{20000}, std::size_t{65536}}) {
                for (int i = 0; i < 8; ++i) {
                  void* p = pass(size);
                  if (p == nullptr) continue;
                  fill(p, size, static_cast<std::uint32_t>(size + i));
                  got.push_back(p);
                  served.fetch_add(1);
                }
              }
              std::size_t i = 0;
              for (std::size_t size : {std::size_t{4096}, std::size_t{9312}, std::size_t{20000}, std::size_t{65536}}) {
                for (int j = 0; j < 8 && i < got.size(); ++j, ++i) {
                  if (intact(got[i], size, static_cast<std::uint32_t>(size + j))) intact_blocks.fetch_add(1);
                }
              }
              for (void* p : got) release(p);
            }),
            0);
  for (int round = 0; round < 4; ++round) {
    std::thread t([key] {
      // The thread uses the cache first, so that it has lists to close.
      void* p = detail::backend::g_pass_malloc.load()(9312);
      detail::backend::g_plain_free.load()(p);
      pthread_setspecific(key, reinterpret_cast<void*>(1));
    });
    t.join();
  }
  pthread_key_delete(key);
  EXPECT_EQ(served.load(), 4 * 32);
  EXPECT_EQ(intact_blocks.load(), 4 * 32);
}

// fork() while other threads move lists through the depot: the child allocates and
// frees through every class and exits (its depot's locks were released after fork).
// Note [Arenas made when first used]: slot 0's arena is made at start-up, another
// slot's by the first thread whose cache needs a block or a run from it. Twice as many
// threads at once as slots (each opening its cache on the next slot, so every slot is
// some thread's even where another thread of the process opens one meanwhile), after the
// cache gave back what it held (so they take runs and blocks from their arenas), leave
// every slot made, once: none made twice, none left unmade, every block holding what
// was written to it while the others wrote theirs.
TEST(FrontCache, EverySlotsArenaIsMadeByTheFirstThreadThatNeedsIt) {
  REQUIRE_FRONT_CACHE();
  detail::backend::front_cache_release();
  unsigned slots = 0, made = 0;
  detail::backend::front_arena_counts(&slots, &made);
  ASSERT_GE(slots, 1u);
  EXPECT_GE(made, 1u) << "slot 0's arena is made at start-up";
  EXPECT_LE(made, slots);
  const unsigned n_threads = 2 * slots;
  std::latch holding(n_threads);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<unsigned char*, std::size_t>> held;
      for (std::size_t i = 0; i < 400; ++i) {
        const std::size_t n = 48 + (i * 997 + t * 131) % 20000;
        auto* p = static_cast<unsigned char*>(std::malloc(n));
        std::memset(p, static_cast<int>(t * 31 + i), n);
        held.emplace_back(p, n);
      }
      holding.arrive_and_wait();  // every thread's cache is open, each on its slot
      for (std::size_t i = 0; i < held.size(); ++i) {
        const auto [p, n] = held[i];
        for (std::size_t j = 0; j < n; ++j) {
          if (p[j] != static_cast<unsigned char>(t * 31 + i)) {
            ++bad;
            break;
          }
        }
        std::free(p);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0) << "blocks overwritten while the threads' slots were made";
  detail::backend::front_arena_counts(&slots, &made);
  EXPECT_EQ(made, slots);
}

TEST(FrontCache, AForkedChildAllocatesWhileThreadsUsedTheDepot) {
  REQUIRE_FRONT_CACHE();
  std::atomic<bool> stop{false};
  auto churn = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<void*> held;
    while (!stop.load(std::memory_order_relaxed)) {
      // Small blocks and runs' (Note [Runs for medium blocks]): their locks in use.
      for (int i = 0; i < 200; ++i) held.push_back(std::malloc(16 + rng() % (i % 2 == 0 ? 4000 : 40000)));
      for (void* p : held) std::free(p);
      held.clear();
    }
  };
  std::thread a(churn, 1u);
  std::thread b(churn, 2u);
  int failed = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a deadlock ends as a signal, not a hung test
      std::vector<void*> held;
      for (int i = 0; i < 5000; ++i) held.push_back(std::malloc(16 + static_cast<std::size_t>(i) * 13 % 70000));
      for (void* p : held) std::free(p);
      _exit(0);
    }
    ASSERT_GT(pid, 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(failed, 0) << "forked children that did not exit cleanly";
}

// Note [The depot's budget follows the threads]: a child after fork counts the forking
// thread's cache alone. Its parent's other threads never close theirs there, and their
// count would have kept its budget of the classes of 4-64 KiB at theirs for its life.
TEST(FrontCache, AForkedChildsDepotBudgetIsItsOwnThreads) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr int kThreads = 6;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  // Each thread's cache opens at its first miss (volatile: the pair is not elided).
  void* volatile mine = std::malloc(100);
  std::free(mine);
  std::latch opened(kThreads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      void* volatile p = std::malloc(100);
      std::free(p);
      opened.count_down();
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  opened.wait();
  EXPECT_GE(be::front_cache_stats().depot_budget[1], (1 + 2 * kThreads) * kMiB) << "the parent's threads not counted";
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    _exit(be::front_cache_stats().depot_budget[1] == kMiB ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  stop = true;
  for (std::thread& t : ts) t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's budget counted its parent's threads";
}

// Blocks handed between four threads while sweeps give idle lists back (Note [Idle lists
// given back]): the threads move from one set of sizes to another and back twice, each
// phase longer than two sweeps, so that the lists of the sizes left go back (the depot's and
// the threads' above 64 KiB) while the others are live and handed on. No block is ever
// live twice or overlaps a live one (intervals under a lock), none changes while live
// (its first, middle and last 64 bytes checked at its free by another thread).
TEST(FrontCache, SweepsGiveBackNoLiveBlock) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  const std::uint64_t idle_before = replayalloc::stats().front_lists_idle;
  std::mutex mu;
  std::vector<queued> queue;
  std::map<std::uintptr_t, std::size_t> live;  // start -> size
  std::atomic<int> bad{0};
  auto mark = [](void* p, std::size_t n, bool check) {
    const std::size_t at[3] = {0, (n / 2) & ~std::size_t{15}, n - 64};
    bool ok = true;
    for (std::size_t a : at) {
      auto* b = static_cast<unsigned char*>(p) + a;
      if (check) {
        ok = ok && intact(b, 64, static_cast<std::uint32_t>(n + a));
      } else {
        fill(b, 64, static_cast<std::uint32_t>(n + a));
      }
    }
    return ok;
  };
  const auto start = std::chrono::steady_clock::now();
  auto worker = [&](int id) {
    std::mt19937 rng(static_cast<unsigned>(id) * 104729u + 3u);
    for (;;) {
      const auto t = std::chrono::steady_clock::now() - start;
      if (t > std::chrono::milliseconds(8800)) break;
      // Phases of 2.2 s: blocks of 4-64 KiB, then of 256 KiB-2 MiB (kept on the threads'
      // lists, which no large miss of the next phase gives back), then both again.
      const bool large = static_cast<int>(t / std::chrono::milliseconds(2200)) % 2 == 1;
      const unsigned lo = large ? 18 : 12, hi = large ? 21 : 16;
      const std::size_t n = std::size_t{1} << (lo + rng() % (hi - lo));
      const std::size_t size = n + (rng() % n & ~std::size_t{15});
      void* p = pass(size);
      if (p == nullptr) {
        bad.fetch_add(1);
        continue;
      }
      mark(p, size, false);
      queued out{nullptr, 0};
      {
        std::lock_guard<std::mutex> l(mu);
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        auto next = live.lower_bound(a);
        if (next != live.end() && next->first < a + size) bad.fetch_add(1);
        if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > a) bad.fetch_add(1);
        live.emplace(a, size);
        queue.emplace_back(p, size);
        if (queue.size() > 64 || (rng() & 1) != 0) {
          out = take_random(queue, rng);
          live.erase(reinterpret_cast<std::uintptr_t>(out.first));
        }
      }
      if (out.first != nullptr) {
        if (!mark(out.first, out.second, true)) bad.fetch_add(1);
        release(out.first);
      }
    }
  };
  std::vector<std::thread> ts;
  for (int id = 0; id < 4; ++id) ts.emplace_back(worker, id);
  for (std::thread& t : ts) t.join();
  for (auto& [p, n] : queue) {
    if (!mark(p, n, true)) bad.fetch_add(1);
    release(p);
  }
  EXPECT_EQ(bad.load(), 0) << "a block was handed out while live, overlapped a live one, or changed while live";
  EXPECT_GE(replayalloc::stats().front_lists_idle - idle_before, 1u) << "no sweep gave a list back during the test";
}

// Note [Idle lists given back]: the calling thread's requests of 1 KiB blocks, enough
// to miss and overflow its list (a take and a put of the depot: where a sweep comes).
void churn_small(detail::backend::front_malloc_fn pass, detail::backend::front_free_fn release) {
  void* got[64];
  for (void*& p : got) p = pass(1000);
  for (void* p : got) release(p);
}

// The whole pages of blocks [blocks[i], blocks[i] + bytes) resident now (mincore), and
// how many there are.
std::size_t resident_pages(const std::vector<void*>& blocks, std::size_t bytes, std::size_t* pages = nullptr) {
  const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in(bytes / page + 1);
  std::size_t n = 0, all = 0;
  for (void* p : blocks) {
    const std::uintptr_t start = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
    const std::size_t whole = (reinterpret_cast<std::uintptr_t>(p) + bytes - start) / page;
    all += whole;
    EXPECT_EQ(::mincore(reinterpret_cast<void*>(start), whole * page, in.data()), 0) << std::strerror(errno);
    for (std::size_t i = 0; i < whole; ++i) n += in[i] & 1;
  }
  if (pages != nullptr) *pages = all;
  return n;
}

// On a thread of its own (its cache opened first), `n` blocks of `size` bytes from the
// fallback's malloc, each shown to `check` and every page of it written, then all freed;
// their addresses (fewer where one could not be had).
template <typename Check>
std::vector<void*> written_and_freed(int n, std::size_t size, Check check) {
  auto pass = detail::backend::g_pass_malloc.load();
  auto release = detail::backend::g_plain_free.load();
  std::vector<void*> freed;
  std::thread([&] {
    release(pass(100));
    for (int i = 0; i < n; ++i) {
      void* p = pass(size);
      ASSERT_NE(p, nullptr);
      check(p);
      std::memset(p, 0x5a, size);  // every page resident
      freed.push_back(p);
    }
    for (void* p : freed) release(p);
  }).join();
  return freed;
}

// Lists that an exited thread left in the depot and that no thread takes go back after a
// quarter second (a whole sweep's 250 ms: Note [Idle lists given back, a quarter second]),
// not before, and their pages leave the process over the next second (the front arenas'
// decay), while the program goes on asking for other blocks.
TEST(FrontCache, ListsNoThreadTakesGoBackAfterAQuarterSecondAndTheirPagesAreFreed) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kSize = 256 << 10;
  constexpr int kBlocks = 24;  // 6 MiB: within the depot's 8 MiB for these classes
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  const std::uint64_t idle_before = replayalloc::stats().front_lists_idle;
  const std::vector<void*> freed = written_and_freed(kBlocks, kSize, [](void*) {});  // its lists to the depot at its exit
  const auto put_at = std::chrono::steady_clock::now();
  ASSERT_EQ(freed.size(), std::size_t{kBlocks});
  std::size_t pages = 0;
  ASSERT_GE(be::front_cache_stats().depot_bytes[2], std::size_t{4} << 20) << "the exited thread's lists are not in the depot";
  ASSERT_GE(resident_pages(freed, kSize, &pages), pages * 9 / 10);
  std::size_t held = 0, resident = pages;
  auto swept_at = put_at;
  const auto deadline = put_at + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    churn_small(pass, release);
    held = be::front_cache_stats().depot_bytes[2];
    if (held != 0) swept_at = std::chrono::steady_clock::now();
    resident = resident_pages(freed, kSize);
    if (held == 0 && resident <= pages / 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(held, 0u) << "lists no thread took for 15 s are still in the depot";
  // (swept_at: the last time the lists were seen held, up to a poll before their sweep.)
  EXPECT_GE(swept_at - put_at, std::chrono::milliseconds(200)) << "lists went back before a quarter second had passed";
  EXPECT_LE(swept_at - put_at, std::chrono::milliseconds(900)) << "lists no thread took stayed beyond two sweeps";
  EXPECT_LE(resident, pages / 4) << "of " << pages << " pages of the lists given back, " << resident << " still resident";
  EXPECT_GE(replayalloc::stats().front_lists_idle - idle_before, 1u);
}

// Note [An idle arena 0 decays]: blocks the front cache does not serve (above 2 MiB)
// are jemalloc's arena 0's; freed while the program asks the cache alone (arena 0 idle,
// never ticking), their pages leave the process over arena 0's decay, as the depot's
// windows decay it. (Arena 0's decay made 1 s here, the front arenas', and put back:
// what is tested is that it decays at all; before, its pages stayed whatever its decay.)
TEST(FrontCache, ArenaZerosFreedPagesDecayWhileOnlyTheCacheIsAsked) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kSize = 4 << 20;
  constexpr int kBlocks = 4;  // 16 MiB
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  ssize_t was = 0, second = 1000;
  std::size_t len = sizeof was;
  ASSERT_EQ(mallctl("arena.0.dirty_decay_ms", &was, &len, &second, sizeof second), 0);
  const std::vector<void*> freed = written_and_freed(kBlocks, kSize, [](void* p) {
    unsigned arena = 1;
    std::size_t alen = sizeof arena;
    ASSERT_EQ(mallctl("arenas.lookup", &arena, &alen, &p, sizeof p), 0);
    ASSERT_EQ(arena, 0u) << "a block above 2 MiB is not arena 0's";
  });
  std::size_t pages = 0, resident = 0;
  if (freed.size() == std::size_t{kBlocks}) {
    resident = resident_pages(freed, kSize, &pages);
    EXPECT_GE(resident, pages * 9 / 10) << "the freed blocks' pages went at their free";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
    while (std::chrono::steady_clock::now() < deadline) {
      churn_small(pass, release);  // the cache's depot, where its sweeps come
      resident = resident_pages(freed, kSize);
      if (resident <= pages / 4) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(mallctl("arena.0.dirty_decay_ms", nullptr, nullptr, &was, sizeof was), 0);
  ASSERT_EQ(freed.size(), std::size_t{kBlocks});
  EXPECT_LE(resident, pages / 4) << "of " << pages << " pages of blocks above 2 MiB freed, " << resident
                                 << " still resident after 8 s of the cache's requests (arena 0's decay 1 s)";
}

// A thread's cached blocks of a class above 64 KiB that it stopped asking for go back
// once a sweep passes; those of the class it goes on asking for stay, and serve it.
TEST(FrontCache, AThreadsBlocksOfAClassItLeftGoBackAndThoseItAsksForStay) {
  REQUIRE_FRONT_CACHE();
  namespace be = detail::backend;
  constexpr std::size_t kAsked = 512 << 10, kLeft = 768 << 10;
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    release(pass(100));
    void* asked = pass(kAsked);
    void* left = pass(kLeft);
    ASSERT_NE(asked, nullptr);
    ASSERT_NE(left, nullptr);
    release(asked);
    release(left);
    ASSERT_EQ(be::front_cache_stats().thread_large_bytes, nallocx(kAsked, 0) + nallocx(kLeft, 0))
        << "the thread's lists did not keep both blocks (its budget: "
        << be::front_cache_stats().thread_large_budget << ")";
    std::size_t kept = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      void* again = pass(kAsked);
      EXPECT_EQ(again, asked) << "the block of the class the thread asks for did not serve it";
      release(again);
      churn_small(pass, release);
      kept = be::front_cache_stats().thread_large_bytes;
      if (kept == nallocx(kAsked, 0)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(kept, nallocx(kAsked, 0)) << "the block of the class the thread left is still on its list after 15 s";
  }).join();
}


// Before a slab is made the fallback's free memory is purged (Note [Purging what a slab
// replaces]); the thread's lists and the depot go back to jemalloc first, so a thread
// that asks next gets its blocks from jemalloc, not from the cache.
TEST(FrontCache, ReleasesItsBlocksBeforeAPurge) {
  REQUIRE_FRONT_CACHE();
  constexpr std::size_t kSize = 16384;
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(std::malloc(kSize));
  for (void* p : blocks) std::free(p);
  detail::backend::front_cache_release();
  std::uint64_t jemalloc_bytes = 0;
  std::thread other([&] {
    const std::uint64_t before = jemalloc_allocated_here();
    std::vector<void*> got;
    for (int i = 0; i < 64; ++i) got.push_back(std::malloc(kSize));
    jemalloc_bytes = jemalloc_allocated_here() - before;
    for (void* p : got) std::free(p);
  });
  other.join();
  EXPECT_GE(jemalloc_bytes, 64 * kSize) << "blocks came from the cache after it was released";
}

}  // namespace
}  // namespace replayalloc::contract
