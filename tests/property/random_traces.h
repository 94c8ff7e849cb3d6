// tests/property/random_traces.h: random traces, and tiny ones with their brute-force
// optimum (support/optimal_slab.h), shared by the property tests. Everything is
// seeded: a failure names its iteration and replays.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "planner/planner.h"
#include "support/optimal_slab.h"
#include "trace/trace.h"

namespace replayalloc::testing_random {

inline std::uint64_t random_size(std::mt19937_64& rng, unsigned max_log2 = 20) {
  const unsigned e = static_cast<unsigned>(rng() % (max_log2 + 1));  // log-uniform
  return 1 + rng() % (std::uint64_t{1} << e);
}

inline std::uint32_t random_align(std::mt19937_64& rng) {
  if (rng() % 10 < 6) return 16;
  return std::uint32_t{16} << (rng() % 9);  // 16 .. 4096
}

// A trace as the recorder hands it over: allocations in alloc_at order (ties as made),
// events one past the last event any of them names.
inline void in_arrival_order(trace& t) {
  std::stable_sort(t.allocations.begin(), t.allocations.end(),
                   [](const trace_allocation& a, const trace_allocation& b) { return a.alloc_at < b.alloc_at; });
  for (const trace_allocation& a : t.allocations) {
    t.events = std::max(t.events, (a.outlives() ? a.alloc_at : a.free_at) + 1);
  }
}

// As a recorder sees it: one event counter advanced by every allocation and free;
// about one allocation in ten outlives the iteration.
inline trace event_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random/event";
  t.ops = {"unknown"};
  std::vector<std::size_t> live;
  std::uint64_t clock = 0;
  while (t.allocations.size() < n || !live.empty()) {
    const bool can_alloc = t.allocations.size() < n;
    if (!live.empty() && (!can_alloc || rng() % 2 == 0)) {
      const std::size_t k = rng() % live.size();
      t.allocations[live[k]].free_at = clock++;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    trace_allocation a;
    a.id = 1000 + 7 * t.allocations.size();
    a.size = random_size(rng);
    a.align = random_align(rng);
    a.alloc_at = clock++;
    if (rng() % 10 != 0) live.push_back(t.allocations.size());
    t.allocations.push_back(a);
  }
  t.events = clock;
  return t;
}

// Lifetimes from a short range: many start and end at the same positions.
inline trace coarse_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random/coarse";
  t.ops = {"unknown"};
  const std::uint64_t range = 1 + n / 2;
  for (std::size_t i = 0; i < n; ++i) {
    trace_allocation a;
    a.id = 3 * i + 1;
    a.size = random_size(rng);
    a.align = random_align(rng);
    a.alloc_at = rng() % range;
    a.free_at = rng() % 10 == 0 ? never_freed : a.alloc_at + 1 + rng() % range;
    t.allocations.push_back(a);
  }
  in_arrival_order(t);
  return t;
}

// A layer chain like a network's forward pass: outputs freed a layer or a few later,
// workspaces freed at once, sizes from a few per "stage".
inline trace chain_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random/chain";
  t.ops = {"unknown"};
  std::uint64_t clock = 0;
  std::vector<std::pair<std::size_t, int>> held;  // allocation, layers left
  std::uint64_t sizes[3] = {random_size(rng, 16), random_size(rng, 16), random_size(rng, 16)};
  while (t.allocations.size() < n) {
    if (rng() % 8 == 0) sizes[rng() % 3] = random_size(rng, 16);
    trace_allocation a;
    a.id = t.allocations.size();
    a.size = sizes[rng() % 3];
    a.align = 64;
    a.alloc_at = clock++;
    t.allocations.push_back(a);
    const std::size_t out = t.allocations.size() - 1;
    if (rng() % 3 == 0 && t.allocations.size() < n) {
      trace_allocation w = a;
      w.id = t.allocations.size();
      w.size = random_size(rng, 14);
      w.alloc_at = clock++;
      w.free_at = clock++;
      t.allocations.push_back(w);
    }
    for (auto& h : held) --h.second;
    for (const auto& h : held) {
      if (h.second <= 0) t.allocations[h.first].free_at = clock++;
    }
    std::erase_if(held, [](const auto& h) { return h.second <= 0; });
    held.push_back({out, 1 + static_cast<int>(rng() % 4)});
  }
  for (const auto& h : held) t.allocations[h.first].free_at = clock++;
  t.events = clock;
  return t;
}

// An LLM's request as one trace: a prefill over the prompt, then decode steps of one
// token each. Per step and layer, the key/value cache is remade one token longer (as
// torch.cat does) and lives until the next step's; scores grow with the length; the
// other activations live within their layer. Growing sizes with crossing lifetimes:
// where the greedy orderings are weakest.
inline trace decode_trace(std::mt19937_64& rng, std::size_t layers, std::size_t steps) {
  trace t;
  t.key = "decode";
  t.ops = {"unknown"};
  std::uint64_t clock = 0;
  const std::uint64_t token = 256u << (rng() % 3), prompt = 4 + rng() % 60;
  auto alloc = [&](std::uint64_t size) {
    trace_allocation a;
    a.id = t.allocations.size();
    a.size = size;
    a.align = 64;
    a.alloc_at = clock++;
    t.allocations.push_back(a);
    return t.allocations.size() - 1;
  };
  auto release = [&](std::size_t i) { t.allocations[i].free_at = clock++; };
  std::vector<std::size_t> cache(layers, SIZE_MAX);
  for (std::size_t step = 0; step < steps; ++step) {
    const std::uint64_t len = prompt + step, q = step == 0 ? prompt : 1;
    std::size_t x = alloc(token * q);
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t h = alloc(token * q), qkv = alloc(3 * token * q);
      const std::size_t kv = alloc(2 * token * len);
      if (cache[l] != SIZE_MAX) release(cache[l]);
      cache[l] = kv;
      const std::size_t scores = alloc(16 * q * len);
      release(qkv);
      const std::size_t y = alloc(token * q);
      release(scores);
      release(h);
      const std::size_t mlp = alloc(4 * token * q), out = alloc(token * q);
      release(mlp);
      release(y);
      release(x);
      x = out;
    }
    const std::size_t logits = alloc(8000);
    release(x);
    release(logits);
  }
  t.events = clock;  // the last step's caches outlive the request
  return t;
}

// Several streams (threads, CUDA streams) making staircases at once, interleaved in
// one trace: each stream allocates a block of 4-10 tensors, then frees them in a
// random order, while the others do the same; lifetimes cross between streams.
inline trace multi_stream_staircase(std::mt19937_64& rng, std::size_t streams, std::size_t n) {
  trace t;
  t.key = "streams";
  t.ops = {"unknown"};
  std::uint64_t clock = 0;
  struct stream_state {
    std::vector<std::size_t> live;  // allocations of the open block
    std::size_t to_make = 0;        // still to allocate in the block
  };
  std::vector<stream_state> st(streams);
  while (t.allocations.size() < n) {
    stream_state& s = st[rng() % streams];
    if (s.to_make == 0 && s.live.empty()) s.to_make = 4 + rng() % 7;
    if (s.to_make > 0) {
      trace_allocation a;
      a.id = t.allocations.size();
      a.size = std::uint64_t{1} << (10 + rng() % 9);
      a.size += rng() % a.size;
      a.align = 64;
      a.alloc_at = clock++;
      s.live.push_back(t.allocations.size());
      t.allocations.push_back(a);
      --s.to_make;
    } else {
      const std::size_t k = rng() % s.live.size();
      t.allocations[s.live[k]].free_at = clock++;
      s.live.erase(s.live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (stream_state& s : st) {
    for (const std::size_t i : s.live) t.allocations[i].free_at = clock++;
  }
  t.events = clock;
  return t;
}

// The brute-force optimum is tests/support/optimal_slab.h's, shared with the unit tests.
using replayalloc::testing::lifetimes_intersect;
using replayalloc::testing::optimal_slab;

// A tiny trace for the brute force: 2..max_n allocations, footprints of 1-4 units of
// 64 bytes and alignments up to 256, so the search stays small.
inline trace tiny_trace(std::mt19937_64& rng, std::size_t max_n) {
  const std::size_t n = 2 + rng() % (max_n - 1);
  trace t = rng() % 2 == 0 ? event_trace(rng, n) : coarse_trace(rng, n);
  for (trace_allocation& a : t.allocations) {
    a.size = 1 + rng() % 256;
    a.align = std::uint32_t{16} << (rng() % 5);
  }
  return t;
}

// Tiny traces whose optimum is above the lower bound (about 1 in 1000 tiny traces:
// mostly large alignments that leave gaps no order can close), found by scanning
// `scan` of them with the brute force; each with its optimum. Deterministic for a seed.
inline std::vector<std::pair<trace, std::uint64_t>> tiny_traces_above_bound(std::uint64_t seed, int scan,
                                                                            const planner_options& o = {}) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<trace, std::uint64_t>> out;
  for (int k = 0; k < scan; ++k) {
    trace t = tiny_trace(rng, 8);
    placement opt;
    const std::uint64_t best = optimal_slab(t, o, &opt);
    if (best > lower_bound(t, o)) out.emplace_back(std::move(t), best);
  }
  return out;
}

}  // namespace replayalloc::testing_random
