// Tests for Note [Bounds] (REPLAYALLOC_MAX_PLANS, REPLAYALLOC_MAX_SLAB_MEMORY) and for
// out-of-memory while recording, planning and making slabs. Each runs in a fresh
// process (the engine reads its options once) and exits 0 only when every check held;
// every block carries a pattern checked before its free.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "support/options.h"
#include "support/pattern.h"

namespace replayalloc::detail {
namespace {

using replayalloc::testing::fill;
using replayalloc::testing::intact;

void start(std::uint32_t max_plans, std::uint64_t max_slab_memory) {
  options o;
  o.mode = run_mode::replay;
  o.min_size = 0;
  o.verbose = 0;
  o.background_planning = false;  // iteration by iteration, as the suite's ENV says (tests/CMakeLists.txt)
  o.max_plans = max_plans;
  o.max_slab_memory = max_slab_memory;
  if (!set_process_options(o)) std::abort();
}

#define REQUIRE(cond)                                                   \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #cond); \
      std::exit(10);                                                    \
    }                                                                   \
  } while (0)

// One iteration of `key`: a few layers of `bytes`-sized activations and workspaces.
// Returns false when a block lost its pattern.
bool iteration(const std::string& key, std::size_t bytes, std::uint64_t tag) {
  replayalloc_iteration_begin(key.c_str());
  bool ok = true;
  void* act = replayalloc_malloc(bytes);
  fill(act, bytes, tag);
  for (int layer = 0; layer < 6; ++layer) {
    void* work = replayalloc_malloc(bytes / 4 + 64 * layer);
    fill(work, bytes / 4 + 64 * layer, tag + 100 + layer);
    void* next = replayalloc_malloc(bytes);
    fill(next, bytes, tag + 200 + layer);
    ok &= intact(work, bytes / 4 + 64 * layer, tag + 100 + layer);
    replayalloc_free(work);
    ok &= intact(act, bytes, layer == 0 ? tag : tag + 200 + layer - 1);
    replayalloc_free(act);
    act = next;
  }
  ok &= intact(act, bytes, tag + 205);
  replayalloc_free(act);
  replayalloc_iteration_end();
  return ok;
}

class Bounds : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(Bounds, MaxPlansForgetsTheLeastRecentlyUsedIdleKeys) {
  EXPECT_EXIT(
      {
        start(4, std::uint64_t{1} << 40);
        // A block from key 0's slab, held while 40 other keys come and go.
        REQUIRE(iteration("k0", 8192, 1) && iteration("k0", 8192, 2));
        replayalloc_iteration_begin("k0");
        void* held = replayalloc_malloc(8192);
        REQUIRE(backend::in_slab_range(held));
        fill(held, 8192, 77);
        replayalloc_iteration_end();
        for (int k = 1; k <= 40; ++k) {
          const std::string key = "k" + std::to_string(k);
          for (int i = 0; i < 3; ++i) REQUIRE(iteration(key, 4096 + 64 * k, 1000 * k + i));
          REQUIRE(stats().keys <= 4);
        }
        const Stats s = stats();
        REQUIRE(s.plans_evicted >= 36);
        REQUIRE(s.slab_hits > 0);
        REQUIRE(intact(held, 8192, 77));  // its plan is retired, its slab still there
        replayalloc_free(held);
        // A forgotten key records again and replays again.
        for (int i = 0; i < 3; ++i) REQUIRE(iteration("k1", 4096 + 64, 5000 + i));
        REQUIRE(stats().slab_hits > s.slab_hits);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// iteration(key, 256 KiB) peaks at 576 KiB + 320 B: a slab of 145 pages (580 KiB).
// 1.25 MiB holds two such slabs, not three.
constexpr std::uint64_t limit_two = std::uint64_t{1280} << 10;

// The documented minimum of REPLAYALLOC_MAX_SLAB_MEMORY (1M) admits a slab smaller than
// a chunk of the slab range: the limit counts committed pages, not reserved chunks.
TEST_F(Bounds, MaxSlabMemoryAtItsMinimumStillReplaysSmallPlans) {
  EXPECT_EXIT(
      {
        start(1000, std::uint64_t{1} << 20);
        for (int i = 0; i < 4; ++i) REQUIRE(iteration("small", 64 * 1024, i));
        const Stats s = stats();
        REQUIRE(s.fallback_no_slab == 0);
        REQUIRE(s.slab_hits >= 2 * 13);
        REQUIRE(s.mapped_bytes > 0 && s.mapped_bytes <= (std::uint64_t{1} << 20));
        REQUIRE(s.mapped_bytes % 4096 == 0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Bounds, MaxSlabMemoryUnmapsIdleSlabsOfOtherKeysFirst) {
  EXPECT_EXIT(
      {
        // Each key's slab commits 580 KiB (its peak, page-rounded); at most two fit.
        start(1000, limit_two);
        for (int round = 0; round < 3; ++round) {
          for (int k = 0; k < 6; ++k) {
            const std::string key = "s" + std::to_string(k);
            for (int i = 0; i < 3; ++i) REQUIRE(iteration(key, 256 * 1024, 10 * k + i));
            REQUIRE(stats().mapped_bytes <= limit_two);
          }
        }
        const Stats s = stats();
        REQUIRE(s.fallback_no_slab == 0);  // idle slabs made room every time
        REQUIRE(s.slab_hits >= 6 * 3 * 13);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Bounds, MaxSlabMemoryPassesThroughWhenEverySlabIsBusy) {
  EXPECT_EXIT(
      {
        start(1000, limit_two);
        for (int k = 0; k < 3; ++k) {
          for (int i = 0; i < 3; ++i) REQUIRE(iteration("b" + std::to_string(k), 256 * 1024, i));
        }
        // Three threads hold an iteration open at once: two slabs fit, the third
        // iteration passes through to the backend.
        std::vector<std::thread> threads;
        std::vector<void*> blocks(3);
        std::atomic<int> opened{0};
        std::atomic<int> done{0};
        for (int k = 0; k < 3; ++k) {
          threads.emplace_back([&, k] {
            replayalloc_iteration_begin(("b" + std::to_string(k)).c_str());
            blocks[k] = replayalloc_malloc(256 * 1024);
            fill(blocks[k], 256 * 1024, 900 + k);
            opened.fetch_add(1);
            while (opened.load() < 3) std::this_thread::yield();
            REQUIRE(intact(blocks[k], 256 * 1024, 900 + k));
            replayalloc_free(blocks[k]);
            replayalloc_iteration_end();
            done.fetch_add(1);
          });
        }
        for (auto& t : threads) t.join();
        int in_slab = 0;
        for (void* b : blocks) in_slab += backend::in_slab_range(b) ? 1 : 0;
        REQUIRE(in_slab <= 2);
        REQUIRE(stats().mapped_bytes <= limit_two);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Out of memory inside the engine, at every point a recording, a plan or a slab can
// need memory: the program's blocks stay intact, nothing crashes, and once memory is
// back the key is recorded, planned and replayed.
TEST_F(Bounds, OutOfMemoryInsideTheEngineFallsBackAndKeepsServing) {
  EXPECT_EXIT(
      {
        start(1000, std::uint64_t{1} << 40);
        std::uint64_t tag = 1;
        for (int failures = 1; failures <= 60; ++failures) {
          const std::string key = "oom" + std::to_string(failures);
          backend::fail_engine_allocations(failures);
          for (int i = 0; i < 4; ++i) REQUIRE(iteration(key, 16384, tag++));
          backend::fail_engine_allocations(0);
          for (int i = 0; i < 4; ++i) REQUIRE(iteration(key, 16384, tag++));
        }
        const Stats s = stats();
        REQUIRE(s.plans >= 30);  // most keys were planned once memory came back
        REQUIRE(s.slab_hits > 0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// The same on a new thread each time, whose recorder is made fresh and must grow while
// the engine's memory runs out: the allocation is served all the same (the allocation
// interface never throws: without the catch the process ends in std::terminate), the
// recording is abandoned, and every block keeps its bytes.
TEST_F(Bounds, OutOfMemoryOnAFreshThreadWhileRecordingNeverThrows) {
  EXPECT_EXIT(
      {
        start(1000, std::uint64_t{1} << 40);
        std::uint64_t tag = 1;
        for (int failures = 1; failures <= 40; ++failures) {
          std::thread([&] {
            const std::string key = "oomthread" + std::to_string(failures);
            // The recorder exists (made by the first allocation); its arrays must grow
            // past their first capacity while the engine's memory is gone.
            replayalloc_iteration_begin(key.c_str());
            std::vector<std::pair<void*, std::uint64_t>> held;
            for (int i = 0; i < 200; ++i) {
              if (i == 1) backend::fail_engine_allocations(failures);
              void* p = replayalloc_malloc(8192);
              REQUIRE(p != nullptr);
              fill(p, 8192, tag + static_cast<std::uint64_t>(i));
              held.emplace_back(p, tag + static_cast<std::uint64_t>(i));
            }
            for (auto& [p, t] : held) {
              REQUIRE(intact(p, 8192, t));
              replayalloc_free(p);
            }
            replayalloc_iteration_end();
            tag += 200;
            backend::fail_engine_allocations(0);
            for (int i = 0; i < 4; ++i) REQUIRE(iteration(key, 16384, tag++));
          }).join();
        }
        REQUIRE(stats().slab_hits > 0);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Auto mode: a thread that marks nothing, its watcher's history and table growing.
TEST_F(Bounds, OutOfMemoryWhileAutoModeWatchesAFreshThreadNeverThrows) {
  EXPECT_EXIT(
      {
        std::uint64_t tag = 1;
        options o;
        o.mode = run_mode::automatic;
        o.min_size = 0;
        o.verbose = 0;
        o.background_planning = false;  // iteration by iteration, as the suite's ENV says (tests/CMakeLists.txt)
        REQUIRE(set_process_options(o));
        for (int failures = 1; failures <= 24; failures += 3) {
          std::thread([&] {
            std::vector<std::pair<void*, std::size_t>> held;
            for (int i = 0; i < 3000; ++i) {
              // The watcher exists by then; its history and table must grow.
              if (i == 40) backend::fail_engine_allocations(failures);
              const std::size_t n = 4096 + 512 * static_cast<std::size_t>(i % 7);
              void* p = replayalloc_malloc(n);
              REQUIRE(p != nullptr);
              fill(p, n, tag + static_cast<std::uint64_t>(i));
              held.emplace_back(p, n);
              if (held.size() > 3) {
                REQUIRE(intact(held.front().first, held.front().second, tag + static_cast<std::uint64_t>(i) - 3));
                replayalloc_free(held.front().first);
                held.erase(held.begin());
              }
            }
            for (auto& [p, n] : held) replayalloc_free(p);
            backend::fail_engine_allocations(0);
          }).join();
          tag += 3000;
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [Tables that grow before they insert]: one thread, auto mode, up to 300 blocks
// held so that the watcher's table of live blocks grows again and again (its history
// short, so that each out-of-memory rest ends soon and the watch starts over), while
// one engine allocation in every few fails: wherever that failure lands (the history,
// the table's growth), the watcher drops what it had and goes on, and every block keeps
// its bytes. With an Abseil table grown in place by its insert, a growth that threw left
// it inconsistent and the rest's clear() wrote past its arrays.
TEST_F(Bounds, OutOfMemoryWhileAutoModesTableGrowsKeepsEveryByte) {
  EXPECT_EXIT(
      {
        options o;
        o.mode = run_mode::automatic;
        o.min_size = 0;
        o.verbose = 0;
        o.auto_history = 256;
        o.background_planning = false;
        REQUIRE(set_process_options(o));
        std::thread([] {
          std::vector<std::pair<void*, std::uint64_t>> held;
          for (std::uint64_t i = 0; i < 20000; ++i) {
            if (i % 13 == 5) backend::fail_engine_allocations(1);
            const std::size_t n = 4096 + 512 * static_cast<std::size_t>(i % 5);
            void* p = replayalloc_malloc(n);
            REQUIRE(p != nullptr);
            fill(p, 4096, i);
            held.emplace_back(p, i);
            if (held.size() > 300 || (i % 1000) > 900) {
              REQUIRE(intact(held.front().first, 4096, held.front().second));
              replayalloc_free(held.front().first);
              held.erase(held.begin());
            }
          }
          backend::fail_engine_allocations(0);
          for (auto& [p, tag] : held) {
            REQUIRE(intact(p, 4096, tag));
            replayalloc_free(p);
          }
        }).join();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace replayalloc::detail
