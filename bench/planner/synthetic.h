// bench/planner/synthetic.h: synthetic traces for the planner benchmark.
//
//   inference_like(n, seed)  what a network's forward pass looks like at scale: a
//       chain of layers, each making its output and sometimes a workspace, freeing
//       its input once used; residual blocks keep their input for three layers, and
//       one layer in 50 is a long skip (U-Net style) kept for 20-200 layers. Sizes
//       log-uniform 4 KiB .. 4 MiB, from a small set per "stage" as real widths are.
//   random_overlap(n, seed)  the hard case: every allocation lives a random span over
//       a random number of others, sizes log-uniform 64 B .. 1 MiB. Many allocations
//       live at once in every order, so the lower bound is rarely reachable.
//   staircase(n, seed)  lifetimes that start one after another and end in the
//       reverse order of a random permutation: nested and crossing intervals whose
//       gaps greedy by size tends to strand.
// All deterministic for a seed; events advance at every allocation and free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "trace/trace.h"

namespace replayalloc::bench {

namespace detail {

inline trace finish(std::vector<trace_allocation> allocs, std::uint64_t events, const char* key) {
  trace t;
  t.key = key;
  t.ops = {"unknown"};
  std::stable_sort(allocs.begin(), allocs.end(),
                   [](const trace_allocation& a, const trace_allocation& b) { return a.alloc_at < b.alloc_at; });
  for (std::size_t i = 0; i < allocs.size(); ++i) allocs[i].id = i;
  t.allocations = std::move(allocs);
  t.events = events;
  return t;
}

inline std::uint64_t log_uniform(std::mt19937_64& rng, unsigned lo_log2, unsigned hi_log2) {
  const unsigned e = lo_log2 + static_cast<unsigned>(rng() % (hi_log2 - lo_log2));
  return (std::uint64_t{1} << e) + rng() % (std::uint64_t{1} << e);
}

}  // namespace detail

inline trace inference_like(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<trace_allocation> out;
  out.reserve(n);
  std::uint64_t clock = 0;
  struct pending {
    std::size_t index;
    std::uint64_t layers_left;
  };
  std::vector<pending> held;  // freed after a number of layers
  std::vector<std::uint64_t> stage_sizes;
  auto new_stage = [&] {
    stage_sizes.clear();
    for (int k = 0; k < 3; ++k) stage_sizes.push_back(detail::log_uniform(rng, 12, 22));
  };
  new_stage();
  auto alloc = [&](std::uint64_t size) {
    trace_allocation a;
    a.size = size;
    a.align = 64;
    a.alloc_at = clock++;
    out.push_back(a);
    return out.size() - 1;
  };
  std::size_t input = alloc(stage_sizes[0]);
  while (out.size() + 3 < n) {
    if (rng() % 40 == 0) new_stage();
    const std::size_t output = alloc(stage_sizes[rng() % stage_sizes.size()]);
    if (rng() % 3 == 0) {  // a workspace (im2col, a reorder), gone when the layer is
      const std::size_t ws = alloc(detail::log_uniform(rng, 10, 20));
      out[ws].free_at = clock++;
    }
    // Layers pass: count down what is held, free what is due.
    for (pending& p : held) --p.layers_left;
    for (const pending& p : held) {
      if (p.layers_left == 0) out[p.index].free_at = clock++;
    }
    std::erase_if(held, [](const pending& p) { return p.layers_left == 0; });
    const unsigned r = static_cast<unsigned>(rng() % 50);
    if (r == 0) {
      held.push_back({input, 20 + rng() % 181});  // a long skip
    } else if (r < 17) {
      held.push_back({input, 3});  // a residual block's input
    } else {
      out[input].free_at = clock++;
    }
    input = output;
  }
  out[input].free_at = clock++;
  for (const pending& p : held) out[p.index].free_at = clock++;
  return detail::finish(std::move(out), clock, "synthetic/inference_like");
}

inline trace random_overlap(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<trace_allocation> out;
  std::vector<std::size_t> live;
  std::uint64_t clock = 0;
  const std::size_t target_live = 8 + rng() % 24;
  while (out.size() < n || !live.empty()) {
    const bool can_alloc = out.size() < n;
    if (!live.empty() && (!can_alloc || live.size() >= target_live || rng() % 2 == 0)) {
      const std::size_t k = rng() % live.size();
      out[live[k]].free_at = clock++;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    trace_allocation a;
    a.size = detail::log_uniform(rng, 6, 20);
    a.align = 64;
    a.alloc_at = clock++;
    live.push_back(out.size());
    out.push_back(a);
  }
  return detail::finish(std::move(out), clock, "synthetic/random_overlap");
}

inline trace staircase(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<trace_allocation> out;
  std::uint64_t clock = 0;
  // Blocks of 6-12 allocations: all made, then freed in a random order.
  while (out.size() < n) {
    const std::size_t k = std::min<std::size_t>(n - out.size(), 6 + rng() % 7);
    const std::size_t first = out.size();
    for (std::size_t i = 0; i < k; ++i) {
      trace_allocation a;
      a.size = detail::log_uniform(rng, 10, 18);
      a.align = 64;
      a.alloc_at = clock++;
      out.push_back(a);
      // Sometimes free one of the block early, so later ones reuse its bytes.
      if (i > 1 && rng() % 3 == 0) {
        const std::size_t j = first + rng() % i;
        if (out[j].free_at == never_freed) out[j].free_at = clock++;
      }
    }
    std::vector<std::size_t> rest;
    for (std::size_t i = first; i < out.size(); ++i) {
      if (out[i].free_at == never_freed) rest.push_back(i);
    }
    std::shuffle(rest.begin(), rest.end(), rng);
    for (const std::size_t i : rest) out[i].free_at = clock++;
  }
  return detail::finish(std::move(out), clock, "synthetic/staircase");
}

}  // namespace replayalloc::bench
