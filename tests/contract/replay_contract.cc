// The replay contract (replay_contract.h says what it is and who runs it): the tests,
// written once. Compiled into each domain's test binary, which instantiates them.
//
// Statistics are per domain and process-wide, so tests compare deltas; each test has
// its own plan key.
#include "contract/replay_contract.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>
#include <thread>
#include <utility>

namespace replayalloc::contract {

using testing::checked_block;

// ---- the ledger ---------------------------------------------------------------------

bool live_blocks::admit(const checked_block& b) {
  if (b.p == nullptr) {
    ADD_FAILURE() << "a " << b.size << "-byte allocation returned null";
    return false;
  }
  bool ok = true;
  const auto addr = reinterpret_cast<std::uintptr_t>(b.p);
  if (addr % d_.alignment() != 0) {
    ADD_FAILURE() << "block " << b.p << " (" << b.size << " B) is not aligned to " << d_.alignment();
    ok = false;
  }
  auto next = live_.lower_bound(addr);
  if (next != live_.end() && next->first < addr + b.size) {
    ADD_FAILURE() << "block " << b.p << " (" << b.size << " B, tag " << b.tag << ") was handed out over live block "
                  << next->second.p << " (" << next->second.size << " B, tag " << next->second.tag << ")";
    ok = false;
  }
  if (next != live_.begin()) {
    const checked_block& prev = std::prev(next)->second;
    if (reinterpret_cast<std::uintptr_t>(prev.p) + prev.size > addr) {
      ADD_FAILURE() << "block " << b.p << " (" << b.size << " B, tag " << b.tag
                    << ") was handed out over live block " << prev.p << " (" << prev.size << " B, tag " << prev.tag
                    << ")";
      ok = false;
    }
  }
  d_.fill(b.p, b.size, b.tag);
  live_[addr] = b;  // a block over a live one replaces it: it is lost either way
  return ok;
}

bool live_blocks::take(const checked_block& b) {
  live_.erase(reinterpret_cast<std::uintptr_t>(b.p));
  if (d_.intact(b.p, b.size, b.tag)) return true;
  ADD_FAILURE() << "block " << b.p << " (" << b.size << " B, tag " << b.tag << ") was overwritten while live";
  return false;
}

bool live_blocks::check_all() {
  bool ok = true;
  for (const auto& [addr, b] : live_) {
    if (!d_.intact(b.p, b.size, b.tag)) {
      ADD_FAILURE() << "block " << b.p << " (" << b.size << " B, tag " << b.tag << ") was overwritten while live";
      ok = false;
    }
  }
  return ok;
}

// ---- the fixture --------------------------------------------------------------------

void ReplayContract::SetUp() {
  d_ = &GetParam().instance();
  ledger_ = std::make_unique<live_blocks>(*d_);
  // "contract/SteadyStateReplaysFromTheSlab/replayalloc_malloc#1": one key per test,
  // domain and run (--gtest_repeat runs a test again in the same process).
  static int runs = 0;
  key_ = std::string("contract/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "#" +
         std::to_string(++runs);
}

void ReplayContract::TearDown() {
  for (auto& [id, b] : held_) free_checked(b);
  held_.clear();
  EXPECT_EQ(ledger().size(), 0u) << "test bug: blocks left in the ledger";
  while (ledger().size() > 0) free_checked(ledger().blocks().begin()->second);
}

void ReplayContract::run(const std::vector<step>& steps, std::vector<void*>* order) {
  for (const step& s : steps) {
    if (s.alloc) {
      const checked_block b{d().alloc(s.size), s.size, next_tag_++};
      if (order != nullptr) order->push_back(b.p);
      ledger().admit(b);  // reports a null, misaligned or overlapping block
      if (b.p == nullptr) continue;
      ASSERT_TRUE(held_.emplace(s.id, b).second) << "test bug: id " << s.id << " reused";
    } else {
      auto it = held_.find(s.id);
      ASSERT_NE(it, held_.end()) << "test bug: id " << s.id << " is not live";
      const checked_block b = it->second;
      held_.erase(it);
      free_checked(b);
    }
  }
}

std::vector<void*> ReplayContract::iteration(const std::vector<step>& steps) {
  std::vector<void*> order;
  ledger().check_all();
  d().begin(key_);
  run(steps, &order);
  d().end();
  d().settle();
  ledger().check_all();
  return order;
}

void ReplayContract::warm_up(const std::vector<step>& steps) {
  // (At least one: a device iteration's host iteration, empty, is planned too.)
  const std::uint64_t plans = d().stats().plans;
  iteration(steps);
  iteration(steps);
  ASSERT_GT(d().stats().plans, plans) << "two identical recordings should make a plan";
}

checked_block ReplayContract::detach(int id) {
  auto it = held_.find(id);
  EXPECT_NE(it, held_.end()) << "test bug: id " << id << " is not live";
  if (it == held_.end()) return {};
  const checked_block b = it->second;
  held_.erase(it);
  return b;
}

void ReplayContract::free_checked(const checked_block& b) {
  ledger().take(b);
  d().free(b.p, b.size);
}

namespace {

// A small inference-shaped iteration: activations that chain, a workspace freed at
// once, a residual kept across three layers. Blocks 1 and 6, and 3 and 4, have the
// same size (as a network's do), the others differ.
const std::vector<step> k_model = {
    A(1, 8192),  A(2, 65536), F(2),  A(3, 16384), F(1), A(4, 16384), A(5, 12288), F(5),
    A(6, 8192),  F(3),        F(4),  A(7, 4096),  A(8, 32768),       F(7),        F(6), F(8),
};
constexpr std::uint64_t k_model_allocs = 8;

// k_model with block `id`'s size changed.
std::vector<step> resized(int id, std::size_t size) {
  std::vector<step> v = k_model;
  for (step& s : v) {
    if (s.alloc && s.id == id) s.size = size;
  }
  return v;
}

// One LLM generation request (issue 31; Note [Periodic iterations] in trace/period.h),
// as one iteration: a prefill of `prompt` tokens, then `tokens` - 1 decode steps, each
// growing 3 layers' key and value caches by one token (the new cache made, the old one
// freed) with scores that grow too, and the logits handed from step to step. Sizes are
// multiples of 256 and at least 4 KiB (see replay_contract.h).
std::vector<step> generation_request(std::size_t prompt, int tokens, std::size_t batch) {
  constexpr std::size_t row = 1024;  // bytes per token of one layer's key or value
  constexpr int layers = 3;
  std::vector<step> v;
  int id = 0;
  const auto round = [](std::size_t n) { return std::max<std::size_t>(4096, (n + 255) / 256 * 256); };
  const int x = ++id;
  v.push_back(A(x, batch * prompt * row));
  int k[layers], val[layers];
  for (int l = 0; l < layers; ++l) {
    const int qkv = ++id, scores = ++id;
    k[l] = ++id;
    val[l] = ++id;
    v.push_back(A(qkv, batch * 3 * prompt * row));
    v.push_back(A(k[l], batch * prompt * row));
    v.push_back(A(val[l], batch * prompt * row));
    v.push_back(A(scores, round(batch * 16 * prompt * prompt)));
    v.push_back(F(qkv));
    v.push_back(F(scores));
  }
  v.push_back(F(x));
  int logits = ++id;
  v.push_back(A(logits, batch * 32768));
  for (int s = 1; s < tokens; ++s) {
    const std::size_t pos = prompt + static_cast<std::size_t>(s);
    for (int l = 0; l < layers; ++l) {
      const int nk = ++id, nv = ++id, scores = ++id;
      v.push_back(A(nk, batch * pos * row));
      v.push_back(F(k[l]));
      v.push_back(A(nv, batch * pos * row));
      v.push_back(F(val[l]));
      v.push_back(A(scores, round(batch * 16 * pos)));
      v.push_back(F(scores));
      k[l] = nk;
      val[l] = nv;
    }
    const int next = ++id;
    v.push_back(A(next, batch * 32768));
    v.push_back(F(logits));
    logits = next;
  }
  v.push_back(F(logits));
  for (int l = 0; l < layers; ++l) {
    v.push_back(F(k[l]));
    v.push_back(F(val[l]));
  }
  return v;
}

}  // namespace

// ---- the contract -------------------------------------------------------------------

// The point of it all: once planned, a repeating iteration is served from the slab,
// at the same addresses every time, without a single fallback.
TEST_P(ReplayContract, SteadyStateReplaysFromTheSlab) {
  warm_up(k_model);
  const Stats before = d().stats();
  std::vector<void*> first;
  for (int i = 0; i < 10; ++i) {
    const std::vector<void*> ptrs = iteration(k_model);
    for (std::size_t k = 0; k < ptrs.size(); ++k) EXPECT_TRUE(d().in_slab(ptrs[k])) << "iteration " << i << " block " << k;
    if (i == 0) first = ptrs;
    EXPECT_EQ(ptrs, first) << "iteration " << i;
  }
  const Stats after = d().stats();
  EXPECT_EQ(after.slab_hits - before.slab_hits, 10 * k_model_allocs);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 0u);
  EXPECT_EQ(after.rerecords - before.rerecords, 0u);
  EXPECT_GT(after.lower_bound_bytes, 0u);
  EXPECT_GE(after.slab_bytes, after.lower_bound_bytes);
}

// Invariant 1: blocks planned on the same bytes (their recorded lifetimes are
// disjoint) are not both handed out when the program holds the first one longer.
TEST_P(ReplayContract, ABlockHeldPastItsFreeIsNeverHandedOutAgain) {
  // Lifetimes:        0  1  2  3  4  5
  //   1 (64 KiB)      [--]
  //   2 (64 KiB)            [--]        shares 1's bytes in the plan
  //   3 (64 KiB)                  [--]  shares them too
  const std::vector<step> recorded = {A(1, 65536), F(1), A(2, 65536), F(2), A(3, 65536), F(3)};
  warm_up(recorded);
  const std::vector<void*> planned = iteration(recorded);
  ASSERT_EQ(planned[0], planned[1]) << "the plan should reuse the bytes";
  ASSERT_EQ(planned[1], planned[2]) << "the plan should reuse the bytes";
  // Now block 1 is held to the end: 2 and 3 must not be placed on its bytes.
  const Stats before = d().stats();
  const std::vector<void*> ptrs = iteration({A(1, 65536), A(2, 65536), F(2), A(3, 65536), F(3), F(1)});
  const Stats after = d().stats();
  EXPECT_TRUE(d().in_slab(ptrs[0]));
  EXPECT_NE(ptrs[1], ptrs[0]);
  EXPECT_NE(ptrs[2], ptrs[0]);
  EXPECT_EQ(after.fallback_overlap_live - before.fallback_overlap_live, 2u);
  // As recorded again: the slab serves all of it.
  for (void* p : iteration(recorded)) EXPECT_TRUE(d().in_slab(p));
}

// A block freed by another thread while its iteration runs: its bytes are reused only
// after that free, it is counted as a remote free, and the iteration replays on.
TEST_P(ReplayContract, ABlockFreedOnAnotherThreadIsSafeAndItsSlotReused) {
  warm_up(k_model);
  const Stats before = d().stats();
  const std::vector<step> head(k_model.begin(), k_model.begin() + 2);  // A(1), A(2)
  std::vector<step> tail(k_model.begin() + 3, k_model.end());          // after F(2)
  for (int round = 0; round < 5; ++round) {
    std::vector<void*> ptrs;
    d().begin(key_);
    run(head, &ptrs);
    const checked_block b2 = detach(2);
    ledger().take(b2);  // every byte checked here, and again on the freeing thread
    std::thread([&] {
      EXPECT_TRUE(d().intact(b2.p, b2.size, b2.tag)) << "block 2 overwritten before its free";
      d().free(b2.p, b2.size);
    }).join();
    run(tail, &ptrs);
    d().end();
    for (void* p : ptrs) EXPECT_TRUE(d().in_slab(p)) << "round " << round;
    ledger().check_all();
  }
  const Stats after = d().stats();
  EXPECT_EQ(after.remote_frees - before.remote_frees, 5u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, 5 * k_model_allocs);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 0u);
}

// Invariant 4: a block kept past its iteration's end keeps its bytes: later iterations
// run on another slab until it is freed, and freeing it late returns its slab (memory
// does not grow with every block held this way).
TEST_P(ReplayContract, ABlockHeldPastTheIterationEndKeepsItsBytes) {
  warm_up(k_model);
  std::vector<step> keep_1;  // k_model, block 1 never freed
  for (const step& s : k_model) {
    if (s.alloc || s.id != 1) keep_1.push_back(s);
  }
  const std::vector<void*> first = iteration(keep_1);
  ASSERT_TRUE(d().in_slab(first[0]));
  const checked_block kept = detach(1);  // live (in the ledger) from here on
  for (int i = 0; i < 3; ++i) {
    const std::vector<void*> ptrs = iteration(k_model);
    for (void* p : ptrs) {
      EXPECT_NE(p, kept.p) << "iteration " << i;
      EXPECT_TRUE(d().in_slab(p)) << "iteration " << i << ": the plan should run on another slab";
    }
  }
  free_checked(kept);  // the slab drains and goes back to the pool
  for (int i = 0; i < 3; ++i) iteration(k_model);
  const std::uint64_t memory = d().slab_memory();
  for (int i = 0; i < 20; ++i) {
    iteration(keep_1);
    free_checked(detach(1));
  }
  EXPECT_LE(d().slab_memory(), memory) << "every block held past its iteration kept a slab";
}

// An iteration that is never ended goes on beyond its plan (served by the backend) and
// is ended by its thread's exit; a block live at that exit keeps its bytes; the key
// replays as before.
TEST_P(ReplayContract, AnIterationThatNeverEndsFallsBackAndEndsAtThreadExit) {
  warm_up(k_model);
  const Stats before = d().stats();
  std::thread([&] {
    d().begin(key_);
    run(k_model);
    std::vector<step> again;  // a second round: beyond the plan
    for (const step& s : k_model) again.push_back({s.alloc, s.id + 100, s.size});
    run(again);
    run({A(500, 8192)});  // live at the thread's exit
  }).join();
  const Stats after = d().stats();
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs);
  EXPECT_EQ(after.fallback_beyond_plan - before.fallback_beyond_plan, k_model_allocs + 1);
  ASSERT_EQ(held_.size(), 1u);
  const checked_block survivor = detach(500);
  // The exit ended the iteration: the next one replays, around the survivor.
  for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p));
  free_checked(survivor);
}

// An allocation the recording did not have falls back, even when its size matches a
// slot further ahead; every planned block still hits.
TEST_P(ReplayContract, AnExtraAllocationFallsBack) {
  warm_up(k_model);
  std::vector<step> changed = k_model;
  changed.insert(changed.begin() + 4, {A(100, 12800), F(100)});
  changed.insert(changed.begin() + 1, A(101, 8192));  // the size of block 6, ahead
  changed.push_back(F(101));
  const Stats before = d().stats();
  const std::vector<void*> ptrs = iteration(changed);
  const Stats after = d().stats();
  EXPECT_FALSE(d().in_slab(ptrs[1]));  // 101
  EXPECT_FALSE(d().in_slab(ptrs[4]));  // 100
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 2u);
  for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p));
}

// An allocation the recording had and this iteration does not: the next one falls
// back once, then the replay finds its place again.
TEST_P(ReplayContract, AMissingAllocationIsSkipped) {
  warm_up(k_model);
  std::vector<step> changed;
  for (const step& s : k_model) {
    if (s.id != 5) changed.push_back(s);  // block 5 is never made
  }
  const Stats before = d().stats();
  const std::vector<void*> ptrs = iteration(changed);
  const Stats after = d().stats();
  ASSERT_EQ(ptrs.size(), k_model_allocs - 1);
  EXPECT_FALSE(d().in_slab(ptrs[4]));  // block 6, where 5 was expected
  for (int i : {0, 1, 2, 3, 5, 6}) EXPECT_TRUE(d().in_slab(ptrs[i])) << i;
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs - 2);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p));
}

// Invariant 7: a slot never serves a request larger than its capacity.
TEST_P(ReplayContract, ALargerAllocationFallsBack) {
  warm_up(k_model);
  const Stats before = d().stats();
  const std::vector<void*> ptrs = iteration(resized(2, 65536 + 4096));
  const Stats after = d().stats();
  EXPECT_FALSE(d().in_slab(ptrs[1]));
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs - 1);
  for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p));
}

// A smaller request than the recording's, at a slot that was always one size, is a
// deviation too: it falls back and the rest replays.
TEST_P(ReplayContract, ASmallerAllocationFallsBack) {
  warm_up(k_model);
  const Stats before = d().stats();
  const std::vector<void*> ptrs = iteration(resized(2, 65536 - 4096));
  const Stats after = d().stats();
  EXPECT_FALSE(d().in_slab(ptrs[1]));
  EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
  EXPECT_EQ(after.slab_hits - before.slab_hits, k_model_allocs - 1);
  for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p));
}

// A deviation that lasts is recorded, planned once as a second regime of the key
// (Note [Regimes]), and replayed; the first pattern keeps its plan.
TEST_P(ReplayContract, ALastingDeviationIsRecordedAgain) {
  warm_up(k_model);
  const std::vector<step> other = {A(1, 12800), A(2, 54272), F(1), A(3, 7936), F(2), F(3)};
  const Stats before = d().stats();
  for (int i = 0; i < 10; ++i) iteration(other);
  const Stats after = d().stats();
  EXPECT_EQ(after.plans - before.plans, 1u);
  EXPECT_EQ(after.regimes - before.regimes, 1u);
  for (void* p : iteration(other)) EXPECT_TRUE(d().in_slab(p));
  // The first pattern comes back: predicted to be `other`, it deviates (its larger
  // requests may read as `other` grown: then the next iteration records, and finds
  // the first regime); from the third on it replays its own plan again.
  iteration(k_model);
  iteration(k_model);
  const Stats back = d().stats();
  for (int i = 0; i < 3; ++i) {
    for (void* p : iteration(k_model)) EXPECT_TRUE(d().in_slab(p)) << i;
  }
  EXPECT_EQ(d().stats().plans, back.plans);
}

// Invariant 4: what was alive at the end of the recording (an iteration's output) is
// served outside the slab, where nothing planned can reach it.
TEST_P(ReplayContract, WhatOutlivesTheRecordingIsServedOutsideTheSlab) {
  const std::vector<step> with_output = {A(1, 8192), A(2, 4096), F(1)};  // 2 is the output
  std::vector<checked_block> outputs;
  for (int i = 0; i < 5; ++i) {
    const std::vector<void*> ptrs = iteration(with_output);
    if (i >= 2) {
      EXPECT_TRUE(d().in_slab(ptrs[0])) << "iteration " << i;
      EXPECT_FALSE(d().in_slab(ptrs[1])) << "iteration " << i;
    }
    outputs.push_back(detach(2));  // freed after later iterations ran
  }
  for (const checked_block& b : outputs) free_checked(b);
}

// LLM generation, one iteration per request under one key (issue 31): prompts of
// 8..64 tokens and 8..32 new tokens drawn per request. Requests of every length share
// one regime (a shorter one replays a prefix of the plan, a longer one extends it by
// steps), the caches are planned like any other block, and after a warm-up of 12
// requests at least 90% of the allocations of the 28 after it come from the slab,
// every block checked (the ledger) through every way in.
TEST_P(ReplayContract, GenerationRequestsOfEveryLengthAreServedFromTheSlab) {
  std::mt19937_64 rng(31);
  std::uint64_t made = 0, in_slab = 0;
  for (int i = 0; i < 40; ++i) {
    const std::size_t prompt = 8 + rng() % 57;
    const int tokens = 8 + static_cast<int>(rng() % 25);
    const std::vector<void*> ptrs = iteration(generation_request(prompt, tokens, 1));
    if (i < 12) continue;
    made += ptrs.size();
    for (void* p : ptrs) in_slab += d().in_slab(p);
  }
  EXPECT_GE(in_slab * 10, made * 9) << in_slab << " of " << made << " allocations from the slab";
  std::printf("generation, 28 requests after 12: %llu of %llu allocations from the slab (%.1f%%)\n",
              static_cast<unsigned long long>(in_slab), static_cast<unsigned long long>(made),
              100.0 * static_cast<double>(in_slab) / static_cast<double>(made));
}

}  // namespace replayalloc::contract
