// Regimes (Note [Regimes] in runtime/engine.h): one key whose iterations follow more
// than one structure, as a training loop alternating zero_grad(set_to_none=...) or a
// model whose kernels pick other workspaces at some shapes. Each structure is planned
// once, the next iteration's structure is predicted from the last two, and a wrong
// prediction costs fallbacks, never data.
//
// Every block carries a fill pattern checked before it is freed, and every block is
// checked against the iteration's live blocks: a slot smaller than its request, or one
// handed out over live bytes, fails the test.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/engine.h"
#include "support/block_ledger.h"

namespace {

using replayalloc::detail::backend::in_slab_range;

struct counts {
  std::uint64_t requests = 0;
  std::uint64_t in_slab = 0;
  std::uint64_t bad = 0;  // overwritten or overlapping blocks (block_ledger.h)
};

class program {
 public:
  // One iteration of structure `variant` (0..4): per layer, activations and `variant`
  // extra workspaces of a size no other variant uses (a kernel that picked another
  // algorithm). In each layer, as many more allocations of sizes never planned as the
  // layer's two bits of `extra` say (0-3).
  void run(const std::string& key, int variant, unsigned extra = 0) {
    replayalloc::Iteration it(key);
    void* x = make(48 << 10);
    for (int layer = 0; layer < 6; ++layer) {
      void* h = make(96 << 10);
      for (int w = 0; w < variant; ++w) {
        void* ws = make((20 + 4 * variant + w) << 10);
        drop(ws);
      }
      for (unsigned n = (extra >> (2 * layer)) & 3u; n > 0; --n) drop(make(12345 + tag_ % 1000));
      void* y = make(48 << 10);
      drop(h);
      drop(x);
      x = y;
    }
    drop(x);
  }

  counts c;

 private:
  void* make(std::size_t n) {
    void* p = replayalloc_malloc(n);
    c.bad += !ledger_.admit({p, n, ++tag_}, 16);
    ++c.requests;
    c.in_slab += in_slab_range(p);
    return p;
  }
  void drop(void* p) {
    const replayalloc::testing::checked_block b = ledger_.blocks().at(reinterpret_cast<std::uintptr_t>(p));
    c.bad += !ledger_.take(b);
    replayalloc_free(p);
  }

  replayalloc::testing::block_ledger ledger_;
  std::uint64_t tag_ = 0;
};

// Runs `pattern` (variants, repeated) `warm` times, then `n` more times counting.
counts run_pattern(const std::string& key, const std::vector<int>& pattern, int warm, int n) {
  program prog;
  for (int i = 0; i < warm; ++i) prog.run(key, pattern[i % pattern.size()]);
  prog.c = counts{};
  for (int i = warm; i < warm + n; ++i) prog.run(key, pattern[i % pattern.size()]);
  return prog.c;
}

TEST(Regimes, AlternatingStructuresBothReplay) {
  const replayalloc::Stats before = replayalloc::stats();
  const counts c = run_pattern("alternate", {0, 2}, 16, 40);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(c.bad, 0);
  EXPECT_EQ(c.in_slab, c.requests) << "every request of every iteration from the slab";
  EXPECT_EQ(after.plans - before.plans, 2u);
  EXPECT_EQ(after.regimes - before.regimes, 2u);
  EXPECT_EQ(after.rerecords - before.rerecords, 0u);
}

TEST(Regimes, APeriodicSequenceIsPredictedFromTheLastTwo) {
  // A A B: what follows A depends on what came before it.
  const counts c = run_pattern("periodic", {1, 1, 3}, 24, 60);
  EXPECT_EQ(c.bad, 0);
  EXPECT_EQ(c.in_slab, c.requests);
}

TEST(Regimes, ASecondStructureAfterPlanningIsFoundByAProbe) {
  program prog;
  for (int i = 0; i < 6; ++i) prog.run("later", 0);
  const replayalloc::Stats before = replayalloc::stats();
  // From now on the loop alternates: the second structure appears only after the
  // first was planned. Deviations, a probe, then both replay.
  for (int i = 0; i < 20; ++i) prog.run("later", i % 2 == 0 ? 4 : 0);
  const replayalloc::Stats mid = replayalloc::stats();
  EXPECT_GE(mid.probes - before.probes, 1u);
  EXPECT_EQ(mid.regimes - before.regimes, 1u);
  prog.c = counts{};
  for (int i = 20; i < 60; ++i) prog.run("later", i % 2 == 0 ? 4 : 0);
  EXPECT_EQ(prog.c.bad, 0);
  EXPECT_EQ(prog.c.in_slab, prog.c.requests);
  EXPECT_EQ(replayalloc::stats().plans, mid.plans);
}

TEST(Regimes, ExtraRequestsInOneStructureCostTheirFallbacksAndFewProbes) {
  // Every third iteration makes unplanned requests (noise, not a structure): each
  // costs one fallback; the probes they cause find nothing that repeats and back off
  // (4, 16, 64 iterations), so 90 iterations make only a few of them.
  program prog;
  for (int i = 0; i < 6; ++i) prog.run("extras", 2);
  const replayalloc::Stats before = replayalloc::stats();
  prog.c = counts{};
  std::mt19937 rng(3);
  std::uint64_t extras = 0;
  for (int i = 0; i < 90; ++i) {
    // Extras drawn each time (4,096 ways; at least 6 of them, more than
    // REPLAYALLOC_DEVIATION_PERCENT of the slots: the iteration deviates).
    unsigned extra = 0;
    while (i % 3 == 0 && std::popcount(extra) < 6) extra = rng() & 0xfffu;
    prog.run("extras", 2, extra);
    for (int layer = 0; layer < 6; ++layer) extras += (extra >> (2 * layer)) & 3u;
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(prog.c.bad, 0);
  const std::uint64_t probes = after.probes - before.probes;
  EXPECT_LE(probes, 6u);
  EXPECT_EQ(after.plans - before.plans, 0u);
  // The extras went to the backend, and the iterations recorded as probes.
  const std::uint64_t per_iteration = 1 + 6 * 4 + 18;
  EXPECT_LE(prog.c.requests - prog.c.in_slab, extras + probes * per_iteration);
  EXPECT_GE(prog.c.requests - prog.c.in_slab, extras);
}

TEST(Regimes, ARandomSequenceOfStructuresStaysSafeAndBounded) {
  // Two structures in random order: nothing predicts the next, so about half the
  // iterations deviate. Safety holds on every one, plans stay bounded, and what the
  // predictions get right replays.
  std::mt19937 rng(7);
  program prog;
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 300; ++i) prog.run("random", (rng() & 1) != 0 ? 1 : 4);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(prog.c.bad, 0);
  EXPECT_LE(after.plans - before.plans, 12u);
  EXPECT_LE(after.recordings - before.recordings, 40u);
  std::printf("random order of 2 structures: %.1f%% of requests from the slab, %llu plans, %llu recordings\n",
              100.0 * static_cast<double>(prog.c.in_slab) / static_cast<double>(prog.c.requests),
              static_cast<unsigned long long>(after.plans - before.plans),
              static_cast<unsigned long long>(after.recordings - before.recordings));
}

TEST(Regimes, MoreStructuresThanAKeyKeepsCostBoundedPlans) {
  // Five structures in rotation and four regime places: each new one would take the
  // place of the least recently seen, the one needed next. After 4 such replacements
  // the key keeps its plans, and the fifth structure is served by the backend.
  program prog;
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 400; ++i) prog.run("five", i % 5);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(prog.c.bad, 0);
  EXPECT_LE(after.plans - before.plans, 10u);
  EXPECT_LE(after.recordings - before.recordings, 40u);
  EXPECT_EQ(after.regimes - before.regimes, 4u);
  std::printf("5 structures in rotation: %.1f%% of requests from the slab, %llu plans, %llu recordings\n",
              100.0 * static_cast<double>(prog.c.in_slab) / static_cast<double>(prog.c.requests),
              static_cast<unsigned long long>(after.plans - before.plans),
              static_cast<unsigned long long>(after.recordings - before.recordings));
}

}  // namespace

// Note [Regimes by first size] (runtime/keys.cc): which regime an iteration whose first
// request is known follows, and when no regime is known to serve that size (it then
// records). Regimes without a plan: no first slot fits anything.
TEST(Regimes, FirstSizesPickTheirRangesRegimeAndRecordOutsideEveryRange) {
  using replayalloc::detail::key_entry;
  key_entry e;
  e.at_quiet = true;
  const auto add = [&](int r, std::uint64_t lo, std::uint64_t hi) {
    e.regimes[r].env = std::make_shared<replayalloc::envelope>();
    e.regimes[r].saw_first(lo);
    e.regimes[r].saw_first(hi);
  };
  EXPECT_EQ(e.regime_for_first_size(4096, -1).regime, -1) << "no ranges yet: the prediction decides";
  add(0, 16 << 10, 64 << 10);   // lengths 16..64
  add(1, 90 << 10, 125 << 10);  // 90..125
  add(2, 126 << 10, 255 << 10); // 126..255
  const auto pick = [&](std::uint64_t size, int predicted = -1) { return e.regime_for_first_size(size, predicted); };
  EXPECT_EQ(pick(40 << 10).regime, 0);
  EXPECT_FALSE(pick(40 << 10).unknown);
  EXPECT_EQ(pick(100 << 10).regime, 1);
  EXPECT_EQ(pick(200 << 10).regime, 2);
  EXPECT_TRUE(pick(70 << 10).unknown) << "between two ranges";
  EXPECT_EQ(pick(70 << 10).regime, 0) << "the regime below the gap";
  EXPECT_TRUE(pick(256 << 10).unknown) << "above every range, past a first slot that serves nothing";
  EXPECT_EQ(pick(256 << 10).regime, 2);
  EXPECT_TRUE(pick(8 << 10).unknown) << "below every range";
  e.regimes[1].saw_first(70 << 10);  // a recording at 70 joined regime 1
  EXPECT_EQ(pick(70 << 10).regime, 1);
  EXPECT_FALSE(pick(70 << 10).unknown);
  add(3, 30 << 10, 40 << 10);  // overlapping ranges: the one whose least first size is largest, or the prediction
  EXPECT_EQ(pick(35 << 10).regime, 3);
  EXPECT_EQ(pick(35 << 10, 0).regime, 0);
}

// Note [Regimes by first size]: outside every range a first slot that fits replays the
// nearest regime until such a replay is not clean; from then on, as far out as that size,
// the iteration records (the structure of its own is recorded and takes the size in).
TEST(Regimes, AFirstSizeWhoseReplayOfTheNearestRegimeWasNotCleanRecords) {
  using replayalloc::detail::key_entry;
  key_entry e;
  e.at_quiet = true;
  for (int r = 0; r < 2; ++r) {
    e.regimes[r].env = std::make_shared<replayalloc::envelope>();
    e.regimes[r].version = new replayalloc::detail::plan_version();
    replayalloc::detail::slot s;
    s.size = 1 << 20;
    s.least = 1;  // a slot that scales: any smaller first request fits it
    e.regimes[r].version->plan.slots.push_back(s);
  }
  e.regimes[0].saw_first(16 << 10);
  e.regimes[0].saw_first(31 << 10);
  e.regimes[1].saw_first(32 << 10);
  e.regimes[1].saw_first(64 << 10);
  const auto pick = [&](std::uint64_t size) { return e.regime_for_first_size(size, -1); };
  EXPECT_EQ(pick(12 << 10).regime, 0);
  EXPECT_FALSE(pick(12 << 10).unknown) << "below every range, the bottom regime's first slot fits";
  EXPECT_FALSE(pick(80 << 10).unknown) << "above every range, the top regime's first slot fits";
  e.regimes[0].refuse_first(12 << 10);  // its replay at 12 KiB deviated
  EXPECT_TRUE(pick(12 << 10).unknown);
  EXPECT_TRUE(pick(8 << 10).unknown) << "farther out too";
  EXPECT_FALSE(pick(14 << 10).unknown) << "nearer the range: still the bottom regime";
  e.regimes[1].refuse_first(80 << 10);
  EXPECT_TRUE(pick(80 << 10).unknown);
  EXPECT_TRUE(pick(100 << 10).unknown);
  EXPECT_FALSE(pick(70 << 10).unknown);
  e.regimes[0].refuse_first(20 << 10);  // inside its range: a deviation, not a range's edge
  EXPECT_EQ(e.regimes[0].refused_below, std::uint64_t{12} << 10);
  e.regimes[0].saw_first(10 << 10);  // a recording at 10 KiB joined regime 0 after all
  EXPECT_EQ(e.regimes[0].refused_below, 0u);
  EXPECT_FALSE(pick(12 << 10).unknown);
  EXPECT_EQ(pick(12 << 10).regime, 0);
  for (int r = 0; r < 2; ++r) delete e.regimes[r].version;

  // Iterations cut by a count of allocations: never unknown, and one regime decides nothing.
  key_entry counted;
  counted.regimes[0].env = std::make_shared<replayalloc::envelope>();
  counted.regimes[0].saw_first(16 << 10);
  EXPECT_EQ(counted.regime_for_first_size(1 << 20, -1).regime, -1);
  EXPECT_FALSE(counted.regime_for_first_size(1 << 20, -1).unknown);
  counted.regimes[1].env = std::make_shared<replayalloc::envelope>();
  counted.regimes[1].saw_first(128 << 10);
  EXPECT_EQ(counted.regime_for_first_size(1 << 20, -1).regime, 1);
  EXPECT_EQ(counted.regime_for_first_size(8 << 10, -1).regime, 0);
  EXPECT_FALSE(counted.regime_for_first_size(8 << 10, -1).unknown);
}
