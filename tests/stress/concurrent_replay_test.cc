// Concurrent replay: many threads replaying the same plan, each on its own slab, with
// blocks freed on other threads and after their iteration ended, extra allocations of
// unplanned sizes, and threads that come and go. Fixed seeds; not a benchmark.
//
// Every block carries a fill pattern checked by whichever thread frees it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "support/pattern.h"

namespace {

using replayalloc::detail::backend::in_slab_range;
using replayalloc::testing::fill;
using replayalloc::testing::intact;

struct block {
  void* p;
  std::size_t size;
  std::uint64_t tag;
};

// A mailbox of blocks to be freed by some other thread.
class mailbox {
 public:
  void put(block b) {
    outstanding_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.push_back(b);
  }
  // Blocks put and not yet freed (some may be in another thread's hands, being freed).
  int outstanding() const { return outstanding_.load(); }
  // Frees (after checking) every block in the box. Returns false on corruption.
  bool drain() {
    std::vector<block> mine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      mine.swap(blocks_);
    }
    bool ok = true;
    for (const block& b : mine) {
      ok = ok && intact(b.p, b.size, b.tag);
      replayalloc_free(b.p);
      outstanding_.fetch_sub(1);
    }
    return ok;
  }

 private:
  std::atomic<int> outstanding_{0};
  std::mutex mu_;
  std::vector<block> blocks_;
};

// The iteration every thread runs: layers of activations and workspaces.
constexpr std::size_t k_sizes[] = {96 << 10, 64 << 10, 128 << 10, 4096, 160 << 10, 32 << 10, 100, 8192};

// Runs one iteration. With `chaos`, adds unplanned allocations and hands one block to
// the mailbox instead of freeing it. Returns the first block's address (kept live
// until `hold` returns) and false on corruption.
bool run_iteration(const char* key, std::mt19937_64& rng, bool chaos, mailbox& box,
                   std::uint64_t tag_base, void** first, const std::function<void()>& hold) {
  replayalloc::Iteration it(key);
  std::vector<block> live;
  bool ok = true;
  for (std::size_t layer = 0; layer < std::size(k_sizes); ++layer) {
    block b{replayalloc_malloc(k_sizes[layer]), k_sizes[layer], tag_base + layer};
    if (b.p == nullptr) return false;
    fill(b.p, b.size, b.tag);
    if (layer == 0) {
      *first = b.p;
      hold();
    }
    if (chaos && rng() % 4 == 0) {
      const std::size_t n = 1 + rng() % 20000;  // an allocation the plan never saw
      void* x = replayalloc_malloc(n);
      fill(x, n, tag_base + 1000);
      ok = ok && intact(x, n, tag_base + 1000);
      replayalloc_free(x);
    }
    live.push_back(b);
    // Free the block two layers back (a residual connection keeps one more alive).
    if (live.size() > 2) {
      block old = live.front();
      live.erase(live.begin());
      if (chaos && rng() % 8 == 0) {
        box.put(old);  // freed by another thread, maybe after this iteration ends
      } else {
        ok = ok && intact(old.p, old.size, old.tag);
        replayalloc_free(old.p);
      }
    }
  }
  for (const block& b : live) {
    ok = ok && intact(b.p, b.size, b.tag);
    replayalloc_free(b.p);
  }
  return ok;
}

TEST(ConcurrentReplay, EightThreadsEachReplayOnTheirOwnSlab) {
  constexpr int k_threads = 8;
  constexpr int k_warmup = 4;
  constexpr int k_iterations = 150;
  // The meeting: once warm, and before any chaos, all threads hold their first block at
  // the same moment, and the addresses must all differ (one slab each) and all be a
  // slab's. Before it nothing deviates, so nothing can retire the plan, record the key
  // again or set it aside, and the plan was installed before the threads began: every
  // thread replays there whatever the scheduler does (a meeting amid the chaos depended
  // on what the chaos had done to the key just before: it failed under ctest -j beside
  // two busy loops, 1 run in 25). The chaos comes after it.
  constexpr int k_meet = 3;
  mailbox box;
  std::atomic<int> corrupt{0};
  std::atomic<std::uint64_t> in_slab{0}, total{0}, late{0};
  std::mutex firsts_mu;
  std::vector<void*> firsts;
  std::barrier sync(k_threads);

  // One thread records and plans the key first, so all threads start warm.
  std::thread([&] {
    std::mt19937_64 rng(1);
    void* first = nullptr;
    for (int i = 0; i < k_warmup; ++i) {
      if (!run_iteration("stress", rng, false, box, 0, &first, [] {})) ++corrupt;
    }
  }).join();
  replayalloc_wait_plans();  // a plan made on the planner thread is installed by now

  const replayalloc::Stats before = replayalloc::stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      void* first = nullptr;
      for (int i = 0; i < k_iterations; ++i) {
        const bool chaos = i > k_meet && i % 3 == 2;
        const bool meet = i == k_meet;
        // A block another thread still holds (put in the mailbox, not yet freed) may sit
        // on this iteration's slot: the miss is right (overlap_live), and how often it
        // happens is the scheduler's doing, so such iterations are counted apart.
        const bool clean = box.outstanding() == 0;
        auto hold = [&] {
          if (!meet) return;
          {
            std::lock_guard<std::mutex> lock(firsts_mu);
            firsts.push_back(first);
          }
          sync.arrive_and_wait();
        };
        if (!run_iteration("stress", rng, chaos, box, (t + 1) * 1000000ull + i * 100, &first, hold)) {
          ++corrupt;
        }
        if (!chaos && !clean) ++late;
        if (!chaos && clean) {
          ++total;
          if (in_slab_range(first)) ++in_slab;
        }
        if (!box.drain()) ++corrupt;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(box.drain());
  EXPECT_EQ(corrupt.load(), 0);
  ASSERT_EQ(firsts.size(), static_cast<std::size_t>(k_threads));
  EXPECT_EQ(std::set<void*>(firsts.begin(), firsts.end()).size(), static_cast<std::size_t>(k_threads))
      << "threads shared a slab";
  EXPECT_EQ(std::count_if(firsts.begin(), firsts.end(), [](void* p) { return in_slab_range(p); }), k_threads)
      << "a thread did not replay at the meeting";
  // Without chaos, the steady state is served from the slab, but for the few
  // iterations recorded to learn whether the chaos is another structure (Note
  // [Regimes]: such recordings back off, 4, 16, .. 4,096 iterations apart; each is one
  // iteration recorded).
  const std::uint64_t recordings = replayalloc::stats().recordings - before.recordings;
  const replayalloc::Stats end = replayalloc::stats();
  std::printf("chaos in 1 of 3 iterations: %llu recordings (%llu probes), %llu regimes, %llu plans, %llu no-slab "
              "fallbacks, %llu of %llu other iterations from the slab (%llu more began with late frees pending)\n",
              static_cast<unsigned long long>(recordings), static_cast<unsigned long long>(end.probes - before.probes),
              static_cast<unsigned long long>(end.regimes), static_cast<unsigned long long>(end.plans - before.plans),
              static_cast<unsigned long long>(end.fallback_no_slab - before.fallback_no_slab),
              static_cast<unsigned long long>(in_slab.load()), static_cast<unsigned long long>(total.load()),
              static_cast<unsigned long long>(late.load()));
  // Without the backoff a probe would follow most of the ~400 chaos iterations; with it,
  // 6-21 were seen (a chaos structure that happens to repeat becomes a regime of its
  // own, and the probes that find it again do not back off).
  EXPECT_LE(recordings, 40u);
  // Besides the recorded iterations, a few may mispredict a regime.
  EXPECT_GE(in_slab.load() + recordings + 8, total.load());
}

TEST(ConcurrentReplay, ThreadsComingAndGoingWithOpenIterations) {
  const replayalloc::Stats before = replayalloc::stats();
  mailbox box;
  std::atomic<int> corrupt{0};
  for (int wave = 0; wave < 6; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(wave * 10 + t);
        void* first = nullptr;
        for (int i = 0; i < 20; ++i) {
          if (!run_iteration("waves", rng, i % 2 == 1, box, wave * 100000ull + t * 1000 + i * 10,
                             &first, [] {})) {
            ++corrupt;
          }
        }
        // Exit with an iteration open and a block live: the thread's exit ends it.
        replayalloc_iteration_begin("waves");
        void* p = replayalloc_malloc(k_sizes[0]);
        fill(p, k_sizes[0], 77);
        box.put({p, k_sizes[0], 77});
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_TRUE(box.drain());
  }
  EXPECT_EQ(corrupt.load(), 0);
  const replayalloc::Stats s = replayalloc::stats();
  EXPECT_GT(s.slab_hits, before.slab_hits);
  EXPECT_EQ(s.double_frees, before.double_frees);
  EXPECT_EQ(s.invalid_frees, before.invalid_frees);
}

}  // namespace
