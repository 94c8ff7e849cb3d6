// Note [Improved plans] (runtime/plans.cc): after the planner thread installs `best`'s
// plan above its lower bound, it searches for a smaller one and swaps it in at an
// iteration boundary; a plan still to be made stops the search. Default options (the
// planner thread on, REPLAYALLOC_PLAN_SEARCH_MS=250), C API, replay mode. Statistics
// are process-wide, so the tests compare deltas.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/slab_range.h"
#include "planner/planner.h"
#include "planner/search.h"
#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/planner_thread.h"

namespace {

using replayalloc::detail::backend::in_slab_range;

// A block of an iteration: allocated at event `at`, freed at event `until`.
struct block {
  std::size_t size;
  std::uint32_t at, until;
};

// Random lifetimes over 2n events and sizes of 4 KiB plus up to 1 MiB, log-uniform: n
// blocks, each event one allocation or one free.
std::vector<block> random_blocks(std::mt19937_64& rng, int n) {
  std::vector<std::uint32_t> events(2 * n);
  for (int i = 0; i < n; ++i) events[2 * i] = events[2 * i + 1] = i;
  std::shuffle(events.begin(), events.end(), rng);
  std::vector<block> b(n, block{0, UINT32_MAX, 0});
  for (std::uint32_t e = 0; e < events.size(); ++e) {
    block& x = b[events[e]];
    if (x.at == UINT32_MAX) x.at = e; else x.until = e;
  }
  for (block& x : b) x.size = 4096 + 1 + rng() % (std::uint64_t{1} << (rng() % 21));  // log-uniform
  std::sort(b.begin(), b.end(), [](const block& l, const block& r) { return l.at < r.at; });
  return b;
}

// The trace the engine records for one iteration of `b` (malloc's alignment, the
// engine's default slot alignment of 64 in the planner's options).
replayalloc::trace trace_of(const std::vector<block>& b) {
  replayalloc::trace t;
  t.key = "improve";
  t.ops = {"unknown"};
  for (std::size_t i = 0; i < b.size(); ++i) {
    replayalloc::trace_allocation a;
    a.id = i;
    a.size = b[i].size;
    a.alloc_at = b[i].at;
    a.free_at = b[i].until;
    t.allocations.push_back(a);
  }
  t.events = 2 * b.size();
  return t;
}

struct chosen {
  std::vector<block> blocks;
  std::uint64_t best = 0, lower_bound = 0;
};

// The first random iteration whose `best` plan is above the lower bound and which the
// search improves within a small budget of nodes (well inside 250 ms, even under a
// sanitizer).
chosen improvable_iteration(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  replayalloc::planner_options o;
  o.slot_align = 64;
  for (int tries = 0; tries < 500; ++tries) {
    std::vector<block> b = random_blocks(rng, 40 + static_cast<int>(rng() % 80));
    const replayalloc::trace t = trace_of(b);
    absl::StatusOr<replayalloc::placement> best = replayalloc::plan_best(t, o);
    if (!best.ok() || best->slab_bytes == best->lower_bound_bytes) continue;
    replayalloc::search_options s;
    s.time_limit_s = 0;
    s.max_nodes = 500;
    absl::StatusOr<replayalloc::search_result> r = replayalloc::search_plan(t, o, s);
    if (r.ok() && r->plan.slab_bytes < best->slab_bytes) return {b, best->slab_bytes, best->lower_bound_bytes};
  }
  return {};
}

// One iteration of `b` under `key`, every block filled and checked before its free;
// returns how many blocks came from a slab.
int iteration(const char* key, const std::vector<block>& b) {
  replayalloc_iteration_begin(key);
  std::vector<unsigned char*> p(b.size(), nullptr);
  int in_slab = 0;
  for (std::uint32_t e = 0; e < 2 * b.size(); ++e) {
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (b[i].at == e) {
        p[i] = static_cast<unsigned char*>(replayalloc_malloc(b[i].size));
        EXPECT_NE(p[i], nullptr);
        std::memset(p[i], static_cast<int>(i & 0xff), b[i].size);
        in_slab += in_slab_range(p[i]) ? 1 : 0;
      } else if (b[i].until == e) {
        bool intact = true;
        for (std::size_t k = 0; k < b[i].size; k += 256) intact &= p[i][k] == static_cast<unsigned char>(i);
        EXPECT_TRUE(intact) << key << ": block " << i << " overwritten";
        replayalloc_free(p[i]);
      }
    }
  }
  replayalloc_iteration_end();
  return in_slab;
}

TEST(ImprovedPlans, ASmallerPlanFromTheSearchIsSwappedInAndServes) {
  const chosen c = improvable_iteration(0x1a2b3c);
  ASSERT_FALSE(c.blocks.empty()) << "no random iteration the search improves";
  const replayalloc::Stats before = replayalloc::stats();
  iteration("improve/swap", c.blocks);
  iteration("improve/swap", c.blocks);  // the second recording: a plan is queued
  replayalloc_wait_plans();             // best's plan, then the search's
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.plans - before.plans, 1u) << "an improvement counted as a plan";
  EXPECT_EQ(after.plans_improved - before.plans_improved, 1u) << "the search's smaller plan was not swapped in";
  EXPECT_GT(after.plan_search_us_total, before.plan_search_us_total);
  const std::uint64_t slab = after.slab_bytes - before.slab_bytes;
  EXPECT_LT(slab, c.best) << "the key's plan is not smaller than best's";
  EXPECT_GE(slab, c.lower_bound);
  // The swapped-in plan serves every block, and no block is overwritten.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(iteration("improve/swap", c.blocks), static_cast<int>(c.blocks.size())) << "iteration " << i;
  }
  const replayalloc::Stats replayed = replayalloc::stats();
  EXPECT_EQ(replayed.fallbacks, after.fallbacks);
  EXPECT_EQ(replayed.rerecords, after.rerecords);
}

// The planner thread's hook, one job at a time: the n-th job to reach it (counting
// from 1) waits until `g_released` is at least n, so a test releases jobs by number and
// knows which one is held (a job that reaches the hook after a release of its number
// passes; one that reaches it before waits, whatever the timing).
std::atomic<int> g_released{0};
std::atomic<int> g_held{0};  // jobs that reached the hook

void hold_hook() {
  const int n = g_held.fetch_add(1) + 1;
  while (g_released.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Waits up to 10 s for `n` jobs to have reached the hook.
bool reached(int n) {
  for (int i = 0; i < 10000 && g_held.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return g_held.load() >= n;
}

TEST(ImprovedPlans, APlanToBeMadeStopsTheSearch) {
  const chosen c = improvable_iteration(0x1a2b3c);
  ASSERT_FALSE(c.blocks.empty());
  g_held.store(0);
  g_released.store(0);
  replayalloc::detail::g_plan_job_hook.store(&hold_hook);
  const replayalloc::Stats before = replayalloc::stats();
  iteration("improve/yield", c.blocks);
  iteration("improve/yield", c.blocks);  // best's plan queued: job 1, held at the hook
  ASSERT_TRUE(reached(1));
  g_released.store(1);  // best's plan is made; the improvement is queued: job 2, held
  ASSERT_TRUE(reached(2)) << "no improvement was queued after best's plan";
  // The improvement is the planner thread's current job, held before it searches. Another
  // key's recording ends: its plan to be made (job 3) stops the search, which then keeps
  // best's plan. (Blocks one after another: best's plan is at the lower bound, nothing to
  // improve.)
  std::vector<block> other;
  for (std::uint32_t i = 0; i < 8; ++i) other.push_back({8192, 2 * i, 2 * i + 1});
  iteration("improve/other", other);
  iteration("improve/other", other);
  g_released.store(1 << 20);  // every job from here on
  replayalloc_wait_plans();
  replayalloc::detail::g_plan_job_hook.store(nullptr);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(g_held.load(), 3) << "jobs through the hook: best's plan, the improvement, the other key's plan";
  EXPECT_EQ(after.plans - before.plans, 2u) << "the other key's plan was not made";
  EXPECT_EQ(after.plans_improved - before.plans_improved, 0u) << "the stopped search swapped a plan in";
  EXPECT_EQ(iteration("improve/yield", c.blocks), static_cast<int>(c.blocks.size()));
}

}  // namespace
