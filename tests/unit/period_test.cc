// Note [Periodic iterations] (trace/period.h): the step an LLM request repeats is found
// inside one recording, requests of different lengths share one regime, their
// envelope covers every recording at every position, and an envelope extended by
// steps is a valid trace of the same regime whose capacities follow the lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "trace/period.h"
#include "trace/trace.h"

namespace replayalloc {
namespace {

// Builds a trace as a program would record it: each call advances the event counter.
struct builder {
  trace t;
  std::uint64_t at = 0;
  builder() { t.ops = {"unknown"}; }
  std::size_t alloc(std::uint64_t size) {
    trace_allocation a;
    a.id = t.allocations.size();
    a.size = size;
    a.alloc_at = at++;
    t.allocations.push_back(a);
    return t.allocations.size() - 1;
  }
  void free(std::size_t i) { t.allocations[i].free_at = at++; }
  trace done() {
    t.events = at;
    return t;
  }
};

constexpr std::uint64_t kHidden = 4096;  // bytes per token of one layer's activation

// A GPT-shaped request: a prefill of `prompt` tokens, then `steps` decode steps whose
// key/value caches grow by one token each (torch.cat: the new cache made, the old
// freed), logits kept until the next step, a token per step held to the end.
// With `handed_on`, as a Python loop does it (`logits, past = model(token, past)`):
// the old caches are freed only when the call that read them returns, after the new
// ones and the step's logits are made (they live into the step after next), and a
// step's one-token blocks (its hidden state, its token) are too small to be recorded,
// so that a step's first recorded allocation is a key cache.
trace request(std::uint64_t prompt, int steps, int layers = 3, std::uint64_t batch = 1, bool handed_on = false) {
  builder b;
  std::vector<std::size_t> k(layers), v(layers), held, old;
  const std::size_t x = b.alloc(batch * prompt * kHidden);
  for (int l = 0; l < layers; ++l) {
    const std::size_t qkv = b.alloc(batch * 3 * prompt * kHidden);
    k[l] = b.alloc(batch * prompt * kHidden);
    v[l] = b.alloc(batch * prompt * kHidden);
    const std::size_t scores = b.alloc(batch * 4 * prompt * prompt * 4);
    b.free(qkv);
    b.free(scores);
  }
  b.free(x);
  std::size_t logits = b.alloc(batch * 32000);
  held.push_back(b.alloc(batch * 8));
  for (int s = 0; s < steps; ++s) {
    const std::uint64_t pos = prompt + s + 1;
    // One token's hidden state: below the recorded size in such a model.
    const std::size_t h = handed_on ? SIZE_MAX : b.alloc(batch * kHidden);
    for (int l = 0; l < layers; ++l) {
      const std::size_t nk = b.alloc(batch * pos * kHidden);
      handed_on ? old.push_back(k[l]) : b.free(k[l]);
      k[l] = nk;
      const std::size_t nv = b.alloc(batch * pos * kHidden);
      handed_on ? old.push_back(v[l]) : b.free(v[l]);
      v[l] = nv;
      const std::size_t scores = b.alloc(batch * 4 * pos * 4 + 64);
      b.free(scores);
    }
    if (h != SIZE_MAX) b.free(h);
    const std::size_t next = b.alloc(batch * 32000);
    b.free(logits);
    logits = next;
    if (!handed_on) held.push_back(b.alloc(batch * 8));
    for (std::size_t o : old) b.free(o);  // `past` rebound
    old.clear();
  }
  b.free(logits);
  for (int l = 0; l < layers; ++l) {
    b.free(k[l]);
    b.free(v[l]);
  }
  for (auto it = held.rbegin(); it != held.rend(); ++it) b.free(*it);  // a list, freed backwards
  return b.done();
}

TEST(Period, FindsTheDecodeStepOfARequest) {
  const trace t = request(20, 12);
  const trace_period p = find_period(t);
  ASSERT_TRUE(p.found());
  // One decode step: the hidden state, per layer a key, a value and scores, logits, a
  // token: 1 + 3 * 3 + 2 = 12 allocations.
  EXPECT_EQ(p.period, 12u);
  EXPECT_GE(p.steps, 9u);
  EXPECT_EQ(p.prefix + p.steps * p.period + p.tail, t.allocations.size());
  EXPECT_EQ(p.step_events, t.allocations[p.prefix + p.period].alloc_at - t.allocations[p.prefix].alloc_at);
}

TEST(Period, RequestsOfAnyLengthShareOneRegime) {
  const std::uint64_t sig = regime_signature(request(20, 12));
  EXPECT_EQ(regime_signature(request(20, 30)), sig);
  EXPECT_EQ(regime_signature(request(57, 5)), sig);
  EXPECT_EQ(regime_signature(request(3, 40, 3, 4)), sig);  // another batch: sizes only
  // Another model (more layers) is another regime; so is one without the step.
  EXPECT_NE(regime_signature(request(20, 12, 4)), sig);
  EXPECT_FALSE(find_period(request(20, 1)).found());
}

TEST(Period, NoPeriodInAStreamThatDoesNotRepeat) {
  std::mt19937_64 rng(7);
  builder b;
  std::vector<std::size_t> live;
  for (int i = 0; i < 3000; ++i) {
    if (!live.empty() && rng() % 2 == 0) {
      const std::size_t k = rng() % live.size();
      b.free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    live.push_back(b.alloc(4096 + rng() % 100000));
    b.at += rng() % 3;  // frees of blocks too small to record
  }
  for (std::size_t i : live) b.free(i);
  EXPECT_FALSE(find_period(b.done()).found());
}

// Every allocation of `t` fits the envelope's slot at its position (prefix and steps
// at the same index, the tail after the envelope's steps).
void expect_covers(const envelope& e, const trace& t) {
  const trace_period p = find_period(t);
  ASSERT_TRUE(p.found());
  ASSERT_LE(p.steps, e.lines.steps);
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const std::size_t at = i < p.tail_from() ? i : i + std::size_t{e.lines.steps - p.steps} * p.period;
    ASSERT_LT(at, e.tr.allocations.size());
    EXPECT_GE(e.tr.allocations[at].size, t.allocations[i].size) << "allocation " << i << " at " << at;
  }
}

TEST(Period, TheEnvelopeCoversEveryRecordingAtEveryPosition) {
  const trace a = request(40, 8), b = request(12, 25), c = request(25, 15);
  envelope e = make_envelope(a);
  EXPECT_TRUE(merge_envelope(e, b));  // more steps: the structure grows
  EXPECT_EQ(e.lines.steps, find_period(b).steps);
  merge_envelope(e, c);
  EXPECT_EQ(regime_signature(e.tr), regime_signature(a));
  for (const trace* t : {&a, &b, &c}) expect_covers(e, *t);
  // The longest prompt at the most steps, never recorded together: the lines cover it.
  expect_covers(e, request(40, 25));
  // A key/value cache column varies: it serves any smaller request.
  const std::size_t k0 = e.lines.prefix + 1;
  EXPECT_EQ(least_served(e)[k0], 1u);
  EXPECT_TRUE(check_trace(e.tr).ok());
}

TEST(Period, AnExtendedEnvelopeIsAValidTraceOfTheSameRegime) {
  envelope e = make_envelope(request(30, 10));
  merge_envelope(e, request(10, 6));
  const std::optional<envelope> longer = extend_envelope(e, e.lines.steps + 20);
  ASSERT_TRUE(longer.has_value());
  EXPECT_TRUE(check_trace(longer->tr).ok());
  EXPECT_EQ(longer->lines.steps, e.lines.steps + 20);
  EXPECT_EQ(longer->tr.allocations.size(), e.tr.allocations.size() + 20 * e.lines.period);
  EXPECT_EQ(regime_signature(longer->tr), regime_signature(e.tr));
  const trace_period p = find_period(longer->tr);
  EXPECT_EQ(p.steps, longer->lines.steps);
  EXPECT_EQ(p.tail_from(), longer->lines.tail_from());
  // Requests up to the recorded prompt, as long as the extension, fit every slot.
  expect_covers(*longer, request(30, 10 + 20 - 1));
  expect_covers(*longer, request(8, 28));
  // Fewer steps than it has, or no period: nothing to extend.
  EXPECT_FALSE(extend_envelope(e, e.lines.steps).has_value());
  builder flat;
  flat.free(flat.alloc(4096));
  EXPECT_FALSE(extend_envelope(make_envelope(flat.done()), 50).has_value());
}

// The most bytes live at once (the least any slab can be).
std::uint64_t peak_live(const trace& t) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> ev;
  for (const trace_allocation& a : t.allocations) {
    ev.emplace_back(a.alloc_at, static_cast<std::int64_t>(a.size));
    if (a.free_at != never_freed) ev.emplace_back(a.free_at, -static_cast<std::int64_t>(a.size));
  }
  std::sort(ev.begin(), ev.end());
  std::int64_t live = 0, peak = 0;
  for (const auto& [at, d] : ev) peak = std::max(peak, live += d);
  return static_cast<std::uint64_t>(peak);
}

// Caches handed on to the step after next (a Python loop's `past`): the recording's
// last full step frees them in the tail, after the last allocation, as a block held to
// the end is. An added step frees its own relative to its step, as every recorded
// step did: extended, the envelope is a request that long, not one that holds every
// added step's caches to the end (a 5.4x longer request planned 583 MiB, not 20, in
// the Python GPT-2 loop under auto mode).
TEST(Period, AnExtendedEnvelopeFreesHandedOnCachesByTheStep) {
  const trace shorter = request(30, 10, 3, 1, true);
  envelope e = make_envelope(shorter);
  merge_envelope(e, request(10, 6, 3, 1, true));  // two recordings: the lines' slopes
  ASSERT_TRUE(e.lines.periodic());
  const std::optional<envelope> longer = extend_envelope(e, e.lines.steps + 40);
  ASSERT_TRUE(longer.has_value());
  EXPECT_TRUE(check_trace(longer->tr).ok());
  EXPECT_EQ(regime_signature(longer->tr), regime_signature(shorter)) << "an extended plan is of the same regime";
  const trace recorded = request(30, 10 + 40, 3, 1, true);
  expect_covers(*longer, recorded);
  // Its capacities are at least the sizes, so its peak may be somewhat above the
  // recorded request's; holding every added step's caches to the end is 40 x 6 caches.
  EXPECT_LE(peak_live(longer->tr), peak_live(recorded) * 11 / 10)
      << "recorded " << peak_live(recorded) << ", extended " << peak_live(longer->tr);
}

// Note [Runs of a period's multiples]: find_period with its runs grown from those of the
// periods they are multiples of finds what scanning every candidate's run in full finds
// (the search before the note, written out here), on traces of steps made of repeated
// layers (candidates at every multiple of a layer and of a step), some with a step
// broken in the middle or a layer's pattern changed in one step.
struct reference_token {
  std::uint64_t gap = 0, life = 0;
  std::uint32_t align = 0;
  std::uint8_t kind = 0;
  friend bool operator==(const reference_token&, const reference_token&) = default;
};

trace_period reference_find_period(const trace& t) {
  const std::size_t n = t.allocations.size();
  std::vector<reference_token> tok(n);
  const std::uint64_t last_at = n == 0 ? 0 : t.allocations.back().alloc_at;
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    tok[i].gap = a.alloc_at - (i == 0 ? 0 : t.allocations[i - 1].alloc_at);
    tok[i].align = a.align;
    if (a.outlives()) {
      tok[i].kind = 2;
    } else if (a.free_at > last_at) {
      tok[i].kind = 1;
    } else {
      tok[i].life = a.free_at - a.alloc_at;
    }
  }
  trace_period best;
  if (n < 4) return best;
  std::size_t best_cover = 0, best_lo = 0;
  for (const std::size_t anchor : {n / 2, (3 * n) / 4, n / 4}) {
    const std::size_t w = std::min<std::size_t>(8, n - anchor);
    int tried = 0;
    for (std::size_t j = anchor; j-- > 0 && tried < 24;) {
      bool same = true;
      for (std::size_t k = 0; k < w && same; ++k) same = tok[j + k] == tok[anchor + k];
      if (!same) continue;
      ++tried;
      const std::size_t q = anchor - j;
      std::size_t lo = j, hi = j;
      while (lo > 0 && tok[lo - 1] == tok[lo - 1 + q]) --lo;
      while (hi + q < n && tok[hi] == tok[hi + q]) ++hi;
      const std::size_t steps = (hi + q - lo) / q;
      if (steps < 2) continue;
      if (steps * q > best_cover || (steps * q == best_cover && q < best.period)) {
        best_cover = steps * q;
        best_lo = lo;
        best.period = static_cast<std::uint32_t>(q);
        best.steps = static_cast<std::uint32_t>(steps);
      }
    }
  }
  if (best.period == 0) return best;
  best.prefix = static_cast<std::uint32_t>(best_lo);
  best.tail = static_cast<std::uint32_t>(n - best_lo - std::size_t{best.steps} * best.period);
  return best;
}

TEST(Period, RunsGrownFromTheirPeriodsMultiplesAreTheRunsAFullScanFinds) {
  std::mt19937_64 rng(0x9e71'0d5);
  int periodic = 0;
  for (int iter = 0; iter < 400; ++iter) {
    SCOPED_TRACE(iter);
    builder b;
    std::vector<std::size_t> live;
    auto op = [&](int kind) {  // 0: a block freed at once; 1: one freed later; 2: free the oldest held
      if (kind == 2 && !live.empty()) {
        b.free(live.front());
        live.erase(live.begin());
      } else if (kind == 1) {
        live.push_back(b.alloc(4096));
      } else {
        b.free(b.alloc(8192));
      }
    };
    const int prefix = static_cast<int>(rng() % 12), tail = static_cast<int>(rng() % 12);
    const int layer_len = 1 + static_cast<int>(rng() % 4), layers = 1 + static_cast<int>(rng() % 6);
    const int steps = 2 + static_cast<int>(rng() % 30);
    std::vector<int> layer(static_cast<std::size_t>(layer_len));
    for (int& k : layer) k = static_cast<int>(rng() % 3);
    const int broken = rng() % 3 == 0 ? static_cast<int>(rng() % steps) : -1;
    for (int i = 0; i < prefix; ++i) op(static_cast<int>(rng() % 3));
    for (int s = 0; s < steps; ++s) {
      for (int l = 0; l < layers; ++l) {
        for (const int k : layer) op(s == broken && l == layers / 2 ? (k + 1) % 3 : k);
      }
      op(1);  // a block a step hands on
    }
    for (int i = 0; i < tail; ++i) op(static_cast<int>(rng() % 3));
    for (const std::size_t i : live) b.free(i);
    const trace t = b.done();
    const trace_period want = reference_find_period(t);
    const trace_period got = find_period(t);
    EXPECT_EQ(got.period, want.period);
    EXPECT_EQ(got.steps, want.steps);
    EXPECT_EQ(got.prefix, want.prefix);
    EXPECT_EQ(got.tail, want.tail);
    periodic += want.found();
    if (HasFailure()) return;
  }
  EXPECT_GT(periodic, 200) << "the traces should mostly repeat a step";
}

}  // namespace
}  // namespace replayalloc
