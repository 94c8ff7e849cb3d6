// The front cache's runs (Note [Runs for medium blocks], backend/front_runs.h) in the
// LD_PRELOAD library's build, as preload_front_cache.cc tests the rest of the cache.
// What a user relies on: a burst of blocks of 4-128 KiB costs jemalloc one request per
// run, not one per block, and the runs go back to jemalloc once their blocks are freed,
// whichever thread frees them (or serve the next burst: Note [Empty runs kept]); a run's block is never handed to jemalloc (realloc,
// malloc_usable_size), and a block jemalloc made of a run's class never enters a run.
#include <jemalloc/jemalloc.h>
#include <malloc.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "backend/backend.h"
#include "backend/front_cache.h"
#include "backend/slab_range.h"
#include "gtest/gtest.h"
#include "runtime/thread_state.h"
#include "replayalloc/replayalloc.hpp"

namespace replayalloc::contract {
namespace {

namespace be = detail::backend;

// jemalloc's per-thread counters of bytes handed out and taken back.
std::uint64_t jemalloc_counter(const char* name) {
  std::uint64_t n = 0;
  std::size_t len = sizeof n;
  EXPECT_EQ(mallctl(name, &n, &len, nullptr, 0), 0);
  return n;
}

// The large requests jemalloc has served, all arenas together (4096: MALLCTL_ARENAS_ALL),
// its statistics refreshed.
std::uint64_t jemalloc_large_requests() {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  EXPECT_EQ(mallctl("epoch", &epoch, &len, &epoch, len), 0);
  std::uint64_t n = 0;
  len = sizeof n;
  EXPECT_EQ(mallctl("stats.arenas.4096.large.nmalloc", &n, &len, nullptr, 0), 0);
  return n;
}

void require_runs() {
  const char* v = std::getenv("REPLAYALLOC_FRONT_CACHE");
  if (v != nullptr && std::strcmp(v, "0") == 0) GTEST_SKIP() << "REPLAYALLOC_FRONT_CACHE=0";
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  if (check != nullptr && std::strcmp(check, "0") != 0) GTEST_SKIP() << "check mode shadows every block itself";
  (void)replayalloc::stats();  // the engine made (it enables the cache)
  be::start_fallback_now();    // now, not after the first requests (Note [The fallback made when first needed])
  ASSERT_NE(be::front_cache_stats().largest, 0u) << "the preload build's front cache is not enabled";
  be::front_cache_release();  // the lists, the depot and the runs kept empty given back
}

#define REQUIRE_RUNS()                                                               \
  do {                                                                               \
    require_runs();                                                                  \
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return; \
  } while (0)

void fill(void* p, std::size_t n, std::uint32_t tag) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 512) b[i] = static_cast<unsigned char>(tag + i);
}
bool intact(const void* p, std::size_t n, std::uint32_t tag) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 512) {
    if (b[i] != static_cast<unsigned char>(tag + i)) return false;
  }
  return true;
}

// A burst of 2,000 blocks of 20 KB (jemalloc's class of 20 KiB, runs of 512 KiB: 22
// blocks each in their 448 KiB, Note [A run a size step short of its slot]): jemalloc
// hands out whole runs, about 2,000 / 22 of them, not a block per request (each was an
// extent of its own before the runs); the blocks do not overlap and keep what is written
// in them; freed, and the cache released, every run is given back to jemalloc.
TEST(FrontRuns, ABurstIsCarvedFromRunsAndTheRunsGoBack) {
  REQUIRE_RUNS();
  constexpr std::size_t kSize = 20000;
  constexpr int kBlocks = 2000;
  const std::size_t cls = nallocx(kSize, 0);
  auto pass = be::g_pass_malloc.load();  // the fallback's malloc, as a request passed through gets it
  auto release = be::g_plain_free.load();
  std::thread([&] {
    release(pass(100));  // the thread's cache and engine state made first
    std::vector<void*> got;
    std::vector<void*> sorted;
    got.reserve(kBlocks);  // made before the counts (runs' blocks too)
    sorted.reserve(kBlocks);
    // No empty run kept before the counts (the release at the end gives back every
    // class's, the small ones' that the process's other requests left too).
    be::front_cache_release();
    const be::front_cache_counts before = be::front_cache_stats();
    const std::uint64_t requests = jemalloc_large_requests();
    for (int i = 0; i < kBlocks; ++i) {
      void* p = pass(kSize);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(malloc_usable_size(p), cls);
      fill(p, kSize, static_cast<std::uint32_t>(i));
      got.push_back(p);
    }
    const be::front_cache_counts during = be::front_cache_stats();
    const std::uint64_t runs = during.runs_made - before.runs_made;
    EXPECT_GE(runs, kBlocks / 22u);
    EXPECT_LE(runs, kBlocks / 22u + 2) << "blocks were not carved from runs";
    // jemalloc was asked for the runs, not for the blocks (other threads' requests
    // meanwhile are a few at most).
    EXPECT_LT(jemalloc_large_requests() - requests, kBlocks / 10u) << "jemalloc was asked for blocks, not runs";
    sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 1; i < sorted.size(); ++i) {
      ASSERT_GE(static_cast<char*>(sorted[i]) - static_cast<char*>(sorted[i - 1]), static_cast<std::ptrdiff_t>(cls))
          << "two blocks overlap";
    }
    for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(intact(got[i], kSize, static_cast<std::uint32_t>(i))) << i;
    for (void* p : got) release(p);
    be::front_cache_release();
    const be::front_cache_counts after = be::front_cache_stats();
    EXPECT_EQ(after.runs_given_back - before.runs_given_back, runs) << "a run was kept after its blocks were freed";
    EXPECT_EQ(after.run_bytes, before.run_bytes);
  }).join();
}

// A run's blocks are freed by another thread than the one that made them: each goes back
// to its run, the runs go back to jemalloc, and no block is handed out twice meanwhile.
TEST(FrontRuns, BlocksFreedByAnotherThreadGoBackToTheirRuns) {
  REQUIRE_RUNS();
  // The fallback's malloc and free, as requests passed through get them (those of
  // malloc() are watched by auto mode, whose tables of the threads are runs' blocks too).
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr int kBlocks = 3000;
  const std::size_t sizes[] = {4096, 5000, 8192, 14000, 30000, 70000, 131072};
  std::vector<void*> made;
  std::vector<std::size_t> made_size;
  made.reserve(kBlocks);  // made before the counts (runs' blocks too)
  made_size.reserve(kBlocks);
  // A thread made and joined first: glibc keeps its stack, and the block its thread
  // control needs (a calloc, below the minimum: the front cache's, Note [Small callocs
  // zeroed by memset]), for the threads below, which then allocate none of their own
  // that outlives them.
  std::thread([] {}).join();
  be::front_cache_release();  // no empty run kept before the counts, as in the test above
  const be::front_cache_counts before = be::front_cache_stats();
  std::thread([&] {
    for (int i = 0; i < kBlocks; ++i) {
      const std::size_t n = sizes[static_cast<std::size_t>(i) % std::size(sizes)];
      void* p = pass(n);
      ASSERT_NE(p, nullptr);
      fill(p, n, static_cast<std::uint32_t>(i));
      made.push_back(p);
      made_size.push_back(n);
    }
  }).join();
  int damaged = 0;
  std::thread([&] {
    for (int i = 0; i < kBlocks; ++i) {
      if (!intact(made[i], made_size[i], static_cast<std::uint32_t>(i))) ++damaged;
      release(made[i]);
    }
  }).join();
  EXPECT_EQ(damaged, 0);
  // Both threads have exited: their lists are in the depot, which the release gives back.
  be::front_cache_release();
  const be::front_cache_counts after = be::front_cache_stats();
  EXPECT_GT(after.runs_made, before.runs_made);
  EXPECT_EQ(after.run_bytes, before.run_bytes) << "runs whose blocks another thread freed were kept";
}

// Note [Empty runs kept]: a burst of blocks larger than the lists and the depot hold,
// all freed, leaves its runs empty; the next burst of the class is carved from them
// again (no run made, nothing asked of jemalloc), every block whole and apart from the
// others; a block above the runs' classes has the stashed runs given back to the arena
// first, and a release (before a purge) gives back the rest.
TEST(FrontRuns, ABurstsEmptiedRunsServeTheNextBurstWithoutJemalloc) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr std::size_t kSize = 8192;  // runs of 256 KiB less an eighth, 28 blocks (run_slot_bytes)
  constexpr std::size_t kRun = std::size_t{256} << 10;
  constexpr std::size_t kCount = 3000;  // 24 MiB: far past the lists and the depot
  std::thread([&] {
    release(pass(100));  // the thread's cache made first
    const auto burst = [&](std::uint32_t tag) {
      std::vector<void*> got;
      got.reserve(kCount);
      for (std::size_t i = 0; i < kCount; ++i) {
        void* p = pass(kSize);
        EXPECT_NE(p, nullptr);
        if (p == nullptr) break;
        fill(p, kSize, tag + static_cast<std::uint32_t>(i));
        got.push_back(p);
      }
      std::vector<std::uintptr_t> at;
      for (void* p : got) at.push_back(reinterpret_cast<std::uintptr_t>(p));
      std::sort(at.begin(), at.end());
      for (std::size_t i = 1; i < at.size(); ++i) EXPECT_GE(at[i] - at[i - 1], kSize) << "two live blocks overlap";
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(intact(got[i], kSize, tag + static_cast<std::uint32_t>(i))) << "block " << i << " was overwritten";
      }
      return got;
    };
    for (void* p : burst(1)) release(p);
    const be::front_cache_counts first = be::front_cache_stats();
    EXPECT_GE(first.stashed_bytes, std::size_t{8} << 20) << "the burst's emptied runs were not kept";
    const std::uint64_t before = jemalloc_counter("thread.allocated");
    const std::vector<void*> second = burst(100000);
    const be::front_cache_counts now = be::front_cache_stats();
    EXPECT_EQ(jemalloc_counter("thread.allocated"), before) << "the second burst asked jemalloc";
    EXPECT_EQ(now.runs_made, first.runs_made) << "a run was made while emptied ones were kept";
    EXPECT_GE(now.runs_reused - first.runs_reused, first.stashed_bytes / kRun);
    for (void* p : second) release(p);
    EXPECT_GT(be::front_cache_stats().stashed_bytes, 0u);
    // A block above the runs' classes (256 KiB): the stashed runs go back first.
    void* large = pass(256 << 10);
    ASSERT_NE(large, nullptr);
    EXPECT_EQ(be::front_cache_stats().stashed_bytes, 0u) << "a large block was made with runs kept empty";
    release(large);
    for (void* p : burst(200000)) release(p);
    EXPECT_GT(be::front_cache_stats().stashed_bytes, 0u);
    be::front_cache_release();
    EXPECT_EQ(be::front_cache_stats().stashed_bytes, 0u) << "the release kept stashed runs";
  }).join();
}

// 1,000-byte requests: jemalloc's class of 1 KiB, lists of 16.
constexpr std::size_t kKiBRequest = 1000;

// fn on a new thread, its cache made, then its lists and the depot emptied: the counts of
// its lists start from nothing.
template <class F>
void on_an_emptied_cache(F fn) {
  std::thread([&] {
    be::g_plain_free.load()(be::g_pass_malloc.load()(100));
    be::front_cache_release();
    fn();
  }).join();
}

// A list's miss into the runs takes half a list; a second miss with no overflow of the
// list between (a burst) the whole list; a list that overflowed goes back to half.
// 1,000-byte requests: jemalloc's class of 1 KiB, lists of 16.
TEST(FrontRuns, ABurstFillsWholeListsAndAnOverflowGoesBackToHalf) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  on_an_emptied_cache([&] {
    void* held[64];
    int n = 0;
    held[n++] = pass(kKiBRequest);
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 7u) << "the first miss takes half a list";
    while (be::front_thread_list_count(kKiBRequest) != 0) held[n++] = pass(kKiBRequest);
    EXPECT_EQ(n, 8);
    held[n++] = pass(kKiBRequest);
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 15u) << "a burst's second miss takes the whole list";
    while (be::front_thread_list_count(kKiBRequest) != 0) held[n++] = pass(kKiBRequest);
    ASSERT_EQ(n, 24);
    std::vector<std::uintptr_t> at;
    at.reserve(64);
    for (int i = 0; i < n; ++i) {
      std::memset(held[i], i, kKiBRequest);
      at.push_back(reinterpret_cast<std::uintptr_t>(held[i]));
    }
    std::sort(at.begin(), at.end());
    for (std::size_t i = 1; i < at.size(); ++i) EXPECT_GE(at[i] - at[i - 1], 1024u) << "two blocks overlap";
    for (int i = 0; i < 17; ++i) release(held[--n]);  // 16 fill the list, the 17th overflows it
    // Note [Half a list handed on]: the thread allocates the class, so half the list
    // stays (8) and the 17th goes on it.
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 9u);
    be::front_cache_release();
    held[n++] = pass(kKiBRequest);
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 7u) << "a list that overflowed did not go back to half";
    while (n > 0) release(held[--n]);
  });
}

// Note [Half a list handed on]: a thread that allocates a class and frees as many keeps
// half its list where the list overflows (the older half goes to the depot, whole and
// intact); a thread that only frees the class (a consumer of another's blocks) hands on
// whole lists, and so does one that has handed on four since it last allocated the
// class. 1,000-byte requests: jemalloc's class of 1 KiB, lists of 16.
TEST(FrontRuns, AnOverflowKeepsHalfWhereTheThreadAllocatesTheClass) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  on_an_emptied_cache([&] {
    std::vector<void*> made;
    while (made.size() < 64 || be::front_thread_list_count(kKiBRequest) != 0) {
      made.push_back(pass(kKiBRequest));
      std::memset(made.back(), static_cast<int>(made.size()), kKiBRequest);
    }
    std::vector<void*> freed;
    const auto free_one = [&] {
      freed.push_back(made.back());
      made.pop_back();
      release(freed.back());
    };
    const auto overflow = [&] {
      while (be::front_thread_list_count(kKiBRequest) != 16) free_one();
      free_one();
    };
    overflow();  // 16 fill its list, the 17th overflows it: half stays, the 17th on it
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 9u) << "an allocating thread's overflow kept no half";
    const std::uint64_t puts = be::front_cache_stats().depot_puts;
    for (int i = 2; i <= 4; ++i) {
      overflow();
      EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 9u) << "overflow " << i;
    }
    overflow();  // the fifth since it last allocated the class: the whole list
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 1u) << "a thread that only freed since kept half";
    EXPECT_EQ(be::front_cache_stats().depot_puts - puts, 4u);
    // The depot's lists, halves and whole, come back with every block once.
    const absl::flat_hash_set<void*> was_freed(freed.begin(), freed.end());
    std::vector<void*> again;
    for (std::size_t i = 0; i < freed.size(); ++i) again.push_back(pass(kKiBRequest));
    const absl::flat_hash_set<void*> unique(again.begin(), again.end());
    EXPECT_EQ(unique.size(), again.size()) << "a block handed out twice";
    int reused = 0;
    for (void* p : again) reused += was_freed.contains(p) ? 1 : 0;
    EXPECT_EQ(reused, static_cast<int>(freed.size())) << "blocks the halves held did not come back";
    for (void* p : made) {
      EXPECT_FALSE(unique.contains(p)) << "a live block handed out";
      release(p);
    }
    for (void* p : again) release(p);
    be::front_cache_release();
  });
  // A thread that never allocated the class hands on whole lists.
  std::vector<void*> blocks;
  std::thread([&] {
    for (int i = 0; i < 17; ++i) blocks.push_back(pass(kKiBRequest));
  }).join();
  std::thread([&] {
    release(pass(100));
    for (void* p : blocks) release(p);
    EXPECT_EQ(be::front_thread_list_count(kKiBRequest), 1u) << "a consumer's overflow kept half its list";
    be::front_cache_release();
  }).join();
}

// Note [A burst's lists twice as long]: a thread that bursts a class it also frees
// takes lists twice as long (1,000-byte requests: jemalloc's class of 1 KiB, lists of
// 16, runs of 64 blocks: 32) and its frees hand them on only when that long; before it
// has handed a list of the class on (a producer), its bursts take lists as before; a
// list longer than a thread's own, from the depot, goes on at its next free. Every
// block is handed out once, keeps what was written in it, and comes back.
TEST(FrontRuns, ABurstOfAClassTheThreadAlsoFreesTakesListsTwiceAsLong) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::vector<void*> held;  // live blocks (each with its index written in it)
  held.reserve(512);        // its buffer of another class than the blocks', made once
  const auto intact_at = [&](std::size_t i) {
    const auto* b = static_cast<const unsigned char*>(held[i]);
    return std::all_of(b, b + kKiBRequest, [&](unsigned char c) { return c == static_cast<unsigned char>(i); });
  };
  const auto free_last = [&] {
    ASSERT_TRUE(intact_at(held.size() - 1)) << "a live block's contents changed";
    release(held.back());
    held.pop_back();
  };
  const auto list = [] { return be::front_thread_list_count(kKiBRequest); };
  on_an_emptied_cache([&] {
    const auto drain = [&] {  // a miss, then the list's blocks, all taken
      held.push_back(pass(kKiBRequest));
      const std::uint32_t took = list();
      while (list() != 0) held.push_back(pass(kKiBRequest));
      return took;
    };
    EXPECT_EQ(drain(), 7u) << "the first miss takes half a list";
    EXPECT_EQ(drain(), 15u) << "a burst of a class the thread never freed took a longer list";
    EXPECT_EQ(drain(), 15u);
    for (int i = 0; i < 17; ++i) {  // 16 fill the list, the 17th overflows it: half stays
      release(held.back());
      held.pop_back();
    }
    EXPECT_EQ(list(), 9u);
    while (list() != 0) held.push_back(pass(kKiBRequest));
    be::front_cache_release();  // the depot's half given back: the next misses go to the runs
    EXPECT_EQ(drain(), 7u) << "the miss after an overflow is not a burst's";
    // A burst's take is as many as its run has left, up to 32: one from a new run, 32.
    std::uint32_t most = 0;
    while (held.size() < 128 || most < 31) {
      const std::uint32_t took = drain();
      ASSERT_LE(took, 31u);
      most = std::max(most, took);
      ASSERT_LT(held.size(), 400u) << "no burst of a class the thread frees took a list of 32";
    }
    for (std::size_t i = 0; i < held.size(); ++i) std::memset(held[i], static_cast<int>(i), kKiBRequest);
    const absl::flat_hash_set<void*> unique(held.begin(), held.end());
    ASSERT_EQ(unique.size(), held.size()) << "a block handed out twice";
    // Its frees: the list holds 32 before a list goes to the depot; the overflow keeps
    // half (the thread allocated the class since it last handed one on).
    const std::uint64_t puts = be::front_cache_stats().depot_puts;
    for (int i = 0; i < 32; ++i) free_last();
    EXPECT_EQ(list(), 32u) << "the longer list did not hold 32";
    EXPECT_EQ(be::front_cache_stats().depot_puts, puts) << "a list went to the depot before 32";
    free_last();
    EXPECT_EQ(list(), 17u) << "the overflow of a longer list kept no half";
    // Four hand-ons with no miss between, then whole lists (Note [Half a list handed on]).
    for (int overflow = 2; overflow <= 4; ++overflow) {
      while (list() != 32) free_last();
      free_last();
      EXPECT_EQ(list(), 17u) << "overflow " << overflow;
    }
    while (list() != 32) free_last();
    free_last();
    EXPECT_EQ(list(), 1u) << "the fifth overflow did not hand the whole list of 32 on";
    EXPECT_EQ(be::front_cache_stats().depot_puts - puts, 5u);
    held.push_back(pass(kKiBRequest));  // its list emptied: the depot's top list is the 32
    std::memset(held.back(), static_cast<int>(held.size() - 1), kKiBRequest);
  });
  // A new thread takes that list of 32 from the depot (its own lists hold 16): its next
  // free hands it on, and no block of it is handed out twice.
  std::thread([&] {
    std::vector<void*> got;
    got.push_back(pass(kKiBRequest));
    const std::uint32_t had = list();
    EXPECT_EQ(had, 31u) << "the depot's list was not the longer one";
    while (list() + 4 > had) got.push_back(pass(kKiBRequest));
    release(got.back());
    got.pop_back();
    EXPECT_LE(list(), 16u) << "a list longer than the thread's was kept whole";
    const absl::flat_hash_set<void*> unique(got.begin(), got.end());
    EXPECT_EQ(unique.size(), got.size());
    for (void* p : got) EXPECT_FALSE(std::find(held.begin(), held.end(), p) != held.end()) << "a live block handed out";
    for (void* p : got) release(p);
    be::front_cache_release();
  }).join();
  // A producer: bursts of the class, never a free of it, take lists of 16.
  std::vector<void*> produced;
  produced.reserve(512);
  std::thread([&] {
    be::g_plain_free.load()(be::g_pass_malloc.load()(100));
    be::front_cache_release();
    for (int burst = 0; burst < 4; ++burst) {
      produced.push_back(pass(kKiBRequest));
      EXPECT_LE(list(), 15u) << "a producer's burst took a longer list";
      while (list() != 0) produced.push_back(pass(kKiBRequest));
    }
  }).join();
  for (std::size_t i = 0; i < held.size(); ++i) EXPECT_TRUE(intact_at(i)) << "a live block's contents changed";
  for (void* p : produced) EXPECT_FALSE(std::find(held.begin(), held.end(), p) != held.end()) << "a live block handed out";
  for (void* p : produced) release(p);
  while (!held.empty()) free_last();
  be::front_cache_release();
}

// Note [A burst's lists twice as long]: the longer list lasts until the thread's next
// miss into the runs that is not a burst's; from there its list holds 16 again (its
// overflow at the 17th free). 1,000-byte requests, as above.
TEST(FrontRuns, ALongerListGoesBackToItsLengthAtAMissThatIsNotABursts) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  on_an_emptied_cache([&] {
    void* held[256];
    int n = 0;
    const auto list = [] { return be::front_thread_list_count(kKiBRequest); };
    const auto drain = [&] {
      held[n++] = pass(kKiBRequest);
      while (list() != 0 && n < 256) held[n++] = pass(kKiBRequest);
    };
    const auto free_until_overflow = [&](std::uint32_t length) {
      while (list() != length && n > 0) release(held[--n]);
      ASSERT_GT(n, 0);
      release(held[--n]);  // the overflow: half stays, this block on it
    };
    drain();
    drain();
    free_until_overflow(16);  // a list of the class handed on: the thread frees it too
    ASSERT_EQ(list(), 9u);
    be::front_cache_release();  // its list and the depot given back: misses go to the runs
    drain();                     // not a burst's (an overflow since the last)
    while (n < 160) drain();     // bursts: lists of 32
    free_until_overflow(32);
    EXPECT_EQ(list(), 17u) << "the burst's list was not 32 long";
    be::front_cache_release();
    drain();  // the miss after an overflow: not a burst's, the list 16 again
    free_until_overflow(16);
    EXPECT_EQ(list(), 9u) << "the list kept its burst's length past a miss that was not a burst's";
    const absl::flat_hash_set<void*> unique(held, held + n);
    EXPECT_EQ(static_cast<int>(unique.size()), n) << "a block handed out twice";
    while (n > 0) release(held[--n]);
    be::front_cache_release();
  });
}

// On a thread with an emptied cache, a burst of `count` blocks of `size` bytes (each
// filled with its index, fill()) made through the fallback's malloc, handed to `check`
// with the runs made meanwhile; then every block checked intact, freed, and the cache
// released.
template <typename F>
void burst_on_an_emptied_cache(std::size_t size, int count, F check) {
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  on_an_emptied_cache([&] {
    std::vector<void*> got;
    got.reserve(static_cast<std::size_t>(count));  // made before the counts
    const std::uint64_t runs_before = be::front_cache_stats().runs_made;
    for (int i = 0; i < count; ++i) {
      void* p = pass(size);
      ASSERT_NE(p, nullptr);
      fill(p, size, static_cast<std::uint32_t>(i));
      got.push_back(p);
    }
    check(got, be::front_cache_stats().runs_made - runs_before);
    const absl::flat_hash_set<void*> unique(got.begin(), got.end());
    EXPECT_EQ(unique.size(), got.size()) << size << " B: a block handed out twice";
    for (int i = 0; i < count; ++i) {
      EXPECT_TRUE(intact(got[i], size, static_cast<std::uint32_t>(i))) << size << " B: " << i;
    }
    for (void* p : got) release(p);
    be::front_cache_release();
  });
}

// Note [A run's blocks in address order]: blocks carved from fresh runs go out one after
// another by their addresses, each a class's size past the one before, whatever the
// lists' lengths (half a list, a burst's whole and twice as long ones): a program that
// walks a burst's blocks in the order it got them walks its memory forwards, as the
// hardware's prefetchers follow. Order breaks only where a new run begins (before, each
// list went out first block, then its last to its second: 0, 15, 14, ..., 1).
TEST(FrontRuns, ARunsFreshBlocksGoOutInAddressOrder) {
  REQUIRE_RUNS();
  for (const std::size_t size : {std::size_t{1000}, std::size_t{8192}, std::size_t{20000}, std::size_t{100000}}) {
    const std::size_t cls = nallocx(size, 0);
    burst_on_an_emptied_cache(size, 300, [&](const std::vector<void*>& got, std::uint64_t runs) {
      ASSERT_GT(runs, 0u) << size << " B: no run made";
      int breaks = 0;  // consecutive blocks not a class's size apart
      for (std::size_t i = 1; i < got.size(); ++i) {
        breaks += static_cast<char*>(got[i]) - static_cast<char*>(got[i - 1]) != static_cast<std::ptrdiff_t>(cls);
      }
      EXPECT_LE(breaks, static_cast<int>(runs)) << size << " B: " << runs << " runs made, blocks out of order";
    });
  }
}

// Note [A run a size step short of its slot]: a burst's runs of 512 KiB (20 KB blocks)
// and of 1 MiB (100 KB blocks), made from fresh memory, lie one after another, each in
// the slot of its size next to the last one's: jemalloc's extent with its extra page
// fits the slot (before, runs lay one every two slots). The blocks end within the run's
// extent, never overlap, and keep what is written in them.
TEST(FrontRuns, ABurstsRunsLieInAdjacentSlots) {
  REQUIRE_RUNS();
  for (const std::size_t size : {std::size_t{20000}, std::size_t{100000}}) {
    const std::size_t cls = nallocx(size, 0);
    const std::size_t slot = size == 20000 ? std::size_t{512} << 10 : std::size_t{1} << 20;
    const std::size_t extent = slot - slot / 8;
    burst_on_an_emptied_cache(size, 160, [&](const std::vector<void*>& got, std::uint64_t runs) {
      ASSERT_GE(runs, 4u) << size << " B: a burst across runs";
      std::vector<std::uintptr_t> starts;
      for (void* p : got) {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        const std::uintptr_t start = a & ~(slot - 1);
        EXPECT_LE(a + cls, start + extent) << size << " B: a block past its run's extent";
        starts.push_back(start);
      }
      std::sort(starts.begin(), starts.end());
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      int adjacent = 0;  // runs whose next run begins at the next slot
      std::string gaps;
      for (std::size_t i = 1; i < starts.size(); ++i) {
        adjacent += starts[i] - starts[i - 1] == slot;
        gaps += " " + std::to_string((starts[i] - starts[i - 1]) >> 10);
      }
      // (not every one: the runs of the 20 KB burst given back before leave jemalloc's free
      // extents in pieces that a run of 1 MiB may skip; before, none was adjacent)
      EXPECT_GE(2 * adjacent, static_cast<int>(starts.size()) - 1)
          << size << " B: " << starts.size() << " runs, " << adjacent << " next to the one before; KiB apart:" << gaps;
    });
  }
}

// Note [Empty runs kept] under threads: four threads allocate bursts of blocks of run
// classes (1 KiB-128 KiB), each handing half of every burst to the next thread to free,
// while another gives the stashes back over and over (front_cache_release, as before a
// purge): every block keeps what its allocator wrote until it is freed, whoever frees
// it, so no block was handed out twice while live, and the runs all go back at the end.
TEST(FrontRuns, BurstsAcrossThreadsWithStashesGivenBackNeverShareALiveBlock) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr int kThreads = 4;
  constexpr int kRounds = 30;
  struct block {
    void* p;
    std::size_t n;
    std::uint32_t tag;
  };
  std::mutex mu[kThreads];
  std::vector<block> inbox[kThreads];
  std::atomic<int> damaged{0};
  std::atomic<bool> done{false};
  const auto check_and_free = [&](const block& b) {
    if (!intact(b.p, b.n, b.tag)) damaged.fetch_add(1);
    release(b.p);
  };
  std::thread releaser([&] {
    while (!done.load()) {
      be::front_cache_release();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 7);
      const std::size_t sizes[] = {1000, 3000, 8192, 20000, 70000, 131072};
      std::vector<block> mine;
      mine.reserve(512);
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t n = sizes[rng() % std::size(sizes)];
        const int count = 64 + static_cast<int>(rng() % 256);
        for (int i = 0; i < count; ++i) {
          void* p = pass(n);
          if (p == nullptr) continue;
          const auto tag = static_cast<std::uint32_t>(t * 1000003 + r * 1009 + i);
          fill(p, n, tag);
          mine.push_back(block{p, n, tag});
        }
        std::vector<block> theirs;
        {
          std::lock_guard<std::mutex> lock(mu[t]);
          theirs.swap(inbox[t]);
        }
        for (const block& b : theirs) check_and_free(b);
        {
          std::lock_guard<std::mutex> lock(mu[(t + 1) % kThreads]);
          for (std::size_t i = 0; i < mine.size(); i += 2) inbox[(t + 1) % kThreads].push_back(mine[i]);
        }
        for (std::size_t i = 1; i < mine.size(); i += 2) check_and_free(mine[i]);
        mine.clear();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  done.store(true);
  releaser.join();
  for (std::vector<block>& left : inbox) {
    for (const block& b : left) check_and_free(b);
    left.clear();
  }
  EXPECT_EQ(damaged.load(), 0) << "a live block was handed out again";
  be::front_cache_release();
  EXPECT_EQ(be::front_cache_stats().stashed_bytes, 0u);
}

// jemalloc never sees a run's block: realloc within its class keeps it, to another class
// moves it with its bytes, and malloc_usable_size says its class. A block of a run's class
// that jemalloc made itself (its realloc shrank a large block in place) goes back to
// jemalloc at its free, never to a list or a run.
TEST(FrontRuns, RunBlocksAreNeverJemallocs) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  void* p = pass(9000);
  ASSERT_NE(p, nullptr);
  std::size_t usable = 0;
  std::size_t below = 0;
  ASSERT_TRUE(be::front_run_block(p, &usable, &below));
  EXPECT_EQ(usable, 9216u) << "the cache's class (Note [A class for a page and a header]), not jemalloc's 10 KiB";
  EXPECT_EQ(below, 8192u);
  EXPECT_EQ(malloc_usable_size(p), usable);
  fill(p, 9000, 7);
  EXPECT_EQ(be::fallback_realloc(p, 9216), p) << "a realloc within the class moved the block";
  EXPECT_EQ(be::fallback_realloc(p, 8193), p) << "a realloc within the class moved the block";
  EXPECT_TRUE(intact(p, 8193, 7));
  // Out of the class either way: the block moves, to one of the new size's class.
  void* down = be::fallback_realloc(p, 8192);
  ASSERT_NE(down, nullptr);
  EXPECT_NE(down, p) << "a realloc to the class below kept a 9 KiB block";
  EXPECT_EQ(malloc_usable_size(down), 8192u);
  EXPECT_TRUE(intact(down, 8192, 7));
  p = be::fallback_realloc(down, 9217);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p, down) << "a realloc past the class kept an 8 KiB block";
  EXPECT_EQ(malloc_usable_size(p), 10240u);
  EXPECT_TRUE(intact(p, 8192, 7));
  void* q = be::fallback_realloc(p, 50000);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(intact(q, 8192, 7)) << "a run's block moved without its bytes";
  void* r = be::fallback_realloc(q, 5000);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(intact(r, 5000, 7));
  EXPECT_EQ(malloc_usable_size(r), nallocx(5000, 0));
  release(r);

  std::thread([&] {
    release(pass(100));
    void* big = pass(300000);  // a large class: an extent of jemalloc's in the range
    ASSERT_NE(big, nullptr);
    ASSERT_FALSE(be::front_run_block(big, &usable));
    void* shrunk = be::fallback_realloc(big, 20000);
    if (shrunk != big) {
      release(shrunk);
      GTEST_SKIP() << "jemalloc moved the block instead of shrinking it in place";
    }
    ASSERT_EQ(malloc_usable_size(shrunk), nallocx(20000, 0));
    ASSERT_FALSE(be::front_run_block(shrunk, &usable)) << "jemalloc's block taken for a run's";
    const std::uint64_t taken = jemalloc_counter("thread.deallocated");
    release(shrunk);
    EXPECT_EQ(jemalloc_counter("thread.deallocated") - taken, nallocx(20000, 0))
        << "jemalloc's block of a run's class was not given back to jemalloc";
    for (int i = 0; i < 64; ++i) {
      void* b = pass(20000);
      EXPECT_TRUE(be::front_run_block(b, &usable)) << "a block of a run's class that is not a run's";
      release(b);
    }
  }).join();
}

// Note [A run's block resized inline] (backend/front_inline.h): a realloc that moves a
// run's block takes the new block from the thread's list of its class (the block freed
// there last) and puts the old one on its own class's list (the next request of its size
// gets it), every byte both hold copied; one within its class keeps the block; to a large
// class, a block of the large class's. What the long way (fallback_alloc and
// fallback_free) did, without it.
TEST(FrontRuns, AReallocMovesARunsBlockFromListToList) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  const auto pattern = [](void* p, std::size_t n, unsigned tag) {
    for (std::size_t i = 0; i < n; ++i) static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(tag + i * 7);
  };
  const auto holds = [](const void* p, std::size_t n, unsigned tag) {
    for (std::size_t i = 0; i < n; ++i) {
      if (static_cast<const unsigned char*>(p)[i] != static_cast<unsigned char>(tag + i * 7)) return false;
    }
    return true;
  };
  std::thread([&] {
    void* b = pass(20000);  // 20 KiB's class
    void* a = pass(9000);   // 9 KiB's
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_LT(reinterpret_cast<std::uintptr_t>(a) - be::g_gate_range.from, be::g_gate_range.front)
        << "the block lies outside the gate's front part, where the realloc takes the long way";
    pattern(a, 9000, 5);
    release(b);  // the head of its class's list
    void* moved = be::fallback_realloc(a, 20000);
    EXPECT_EQ(moved, b) << "the moved block is not the one its class's list held first";
    EXPECT_TRUE(holds(moved, 9000, 5)) << "a run's block moved without its bytes";
    void* again = pass(9000);
    EXPECT_EQ(again, a) << "the old block is not on its class's list";
    EXPECT_EQ(be::fallback_realloc(again, 8193), again) << "a realloc within the class moved the block";
    pattern(moved, 20000, 9);
    void* small = be::fallback_realloc(moved, 100);
    ASSERT_NE(small, nullptr);
    EXPECT_NE(small, moved);
    EXPECT_EQ(malloc_usable_size(small), nallocx(100, 0));
    EXPECT_TRUE(holds(small, 100, 9)) << "shrunk to another class without its first bytes";
    EXPECT_EQ(pass(20000), moved) << "the old block is not on its class's list";
    void* big = be::fallback_realloc(small, 300000);  // a large class: not a run's
    ASSERT_NE(big, nullptr);
    std::size_t usable = 0;
    EXPECT_FALSE(be::front_run_block(big, &usable));
    EXPECT_GE(malloc_usable_size(big), 300000u);
    EXPECT_TRUE(holds(big, 100, 9));
    release(big);
    release(moved);
    release(again);
  }).join();
}

// Note [A class for a page and a header] (front_classes.cc), against the real jemalloc:
// every request from 1 B to 128 KiB gets a run block of the smallest class that holds
// it (the block's usable size at least the request, the class below smaller than it),
// the classes being jemalloc's (nallocx) but 4.5 and 9 KiB, which take the requests
// just above 4 and 8 KiB: 4,104 bytes (a SQLite page and its header) gets 4,608.
TEST(FrontRuns, EveryRequestGetsTheSmallestClassThatHoldsIt) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    for (std::size_t n = 1; n <= 128 * 1024; n += n < 16384 ? 8 : 256) {
      void* p = pass(n);
      ASSERT_NE(p, nullptr) << n;
      std::size_t usable = 0;
      std::size_t below = 0;
      ASSERT_TRUE(be::front_run_block(p, &usable, &below)) << n << " bytes not from a run";
      const std::size_t at_least = n < 16 ? 16 : n;
      ASSERT_GE(usable, at_least) << n;
      ASSERT_LT(below, at_least) << n << ": the class below holds it";
      const bool header = (n > 4096 && n <= 4608) || (n > 8192 && n <= 9216);
      ASSERT_EQ(usable, header ? (n <= 4608 ? 4608u : 9216u) : nallocx(at_least, 0)) << n;
      ASSERT_EQ(malloc_usable_size(p), usable) << n;
      std::memset(p, 0x5a, usable);  // every byte it says it has is its own
      release(p);
    }
    void* page = pass(4104);
    ASSERT_NE(page, nullptr);
    EXPECT_EQ(malloc_usable_size(page), 4608u) << "a 4 KiB page and its header in jemalloc's 5 KiB class";
    release(page);
    be::front_cache_release();  // no list, depot stack or empty run of these classes left to the tests after
  }).join();
}

// Blocks of the classes of 4.5 and 9 KiB (Note [A class for a page and a header]), 300
// of each live at once over several runs, each written over all of its usable size:
// none overlaps another, each keeps its bytes until freed, and blocks freed and asked
// again (half of them, then the other half) come back only once free.
TEST(FrontRuns, BlocksOfAPageAndAHeaderNeverOverlap) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    struct held {
      void* p;
      std::size_t usable;
      std::uint32_t tag;
    };
    std::vector<held> live;
    std::uint32_t next_tag = 1;
    const auto take = [&](std::size_t n) {
      void* p = pass(n);
      ASSERT_NE(p, nullptr);
      const std::size_t usable = malloc_usable_size(p);
      ASSERT_GE(usable, n);
      fill(p, usable, next_tag);
      live.push_back({p, usable, next_tag++});
    };
    const auto check = [&] {
      std::vector<std::pair<std::uintptr_t, std::size_t>> spans;
      for (const held& h : live) {
        ASSERT_TRUE(intact(h.p, h.usable, h.tag)) << "a live block of " << h.usable << " bytes changed";
        spans.emplace_back(reinterpret_cast<std::uintptr_t>(h.p), h.usable);
      }
      std::sort(spans.begin(), spans.end());
      for (std::size_t i = 1; i < spans.size(); ++i) {
        ASSERT_GE(spans[i].first - spans[i - 1].first, spans[i - 1].second) << "two live blocks overlap";
      }
    };
    for (int i = 0; i < 300; ++i) {
      take(4104 + i % 500);  // 4,104-4,603 bytes: the 4.5 KiB class
      take(8200 + i % 1000);  // 8,200-9,199 bytes: the 9 KiB class
    }
    check();
    for (int round = 0; round < 2; ++round) {
      std::vector<held> kept;
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (i % 2 == static_cast<std::size_t>(round)) {
          ASSERT_TRUE(intact(live[i].p, live[i].usable, live[i].tag));
          release(live[i].p);
        } else {
          kept.push_back(live[i]);
        }
      }
      live = kept;
      for (int i = 0; i < 150; ++i) {
        take(4608 - i);
        take(9216 - i);
      }
      check();
    }
    for (const held& h : live) release(h.p);
    be::front_cache_release();  // nothing of these classes left to the tests after
  }).join();
}

// Note [Small blocks the filters let through] (runtime/host_slow_path.cc): a free a
// recording's or a watcher's filter let through skips their tables only where the
// fallback knows the block to be smaller than the minimum (4 KiB here): a run's block
// of a smaller class. Never a block of the minimum or more, of a run or of jemalloc's
// (which the tables may hold: a miss there would leave a freed block in them), nor
// memory that is no block of the cache's.
TEST(FrontRuns, OnlyARunsBlockBelowTheMinimumIsKnownToBeBelowIt) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr std::size_t minimum = 4096;
  std::thread([&] {
    void* small = pass(64);
    void* below = pass(3000);
    void* at = pass(minimum);
    void* medium = pass(9000);
    void* large = pass(300000);  // a large class: an extent of jemalloc's in the range
    ASSERT_TRUE(small != nullptr && below != nullptr && at != nullptr && medium != nullptr && large != nullptr);
    std::size_t usable = 0;
    ASSERT_TRUE(be::front_run_block(small, &usable) && be::front_run_block(below, &usable));
    EXPECT_TRUE(be::fallback_block_below(small, minimum));
    EXPECT_TRUE(be::fallback_block_below(below, minimum));
    EXPECT_FALSE(be::fallback_block_below(at, minimum)) << "a block of the minimum taken for one below it";
    EXPECT_FALSE(be::fallback_block_below(medium, minimum)) << "a run's block of 9,000 bytes taken for one below 4 KiB";
    EXPECT_TRUE(be::fallback_block_below(medium, 1 << 20));
    EXPECT_FALSE(be::fallback_block_below(large, minimum)) << "jemalloc's block taken for one below the minimum";
    EXPECT_FALSE(be::fallback_block_below(large, std::size_t{1} << 30)) << "jemalloc's block is not known to the cache";
    int on_stack = 0;
    EXPECT_FALSE(be::fallback_block_below(&on_stack, minimum));
    // A block of the minimum's class or more shrunk in place by jemalloc's realloc is
    // jemalloc's, whatever its size now (Note [The front cache's page map]).
    void* shrunk = be::fallback_realloc(large, 2000);
    ASSERT_NE(shrunk, nullptr);
    if (!be::front_run_block(shrunk, &usable)) EXPECT_FALSE(be::fallback_block_below(shrunk, minimum));
    for (void* p : {small, below, at, medium, shrunk}) release(p);
  }).join();
}

// Note [Idle blocks before a new run]: 24 caches a row of 1 KiB longer each step, from 33
// to 64 rows (jemalloc's classes of 40, 48, 56 and 64 KiB, runs of 1 MiB: 25, 21, 18 and
// 16 blocks), as a decoder's K/V caches grow: each class's blocks, once the caches have
// left it, wait on the thread's list and in the depot, and go back to their runs before
// a later class's run is made of fresh memory, which then takes the run they left
// empty. Every cache keeps its bytes, and no two live caches overlap.
//
// The depot's budget follows the most threads with a cache open in the last second or
// two (Note [The depot's budget follows the threads]), so what ran before in the process
// (the whole suite runs in one under synchronous_planning) decides how many lists stay in
// the depot and how many go back to their runs: the caches grow in a child forked for
// them, whose count of threads is its own (front_cache_postfork), as in a process of its
// own, its inherited lists, depot and empty runs given back first. (Which of the front
// arenas its thread gets still depends on the threads before it: below.)
TEST(FrontRuns, CachesThatGrowTakeTheRunsOfTheClassesTheyLeft) {
  REQUIRE_RUNS();
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    auto pass = be::g_pass_malloc.load();
    auto release = be::g_plain_free.load();
    be::front_cache_release();
    int code = 0;  // 1: a cache lost its bytes, 2: two overlap, 3: too many runs made
    std::thread([&] {
      release(pass(100));  // the thread's cache made first
      constexpr std::size_t kCaches = 24;
      std::vector<void*> caches(kCaches, nullptr);
      std::vector<std::uintptr_t> at;
      at.reserve(kCaches);  // no run of a small class made below
      const be::front_cache_counts before = be::front_cache_stats();
      for (std::size_t rows = 33; rows <= 64 && code == 0; ++rows) {
        for (std::size_t c = 0; c < kCaches; ++c) {
          const auto tag = static_cast<std::uint32_t>(rows * 100 + c);
          void* grown = pass(rows * 1024);
          if (grown == nullptr) {
            code = 1;
            return;
          }
          fill(grown, rows * 1024, tag);
          if (caches[c] != nullptr) {
            if (!intact(caches[c], (rows - 1) * 1024, tag - 100)) code = 1;
            release(caches[c]);
          }
          caches[c] = grown;
        }
        at.clear();
        for (void* p : caches) at.push_back(reinterpret_cast<std::uintptr_t>(p));
        std::sort(at.begin(), at.end());
        for (std::size_t i = 1; i < at.size(); ++i) {
          if (at[i] - at[i - 1] < rows * 1024) code = 2;
        }
      }
      const be::front_cache_counts after = be::front_cache_stats();
      // One run of 40 KiB, two of 48 KiB (the first class's blocks still out as the second
      // fills its first run), none of 56 KiB (the 40 KiB one, emptied), one of 64 KiB (the
      // first 48 KiB run, emptied, serves 16; the second, 3 blocks written, is not worth
      // taking): 4; 5 where only a full depot's lists went back to their runs, and 5 where
      // the thread's arena is the other one of two (the arenas are handed out in turn: one
      // thread opened and closed before it in the child moves it; 2.4 MiB of lists left in
      // the depot there against 1.4, measured on 2 CPUs).
      if (code == 0 && after.runs_made - before.runs_made > 5) {
        std::fprintf(stderr, "%llu runs made of fresh memory where a left class's were idle\n",
                     static_cast<unsigned long long>(after.runs_made - before.runs_made));
        code = 3;
      }
      for (std::size_t c = 0; c < kCaches; ++c) {
        if (code == 0 && !intact(caches[c], 64 * 1024, static_cast<std::uint32_t>(6400 + c))) code = 1;
        release(caches[c]);
      }
    }).join();
    _exit(code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_NE(WEXITSTATUS(status), 1) << "a cache lost its bytes";
  EXPECT_NE(WEXITSTATUS(status), 2) << "two caches overlap";
  EXPECT_NE(WEXITSTATUS(status), 3) << "runs made of fresh memory where a left class's were idle";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Note [Idle blocks before a new run] across threads: four threads grow caches through
// the classes of 40-128 KiB at once, each freeing half of what it outgrows and handing
// the other half to its neighbour to free (so the depot holds every thread's lists, and
// the runs a thread's idle blocks empty hold blocks another thread frees). Whatever goes
// back to a run while another thread's idle walk or miss runs, no live block is handed
// out again: every cache keeps its bytes.
TEST(FrontRuns, CachesGrownByFourThreadsAtOnceNeverShareALiveBlock) {
  REQUIRE_RUNS();
  auto pass = be::g_pass_malloc.load();
  auto release = be::g_plain_free.load();
  constexpr unsigned kThreads = 4;
  constexpr std::size_t kCaches = 12;
  std::mutex handed_lock[kThreads];
  std::vector<void*> handed[kThreads];  // blocks thread t frees for its neighbour
  std::atomic<unsigned> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      release(pass(100));
      for (int round = 0; round < 3; ++round) {
        std::vector<void*> caches(kCaches, nullptr);
        for (std::size_t rows = 33; rows <= 128; rows += 3) {
          for (std::size_t c = 0; c < kCaches; ++c) {
            const auto tag = static_cast<std::uint32_t>(t * 100000 + rows * 100 + c);
            void* grown = pass(rows * 1024);
            if (grown == nullptr) {
              ++bad;
              continue;
            }
            fill(grown, rows * 1024, tag);
            if (void* old = caches[c]; old != nullptr) {
              if (!intact(old, (rows - 3) * 1024, tag - 300)) ++bad;
              if (c % 2 == 0) {
                release(old);
              } else {
                std::lock_guard<std::mutex> g(handed_lock[(t + 1) % kThreads]);
                handed[(t + 1) % kThreads].push_back(old);
              }
            }
            caches[c] = grown;
          }
          std::vector<void*> mine;
          {
            std::lock_guard<std::mutex> g(handed_lock[t]);
            mine.swap(handed[t]);
          }
          for (void* p : mine) release(p);
        }
        for (std::size_t c = 0; c < kCaches; ++c) {
          if (caches[c] == nullptr) continue;
          if (!intact(caches[c], 126 * 1024, static_cast<std::uint32_t>(t * 100000 + 12600 + c))) ++bad;
          release(caches[c]);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (auto& h : handed) {
    for (void* p : h) release(p);
  }
  EXPECT_EQ(bad.load(), 0u) << "a cache lost its bytes (a live block handed out twice) or a request failed";
}

// Note [Aligned requests in the front cache] (front_classes.cc): the fallback's aligned
// request (what posix_memalign passes on where no plan serves) of 1 B to 64 KiB aligned
// to 32 B-4 KiB (libtorch's tensors are 64) is a run block, aligned as asked, of the
// class of the size rounded up to the alignment (and at least it), whose whole class is
// so aligned; freed, it serves the same request again. (The backend's entry, not
// posix_memalign: auto mode may find this loop's period and serve it from a slab.)
TEST(FrontRuns, AlignedRequestsTakeTheClassOfTheSizeRoundedToTheAlignment) {
  REQUIRE_RUNS();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    for (std::size_t align = 32; align <= 4096; align *= 2) {
      for (std::size_t n = 1; n <= 64 * 1024; n += n < 4096 ? 24 : 1000) {
        void* p = be::fallback_alloc(n, align);
        ASSERT_NE(p, nullptr) << align << " " << n;
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << align << " " << n;
        std::size_t usable = 0;
        ASSERT_TRUE(be::front_run_block(p, &usable)) << n << " bytes aligned to " << align << " not from a run";
        const std::size_t at_least = n < align ? align : n;
        const std::size_t m = (at_least + align - 1) / align * align;
        const bool header = (m > 4096 && m <= 4608) || (m > 8192 && m <= 9216);
        ASSERT_EQ(usable, header ? (m <= 4608 ? 4608u : 9216u) : nallocx(m, 0)) << align << " " << n;
        ASSERT_EQ(usable % align, 0u) << "a class not every block of which is aligned to " << align;
        std::memset(p, 0x5a, usable);
        release(p);
        void* again = be::fallback_alloc(n, align);
        EXPECT_EQ(again, p) << "the freed aligned block did not serve the same request";
        // The engine's own containers free with their size and alignment
        // (internal_allocator): the block goes back to its list, never to jemalloc.
        be::fallback_free_sized(again, n, align);
        EXPECT_EQ(be::fallback_alloc(n, align), p) << "a sized free of an aligned block did not give it back to its list";
        release(p);
      }
    }
    be::front_cache_release();
  }).join();
}

// The same through the program's own calls below the minimum (never recorded, planned
// or watched, so never a slab's): posix_memalign, aligned_alloc and memalign of under
// g_small_limit bytes take the front cache's aligned class, and free gives the block back
// to its list for the next such request. (That they take it inline, without the slow
// path, is what perf.instruction_counts' below_min_preload_memalign_64 measures.)
TEST(FrontRuns, AlignedRequestsBelowTheMinimumAreTheCachesInline) {
  REQUIRE_RUNS();
  const std::uint64_t limit = __atomic_load_n(&detail::g_small_limit, __ATOMIC_ACQUIRE);
  if (limit <= 64) GTEST_SKIP() << "REPLAYALLOC_MIN_SIZE leaves no size below it";
  ASSERT_NE(be::g_plain_memalign.load(), nullptr) << "the front cache serves, but not aligned requests inline";
  std::thread([&] {
    for (std::size_t align : {32u, 64u, 256u, 4096u}) {
      for (std::size_t n = 1; n < limit && n <= 64 * 1024; n += 40) {
        void* p = nullptr;
        ASSERT_EQ(posix_memalign(&p, align, n), 0) << align << " " << n;
        std::size_t usable = 0;
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << align << " " << n;
        ASSERT_TRUE(be::front_run_block(p, &usable)) << n << " bytes aligned to " << align << " not from a run";
        ASSERT_GE(usable, n);
        std::memset(p, 0x11, usable);
        std::free(p);
        const std::size_t multiple = (n + align - 1) / align * align;  // aligned_alloc's size
        if (multiple < limit) {
          void* q = aligned_alloc(align, multiple);
          EXPECT_EQ(q, p) << "aligned_alloc did not take the block posix_memalign freed";
          std::free(q);
        }
        void* r = memalign(align, n);
        EXPECT_EQ(r, p) << "memalign did not take the block posix_memalign freed";
        std::free(r);
      }
    }
    be::front_cache_release();
  }).join();
}

// What the cache leaves to jemalloc stays jemalloc's, aligned as asked: an alignment
// above a page, and requests of 64 KiB or more (the Note says why); each freed by the
// fallback's free.
TEST(FrontRuns, AlignedRequestsBeyondTheCachesClassesAreJemallocs) {
  REQUIRE_RUNS();
  auto release = be::g_plain_free.load();
  std::thread([&] {
    const std::pair<std::size_t, std::size_t> cases[] = {{8192, 100}, {65536, 5000}, {64, 65536}, {64, 100000}, {4096, 300000}};
    for (const auto& [align, n] : cases) {
      void* p = be::fallback_alloc(n, align);
      ASSERT_NE(p, nullptr) << align << " " << n;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << align << " " << n;
      std::size_t usable = 0;
      EXPECT_FALSE(be::front_run_block(p, &usable)) << n << " bytes aligned to " << align << " from a run";
      EXPECT_GE(malloc_usable_size(p), n);
      std::memset(p, 0x33, n);
      release(p);
    }
  }).join();
}

// Four threads each keep 300 blocks of posix_memalign(64) of 16 B-64 KiB live, replace
// one at random each step, and free a third of what they replace on the next thread: no
// block is handed out twice (each keeps its bytes until freed) or misaligned.
TEST(FrontRuns, AlignedBlocksOfFourThreadsNeverShareALiveBlock) {
  REQUIRE_RUNS();
  constexpr unsigned kThreads = 4;
  std::mutex handed_lock[kThreads];
  std::vector<std::pair<void*, std::size_t>> handed[kThreads];
  std::atomic<unsigned> bad{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(900 + t);
      struct live {
        void* p = nullptr;
        std::size_t n = 0;
        std::uint32_t tag = 0;
      };
      std::vector<live> window(300);
      for (std::uint32_t step = 1; step <= 20000; ++step) {
        live& b = window[rng() % window.size()];
        if (b.p != nullptr) {
          if (!intact(b.p, b.n, b.tag)) ++bad;
          if (step % 3 == 0) {
            std::lock_guard<std::mutex> g(handed_lock[(t + 1) % kThreads]);
            handed[(t + 1) % kThreads].emplace_back(b.p, b.n);
          } else {
            std::free(b.p);
          }
        }
        b.n = (std::size_t{16} << (rng() % 13)) / 2 + rng() % 512 + 1;
        b.tag = t * 1000000 + step;
        if (posix_memalign(&b.p, 64, b.n) != 0 || reinterpret_cast<std::uintptr_t>(b.p) % 64 != 0) {
          ++bad;
          b.p = nullptr;
          continue;
        }
        fill(b.p, b.n, b.tag);
        if (step % 64 == 0) {
          std::vector<std::pair<void*, std::size_t>> mine;
          {
            std::lock_guard<std::mutex> g(handed_lock[t]);
            mine.swap(handed[t]);
          }
          for (auto& [p, n] : mine) std::free(p);
        }
      }
      for (live& b : window) {
        if (b.p == nullptr) continue;
        if (!intact(b.p, b.n, b.tag)) ++bad;
        std::free(b.p);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (auto& h : handed) {
    for (auto& [p, n] : h) std::free(p);
  }
  EXPECT_EQ(bad.load(), 0u) << "an aligned block lost its bytes (handed out twice), was misaligned, or was refused";
}

}  // namespace
}  // namespace replayalloc::contract
