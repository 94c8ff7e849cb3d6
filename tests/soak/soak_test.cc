// Soak: a service fed ever-new shapes keeps flat memory (Note [Bounds]). Eight
// threads for REPLAYALLOC_SOAK_SECONDS (default 40) run iterations: most of a few
// recurring shapes (planned and replayed), the rest of shapes never seen before (a new
// key each), with unplanned extra allocations and blocks handed to other threads to
// free. Every block's pattern is checked before its free. Resident memory, committed
// slab bytes and remembered keys are sampled; after a warm-up third, none may keep
// growing. Not a benchmark.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "support/options.h"
#include "support/pattern.h"

namespace replayalloc::detail {
namespace {

using replayalloc::testing::fill;
using replayalloc::testing::intact;

constexpr std::uint32_t max_plans = 64;
constexpr std::uint64_t max_slab_memory = std::uint64_t{96} << 20;
constexpr int threads = 8;

std::uint64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * 4096ull : 0;
}

struct handoff {
  std::mutex mu;
  std::vector<std::pair<void*, std::pair<std::size_t, std::uint64_t>>> blocks;
};

TEST(Soak, NewShapesForeverKeepMemoryFlat) {
  options o;
  o.mode = run_mode::replay;
  o.min_size = 0;
  o.verbose = 0;
  o.max_plans = max_plans;
  o.max_slab_memory = max_slab_memory;
  ASSERT_TRUE(set_process_options(o));
  const char* env = std::getenv("REPLAYALLOC_SOAK_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 40;
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> corrupt{0}, iterations{0}, new_shapes{0};
  handoff shared;

  auto worker = [&](int id) {
    std::mt19937_64 rng(1234 + id);
    std::uint64_t tag = std::uint64_t(id) << 40;
    std::uint64_t fresh = 0;
    int fresh_left = 0;  // a new shape is served three times in a row: recorded, planned, replayed
    while (!stop.load(std::memory_order_relaxed)) {
      const bool recurring = fresh_left == 0 && rng() % 10 < 7;
      if (!recurring && fresh_left == 0) {
        ++fresh;
        fresh_left = 3;
        new_shapes.fetch_add(1, std::memory_order_relaxed);
      }
      if (!recurring) --fresh_left;
      const std::uint64_t shape = recurring ? rng() % 8 : (std::uint64_t(id) << 32) | fresh;
      const std::string key = (recurring ? "shape/" : "new/") + std::to_string(shape);
      std::mt19937_64 sizes(shape);  // the shape decides its sizes
      const int layers = 4 + static_cast<int>(sizes() % 12);
      replayalloc_iteration_begin(key.c_str());
      std::size_t act_n = 1024 + sizes() % (256 * 1024);
      void* act = replayalloc_malloc(act_n);
      fill(act, act_n, ++tag);
      std::uint64_t act_tag = tag;
      for (int l = 0; l < layers; ++l) {
        const std::size_t work_n = 64 + sizes() % 65536;
        void* work = replayalloc_malloc(work_n);
        fill(work, work_n, ++tag);
        if (!intact(work, work_n, tag)) corrupt.fetch_add(1);
        replayalloc_free(work);
        if (rng() % 8 == 0) {  // an unplanned extra, freed by whichever thread comes next
          const std::size_t n = 16 + rng() % 20000;
          void* x = replayalloc_malloc(n);
          fill(x, n, ++tag);
          std::lock_guard<std::mutex> lock(shared.mu);
          shared.blocks.push_back({x, {n, tag}});
        }
        const std::size_t next_n = 1024 + sizes() % (256 * 1024);
        void* next = replayalloc_malloc(next_n);
        fill(next, next_n, ++tag);
        if (!intact(act, act_n, act_tag)) corrupt.fetch_add(1);
        replayalloc_free(act);
        act = next;
        act_n = next_n;
        act_tag = tag;
      }
      if (!intact(act, act_n, act_tag)) corrupt.fetch_add(1);
      replayalloc_free(act);
      replayalloc_iteration_end();
      iterations.fetch_add(1, std::memory_order_relaxed);
      std::vector<std::pair<void*, std::pair<std::size_t, std::uint64_t>>> mine;
      {
        std::lock_guard<std::mutex> lock(shared.mu);
        if (shared.blocks.size() > 64) mine.swap(shared.blocks);
      }
      for (auto& [p, nt] : mine) {
        if (!intact(p, nt.first, nt.second)) corrupt.fetch_add(1);
        replayalloc_free(p);
      }
    }
  };

  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, i);
  struct sample {
    double t;
    std::uint64_t rss, mapped, keys;
  };
  std::vector<sample> samples;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < stop_at) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const Stats s = stats();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    samples.push_back({t, rss_bytes(), s.mapped_bytes, s.keys});
    EXPECT_LE(s.mapped_bytes, max_slab_memory);
    EXPECT_LE(s.keys, max_plans + threads);  // keys held by running iterations may exceed it
  }
  stop.store(true);
  for (auto& t : pool) t.join();
  for (auto& [p, nt] : shared.blocks) {
    if (!intact(p, nt.first, nt.second)) corrupt.fetch_add(1);
    replayalloc_free(p);
  }
  const Stats s = stats();
  std::printf("soak: %d s, %llu iterations, %llu new shapes, %llu slab hits, %llu fallbacks, "
              "%llu plans, %llu evicted, corruptions %llu\n",
              seconds, (unsigned long long)iterations.load(), (unsigned long long)new_shapes.load(),
              (unsigned long long)s.slab_hits, (unsigned long long)s.fallbacks,
              (unsigned long long)s.plans, (unsigned long long)s.plans_evicted,
              (unsigned long long)corrupt.load());
  for (std::size_t i = 0; i < samples.size(); i += std::max<std::size_t>(1, samples.size() / 10)) {
    std::printf("soak: t=%5.1f s  rss %6.1f MiB  slabs %6.1f MiB  keys %llu\n", samples[i].t,
                samples[i].rss / 1048576.0, samples[i].mapped / 1048576.0,
                (unsigned long long)samples[i].keys);
  }
  EXPECT_EQ(corrupt.load(), 0u);
  EXPECT_GT(s.slab_hits, 0u);
  EXPECT_GT(s.plans_evicted, 0u);
  ASSERT_GE(samples.size(), 6u);
  // Flat: the peak resident size over the last two thirds exceeds the peak over the
  // second third by at most 10% + 16 MiB (allocator noise), however many new shapes came.
  const std::size_t third = samples.size() / 3;
  std::uint64_t early = 0, late = 0;
  for (std::size_t i = third; i < 2 * third; ++i) early = std::max(early, samples[i].rss);
  for (std::size_t i = 2 * third; i < samples.size(); ++i) late = std::max(late, samples[i].rss);
  std::printf("soak: peak rss %.1f MiB (second third) -> %.1f MiB (last third)\n",
              early / 1048576.0, late / 1048576.0);
  EXPECT_LE(late, early + early / 10 + (std::uint64_t{16} << 20));
}

}  // namespace
}  // namespace replayalloc::detail
