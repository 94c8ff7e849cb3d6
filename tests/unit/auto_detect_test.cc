// Auto mode's period detector on hand-made allocation streams.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "runtime/auto_detect.h"
#include "runtime/auto_policy.h"

namespace replayalloc::detail {
namespace {

// An inference-shaped period: sizes with live bytes rising through the pass and
// falling back at its end; the boundary should fall where the fewest were live.
struct stream {
  std::vector<std::uint64_t> sizes;
  std::vector<std::uint64_t> live;
};

stream periodic(int prefix, int periods) {
  stream s;
  for (int i = 0; i < prefix; ++i) {  // start-up: nothing periodic
    s.sizes.push_back(8192 + 64 * static_cast<std::uint64_t>(i * 7919 % 101));
    s.live.push_back(1 << 20);
  }
  const std::vector<std::uint64_t> pass = {602112, 802816, 802816, 401408, 401408, 200704,
                                           200704, 100352, 100352, 50176,  4096,   65536};
  for (int p = 0; p < periods; ++p) {
    for (std::size_t k = 0; k < pass.size(); ++k) {
      s.sizes.push_back(pass[k]);
      s.live.push_back(k == 3 ? 1000 : 500000 + 10000 * k);  // fewest live before the 4th
    }
  }
  return s;
}

TEST(PeriodDetector, FindsThePeriodAfterANonPeriodicStartAndPutsTheBoundaryAtTheLeastLive) {
  const stream s = periodic(37, 12);
  period_detector d;
  std::size_t found_at = 0;
  for (std::size_t i = 0; i < s.sizes.size() && !d.found(); ++i) {
    if (d.observe(s.sizes[i], s.live[i])) found_at = i;
  }
  ASSERT_TRUE(d.found());
  EXPECT_EQ(d.period(), 12u);
  EXPECT_LE(found_at, 37u + 12 * 8);  // within a few periods of their start
  // Boundaries sit on the 4th allocation of a pass (index 3): stream positions 37+3+12k.
  EXPECT_EQ((d.next_boundary() - 37 - 3) % 12, 0u);
  EXPECT_GE(d.next_boundary(), d.count());
}

// A period of `run` blocks of 8,032 bytes and 20 of other sizes, behind a start-up of
// `start` allocations of that size (7 in 8) and sizes never seen twice: the detector
// after it, and the allocation (counted from the period's start) at which it was found.
struct run_period_found {
  period_detector d;
  std::size_t at = 0;
};
std::unique_ptr<run_period_found> find_run_period(std::size_t run, std::size_t start) {
  auto r = std::make_unique<run_period_found>();
  const std::size_t period = run + 20;
  std::mt19937 rng(static_cast<unsigned>(start));
  std::uint64_t i = 0, other = 0;
  for (; i < start; ++i) r->d.observe(rng() % 8 == 0 ? 1'000'000 + 8 * other++ : 8032, 1000);
  for (; i < start + 6 * period && !r->d.found(); ++i) {
    const std::uint64_t k = (i - start) % period;
    if (r->d.observe(k < run ? 8032 : 16312 + 64 * k, k == 0 ? 10 : 1000 + k)) r->at = i - start;
  }
  return r;
}

// Note [A run of one value walked once]: a program that makes one size far more than any
// other (cc1plus's 8,032-byte obstack chunks, 86% of its watched allocations) has long
// runs of it, and a search made inside one starts its walks past it. A period that is
// mostly such a run, behind a start-up of that size among others, is still found whole,
// at the allocation that completes its third period, wherever in the run the searches
// fall.
TEST(PeriodDetector, APeriodMostlyOfOneRunOfOneSizeIsFoundWhole) {
  constexpr std::size_t kRun = 100, kPeriod = kRun + 20;
  for (std::size_t start : {3000u, 3047u, 5111u, 8000u}) {
    const auto r = find_run_period(kRun, start);
    ASSERT_TRUE(r->d.found()) << start;
    EXPECT_EQ(r->d.period(), kPeriod) << start;
    EXPECT_EQ(r->at, 3 * kPeriod - 1) << "start-up of " << start << " allocations";
  }
}

// Note [A search put off to a run's end]: a period made mostly of one run longer than a
// search's candidates, behind start-ups of that size and others, is found within its
// fourth period (before, runs of 390 were found up to three periods late and runs of
// 1,000 in one start-up of four).
TEST(PeriodDetector, APeriodMostlyOfOneLongRunIsFoundOnTime) {
  for (std::size_t run : {300u, 390u, 1000u}) {
    for (std::size_t start : {3000u, 3047u, 5111u, 8000u}) {
      const auto r = find_run_period(run, start);
      ASSERT_TRUE(r->d.found()) << "run " << run << ", start-up " << start;
      EXPECT_EQ(r->d.period(), run + 20) << "run " << run << ", start-up " << start;
      EXPECT_LT(r->at, 4 * (run + 20)) << "run " << run << ", start-up " << start;
    }
  }
}

// Note [A period found on time]: behind a long start-up (searches then run every ~125
// allocations), the period is found at the allocation that completes its third period,
// not at the next regular search, which could come after the request its iterations
// begin at. For each length of start-up around a search's spacing.
TEST(PeriodDetector, APeriodIsFoundAtTheAllocationThatCompletesItsThirdPeriod) {
  constexpr std::size_t kPeriod = 200;
  for (std::size_t start = 8000; start < 8000 + 130; start += 13) {
    period_detector d;
    std::size_t found_at = 0;
    std::uint64_t i = 0;
    for (; i < start; ++i) d.observe(1'000'000 + 8 * i, 1000);  // no size twice
    for (; i < start + 6 * kPeriod && !d.found(); ++i) {
      const std::uint64_t k = (i - start) % kPeriod;
      if (d.observe(4096 + 64 * k, k == 0 ? 10 : 1000 + k)) found_at = i;
    }
    ASSERT_TRUE(d.found()) << start;
    EXPECT_EQ(d.period(), kPeriod) << start;
    EXPECT_EQ(found_at, start + 3 * kPeriod - 1) << "start-up of " << start << " allocations";
  }
}

TEST(PeriodDetector, TheSameSequenceGetsTheSameSignature) {
  const stream a = periodic(10, 10), b = periodic(50, 10);
  period_detector da, db;
  for (std::size_t i = 0; i < a.sizes.size(); ++i) da.observe(a.sizes[i], a.live[i]);
  for (std::size_t i = 0; i < b.sizes.size(); ++i) db.observe(b.sizes[i], b.live[i]);
  ASSERT_TRUE(da.found() && db.found());
  EXPECT_EQ(da.signature(), db.signature());
}

TEST(PeriodDetector, SmallRepeatingLoopsAreNotTakenForAnIteration) {
  period_detector d;
  for (int i = 0; i < 5000; ++i) d.observe(4096 + 4096 * (i % 3), 0);  // 12 KiB a period
  EXPECT_FALSE(d.found());
}

TEST(PeriodDetector, ARejectedPeriodIsNeverPickedAgain) {
  const stream s = periodic(0, 40);
  period_detector d;
  std::size_t i = 0;
  for (; i < s.sizes.size() && !d.found(); ++i) d.observe(s.sizes[i], s.live[i]);
  ASSERT_EQ(d.period(), 12u);
  d.reject_current();
  EXPECT_FALSE(d.found());
  for (; i < s.sizes.size(); ++i) d.observe(s.sizes[i], s.live[i]);
  // Only multiples of 12 remain; with the shortest excluded the next best is 24.
  if (d.found()) {
    EXPECT_NE(d.period(), 12u);
    EXPECT_EQ(d.period() % 12, 0u);
  }
}

TEST(PeriodDetector, ANonRepeatingStreamFindsNothing) {
  period_detector d;
  for (std::uint64_t i = 0; i < 3000; ++i) d.observe(300000 + (i * 2654435761u) % 100000, i);
  EXPECT_FALSE(d.found());
}

// Note [Auto mode rests]: a stream in which no size recurs (random sizes, as a request
// stream with nothing to plan) says so, and auto mode rests after one history instead
// of four; one whose sizes recur (a period, or a start-up loop) says so within a few
// searches, and keeps the longer watch.
TEST(PeriodDetector, SaysWhetherAnySizeRecurs) {
  std::mt19937_64 rng(7);
  period_detector random_sizes;
  for (int i = 0; i < 16384; ++i) random_sizes.observe(4096 + rng() % (1u << 20), 1 << 20);
  EXPECT_FALSE(random_sizes.found());
  EXPECT_FALSE(random_sizes.sizes_recur()) << "16,384 random sizes in 1 MiB";

  const stream s = periodic(37, 12);
  period_detector d;
  for (std::size_t i = 0; i < s.sizes.size(); ++i) d.observe(s.sizes[i], s.live[i]);
  EXPECT_TRUE(d.found());
  EXPECT_TRUE(d.sizes_recur());
  d.reset();
  EXPECT_FALSE(d.sizes_recur()) << "a rest starts the watch afresh";
}

// Note [Auto mode rests]: a history of one size says so (the watch rests after one
// history), until another size comes; a start-up's block of another size (libstdc++'s
// pool) stops counting once the history has dropped it.
TEST(PeriodDetector, SaysWhetherItsHistoryIsOfOneSize) {
  const std::uint32_t history = 4096;
  period_detector d(history);
  EXPECT_FALSE(d.one_size()) << "nothing observed yet";
  d.observe(72704, 0);
  for (std::uint32_t i = 0; i < history - 1; ++i) d.observe(100000, std::uint64_t(i % 2000) * 100000);
  EXPECT_FALSE(d.one_size()) << "the start-up's block is still in the history";
  d.observe(100000, 0);  // the history is full: its older half is dropped
  EXPECT_TRUE(d.one_size());
  EXPECT_TRUE(d.sizes_recur());
  d.observe(100001, 0);
  EXPECT_FALSE(d.one_size()) << "a second size";
  d.observe(100000, 0);
  EXPECT_FALSE(d.one_size()) << "and after it";
  d.reset();
  EXPECT_FALSE(d.one_size());
  d.observe(4096, 0);
  EXPECT_TRUE(d.one_size()) << "a reset starts the watch afresh";
}

// Note [Auto mode rests]: a stream of one size whose rounds are short enough for the
// search of structure (each round allocates `round` blocks of 100,000 bytes, then frees
// them all) is found within the one history its watch now gets; one of 1,000 blocks a
// round is not found within four histories either (a watch where sizes differ), so the
// shorter watch loses nothing there. (If the detector learns to find it, the budget
// for one size is to be looked at again.)
std::uint64_t one_size_rounds(std::uint32_t round, std::uint64_t most, period_detector& d) {
  std::vector<std::uint64_t> pos;
  std::uint64_t observed = 0;
  while (!d.found() && observed < most) {
    pos.clear();
    for (std::uint32_t i = 0; i < round && !d.found() && observed < most; ++i) {
      d.observe(100000, std::uint64_t{i} * 100000, i);
      pos.push_back(d.count() - 1);
      ++observed;
    }
    for (std::uint64_t p : pos) d.settle(p);
  }
  return observed;
}

TEST(PeriodDetector, OneSizeInRoundsIsFoundWithinOneHistoryOrNotAtAll) {
  const std::uint64_t history = 16384;
  for (std::uint32_t round : {64u, 300u, 700u}) {
    period_detector d;
    const std::uint64_t observed = one_size_rounds(round, history, d);
    EXPECT_TRUE(d.found()) << round << " blocks a round";
    EXPECT_LT(observed, history) << round << " blocks a round";
    EXPECT_EQ(d.period(), round);
    EXPECT_TRUE(d.one_size());
  }
  period_detector d;
  one_size_rounds(1000, 4 * history, d);
  EXPECT_FALSE(d.found()) << "1,000 blocks a round: found within four histories";
  EXPECT_TRUE(d.one_size());
}

// Note [Periods whose sizes change]: an encoder fed a new sequence length on every
// request repeats no size but its structure; the period is the whole inference (not
// one of its repeated layers), found by lifetimes, and named the same whatever the
// lengths.
struct encoder_stream {
  period_detector& d;
  std::uint64_t live = 0;
  std::uint32_t blocks_live = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> blocks;  // (position, size) by handle
  std::size_t alloc(std::uint64_t size) {
    d.observe(size, live, blocks_live);
    live += size;
    ++blocks_live;
    blocks.emplace_back(d.count() - 1, size);
    return blocks.size() - 1;
  }
  void release(std::size_t h) {
    d.settle(blocks[h].first);
    live -= blocks[h].second;
    --blocks_live;
  }
  // One inference at sequence length `seq`: 1 + 6 x layers allocations.
  void inference(std::uint64_t seq, int layers) {
    const std::uint64_t hidden = 1024;
    std::size_t x = alloc(seq * hidden);
    for (int l = 0; l < layers; ++l) {
      const std::size_t qkv = alloc(3 * seq * hidden), scores = alloc(16 * seq * seq), ws = alloc(65536);
      release(ws);
      const std::size_t ctx = alloc(seq * hidden);
      release(scores);
      release(qkv);
      const std::size_t h = alloc(4 * seq * hidden), y = alloc(seq * hidden);
      release(h);
      release(ctx);
      release(x);
      x = y;
    }
    release(x);
  }
};

TEST(PeriodDetector, FindsAPeriodWhoseSizesChangeByItsStructure) {
  std::uint64_t sig[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    period_detector d;
    encoder_stream e{d};
    std::mt19937_64 rng(run + 1);
    int inferences = 0;
    while (!d.found() && inferences < 400) {
      e.inference(16 + rng() % 241, 4);
      ++inferences;
    }
    ASSERT_TRUE(d.found()) << "run " << run;
    EXPECT_TRUE(d.by_shape());
    EXPECT_EQ(d.period(), 25u);  // the inference, not one layer (6)
    EXPECT_LE(inferences, 60);
    sig[run] = d.signature();
  }
  EXPECT_EQ(sig[0], sig[1]);  // other lengths, the same key
}

TEST(PeriodDetector, RandomSizesFreedAtOnceHaveNoPeriodOfStructure) {
  period_detector d;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000 && !d.found(); ++i) {
    d.observe(4096 + rng() % (1 << 20), 0);
    d.settle(d.count() - 1);
  }
  EXPECT_FALSE(d.found());
}

// Note [Iterations between quiet points]: a model whose kernels allocate more
// workspaces past some sequence lengths (one more per layer past 64, two more past
// 128) repeats neither sizes nor one structure. Its requests begin where only the
// weights and the last request's output are live; iterations are found there, with
// the structures as pieces of different lengths, and the same key whatever the order
// of lengths.
struct shifting_model : encoder_stream {
  std::size_t out = SIZE_MAX;  // the last request's output, freed after the next is made
  void weights(int n) {
    for (int i = 0; i < n; ++i) alloc(1 << 20);
  }
  void request(std::uint64_t seq, int layers) {
    const std::uint64_t hidden = 1024;
    std::size_t x = alloc(seq * hidden);
    for (int l = 0; l < layers; ++l) {
      const std::size_t qkv = alloc(3 * seq * hidden);
      for (std::uint64_t w = 0; w < 1 + (seq > 64) + 2 * (seq > 128); ++w) release(alloc(512 << 10));
      const std::size_t ctx = alloc(seq * hidden);
      release(qkv);
      const std::size_t y = alloc(seq * hidden);
      release(ctx);
      release(x);
      x = y;
    }
    if (out != SIZE_MAX) release(out);
    out = x;
    release(alloc(seq * hidden));  // the output serialized, at the quiet count
  }
};

// Note [Auto mode rests]: a watch whose first 2,048 allocations are mostly of sizes
// not seen before in it (random sizes) says so, and auto mode rests after those 2,048;
// a period of up to 1,024 allocations, even of sizes all different within it, does
// not say so, and nor do programs whose sizes change by the request (their layers
// repeat shapes within one; the streams of the tests before and after this one).
TEST(PeriodDetector, SaysWhenFewSizesRecurInTheWatchsFirstAllocations) {
  std::mt19937_64 rng(11);
  period_detector random_sizes;
  for (std::uint32_t i = 0; i + 1 < early_sample; ++i) random_sizes.observe(4096 + rng() % (1u << 20), 0);
  EXPECT_FALSE(random_sizes.sizes_rare()) << "said before its first 512";
  random_sizes.observe(4096 + rng() % (1u << 20), 0);
  EXPECT_TRUE(random_sizes.sizes_rare()) << "512 random sizes in 1 MiB (Note [Rare sizes said early])";
  random_sizes.reset();
  EXPECT_FALSE(random_sizes.sizes_rare()) << "a rest starts the tally afresh";

  // Note [Rare sizes said early]: one size in eight seen before (more than a sixteenth,
  // fewer than a quarter) is not said rare at 512, but is once the sample of 2,048 is complete.
  period_detector some;
  for (std::uint32_t i = 0; i + 1 < recur_sample; ++i) {
    some.observe(i % 8 == 7 ? 4096 : 8192 + rng() % (1u << 20), 0);
    if (i + 1 == early_sample) EXPECT_FALSE(some.sizes_rare()) << "an eighth recurring said rare at 512";
  }
  EXPECT_FALSE(some.sizes_rare()) << "said before its sample was complete";
  some.observe(8192 + rng() % (1u << 20), 0);
  EXPECT_TRUE(some.sizes_rare()) << "an eighth recurring over 2,048";

  // A period of 480 different sizes: more than a sixteenth of the first 512 recur.
  period_detector p480;
  for (std::uint32_t i = 0; i < early_sample; ++i) p480.observe(4096 * (1 + i % 480), 0);
  EXPECT_FALSE(p480.sizes_rare()) << "a period of 480 different sizes";

  // 1,024 different sizes, then the same again: half the sample recurs.
  period_detector distinct;
  for (std::uint32_t i = 0; i < recur_sample; ++i) distinct.observe(4096 * (1 + i % 1024), 0);
  EXPECT_FALSE(distinct.sizes_rare()) << "a period of 1,024 different sizes";
  for (int i = 0; i < 3 * 1024 && !distinct.found(); ++i) distinct.observe(4096 * (1 + i % 1024), 0);
  EXPECT_TRUE(distinct.found());
  EXPECT_EQ(distinct.period(), 1024u);

  period_detector d;
  encoder_stream e{d};
  while (d.count() < recur_sample) e.inference(16 + rng() % 241, 4);
  EXPECT_FALSE(d.sizes_rare()) << "an encoder fed a new sequence length per request";

  period_detector q;
  shifting_model m{{q}};
  m.weights(40);
  while (q.count() < recur_sample) m.request(16 + rng() % 241, 4);
  EXPECT_FALSE(q.sizes_rare()) << "a model whose structure changes with the shape";
}

// Note [A glance after a rest] (runtime/auto_mode.cc): a glance tallies sizes seen
// before in it and nothing else (no history, no count, no period), and says "rare" of
// 512 random sizes but not of a period of 256 different sizes, nor of an encoder fed a
// new sequence length per request or a model whose structure changes with the shape;
// a reset starts the tally afresh.
TEST(PeriodDetector, AGlanceTalliesSizesSeenBeforeAndNothingElse) {
  std::mt19937_64 rng(12);
  period_detector g;
  for (std::uint32_t i = 0; i < glance_sample; ++i) g.glance(4096 + rng() % (1u << 20));
  EXPECT_EQ(g.glanced(), glance_sample);
  EXPECT_EQ(g.count(), 0u) << "a glance observed";
  EXPECT_FALSE(g.found());
  EXPECT_TRUE(auto_glance_rare(g.glanced(), g.glance_recurred())) << "512 random sizes in 1 MiB";
  g.reset();
  EXPECT_EQ(g.glanced(), 0u) << "a reset kept the glance's tally";
  for (std::uint32_t i = 0; i < glance_sample; ++i) g.glance(4096 * (1 + i % 256));
  EXPECT_GE(g.glance_recurred(), glance_sample - 256);  // (more where two sizes share a bit)
  EXPECT_FALSE(auto_glance_rare(g.glanced(), g.glance_recurred())) << "a period of 256 different sizes";
  // The sizes of two programs whose sizes change by the request, glanced at.
  auto glanced_rare = [](const period_detector& d) {
    period_detector look;
    for (std::size_t back = glance_sample; back-- > 0;) look.glance(d.size_back(back));
    return auto_glance_rare(look.glanced(), look.glance_recurred());
  };
  period_detector d;
  encoder_stream e{d};
  while (d.count() < 4 * glance_sample) e.inference(16 + rng() % 241, 4);
  EXPECT_FALSE(glanced_rare(d)) << "an encoder fed a new sequence length per request";
  period_detector q;
  shifting_model m{{q}};
  m.weights(40);
  while (q.count() < 4 * glance_sample) m.request(16 + rng() % 241, 4);
  EXPECT_FALSE(glanced_rare(q)) << "a model whose structure changes with the shape";
}

TEST(AutoPolicy, AGlanceIsRareWhenFewerThanAQuarterOfItsSizesRecur) {
  EXPECT_TRUE(auto_glance_rare(512, 127));
  EXPECT_FALSE(auto_glance_rare(512, 128));
  EXPECT_FALSE(auto_glance_rare(512, 511));
}

// Note [Blocks that never overlap]: a watch whose first 2,048 allocations were each
// freed before the next, none above the thread cache's 128 KiB, says so; blocks still
// live (a start-up's, the watch's first among them) are left out; a block of the sample
// freed after others were made, or a larger block, and it does not; a rest starts over.
TEST(PeriodDetector, SaysWhenTheWatchsFirstBlocksNeverOverlap) {
  // n allocations, each freed (settled) before the next but `held`, freed after
  // `held_for` more (never with 0).
  const auto stream = [](period_detector& d, std::uint32_t n, auto size_of, std::uint32_t held = UINT32_MAX,
                         std::uint32_t held_for = 0) {
    std::uint64_t held_pos = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      d.observe(size_of(i), 0);
      if (i == held) {
        held_pos = d.count() - 1;
      } else {
        d.settle(d.count() - 1);
      }
      if (held_for != 0 && i == held + held_for) d.settle(held_pos);
    }
  };
  const auto four_k = [](std::uint32_t) { return std::uint64_t{4096}; };
  period_detector alone;
  stream(alone, early_sample - 1, four_k, 0);  // the first: a start-up block, live for good
  EXPECT_FALSE(alone.blocks_alone()) << "said before its first 512 were observed";
  stream(alone, 1, four_k);
  EXPECT_TRUE(alone.blocks_alone()) << "512 malloc/free pairs of 4 KiB, said early";
  EXPECT_FALSE(alone.sizes_rare()) << "one size recurs";
  alone.reset();
  EXPECT_FALSE(alone.blocks_alone()) << "a rest starts the tally afresh";

  // A start-up's 300 buffers, live for good, then pairs: more than half of the first 512
  // still live says nothing yet; of the 2,048, a seventh: said then.
  period_detector after_startup;
  for (std::uint32_t i = 0; i < 300; ++i) after_startup.observe(8192, std::uint64_t{i} * 8192, i);
  stream(after_startup, early_sample - 300, four_k);
  EXPECT_FALSE(after_startup.blocks_alone()) << "said early of a sample mostly still live";
  stream(after_startup, recur_sample - early_sample - 1, four_k);
  EXPECT_FALSE(after_startup.blocks_alone()) << "said before its sample was complete";
  stream(after_startup, 1, four_k);
  EXPECT_TRUE(after_startup.blocks_alone()) << "1,748 pairs after 300 start-up buffers";

  period_detector one_held;
  stream(one_held, recur_sample, four_k, 1000, 500);
  EXPECT_FALSE(one_held.blocks_alone()) << "500 blocks made while one of the sample was live";
  period_detector held_over_one;
  stream(held_over_one, recur_sample, four_k, 1000, 1);
  EXPECT_FALSE(held_over_one.blocks_alone()) << "one block made while another was live";

  period_detector large;  // one block of 256 KiB among the pairs
  stream(large, recur_sample, [](std::uint32_t i) { return i == 5 ? std::uint64_t{256} << 10 : 4096; });
  EXPECT_FALSE(large.blocks_alone()) << "a block larger than the thread cache keeps";
  period_detector cached;  // 128 KiB: still the thread cache's
  stream(cached, recur_sample, [](std::uint32_t i) { return i % 2 ? thread_cached_max : 4096; });
  EXPECT_TRUE(cached.blocks_alone());
  // The thread cache as the backend's settings say (a user's MALLOC_CONF): 32 KiB.
  period_detector small_cache(16384, std::uint64_t{32} << 10);
  stream(small_cache, recur_sample, [](std::uint32_t i) { return i % 2 ? std::uint64_t{64} << 10 : 4096; });
  EXPECT_FALSE(small_cache.blocks_alone()) << "64 KiB blocks, above a thread cache of 32 KiB";
  period_detector small_cache_fits(16384, std::uint64_t{32} << 10);
  stream(small_cache_fits, recur_sample, [](std::uint32_t i) { return i % 2 ? std::uint64_t{32} << 10 : 4096; });
  EXPECT_TRUE(small_cache_fits.blocks_alone());

  // The streams of the test above do not say so: their blocks overlap.
  std::mt19937_64 rng(3);
  period_detector d;
  encoder_stream e{d};
  while (d.count() < recur_sample) e.inference(16 + rng() % 241, 4);
  EXPECT_FALSE(d.blocks_alone()) << "an encoder fed a new sequence length per request";
}

// Note [Blocks that never overlap]: a sample all of whose blocks were still live at its
// end overlaps (a burst's first 2,048 blocks); it said "alone" of them before.
TEST(PeriodDetector, ASampleWhoseBlocksAreAllStillLiveIsNotAlone) {
  period_detector burst;
  for (std::uint32_t i = 0; i < recur_sample; ++i) burst.observe(4096, std::uint64_t{i} * 4096, i);
  EXPECT_FALSE(burst.blocks_alone()) << "2,048 blocks of 4 KiB, none freed";
  period_detector half;  // pairs after 1,024 buffers made for good: still alone
  for (std::uint32_t i = 0; i < recur_sample; ++i) {
    half.observe(4096, 0);
    if (i >= recur_sample / 2) half.settle(half.count() - 1);
  }
  EXPECT_TRUE(half.blocks_alone());
}

// Note [Blocks that never overlap]: a sample of one size the fallback caches, whatever
// its blocks' lifetimes (a burst of 2,000 blocks of 100,000 bytes, all freed together),
// rests after the sample; a few blocks of other sizes still live (a start-up's pool) do
// not count, one freed does, as do 33 live ones, or a size above the thread cache.
TEST(PeriodDetector, SaysWhetherTheSampleIsOfOneSizeTheFallbackCaches) {
  // `n` blocks of `size` in bursts of `burst` (allocated, then all freed), after the
  // blocks of `first`, each freed at once when `freed` and kept otherwise.
  const auto run = [](period_detector& d, std::uint64_t size, std::uint32_t burst, std::uint32_t n,
                      std::vector<std::uint64_t> first = {}, bool freed = false) {
    for (std::uint64_t f : first) {
      d.observe(f, 0);
      if (freed) d.settle(d.count() - 1);
    }
    std::vector<std::uint64_t> pos;
    for (std::uint32_t i = 0; i < n; ++i) {
      d.observe(size, std::uint64_t{pos.size()} * size, static_cast<std::uint32_t>(pos.size()));
      pos.push_back(d.count() - 1);
      if (pos.size() == burst) {
        for (std::uint64_t p : pos) d.settle(p);
        pos.clear();
      }
    }
  };
  period_detector bursts;
  run(bursts, 100000, 2000, early_sample - 1);
  EXPECT_FALSE(bursts.sample_one_size()) << "said before its first 512 were observed";
  run(bursts, 100000, 2000, 1);
  EXPECT_TRUE(bursts.sample_one_size()) << "bursts of 2,000 blocks of 100,000 bytes, said early";
  EXPECT_FALSE(bursts.found());
  bursts.reset();
  EXPECT_FALSE(bursts.sample_one_size()) << "a rest starts the tally afresh";

  period_detector live;  // 10,000 a burst: none freed by the sample's end
  run(live, 20000, 10000, recur_sample);
  EXPECT_TRUE(live.sample_one_size());
  EXPECT_FALSE(live.blocks_alone()) << "and they overlap";

  period_detector pool;
  run(pool, 100000, 2000, recur_sample - 1, {72704});
  EXPECT_TRUE(pool.sample_one_size()) << "one start-up block of another size, still live";
  period_detector startup;
  run(startup, 100000, 2000, early_sample - 32, std::vector<std::uint64_t>(32, 8192));
  EXPECT_FALSE(startup.sample_one_size()) << "32 of the first 512 (at most 8 there) said early";
  run(startup, 100000, 2000, recur_sample - early_sample);
  EXPECT_TRUE(startup.sample_one_size()) << "32 of them";
  period_detector many;
  run(many, 100000, 2000, recur_sample - 33, std::vector<std::uint64_t>(33, 8192));
  EXPECT_FALSE(many.sample_one_size()) << "33 of them";
  period_detector freed;
  run(freed, 100000, 2000, recur_sample - 1, {8192}, true);
  EXPECT_FALSE(freed.sample_one_size()) << "a block of another size made and freed among them";
  period_detector two;
  for (std::uint32_t i = 0; i < recur_sample; ++i) {
    two.observe(i % 2 ? 100000 : 100001, 0);
    two.settle(two.count() - 1);
  }
  EXPECT_FALSE(two.sample_one_size()) << "two sizes";
  period_detector large;
  run(large, std::uint64_t{256} << 10, 100, recur_sample);
  EXPECT_FALSE(large.sample_one_size()) << "256 KiB, above the thread cache's 128 KiB";
  period_detector small_cache(16384, std::uint64_t{32} << 10);
  run(small_cache, std::uint64_t{64} << 10, 100, recur_sample);
  EXPECT_FALSE(small_cache.sample_one_size()) << "64 KiB, above a thread cache of 32 KiB";

  // The model-shaped streams of the tests above do not say so.
  std::mt19937_64 rng(3);
  period_detector d;
  encoder_stream e{d};
  while (d.count() < recur_sample) e.inference(16 + rng() % 241, 4);
  EXPECT_FALSE(d.sample_one_size()) << "an encoder fed a new sequence length per request";
}

TEST(PeriodDetector, FindsIterationsBetweenQuietPointsWhenTheStructureChangesWithTheShape) {
  std::uint64_t sig[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    period_detector d;
    shifting_model m{{d}};
    m.weights(40);
    std::mt19937_64 rng(run + 7);
    int requests = 0;
    while (!d.found() && requests < 400) {
      m.request(16 + rng() % 241, 4);
      ++requests;
    }
    ASSERT_TRUE(d.found()) << "run " << run;
    EXPECT_TRUE(d.quiet());
    EXPECT_FALSE(d.by_shape());
    EXPECT_EQ(d.quiet_level(), 41u);  // the weights and the last output
    // The serialized output is made and freed at that count too: a run of 2, the
    // request beginning at its last.
    EXPECT_EQ(d.quiet_run(), 2u);
    EXPECT_LE(requests, 120);
    // The longest piece, a request past 128: its input, 4 layers of 3 + 4
    // workspaces, and its output serialized (past 64: 26; up to 64: 18).
    EXPECT_EQ(d.period(), 1u + 4 * 7 + 1);
    sig[run] = d.signature();
  }
  EXPECT_EQ(sig[0], sig[1]);
}

TEST(PeriodDetector, RandomLifetimesHaveNoQuietPoints) {
  period_detector d;
  std::mt19937_64 rng(5);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // (position, size)
  std::uint64_t bytes = 0;
  for (int i = 0; i < 40000 && !d.found(); ++i) {
    const std::uint64_t size = 4096 + rng() % (1 << 20);
    d.observe(size, bytes, static_cast<std::uint32_t>(live.size()));
    live.emplace_back(d.count() - 1, size);
    bytes += size;
    while (!live.empty() && rng() % 2 == 0) {  // free a random live block or none
      const std::size_t k = rng() % live.size();
      d.settle(live[k].first);
      bytes -= live[k].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  EXPECT_FALSE(d.found());
}

// Note [Requests of repeated steps]: LLM generation as a Python loop makes it. A
// request is a prefill, then a number of decode steps drawn per request, each the same
// structure with sizes that grow by the position: per layer a key and a value cache
// grown by one token (torch.cat: the new one made; the old one freed only when the call
// that read it returns, after the next step's caches are made) and two scratch blocks,
// then the logits. The period of structure is the decode step, but its iterations could
// never hold the caches (each outlives its step) nor its sizes; the iterations are
// the requests, between the counts where only the weights are live.
struct generation_model : encoder_stream {
  std::vector<std::size_t> past;  // the caches the next step reads
  void weights(int n) {
    for (int i = 0; i < n; ++i) alloc(1 << 20);
  }
  void request(std::uint64_t prompt, int steps, int layers = 4) {
    const std::uint64_t row = 1024;  // bytes per token of one layer's key or value
    const std::size_t x = alloc(prompt * row);
    for (int l = 0; l < layers; ++l) {
      const std::size_t qkv = alloc(3 * prompt * row);
      past.push_back(alloc(prompt * row));
      past.push_back(alloc(prompt * row));
      release(alloc(16 * prompt * prompt));
      release(qkv);
    }
    release(x);
    std::size_t logits = alloc(32000);
    for (int s = 1; s < steps; ++s) {
      std::vector<std::size_t> next;
      for (int l = 0; l < layers; ++l) {
        next.push_back(alloc((prompt + s) * row));
        next.push_back(alloc((prompt + s) * row));
        release(alloc(4096));
        release(alloc(4096 + 64 * (prompt + s)));
      }
      release(logits);
      logits = alloc(32000);
      for (std::size_t h : past) release(h);  // `past` rebound after the call returns
      past = std::move(next);
    }
    release(logits);
    for (std::size_t h : past) release(h);
    past.clear();
  }
};

TEST(PeriodDetector, FindsGenerationRequestsMadeOfDecodeSteps) {
  std::uint64_t sig[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    period_detector d;
    generation_model m{{d}};
    m.weights(40);
    std::mt19937_64 rng(run + 3);
    int requests = 0, longest = 0;
    while (!d.found() && requests < 200) {
      const std::uint64_t prompt = 8 + rng() % 57;
      const int steps = 8 + static_cast<int>(rng() % 57);
      m.request(prompt, steps);
      ++requests;
      longest = std::max(longest, 1 + 4 * 4 + 1 + (steps - 1) * (4 * 4 + 1));
    }
    ASSERT_TRUE(d.found()) << "run " << run;
    EXPECT_TRUE(d.quiet()) << "took a period of " << d.period() << (d.by_shape() ? " in structure" : "");
    EXPECT_FALSE(d.by_shape());
    EXPECT_EQ(d.quiet_level(), 40u);  // the weights: between two requests
    EXPECT_LE(d.period(), static_cast<std::uint32_t>(longest));
    EXPECT_GT(d.period(), 4u * 17) << "a request, not a decode step";
    EXPECT_LE(requests, 40);
    sig[run] = d.signature();
  }
  EXPECT_EQ(sig[0], sig[1]);
}

// Note [Anchored iterations]: the same generation when the host language holds the
// caches (ONNX Runtime under Node.js): each decode step is one run whose outputs are
// copied into buffers a collector frees in batches, much later, so no quiet point
// shows where a request begins, and the live bytes climb between collections. The step
// is the iteration, begun at the one request of a size that recurs once a step (the
// runtime's 7,008-byte block), found after an eighth of a history, not a whole one:
// a third of its blocks at most outlive it.
struct host_held_model : encoder_stream {
  std::vector<std::size_t> held;
  std::size_t mine = SIZE_MAX;
  std::mt19937 rng{5};
  std::size_t batch = 100;
  void step(std::uint64_t past, std::uint64_t q) {
    const std::uint64_t row = 1024, len = past + q;
    const std::size_t m = alloc(7008);
    std::vector<std::size_t> split, present;
    for (int l = 0; l < 4 && past > 0; ++l) split.push_back(alloc(past * row));
    if (mine != SIZE_MAX) release(mine);
    mine = m;
    for (int l = 0; l < 4; ++l) {
      const std::size_t k = alloc(len * row), v = alloc(len * row);
      for (int s = 0; s < 3; ++s) release(alloc(4096 * q));
      if (q * len >= 256) release(alloc(16 * q * len));
      present.push_back(alloc(2 * len * row));
      release(k);
      release(v);
    }
    for (std::size_t h : split) release(h);
    const std::size_t logits = alloc(32000);
    held.push_back(alloc(32000));
    for (int l = 0; l < 4; ++l) held.push_back(alloc(2 * len * row));
    for (std::size_t h : present) release(h);
    release(logits);
    if (held.size() >= batch) {  // a collection
      for (std::size_t h : held) release(h);
      held.clear();
      batch = 20 + rng() % 381;
    }
  }
};

TEST(PeriodDetector, AnchorsDecodeStepsWhoseCachesTheHostHolds) {
  period_detector d;
  host_held_model m{{d}};
  for (int w = 0; w < 8; ++w) m.alloc(256 << 10);
  std::mt19937_64 rng(13);
  int requests = 0;
  while (!d.found() && requests < 200) {
    const std::uint64_t prompt = 8 + rng() % 57, steps = 8 + rng() % 57;
    m.step(0, prompt);
    for (std::uint64_t s = 1; s < steps && !d.found(); ++s) m.step(prompt + s - 1, 1);
    ++requests;
  }
  ASSERT_TRUE(d.found());
  EXPECT_TRUE(d.by_shape());
  EXPECT_FALSE(d.quiet());
  EXPECT_EQ(d.period(), 35u);  // one decode step
  EXPECT_EQ(d.anchor(), 7008u);
  EXPECT_LT(d.count(), 16384u / anchored_wait + 1024) << "an eighth of a history, and the search's stride";
}

TEST(PeriodDetector, NoAnchorWhereTheBoundarysSizeRecursWithinThePeriod) {
  const stream s = periodic(37, 12);  // the boundary's 401,408 bytes come twice a pass
  period_detector d;
  for (std::size_t i = 0; i < s.sizes.size() && !d.found(); ++i) d.observe(s.sizes[i], s.live[i]);
  ASSERT_TRUE(d.found());
  EXPECT_EQ(d.anchor(), 0u);
}

TEST(PeriodDetector, GenerationRequestsWhoseStepsHandTheirCachesOnHaveNoAnchoredStep) {
  period_detector d;  // the Python loop above: its requests, not its steps (11 of 17 outlive them)
  generation_model m{{d}};
  m.weights(40);
  std::mt19937_64 rng(3);
  for (int r = 0; r < 200 && !d.found(); ++r) m.request(8 + rng() % 57, 8 + static_cast<int>(rng() % 57));
  ASSERT_TRUE(d.found());
  EXPECT_TRUE(d.quiet());
  EXPECT_EQ(d.anchor(), 0u);
}

// runtime/auto_iteration.h: where an auto iteration ends (whether it was poor is the key
// policy's reading: ReadReplay.AutoModeCountsAReplayThatFellShortOfTheFewerOfTheSlotsAndThePeriod).
TEST(AutoIteration, ACountedIterationEndsAfterItsPeriodOrItsPlansSlots) {
  auto_iteration it;
  it.period = 35;
  it.count = 34;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  it.count = 35;
  EXPECT_TRUE(auto_iteration_ends(it, 4096));
  it.replaying = true;
  it.count = 3;
  it.handed = 20;
  it.cursor_count = 30;
  it.cursor_next = 29;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  it.cursor_next = 30;  // the plan walked
  EXPECT_TRUE(auto_iteration_ends(it, 4096));
}

TEST(AutoIteration, AnAnchoredIterationEndsAtItsAnchorNotAtItsCount) {
  auto_iteration it;
  it.period = 35;
  it.anchor = 7008;
  it.count = 35;
  EXPECT_FALSE(auto_iteration_ends(it, 4096)) << "a longer step (a prefill) goes on to the anchor";
  EXPECT_TRUE(auto_iteration_ends(it, 7008));
  it.count = 20;
  EXPECT_TRUE(auto_iteration_ends(it, 7008)) << "a shorter one ends there too";
  it.count = 17;
  EXPECT_FALSE(auto_iteration_ends(it, 7008)) << "not before half a period";
  it.count = 69;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  it.count = 70;
  EXPECT_TRUE(auto_iteration_ends(it, 4096)) << "the anchor lost: after two periods";
  it.replaying = true;  // in replay too, whatever the cursor says
  it.count = 5;
  it.handed = 30;
  it.cursor_next = it.cursor_count = 30;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  EXPECT_TRUE(auto_iteration_ends(it, 7008));
}

// Note [Long pieces between anchors] (auto_iteration.h).
TEST(AutoIteration, AReplayedStepThatMissedAnEighthOfItsPeriodHandsItsRestToTheLongPiece) {
  auto_iteration it;
  it.period = 35;
  it.anchor = 7008;
  it.replaying = true;
  it.handed = 22;
  it.count = 13;
  it.misses = 5;  // a prefill on the step's plan: 5 of its first 35 requests missed (or more)
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::long_piece);
  EXPECT_EQ(auto_iteration_cut(it, 7008), auto_cut::next) << "at the anchor the step ends as any";
  it.misses = 4;  // fewer: a step and some requests of the host's after it (the count says nothing)
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::none);
  it.misses = 5;
  it.handed = 21;  // not a period of requests yet
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::none);
  it.handed = 22;
  it.long_checked = true;  // asked once, at the first request past the period
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::none);
  it.long_checked = false;
  it.replaying = false;  // a recording (or a step passed through) is never cut
  it.handed = 0;
  it.count = 35;
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::none);
  it.anchor = 0;  // nor an iteration counted from a boundary
  it.replaying = true;
  it.handed = 22;
  it.count = 13;
  it.cursor_count = 40;
  EXPECT_EQ(auto_iteration_cut(it, 23552), auto_cut::next);
}

TEST(AutoIteration, ALongPieceEndsAtTheAnchorOnly) {
  auto_iteration it;
  it.period = 35;
  it.anchor = 7008;
  it.long_piece = true;
  it.replaying = true;
  it.handed = 1;
  EXPECT_EQ(auto_iteration_cut(it, 7008), auto_cut::next);
  it.handed = 80;
  it.count = 10;
  it.cursor_next = it.cursor_count = 80;
  EXPECT_EQ(auto_iteration_cut(it, 4096), auto_cut::none) << "its plan walked, it still runs to the anchor";
  it.count = max_long_periods * 35 - 80 - 1;
  EXPECT_EQ(auto_iteration_cut(it, 4096), auto_cut::none);
  ++it.count;
  EXPECT_EQ(auto_iteration_cut(it, 4096), auto_cut::next) << "the anchor lost";
}

TEST(AutoIteration, AnIterationBetweenQuietPointsEndsAtTheQuietCount) {
  auto_iteration it;
  it.quiet = true;
  it.period = 100;
  it.quiet_run = 2;
  it.count = 40;
  it.at_quiet = 1;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  it.at_quiet = 2;
  EXPECT_TRUE(auto_iteration_ends(it, 4096));
  it.count = min_quiet_piece - 1;
  EXPECT_FALSE(auto_iteration_ends(it, 4096));
  it.at_quiet = 0;
  it.count = 400;
  EXPECT_TRUE(auto_iteration_ends(it, 4096)) << "past 4 times the longest piece";
}

// runtime/auto_policy.h: the watcher's decisions, as the watcher (auto_mode.cc) takes them.
TEST(AutoPolicy, AWatcherGoesDormantAfterUnwatchedFreesUnlessItCountsWherePiecesEnd) {
  EXPECT_FALSE(auto_goes_dormant(dormant_after - 1, false));
  EXPECT_TRUE(auto_goes_dormant(dormant_after, false));
  EXPECT_FALSE(auto_goes_dormant(dormant_after, true)) << "between quiet points every free counts";
  EXPECT_TRUE(auto_goes_dormant(dormant_after + 1000, false));
}

TEST(AutoPolicy, ANewThreadBeginsRestingOnlyAfterTwoRestsWithoutAPeriod) {
  EXPECT_FALSE(auto_start_of_thread(0).rest);
  EXPECT_FALSE(auto_start_of_thread(1).rest) << "one thread's rest says nothing of the process";
  auto_start s = auto_start_of_thread(2);
  EXPECT_TRUE(s.rest);
  EXPECT_EQ(s.rests, 0u) << "as long as one rest: the history";
  EXPECT_EQ(auto_start_of_thread(4).rests, 2u) << "doubled for each rest beyond the second";
  EXPECT_EQ(auto_start_of_thread(1000).rests, 5u) << "at most 32 times";
}

TEST(AutoPolicy, AFoundPeriodBeginsAtItsBoundaryAnchorOrQuietRun) {
  auto_period p;
  p.count = 70;
  p.next_boundary = 70;
  EXPECT_FALSE(auto_period_begins(p, 4096)) << "no period found";
  p.found = true;
  EXPECT_TRUE(auto_period_begins(p, 4096));
  p.count = 69;
  EXPECT_FALSE(auto_period_begins(p, 4096)) << "not before the boundary";
  p.anchor = 7008;
  EXPECT_FALSE(auto_period_begins(p, 4096));
  EXPECT_TRUE(auto_period_begins(p, 7008)) << "anchored: at the anchor's request, wherever the count is";
  p.quiet = true;
  p.quiet_run = 3;
  p.at_quiet = 2;
  EXPECT_FALSE(auto_period_begins(p, 7008)) << "between quiet points the anchor does not decide";
  p.at_quiet = 3;
  EXPECT_TRUE(auto_period_begins(p, 4096));
}

TEST(AutoPolicy, PoorIterationsInARowRejectThePeriodAndAGoodOneForgivesThem) {
  const std::uint32_t replan_after = 2;  // rejected at 4 poor iterations in a row
  std::uint32_t in_a_row = 0;
  for (int i = 1; i <= 3; ++i) {
    const auto_verdict v = auto_after_iteration(true, false, false, in_a_row, replan_after);
    ASSERT_FALSE(v.reject) << "poor iteration " << i;
    in_a_row = v.deviated_in_a_row;
  }
  EXPECT_EQ(in_a_row, 3u);
  auto_verdict v = auto_after_iteration(false, false, false, in_a_row, replan_after);
  EXPECT_FALSE(v.reject);
  EXPECT_EQ(v.deviated_in_a_row, 0u) << "an iteration that repeated its period forgives the poor ones";
  in_a_row = 3;
  v = auto_after_iteration(true, false, false, in_a_row, replan_after);
  EXPECT_TRUE(v.reject) << "the fourth in a row";
  EXPECT_EQ(v.deviated_in_a_row, 0u) << "the next period starts with none";
  v = auto_after_iteration(false, true, false, 0, replan_after);
  EXPECT_TRUE(v.reject) << "a period of structure whose key failed is rejected at once, poor or not";
  v = auto_after_iteration(false, false, true, 0, replan_after);
  EXPECT_TRUE(v.reject) << "a period whose key is set aside is rejected at its first iteration passed through";
  EXPECT_EQ(v.deviated_in_a_row, 0u);
  EXPECT_TRUE(auto_after_iteration(true, false, false, 1, 0).reject) << "REPLAYALLOC_REPLAN_AFTER=0 counts as 1";
  EXPECT_FALSE(auto_after_iteration(true, false, false, 0, 0).reject);
}

// Note [Periods that keep failing] (auto_policy.h).
TEST(AutoPolicy, TheSecondPeriodGivenUpInARowRestsTheThreadLongerForEachAfterIt) {
  EXPECT_FALSE(auto_rest_after_failed(0).rest);
  EXPECT_FALSE(auto_rest_after_failed(1).rest) << "one period given up: the next may be the program's";
  auto_failed f = auto_rest_after_failed(2);
  EXPECT_TRUE(f.rest);
  EXPECT_EQ(f.rests, 0u) << "one history";
  EXPECT_EQ(auto_rest_after_failed(4).rests, 2u) << "doubled for each beyond the second";
  EXPECT_EQ(auto_rest_after_failed(1000).rests, 6u) << "at most 64 times, as rests in a row";
}

// Note [A period of sizes that stops at once] (auto_policy.h).
TEST(AutoPolicy, APeriodOfSizesStopsWhenMostOfAnIterationsRequestsHaveOtherSizes) {
  EXPECT_TRUE(auto_sizes_stopped(28, 3, 28)) << "a recording of decode steps after a prefill's layers";
  EXPECT_FALSE(auto_sizes_stopped(28, 28, 28)) << "a recording that repeats the period";
  EXPECT_FALSE(auto_sizes_stopped(28, 14, 28)) << "half of them: the program may have shifted by one";
  EXPECT_TRUE(auto_sizes_stopped(14, 6, 28)) << "a replay that missed half a period, mostly other sizes";
  EXPECT_FALSE(auto_sizes_stopped(13, 0, 28)) << "a replay that missed less: the slab served the rest";
}

TEST(AutoPolicy, AWatchWithoutAPeriodRestsEarlyOnRareSizesLoneBlocksOrOneCachedSizeElseAfterItsBudget) {
  const std::uint64_t history = 16384;
  // The watch `v` rests at `n` watched allocations, not one before; its rest's budget.
  const auto rests_at = [history](auto_watch v, std::uint64_t n) {
    v.watched = n - 1;
    EXPECT_FALSE(auto_rest_after(v, history).rest) << "rested before " << n;
    v.watched = n;
    const auto_rest r = auto_rest_after(v, history);
    EXPECT_TRUE(r.rest) << "did not rest at " << n;
    return r.budget;
  };
  auto_watch w;
  w.sizes_recur = true;
  // Note [A first watch of two histories]: two histories watched, four rested.
  EXPECT_EQ(rests_at(w, 2 * history), 4 * history) << "sizes recur: a watch of two histories, a rest of four";
  // Note [A shorter watch after a rest]: after a rest without a period, one history, for
  // the same budget.
  w.rested = true;
  EXPECT_EQ(rests_at(w, history), 4 * history) << "a shorter watch rests as long as before";
  w.rested = false;
  w.sizes_recur = false;
  EXPECT_EQ(rests_at(w, history), history) << "no size ever recurred: one history";
  w.sizes_recur = true;
  w.one_size = true;
  EXPECT_EQ(rests_at(w, history), history) << "one size throughout: no period of sizes to wait for, one history";
  auto_rest r;
  for (int kind = 0; kind < 3; ++kind) {
    auto_watch early;
    early.sizes_recur = true;
    early.one_size = kind == 2;
    early.rare = kind == 0;
    early.alone = kind == 1;
    early.cached_one_size = kind == 2;
    early.watched = 2048;
    r = auto_rest_after(early, history);
    const char* why[] = {"rare sizes", "blocks that never overlap", "one size the fallback caches"};
    EXPECT_TRUE(r.rest) << why[kind] << ": after the sample";
    EXPECT_EQ(r.budget, history) << why[kind] << ": for one history";
  }
}

}  // namespace
}  // namespace replayalloc::detail
