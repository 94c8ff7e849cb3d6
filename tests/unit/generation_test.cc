// LLM generation with one iteration per request (Note [Periodic iterations] in
// trace/period.h): a GPT-shaped request (a prefill, then decode steps whose key/value
// caches grow by one token each) under one key, with prompts, generation lengths and
// batches drawn per request, is served from the slab once warm; and no request, however
// it deviates from the recordings (shorter, longer, a step missing an allocation, a
// step repeated, a cache held past its step), ever gets a block smaller than it asked
// for or one over live bytes.
//
// Every block carries a fill pattern checked before it is freed, and every block is
// checked against the request's live blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

struct counts {
  std::uint64_t requests = 0;
  std::uint64_t in_slab = 0;
  int bad = 0;  // overwritten or overlapping blocks
  std::uint64_t peak = 0;  // the most bytes one request held at once
};

// The blocks of one request, checked on every allocation and free.
class live_blocks {
 public:
  live_blocks(counts& c, std::uint64_t& tag) : c_(c), tag_(tag) {}
  ~live_blocks() {
    while (!live_.empty()) drop(reinterpret_cast<unsigned char*>(live_.begin()->first));
  }
  unsigned char* make(std::size_t n) {
    auto* p = static_cast<unsigned char*>(replayalloc_malloc(n));
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto next = live_.lower_bound(a);
    if (next != live_.end() && next->first < a + n) ++c_.bad;
    if (next != live_.begin() && std::prev(next)->first + std::prev(next)->second.n > a) ++c_.bad;
    const std::uint64_t t = ++tag_;
    fill(p, n, t);
    live_[a] = {n, t};
    bytes_ += n;
    c_.peak = std::max(c_.peak, bytes_);
    ++c_.requests;
    c_.in_slab += in_slab_range(p);
    return p;
  }
  void drop(unsigned char* p) {
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
    ASSERT_NE(it, live_.end());
    if (!intact(p, it->second.n, it->second.tag)) ++c_.bad;
    replayalloc_free(p);
    bytes_ -= it->second.n;
    live_.erase(it);
  }

 private:
  struct block {
    std::size_t n;
    std::uint64_t tag;
  };
  std::map<std::uintptr_t, block> live_;
  std::uint64_t bytes_ = 0;
  counts& c_;
  std::uint64_t& tag_;
};

constexpr std::size_t kHidden = 4096;  // bytes per token of one layer's activation

// How a request departs from the program's usual step (the safety test).
struct quirks {
  int skip_at = -1;    // this step makes one allocation fewer (its scores)
  int repeat_at = -1;  // this step runs twice at the same position
  int hold_at = -1;    // this step's key cache is kept to the end of the request
};

// One request: a prefill of `prompt` tokens at `batch`, then `steps` decode steps. The
// batch may change between decode steps (`batch_at`, continuous batching).
void request(const std::string& key, std::size_t prompt, int steps, std::size_t batch, counts& c,
             std::uint64_t& tag, const quirks& q = {}, const std::vector<std::size_t>* batch_at = nullptr,
             std::size_t hidden = kHidden) {
  replayalloc::Iteration it(key);
  live_blocks live(c, tag);
  const int layers = 3;
  std::vector<unsigned char*> k(layers), v(layers), held;
  unsigned char* x = live.make(batch * prompt * hidden);
  for (int l = 0; l < layers; ++l) {
    unsigned char* qkv = live.make(batch * 3 * prompt * hidden);
    k[l] = live.make(batch * prompt * hidden);
    v[l] = live.make(batch * prompt * hidden);
    unsigned char* scores = live.make(batch * 4 * prompt * prompt * 4 + 4096);
    live.drop(qkv);
    live.drop(scores);
  }
  live.drop(x);
  unsigned char* logits = live.make(batch * 32000);
  std::size_t pos = prompt;
  for (int s = 0; s < steps; ++s) {
    const std::size_t b = batch_at != nullptr ? (*batch_at)[static_cast<std::size_t>(s) % batch_at->size()] : batch;
    for (int twice = 0; twice < (s == q.repeat_at ? 2 : 1); ++twice) {
      if (twice == 0) ++pos;
      unsigned char* h = live.make(b * hidden);
      for (int l = 0; l < layers; ++l) {
        unsigned char* nk = live.make(b * pos * hidden);
        if (s == q.hold_at && l == 0) {
          held.push_back(k[l]);
        } else {
          live.drop(k[l]);
        }
        k[l] = nk;
        unsigned char* nv = live.make(b * pos * hidden);
        live.drop(v[l]);
        v[l] = nv;
        if (!(s == q.skip_at && l == 1)) live.drop(live.make(b * 4 * pos * 4 + 4096));
      }
      live.drop(h);
      unsigned char* next = live.make(b * 32000);
      live.drop(logits);
      logits = next;
    }
  }
  // The caches and the logits end with the request; so does anything held.
}

struct drawn {
  std::size_t prompt;
  int steps;
  std::size_t batch;
};

double share(const counts& c) { return static_cast<double>(c.in_slab) / static_cast<double>(c.requests); }

// The loop in C++: prompts of 8..64 tokens and 8..32 new tokens drawn per
// request under one key. After a warm-up of 12 requests, at least 90% of each later
// request's allocations come from the slab.
TEST(Generation, OneKeyPerRequestServesEveryLengthFromTheSlab) {
  std::mt19937_64 rng(2026);
  std::uint64_t tag = 0;
  counts warm;
  const replayalloc::Stats before = replayalloc::stats();
  // Drawn in order (the order of a call's arguments is unspecified).
  auto draw = [&] {
    const std::size_t prompt = 8 + rng() % 57;
    return drawn{prompt, 8 + static_cast<int>(rng() % 25), 1};
  };
  for (int i = 0; i < 12; ++i) {
    const drawn d = draw();
    request("gen/one-key", d.prompt, d.steps, d.batch, warm, tag);
  }
  counts all;
  double worst = 1.0;
  for (int i = 0; i < 40; ++i) {
    counts one;
    const drawn d = draw();
    request("gen/one-key", d.prompt, d.steps, d.batch, one, tag);
    worst = std::min(worst, share(one));
    all.requests += one.requests;
    all.in_slab += one.in_slab;
    all.bad += one.bad;
  }
  const replayalloc::Stats after = replayalloc::stats();
  std::printf("generation, one key per request: %.1f%% of %llu requests from the slab after 12 (worst "
              "request %.1f%%); %llu plans, %llu recordings, %llu grown\n",
              100.0 * share(all), static_cast<unsigned long long>(all.requests), 100.0 * worst,
              static_cast<unsigned long long>(after.plans - before.plans),
              static_cast<unsigned long long>(after.recordings - before.recordings),
              static_cast<unsigned long long>(after.plans_grown - before.plans_grown));
  EXPECT_EQ(warm.bad + all.bad, 0);
  EXPECT_GE(worst, 0.90);
  EXPECT_LE(after.plans - before.plans, 12u);
  EXPECT_EQ(after.double_frees, before.double_frees);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);
}

// A request longer than any recorded is served from the plan up to its end, and the
// plan is extended by steps without recording: the next request of that length is
// served from the slab whole.
TEST(Generation, ALongerRequestExtendsThePlanWithoutRecording) {
  std::uint64_t tag = 0;
  counts c;
  for (int steps : {10, 16, 12}) request("gen/extend", 32, steps, 1, c, tag);
  const replayalloc::Stats before = replayalloc::stats();
  counts first, again;
  request("gen/extend", 32, 60, 1, first, tag);
  request("gen/extend", 32, 60, 1, again, tag);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(c.bad + first.bad + again.bad, 0);
  EXPECT_GT(first.in_slab, first.requests / 4);  // its first 16 steps
  EXPECT_GE(share(again), 0.99);
  EXPECT_EQ(after.recordings, before.recordings);
  EXPECT_GE(after.plans_grown - before.plans_grown, 1u);
}

// Dynamic batching: the batch (1..8) and the lengths drawn per request, and a batch
// that changes between decode steps, under one key: at least 90% from the slab once
// warm, with a bounded number of plans.
TEST(Generation, BatchAndLengthChangingPerRequestAndPerStep) {
  std::mt19937_64 rng(31);
  std::uint64_t tag = 0;
  counts warm, steady;
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 60; ++i) {
    counts& c = i < 20 ? warm : steady;
    const std::size_t prompt = 8 + rng() % 57;
    const int steps = 8 + static_cast<int>(rng() % 25);
    if (i % 3 == 2) {
      std::vector<std::size_t> batches;
      for (int s = 0; s < 4; ++s) batches.push_back(1 + rng() % 8);
      request("gen/batched", prompt, steps, 8, c, tag, {}, &batches, kHidden / 2);
    } else {
      request("gen/batched", prompt, steps, 1 + rng() % 8, c, tag, {}, nullptr, kHidden / 2);
    }
  }
  const replayalloc::Stats after = replayalloc::stats();
  std::printf("generation, dynamic batching: %.1f%% of %llu requests from the slab after 20; %llu plans\n",
              100.0 * share(steady), static_cast<unsigned long long>(steady.requests),
              static_cast<unsigned long long>(after.plans - before.plans));
  EXPECT_EQ(warm.bad + steady.bad, 0);
  EXPECT_GE(share(steady), 0.90);
  EXPECT_LE(after.plans - before.plans, 16u);
  // The plan is sized near the largest request, not by scaling every slot by one
  // slot's ratio to a batch 8 times larger (Note [Periodic iterations], key_policy.cc:
  // max_scaled_growth).
  const std::uint64_t largest = std::max(warm.peak, steady.peak);
  std::printf("generation, dynamic batching: slab %.1f MiB, the largest request held %.1f MiB at once\n",
              static_cast<double>(after.slab_bytes) / (1 << 20), static_cast<double>(largest) / (1 << 20));
  EXPECT_LE(after.slab_bytes, 2 * largest);
}

// A preallocated cache (a static key/value cache of the longest sequence, made at the
// request's start and written in place, as servers that reserve it up front do): each
// decode step allocates only its temporaries, of one size whatever the position. Served
// at least as well as the growing cache: every later request whole from the slab.
TEST(Generation, APreallocatedCacheIsServedAtLeastAsWell) {
  std::mt19937_64 rng(5);
  std::uint64_t tag = 0;
  counts warm, steady;
  constexpr std::size_t max_len = 128;
  for (int i = 0; i < 40; ++i) {
    counts& c = i < 12 ? warm : steady;
    const std::size_t prompt = 8 + rng() % 57;
    const int steps = 8 + static_cast<int>(rng() % 25);
    replayalloc::Iteration it("gen/static-cache");
    live_blocks live(c, tag);
    std::vector<unsigned char*> cache;
    for (int l = 0; l < 3; ++l) {
      cache.push_back(live.make(max_len * kHidden));  // keys
      cache.push_back(live.make(max_len * kHidden));  // values
    }
    unsigned char* x = live.make(prompt * kHidden);
    for (int l = 0; l < 3; ++l) live.drop(live.make(4 * prompt * prompt * 4 + 4096));
    live.drop(x);
    unsigned char* logits = live.make(32000);
    for (int s = 0; s < steps; ++s) {
      unsigned char* h = live.make(kHidden);
      for (int l = 0; l < 3; ++l) live.drop(live.make(4 * max_len * 4));  // scores over the whole cache
      live.drop(h);
      unsigned char* next = live.make(32000);
      live.drop(logits);
      logits = next;
    }
  }
  std::printf("generation, preallocated cache: %.1f%% of %llu requests from the slab after 12\n",
              100.0 * share(steady), static_cast<unsigned long long>(steady.requests));
  EXPECT_EQ(warm.bad + steady.bad, 0);
  EXPECT_GE(share(steady), 0.99);
}

// The safety test: requests shorter and longer than every recording, steps missing an
// allocation or repeated, caches held past their step, in random order. Whatever the
// plans predict, no block is smaller than its request or handed out over live bytes.
TEST(Generation, DeviatingRequestsNeverGetLiveOrShortBlocks) {
  std::mt19937_64 rng(99);
  std::uint64_t tag = 0;
  counts c;
  for (int i = 0; i < 100; ++i) {
    quirks q;
    const int steps = 1 + static_cast<int>(rng() % 48);
    switch (rng() % 5) {
      case 0: q.skip_at = static_cast<int>(rng() % static_cast<unsigned>(steps)); break;
      case 1: q.repeat_at = static_cast<int>(rng() % static_cast<unsigned>(steps)); break;
      case 2: q.hold_at = static_cast<int>(rng() % static_cast<unsigned>(steps)); break;
      default: break;
    }
    const std::size_t prompt = 2 + rng() % 48;
    const std::size_t batch = 1 + rng() % 3;
    request("gen/safety", prompt, steps, batch, c, tag, q, nullptr, kHidden / 2);
    ASSERT_EQ(c.bad, 0) << "request " << i;
  }
  std::printf("generation, deviating requests: %.1f%% of %llu requests from the slab, no block corrupted\n",
              100.0 * share(c), static_cast<unsigned long long>(c.requests));
  EXPECT_GT(c.in_slab, 0u);  // the plans served (the test checked their blocks)
}

}  // namespace
