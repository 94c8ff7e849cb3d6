// Shapes that change (Note [Envelope] in trace/trace.h, Note [Setting aside] in
// runtime/engine.cc): one key whose allocations scale with a sequence length drawn per
// iteration is served from one plan once its largest shape has been seen; a key whose
// iterations never repeat is set aside and makes a bounded number of plans.
//
// Every block carries a fill pattern checked before it is freed, and every block is
// checked against the iteration's live blocks: a slot smaller than its request, or one
// handed out over live bytes, fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "support/pattern.h"

namespace {

using replayalloc::detail::backend::in_slab_range;
using replayalloc::testing::fill;
using replayalloc::testing::intact;

struct block {
  unsigned char* p;
  std::size_t n;
  std::uint64_t tag;
};

struct counts {
  std::uint64_t requests = 0;  // planned-size requests (all of them here)
  std::uint64_t in_slab = 0;
  int bad = 0;                 // overwritten or overlapping blocks
};

// Checks that `b` overlaps no live block; then admits it.
void admit(std::map<std::uintptr_t, block>& live, const block& b, counts& c) {
  const auto a = reinterpret_cast<std::uintptr_t>(b.p);
  auto next = live.lower_bound(a);
  if (next != live.end() && next->first < a + b.n) ++c.bad;
  if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.n > a) ++c.bad;
  live[a] = b;
}

void drop(std::map<std::uintptr_t, block>& live, unsigned char* p, counts& c) {
  auto it = live.find(reinterpret_cast<std::uintptr_t>(p));
  if (!intact(it->second.p, it->second.n, it->second.tag)) ++c.bad;
  replayalloc_free(p);
  live.erase(it);
}

// One inference of a transformer-encoder-shaped program at sequence length `seq`:
// per layer, activations that scale with seq (seq x hidden), attention scores that
// scale with seq^2, and a fixed-size workspace; the output outlives the iteration.
unsigned char* encoder(const std::string& key, std::size_t seq, int layers, counts& c,
                       std::uint64_t& tag) {
  replayalloc::Iteration it(key);
  std::map<std::uintptr_t, block> live;
  auto make = [&](std::size_t n) {
    auto* p = static_cast<unsigned char*>(replayalloc_malloc(n));
    block b{p, n, ++tag};
    fill(p, n, b.tag);
    admit(live, b, c);
    ++c.requests;
    c.in_slab += in_slab_range(p);
    return p;
  };
  const std::size_t hidden = 256 * sizeof(float);
  unsigned char* x = make(seq * hidden);
  for (int l = 0; l < layers; ++l) {
    unsigned char* qkv = make(3 * seq * hidden);
    unsigned char* scores = make(4 * seq * seq * sizeof(float));  // 4 heads
    unsigned char* ws = make(64 * 1024);                           // fixed workspace
    drop(live, ws, c);
    unsigned char* ctx = make(seq * hidden);
    drop(live, scores, c);
    drop(live, qkv, c);
    unsigned char* h = make(4 * seq * hidden);
    unsigned char* y = make(seq * hidden);
    drop(live, h, c);
    drop(live, ctx, c);
    drop(live, x, c);
    x = y;
  }
  // x is the output: handed to the caller, freed after the iteration.
  live.erase(reinterpret_cast<std::uintptr_t>(x));
  for (auto& [a, b] : live) drop(live, b.p, c);
  return x;
}

TEST(DynamicShapes, OneKeyServesEveryShapeAfterTheLargest) {
  std::mt19937_64 rng(7);
  const replayalloc::Stats before = replayalloc::stats();
  std::uint64_t tag = 0;
  counts warm, steady;
  std::size_t largest = 0;
  std::vector<std::size_t> seqs;
  for (int i = 0; i < 200; ++i) seqs.push_back(16 + rng() % 241);  // 16..256
  const std::size_t max_seq = *std::max_element(seqs.begin(), seqs.end());
  bool seen_max = false;
  for (std::size_t seq : seqs) {
    counts& c = seen_max ? steady : warm;
    unsigned char* out = encoder("dyn/encoder", seq, 4, c, tag);
    replayalloc_free(out);
    // The iteration at the largest shape grows the plan; the next one records it.
    if (seq == max_seq) seen_max = true;
    largest = std::max(largest, seq);
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(warm.bad + steady.bad, 0);
  ASSERT_GT(steady.requests, 1000u);
  // After the largest shape has been seen (and recorded once: the iteration after it
  // may be the growing one), at least 95% of the requests come from the slab.
  const double share = static_cast<double>(steady.in_slab) / static_cast<double>(steady.requests);
  std::printf("dynamic shapes: %.1f%% of %llu requests from the slab after the largest shape; "
              "%llu plans (%llu grown), %llu recordings, too_large %llu\n",
              100.0 * share, static_cast<unsigned long long>(steady.requests),
              static_cast<unsigned long long>(after.plans - before.plans),
              static_cast<unsigned long long>(after.plans_grown - before.plans_grown),
              static_cast<unsigned long long>(after.recordings - before.recordings),
              static_cast<unsigned long long>(after.fallback_too_large - before.fallback_too_large));
  EXPECT_GE(share, 0.95);
  // Plans grow only when a new largest shape appears: a handful, not one per shape.
  EXPECT_LE(after.plans - before.plans, 12u);
  EXPECT_GT(after.plans_grown - before.plans_grown, 0u);
  EXPECT_EQ(after.double_frees, before.double_frees);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);
}

// Note [Growth headroom]: a sequence that gets one token longer per iteration (a
// decode loop) from 32 to 128 re-plans a handful of times, not once per length, and
// every block stays intact.
TEST(DynamicShapes, AGrowingSequenceReplansInSteps) {
  const replayalloc::Stats before = replayalloc::stats();
  std::uint64_t tag = 0;
  counts c;
  for (std::size_t seq = 32; seq <= 128; ++seq) replayalloc_free(encoder("dyn/growing", seq, 2, c, tag));
  const replayalloc::Stats after = replayalloc::stats();
  const std::uint64_t plans = after.plans - before.plans, grown = after.plans_grown - before.plans_grown;
  std::printf("growing sequence 32..128: %llu plans (%llu grown), %.1f%% of %llu requests from the slab\n",
              static_cast<unsigned long long>(plans), static_cast<unsigned long long>(grown),
              100.0 * static_cast<double>(c.in_slab) / static_cast<double>(c.requests),
              static_cast<unsigned long long>(c.requests));
  EXPECT_EQ(c.bad, 0);
  EXPECT_GE(grown, 2u);
  EXPECT_LE(plans, 12u);  // 97 lengths; scores grow with the square of the length
  EXPECT_GE(static_cast<double>(c.in_slab), 0.8 * static_cast<double>(c.requests));  // 39% when a smaller
  // request could take an outgrown slot (every later request one slot off); 78.7%
  // when each larger shape was recorded before it was planned (Note [Predicted plans])
  EXPECT_LE(after.recordings - before.recordings, 4u);
  EXPECT_GE(after.plans_predicted - before.plans_predicted, 2u);
}

// Note [Predicted plans]: with recordings at four shapes (so the fit has the scores'
// square in the length, checked), a shape larger than any recorded outgrows its slots
// once, is planned from the fitted sizes at once, and its next iteration is served from
// the slab whole, without being recorded.
TEST(DynamicShapes, ALargerShapeIsPlannedFromFittedSizesWithoutRecording) {
  std::uint64_t tag = 0;
  counts c;
  // 32 and 48 recorded and planned; 64 and 80 each outgrow the plan and are recorded.
  for (std::size_t seq : {32, 48, 64, 64, 80, 80}) replayalloc_free(encoder("dyn/fitted", seq, 2, c, tag));
  counts mid;
  replayalloc_free(encoder("dyn/fitted", 40, 2, mid, tag));
  EXPECT_EQ(mid.in_slab, mid.requests - 1);  // all but the outliving output
  for (std::size_t seq : {100, 150, 230}) {
    const replayalloc::Stats before = replayalloc::stats();
    counts first;
    replayalloc_free(encoder("dyn/fitted", seq, 2, first, tag));  // outgrows its slots
    const replayalloc::Stats predicted = replayalloc::stats();
    EXPECT_EQ(predicted.plans_predicted - before.plans_predicted, 1u) << seq;
    counts again;
    replayalloc_free(encoder("dyn/fitted", seq, 2, again, tag));
    const replayalloc::Stats after = replayalloc::stats();
    EXPECT_EQ(again.in_slab, again.requests - 1) << seq;
    EXPECT_EQ(after.recordings, before.recordings) << seq;
    EXPECT_EQ(first.bad + again.bad, 0);
  }
  EXPECT_EQ(c.bad + mid.bad, 0);
}

TEST(DynamicShapes, SmallerShapeNeverRecordedIsServedAndLargerFallsBackSafely) {
  std::uint64_t tag = 0;
  counts c;
  // Two shapes recorded (the envelope: 64 and 128), then one never seen below them,
  // then one above them: the larger falls back (too_large) and grows the plan.
  for (std::size_t seq : {64, 128}) replayalloc_free(encoder("dyn/unseen", seq, 2, c, tag));
  counts small;
  replayalloc_free(encoder("dyn/unseen", 20, 2, small, tag));
  EXPECT_EQ(small.in_slab, small.requests - 1);  // all but the outliving output
  const replayalloc::Stats before = replayalloc::stats();
  counts big;
  replayalloc_free(encoder("dyn/unseen", 200, 2, big, tag));
  const replayalloc::Stats mid = replayalloc::stats();
  EXPECT_GT(mid.fallback_too_large - before.fallback_too_large, 0u);
  // The plan grows once: predicted from the fitted sizes at once (Note [Predicted
  // plans]), or from the recording of the next iteration.
  replayalloc_free(encoder("dyn/unseen", 200, 2, c, tag));
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.plans_grown - before.plans_grown, 1u);
  counts again;
  replayalloc_free(encoder("dyn/unseen", 200, 2, again, tag));
  EXPECT_EQ(again.in_slab, again.requests - 1);
  EXPECT_EQ(c.bad + small.bad + big.bad + again.bad, 0);
}

TEST(DynamicShapes, AStreamThatNeverRepeatsIsSetAsideWithBoundedPlans) {
  std::mt19937_64 rng(99);
  const replayalloc::Stats before = replayalloc::stats();
  std::uint64_t tag = 0;
  counts c;
  constexpr int k_iterations = 600;
  for (int i = 0; i < k_iterations; ++i) {
    // Each iteration a different number of blocks with random sizes and lifetimes.
    replayalloc::Iteration it("dyn/never-repeats");
    std::map<std::uintptr_t, block> live;
    const int n = 20 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const std::size_t sz = 64 + rng() % 100000;
      auto* p = static_cast<unsigned char*>(replayalloc_malloc(sz));
      block b{p, sz, ++tag};
      fill(p, sz, b.tag);
      admit(live, b, c);
      if (rng() % 2 == 0 && !live.empty()) {
        auto victim = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        drop(live, victim->second.p, c);
      }
    }
    while (!live.empty()) drop(live, live.begin()->second.p, c);
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(c.bad, 0);
  const std::uint64_t plans = after.plans - before.plans;
  const std::uint64_t recordings = after.recordings - before.recordings;
  std::printf("never repeats: %d iterations, %llu recordings, %llu plans, %llu set aside, "
              "given up %llu, %llu iterations passed through\n", k_iterations,
              static_cast<unsigned long long>(recordings), static_cast<unsigned long long>(plans),
              static_cast<unsigned long long>(after.set_asides - before.set_asides),
              static_cast<unsigned long long>(after.keys_given_up - before.keys_given_up),
              static_cast<unsigned long long>(after.iterations_set_aside - before.iterations_set_aside));
  // Without setting aside, this key records and plans every few iterations forever
  // (600 iterations: ~75 plans). Set aside, it stops within a few failures.
  EXPECT_GE(after.keys_given_up - before.keys_given_up, 1u);
  EXPECT_LE(plans, 6u);
  EXPECT_LE(recordings, 60u);
  EXPECT_GE(after.iterations_set_aside - before.iterations_set_aside, 400u);
}

}  // namespace
