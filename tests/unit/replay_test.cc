// Replay: after warm-up a repeating iteration is served from the slab, and every
// deviation from the recording falls back without ever handing out live memory.
//
// Each test uses its own plan key; statistics are process-wide, so tests compare
// deltas. Every block carries a fill pattern checked before it is freed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/engine.h"
#include "support/log.h"
#include "support/pattern.h"
#include "trace/trace_io.h"

namespace {

using replayalloc::testing::fill;
using replayalloc::testing::intact;
using replayalloc::detail::backend::in_slab_range;

// One step of an iteration: allocate block `id` of `size` bytes, or free block `id`.
struct step {
  bool alloc;
  int id;
  std::size_t size = 0;
};
step A(int id, std::size_t size) { return {true, id, size}; }
step F(int id) { return {false, id, 0}; }

struct block {
  void* p = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
};

// Runs `steps` (without opening an iteration), filling every block and checking its
// pattern before freeing it. Blocks not freed by the steps are left in `live`.
void run_steps(const std::vector<step>& steps, std::map<int, block>& live, std::uint64_t salt,
               std::vector<void*>* order = nullptr) {
  for (const step& s : steps) {
    if (s.alloc) {
      block b{replayalloc_malloc(s.size), s.size, salt * 1000 + static_cast<std::uint64_t>(s.id)};
      ASSERT_NE(b.p, nullptr);
      fill(b.p, b.size, b.tag);
      if (order) order->push_back(b.p);
      ASSERT_TRUE(live.emplace(s.id, b).second) << "test bug: id " << s.id << " reused";
    } else {
      auto it = live.find(s.id);
      ASSERT_NE(it, live.end());
      ASSERT_TRUE(intact(it->second.p, it->second.size, it->second.tag))
          << "block " << s.id << " was overwritten while live";
      replayalloc_free(it->second.p);
      live.erase(it);
    }
  }
}

void check_and_free_all(std::map<int, block>& live) {
  for (auto& [id, b] : live) {
    ASSERT_TRUE(intact(b.p, b.size, b.tag)) << "block " << id << " was overwritten while live";
    replayalloc_free(b.p);
  }
  live.clear();
}

// Runs one whole iteration of `key`. Returns the pointers in allocation order.
std::vector<void*> iteration(const std::string& key, const std::vector<step>& steps,
                             std::uint64_t salt) {
  std::map<int, block> live;
  std::vector<void*> order;
  {
    replayalloc::Iteration it(key);
    EXPECT_TRUE(it.ok());
    run_steps(steps, live, salt, &order);
  }
  check_and_free_all(live);
  return order;
}

// A small inference-shaped iteration: activations that chain, a workspace freed at
// once, a residual kept across three layers.
const std::vector<step> k_model = {
    A(1, 4096),  A(2, 65536), F(2),  A(3, 8192), F(1),  A(4, 8192),  A(5, 1000),
    F(5),        A(6, 4096),  F(3),  F(4),       A(7, 300), A(8, 16384), F(7), F(6), F(8),
};
constexpr int k_model_allocs = 8;

// Warms `key` up: two identical recordings make a plan (REPLAYALLOC_RECORD_ITERATIONS=2).
void warm_up(const std::string& key, const std::vector<step>& steps) {
  const std::uint64_t plans = replayalloc::stats().plans;
  iteration(key, steps, 1);
  iteration(key, steps, 2);
  ASSERT_EQ(replayalloc::stats().plans, plans + 1) << "two identical recordings should plan";
}

TEST(Replay, SteadyStateIsServedFromTheSlabWithTheSamePointers) {
  warm_up("steady", k_model);
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> first;
  for (int i = 0; i < 20; ++i) {
    std::vector<void*> ptrs = iteration("steady", k_model, 10 + i);
    for (void* p : ptrs) EXPECT_TRUE(in_slab_range(p));
    if (i == 0) first = ptrs;
    EXPECT_EQ(ptrs, first) << "iteration " << i;
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.slab_hits - before.slab_hits, 20u * k_model_allocs);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  EXPECT_EQ(after.rerecords, before.rerecords);
  // Blocks whose lifetimes are disjoint share bytes: the slab is smaller than the sum.
  EXPECT_LT(after.slab_bytes - before.slab_bytes, 4096u + 65536 + 8192 * 2 + 1000 + 4096 + 300 + 16384);
}

// Note [The first slab with the plan]: a plan made where its recording ended comes
// with its slab, pages faulted in; the first replayed iteration pays no more than the
// next: no page fault (a 4 MiB block, 1,024 pages, would fault every one of them in a
// slab made by the iteration), and its bytes are the slab's.
TEST(Replay, TheFirstReplayedIterationFindsItsSlabMadeAndFaultsNoPage) {
  const auto faults = [] {
    rusage r{};
    getrusage(RUSAGE_THREAD, &r);
    return r.ru_minflt;
  };
  const std::vector<step> big = {A(1, 4 << 20), A(2, 8192), F(1), A(3, 65536), F(2), F(3)};
  const std::uint64_t mapped = replayalloc::stats().mapped_bytes;
  warm_up("first-slab", big);
  const replayalloc::Stats before = replayalloc::stats();
  // The slab is there before the first replayed iteration begins (whatever the page
  // size its faults come in: with huge pages a slab made by the iteration would fault
  // only a few).
  EXPECT_GE(before.mapped_bytes, mapped + (4 << 20)) << "no slab made with the plan";
  const long f0 = faults();
  std::vector<void*> ptrs;
  {
    replayalloc::Iteration it("first-slab");
    ASSERT_TRUE(it.ok());
    for (int i = 0; i < 3; ++i) {
      ptrs.push_back(replayalloc_malloc(i == 0 ? 4 << 20 : i == 1 ? 8192 : 65536));
      ASSERT_NE(ptrs.back(), nullptr);
      std::memset(ptrs.back(), 0x5a, i == 0 ? 4 << 20 : i == 1 ? 8192 : 65536);  // every page written
      if (i == 1) replayalloc_free(ptrs[0]);
    }
    replayalloc_free(ptrs[1]);
    replayalloc_free(ptrs[2]);
  }
  const long f1 = faults();
  for (void* p : ptrs) EXPECT_TRUE(in_slab_range(p));
  EXPECT_EQ(replayalloc::stats().slab_hits - before.slab_hits, 3u);
  // Under 1/4 of the slab's pages (ASan's shadow of the 4 MiB written is 128 pages).
  EXPECT_LT(f1 - f0, 256) << "the first replayed iteration faulted its slab's pages in";
  // And the next replays the same slab, its bytes as the first's.
  EXPECT_EQ(iteration("first-slab", big, 3), ptrs);
}

TEST(Replay, PlanRespectsTheLowerBound) {
  warm_up("bound", k_model);
  const replayalloc::Stats s = replayalloc::stats();
  EXPECT_GE(s.slab_bytes, s.lower_bound_bytes);
  EXPECT_GT(s.lower_bound_bytes, 0u);
}

TEST(Replay, BiggerSizeFallsBackAndOthersStillHit) {
  warm_up("bigger", k_model);
  std::vector<step> changed = k_model;
  changed[1].size = 70000;  // block 2: 65536 recorded
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> ptrs = iteration("bigger", changed, 20);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_FALSE(in_slab_range(ptrs[1]));
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs - 1u);
}

TEST(Replay, ExtraAllocationFallsBackWithoutShiftingTheCursor) {
  warm_up("extra", k_model);
  std::vector<step> changed = k_model;
  changed.insert(changed.begin() + 4, {A(100, 777), F(100)});
  changed.insert(changed.begin() + 1, A(101, 4096));  // same size as a planned slot ahead
  changed.push_back(F(101));
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> ptrs = iteration("extra", changed, 21);
  const replayalloc::Stats after = replayalloc::stats();
  // Block 101 (4096 B) matches a slot further ahead, but the next request is the one
  // the cursor expects, so the look-ahead is not taken: both extras cost one fallback
  // each and every planned block still hits.
  EXPECT_EQ(after.slab_hits - before.slab_hits, static_cast<std::uint64_t>(k_model_allocs));
  EXPECT_EQ(after.fallback_size_mismatch - before.fallback_size_mismatch, 2u);
  EXPECT_FALSE(in_slab_range(ptrs[1]));
}

TEST(Replay, MissingAllocationIsSkippedAndTheRestHits) {
  warm_up("missing", k_model);
  std::vector<step> changed;
  for (const step& s : k_model) {
    if (s.id != 5) changed.push_back(s);  // block 5 (1000 B) is never made
  }
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> ptrs = iteration("missing", changed, 22);
  const replayalloc::Stats after = replayalloc::stats();
  // Block 6 matches the slot after the missing one: it falls back once, then block 7
  // confirms the jump and the rest of the iteration hits.
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs - 2u);
  EXPECT_EQ(after.fallback_size_mismatch - before.fallback_size_mismatch, 1u);
  ASSERT_EQ(ptrs.size(), 7u);
  EXPECT_FALSE(in_slab_range(ptrs[4]));  // block 6
  for (int i : {0, 1, 2, 3, 5, 6}) EXPECT_TRUE(in_slab_range(ptrs[i])) << i;
}

TEST(Replay, BlockHeldPastItsRecordedFreeIsNeverHandedOutAgain) {
  // Lifetimes:        0  1  2  3  4  5
  //   1 (64 KiB)      [--]
  //   2 (64 KiB)            [--]        shares 1's bytes in the plan
  //   3 (64 KiB)                  [--]  shares them too
  const std::vector<step> rec = {A(1, 65536), F(1), A(2, 65536), F(2), A(3, 65536), F(3)};
  warm_up("held", rec);
  const std::vector<void*> planned = iteration("held", rec, 30);
  ASSERT_EQ(planned[0], planned[1]) << "the plan should reuse the bytes";
  // Now block 1 is held to the end: 2 and 3 must not be placed on its bytes.
  const std::vector<step> held = {A(1, 65536), A(2, 65536), F(2), A(3, 65536), F(3), F(1)};
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> ptrs = iteration("held", held, 31);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_NE(ptrs[1], ptrs[0]);
  EXPECT_NE(ptrs[2], ptrs[0]);
  EXPECT_EQ(after.fallback_overlap_live - before.fallback_overlap_live, 2u);
}

// Note [Freed prefix] (replay/slot_record.h): the hit hands a slot out without reading
// state words when the thread has seen the frees of every earlier slot on its bytes.
// A free out of order moves the free cursor past a block still live; the slot after
// must still see that block.
TEST(Replay, AFreeOutOfOrderNeverLetsALaterSlotOntoABlockStillLive) {
  // Recorded: 3 is planned on 1's bytes (and perhaps 2's): both were freed before it.
  const std::vector<step> rec = {A(1, 131072), A(2, 65536), F(1), F(2), A(3, 131072), F(3)};
  warm_up("freed-prefix", rec);
  const std::vector<void*> planned = iteration("freed-prefix", rec, 40);
  for (void* p : planned) ASSERT_TRUE(in_slab_range(p));
  // Now 2 is freed first (the free cursor, expecting 1, is moved past 1 by the
  // prediction) and 1 is held: 3 must not be placed on 1's bytes. run_steps checks
  // 1's pattern before freeing it.
  const std::vector<step> out_of_order = {A(1, 131072), A(2, 65536), F(2), A(3, 131072), F(3), F(1)};
  const replayalloc::Stats before = replayalloc::stats();
  const std::vector<void*> ptrs = iteration("freed-prefix", out_of_order, 41);
  const replayalloc::Stats after = replayalloc::stats();
  const auto a1 = reinterpret_cast<std::uintptr_t>(ptrs[0]);
  const auto a3 = reinterpret_cast<std::uintptr_t>(ptrs[2]);
  EXPECT_TRUE(a3 + 131072 <= a1 || a1 + 131072 <= a3) << "block 3 was placed on live block 1";
  EXPECT_EQ(after.fallback_overlap_live - before.fallback_overlap_live, 1u);
  // The next iteration in the recorded order replays wholly from the slab again.
  const replayalloc::Stats before_clean = replayalloc::stats();
  EXPECT_EQ(iteration("freed-prefix", rec, 42), planned);
  EXPECT_EQ(replayalloc::stats().fallbacks, before_clean.fallbacks);
}

// A block held past its recorded free makes the slot after it on its bytes fall back
// (it is passed over, blocked). Once that block is freed, the slots after the one
// passed over are served from the slab again: the one passed over is found free.
TEST(Replay, SlotsAfterABlockHeldLongerAreServedOnceItIsFreed) {
  const std::vector<step> rec = {A(1, 65536), F(1), A(2, 65536), F(2),
                                 A(3, 65536), F(3), A(4, 65536), F(4)};
  warm_up("held-then-freed", rec);
  const std::vector<void*> planned = iteration("held-then-freed", rec, 50);
  ASSERT_EQ(planned[0], planned[1]) << "the plan should reuse the bytes";
  const std::vector<step> held = {A(1, 65536), A(2, 65536), F(1), F(2),
                                  A(3, 65536), F(3), A(4, 65536), F(4)};
  const replayalloc::Stats before = replayalloc::stats();
  const std::vector<void*> ptrs = iteration("held-then-freed", held, 51);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_FALSE(in_slab_range(ptrs[1])) << "block 2 was placed on live block 1";
  EXPECT_TRUE(in_slab_range(ptrs[2]));
  EXPECT_TRUE(in_slab_range(ptrs[3]));
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, 3u);
}

TEST(Replay, BlockFreedOnAnotherThreadIsAccountedAndTheSlabReused) {
  warm_up("remote", k_model);
  const replayalloc::Stats before = replayalloc::stats();
  for (int round = 0; round < 5; ++round) {
    std::map<int, block> live;
    {
      replayalloc::Iteration it("remote");
      run_steps({A(1, 4096), A(2, 65536)}, live, 40 + round);
      // Another thread frees block 2 while the iteration runs.
      block b2 = live[2];
      live.erase(2);
      std::thread([&] {
        EXPECT_TRUE(intact(b2.p, b2.size, b2.tag));
        replayalloc_free(b2.p);
      }).join();
      run_steps({A(3, 8192), F(1), A(4, 8192), A(5, 1000), F(5), A(6, 4096), F(3), F(4), A(7, 300),
                 A(8, 16384), F(7), F(6), F(8)},
                live, 40 + round);
    }
    check_and_free_all(live);
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.remote_frees - before.remote_frees, 5u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, 5u * k_model_allocs);
}

TEST(Replay, BlockFreedAfterTheIterationEndedKeepsItsSlabOutOfThePool) {
  warm_up("late", k_model);
  std::map<int, block> held;
  std::vector<void*> first;
  {
    replayalloc::Iteration it("late");
    std::map<int, block> live;
    run_steps({A(1, 4096)}, live, 50, &first);
    held = live;  // block 1 is kept past the iteration's end
    live.clear();
    std::map<int, block> rest;
    std::vector<step> tail(k_model.begin() + 1, k_model.end());
    for (auto& s : tail) {
      if (!s.alloc && s.id == 1) s = A(99, 64);  // replace F(1) by something harmless
    }
    run_steps(tail, rest, 50);
    check_and_free_all(rest);
  }
  // The next iterations must run on another slab: block 1's bytes stay untouched.
  for (int i = 0; i < 3; ++i) {
    std::vector<void*> ptrs = iteration("late", k_model, 51 + i);
    for (void* p : ptrs) EXPECT_NE(p, first[0]);
    ASSERT_TRUE(intact(held[1].p, held[1].size, held[1].tag));
  }
  check_and_free_all(held);  // the slab drains and goes back to the pool
  // Holding one block per iteration and freeing it later must not grow memory without bound.
  const std::uint64_t mapped = replayalloc::stats().mapped_bytes;
  for (int i = 0; i < 50; ++i) {
    std::map<int, block> keep;
    {
      replayalloc::Iteration it("late");
      run_steps(k_model, keep, 60 + i);  // all freed inside...
    }
    check_and_free_all(keep);
  }
  EXPECT_LE(replayalloc::stats().mapped_bytes, mapped);
}

TEST(Replay, IterationThatNeverEndsFallsBackBeyondThePlanAndEndsAtThreadExit) {
  warm_up("endless", k_model);
  const replayalloc::Stats before = replayalloc::stats();
  std::thread([] {
    ASSERT_EQ(replayalloc_iteration_begin("endless"), 0);
    std::map<int, block> live;
    run_steps(k_model, live, 70);
    // Keep going as if the iteration never ended: a second round is beyond the plan.
    std::vector<step> again;
    for (const step& s : k_model) again.push_back({s.alloc, s.id + 100, s.size});
    run_steps(again, live, 71);
    // One block stays live at thread exit; it must survive the iteration's forced end.
    run_steps({A(500, 4096)}, live, 72);
    ASSERT_EQ(live.size(), 1u);
    block b = live.begin()->second;
    // Hand it to the parent through a global by copying into a heap box.
    static block survivor;
    survivor = b;
  }).join();
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.slab_hits - before.slab_hits, static_cast<std::uint64_t>(k_model_allocs));
  EXPECT_EQ(after.fallback_beyond_plan - before.fallback_beyond_plan, k_model_allocs + 1u);
  // The thread's exit ended the iteration; the next one replays normally.
  std::vector<void*> ptrs = iteration("endless", k_model, 73);
  for (void* p : ptrs) EXPECT_TRUE(in_slab_range(p));
}

TEST(Replay, NestedIterationsJoinTheOuterOne) {
  EXPECT_EQ(replayalloc_iteration_begin("outer"), 0);
  EXPECT_EQ(replayalloc_iteration_begin("inner"), REPLAYALLOC_NESTED);
  {
    replayalloc::Iteration nested("inner2");
    EXPECT_TRUE(nested.nested());
  }
  EXPECT_EQ(replayalloc_iteration_end(), REPLAYALLOC_NESTED);
  EXPECT_EQ(replayalloc_iteration_end(), 0);
  errno = 0;
  EXPECT_EQ(replayalloc_iteration_end(), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(replayalloc_iteration_begin(""), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(replayalloc_iteration_begin(nullptr), -1);
}

// Note [Regimes]: a lasting change of structure becomes a second regime of the key,
// planned once, and the first one keeps its plan: both patterns replay afterwards.
TEST(Replay, PersistentDeviationBecomesARegimeAndBothPatternsReplay) {
  warm_up("drift", k_model);
  std::vector<step> other = {A(1, 12345), A(2, 54321), F(1), A(3, 777), F(2), F(3)};
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 10; ++i) iteration("drift", other, 80 + i);
  const replayalloc::Stats mid = replayalloc::stats();
  EXPECT_EQ(mid.plans - before.plans, 1u);
  EXPECT_EQ(mid.rerecords - before.rerecords, 0u);
  // Two deviating replays, then a probe of two recordings (the second plans).
  EXPECT_EQ(mid.probes - before.probes, 2u);
  EXPECT_EQ(mid.regimes - before.regimes, 1u);
  for (void* p : iteration("drift", other, 95)) EXPECT_TRUE(in_slab_range(p));
  // The first pattern comes back: one deviating replay, then its plan again.
  iteration("drift", k_model, 96);
  for (int i = 0; i < 3; ++i) {
    for (void* p : iteration("drift", k_model, 97 + i)) EXPECT_TRUE(in_slab_range(p)) << i;
  }
  EXPECT_EQ(replayalloc::stats().plans - before.plans, 1u);
}

TEST(Replay, ReallocOfASlabBlockMovesItsBytes) {
  const std::vector<step> rec = {A(1, 4096), F(1), A(2, 4096), F(2)};
  warm_up("realloc", rec);
  replayalloc::Iteration it("realloc");
  void* p = replayalloc_malloc(4096);
  ASSERT_TRUE(in_slab_range(p));
  fill(p, 4096, 7);
  void* q = replayalloc_realloc(p, 100000);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(intact(q, 4096, 7));
  EXPECT_GE(replayalloc_usable_size(q), 100000u);
  replayalloc_free(q);
}

TEST(Replay, CallocIsZeroEvenOnReusedSlabBytes) {
  const std::vector<step> rec = {A(1, 8192), F(1)};
  warm_up("calloc", rec);
  for (int i = 0; i < 3; ++i) {
    replayalloc::Iteration it("calloc");
    auto* p = static_cast<unsigned char*>(replayalloc_calloc(1024, 8));
    ASSERT_TRUE(in_slab_range(p));
    for (int k = 0; k < 8192; ++k) ASSERT_EQ(p[k], 0) << "byte " << k;
    std::memset(p, 0xab, 8192);  // dirty it for the next iteration
    replayalloc_free(p);
  }
}

TEST(Replay, AlignedAllocationsKeepTheirAlignment) {
  for (int i = 0; i < 5; ++i) {
    replayalloc::Iteration it("aligned");
    void* a = replayalloc_aligned_alloc(4096, 10000);
    void* b = replayalloc_malloc(100);
    void* c = nullptr;
    ASSERT_EQ(replayalloc_posix_memalign(&c, 256, 3000), 0);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) % 256, 0u);
    if (i >= 2) {
      EXPECT_TRUE(in_slab_range(a));
      EXPECT_TRUE(in_slab_range(c));
    }
    replayalloc_free(a);
    replayalloc_free(b);
    replayalloc_free(c);
  }
}

TEST(Replay, OutlivingAllocationsAreServedByTheBackend) {
  std::vector<void*> outputs;
  for (int i = 0; i < 5; ++i) {
    replayalloc::Iteration it("outlive");
    void* tmp = replayalloc_malloc(4096);
    void* out = replayalloc_malloc(2048);  // the iteration's output, freed later
    fill(out, 2048, 100 + i);
    replayalloc_free(tmp);
    outputs.push_back(out);
  }
  for (int i = 2; i < 5; ++i) EXPECT_FALSE(in_slab_range(outputs[i]));
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(intact(outputs[i], 2048, 100 + i));
    replayalloc_free(outputs[i]);
  }
}

TEST(Replay, DoubleAndInvalidFreesOfSlabBlocksAreRefused) {
  const std::vector<step> rec = {A(1, 4096), F(1)};
  warm_up("double", rec);
  replayalloc::Iteration it("double");
  void* p = replayalloc_malloc(4096);
  ASSERT_TRUE(in_slab_range(p));
  const replayalloc::Stats before = replayalloc::stats();
  ::testing::internal::CaptureStderr();
  replayalloc_free(static_cast<char*>(p) + 64);  // interior pointer
  replayalloc_free(p);
  replayalloc_free(p);  // double free
  const std::string err = ::testing::internal::GetCapturedStderr();
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.invalid_frees - before.invalid_frees, 1u);
  EXPECT_EQ(after.double_frees - before.double_frees, 1u);
  EXPECT_THAT(err, ::testing::HasSubstr("not the start of a block"));
  EXPECT_THAT(err, ::testing::HasSubstr("not live"));
}

TEST(MallocContract, EdgeCasesFollowGlibc) {
  void* z = replayalloc_malloc(0);
  EXPECT_NE(z, nullptr);
  replayalloc_free(z);
  errno = 0;
  EXPECT_EQ(replayalloc_malloc(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(replayalloc_calloc(SIZE_MAX / 2, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(replayalloc_aligned_alloc(24, 100), nullptr);
  EXPECT_EQ(errno, EINVAL);
  void* p = nullptr;
  EXPECT_EQ(replayalloc_posix_memalign(&p, 4, 100), EINVAL);
  EXPECT_EQ(replayalloc_posix_memalign(&p, 48, 100), EINVAL);
  EXPECT_EQ(replayalloc_posix_memalign(&p, 64, SIZE_MAX), ENOMEM);
  void* r = replayalloc_realloc(nullptr, 100);
  ASSERT_NE(r, nullptr);
  EXPECT_GE(replayalloc_usable_size(r), 100u);
  EXPECT_EQ(replayalloc_realloc(r, 0), nullptr);
  replayalloc_free(nullptr);
  EXPECT_EQ(replayalloc_usable_size(nullptr), 0u);
  void* big = replayalloc_aligned_alloc(std::size_t{4} << 20, 100);  // beyond a slot's alignment
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big) % (std::size_t{4} << 20), 0u);
  replayalloc_free(big);
}

TEST(Api, StatsJsonHasTheDocumentedKeysAndReportsItsLength) {
  char small[8];
  const std::size_t need = replayalloc_stats_json(small, sizeof small);
  EXPECT_GT(need, sizeof small);
  EXPECT_EQ(small[sizeof small - 1], '\0');
  std::string buf(need + 1, '\0');
  EXPECT_EQ(replayalloc_stats_json(buf.data(), buf.size()), need);
  for (const char* key : {"\"allocations\"", "\"slab_hits\"", "\"fallbacks\"", "\"plans\"",
                          "\"rerecords\"", "\"slab_bytes\"", "\"lower_bound_bytes\""}) {
    EXPECT_THAT(buf, ::testing::HasSubstr(key));
  }
  EXPECT_EQ(replayalloc_stats_json(nullptr, 0), need);
}

TEST(Api, SavedTraceCarriesSizesLifetimesAndOps) {
  const unsigned conv = replayalloc_op_id("aten::conv2d");
  const unsigned relu = replayalloc_op_id("aten::relu");
  EXPECT_EQ(replayalloc_op_id("aten::conv2d"), conv);
  {
    replayalloc::Iteration it("traced");
    void* a;
    {
      replayalloc::OpScope op(conv);
      a = replayalloc_malloc(1000);
    }
    replayalloc::OpScope op(relu);
    void* b = replayalloc_malloc(2000);
    replayalloc_free(a);
    replayalloc_free(b);
  }
  const std::string path = ::testing::TempDir() + "/traced.csv";
  ASSERT_EQ(replayalloc_save_trace("traced", path.c_str()), 0);
  absl::StatusOr<replayalloc::trace> t = replayalloc::read_trace_file(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->allocations.size(), 2u);
  EXPECT_EQ(t->allocations[0].size, 1000u);
  EXPECT_EQ(t->ops[t->allocations[0].op], "aten::conv2d");
  EXPECT_EQ(t->ops[t->allocations[1].op], "aten::relu");
  EXPECT_EQ(t->allocations[0].free_at, 2u);
  EXPECT_EQ(t->allocations[1].free_at, 3u);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(replayalloc_save_trace("never-run", path.c_str()), -1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::HasSubstr("no recording"));
}

// Note [Deferred op names]: a call-stack tag (the LD_PRELOAD library's) is named when a
// trace is written, not while its iteration records; the trace on file carries the
// name, and each op is named once.
std::atomic<int> g_namings{0};
void name_for_test(std::uint64_t token, char* out, std::size_t cap) {
  g_namings.fetch_add(1);
  std::snprintf(out, cap, "frame_%llu <- caller", static_cast<unsigned long long>(token));
}

TEST(Api, DeferredOpsAreNamedWhenATraceIsWrittenNotWhileRecording) {
  using replayalloc::detail::engine;
  using replayalloc::detail::g_deferred_op_namer;
  const auto before = g_deferred_op_namer.exchange(&name_for_test);
  const std::uint32_t a_op = engine::get().op_id_deferred(4242);
  const std::uint32_t b_op = engine::get().op_id_deferred(4343);
  EXPECT_EQ(engine::get().op_id_deferred(4242), a_op);
  EXPECT_NE(a_op, b_op);
  {
    replayalloc::Iteration it("deferred-ops");
    void* a;
    {
      replayalloc::OpScope op(a_op);
      a = replayalloc_malloc(1000);
    }
    replayalloc::OpScope op(b_op);
    void* b = replayalloc_malloc(2000);
    replayalloc_free(a);
    replayalloc_free(b);
  }
  EXPECT_EQ(g_namings.load(), 0) << "a deferred op was named while its iteration recorded";
  const std::string path = ::testing::TempDir() + "/deferred.csv";
  ASSERT_EQ(replayalloc_save_trace("deferred-ops", path.c_str()), 0);
  absl::StatusOr<replayalloc::trace> t = replayalloc::read_trace_file(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->allocations.size(), 2u);
  EXPECT_EQ(t->ops[t->allocations[0].op], "frame_4242 <- caller");
  EXPECT_EQ(t->ops[t->allocations[1].op], "frame_4343 <- caller");
  EXPECT_EQ(g_namings.load(), 2);
  // Named once: a second trace, and op_id() of the name, find the same op.
  ASSERT_EQ(replayalloc_save_trace("deferred-ops", path.c_str()), 0);
  EXPECT_EQ(g_namings.load(), 2);
  EXPECT_EQ(replayalloc_op_id("frame_4242 <- caller"), a_op);
  g_deferred_op_namer.store(before);
}

}  // namespace

// Note [The iteration log]: at REPLAYALLOC_VERBOSE=3 each iteration ends with one line
// saying what it was (recorded, replayed, passed through and why), its duration, the
// slab made for it and what a deviation came to; below 3, nothing.
TEST(IterationLog, SaysWhatEachIterationWasAndWhatItsSlabCost) {
  using replayalloc::detail::set_log_verbosity;
  const std::vector<step> other = {A(1, 4096), A(2, 65536), F(2), A(3, 12288), F(1), F(3)};  // deviates at 3
  (void)replayalloc::stats();  // the engine made (it sets the verbosity of the settings)
  set_log_verbosity(3);
  ::testing::internal::CaptureStderr();
  warm_up("iteration-log", k_model);
  iteration("iteration-log", k_model, 3);  // replayed: its slab made with the plan
  iteration("iteration-log", k_model, 4);  // replayed: the slab reused
  iteration("iteration-log", other, 5);    // replayed, deviates
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_verbosity(1);
  ::testing::internal::CaptureStderr();
  iteration("iteration-log", k_model, 6);
  const std::string quiet = ::testing::internal::GetCapturedStderr();

  const auto count = [&err](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = err.find(what); at != std::string::npos; at = err.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("iteration of 'iteration-log' (thread "), 5u) << err;
  EXPECT_EQ(count("recorded (8 allocations)"), 2u) << err;
  EXPECT_EQ(count("recorded (8 allocations); a plan asked for"), 1u) << err;
  EXPECT_EQ(count("replayed regime 0: 8 of 8 slots handed out, 0 misses"), 2u) << err;
  // Note [The first slab with the plan]: made at the recording's end, not by a replay.
  EXPECT_EQ(count("its first slab ("), 1u) << err;
  EXPECT_EQ(count("a new slab of "), 0u) << "the first replay made a slab of its own:\n" << err;
  EXPECT_THAT(err, ::testing::HasSubstr("slots handed out, 1 misses; deviated")) << err;
  EXPECT_THAT(err, ::testing::ContainsRegex("\\(thread [0-9]+\\): [0-9]+\\.[0-9]{3} ms, ")) << err;
  EXPECT_THAT(quiet, ::testing::Not(::testing::HasSubstr("iteration of"))) << quiet;
}

// The iteration log's reason for a pass-through is the key policy's decision's own
// (begin_decision::why), not read again off the key's state: an iteration of a key that
// another thread is recording says so.
TEST(IterationLog, SaysWhyAnIterationPassedThrough) {
  using replayalloc::detail::set_log_verbosity;
  (void)replayalloc::stats();
  set_log_verbosity(3);
  ::testing::internal::CaptureStderr();
  {
    replayalloc::Iteration recording("iteration-log-pass");  // this thread records the key
    ASSERT_TRUE(recording.ok());
    std::thread other([] { iteration("iteration-log-pass", k_model, 1); });
    other.join();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_verbosity(1);
  EXPECT_THAT(err, ::testing::HasSubstr("another thread records the key")) << err;
  EXPECT_THAT(err, ::testing::HasSubstr("recorded (0 allocations)")) << err;
}
