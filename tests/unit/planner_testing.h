// tests/unit/planner_testing.h: what the planner's unit tests share (one file per
// planner module: planner_<module>_test.cc).
//
// The hand-made traces pin exact offsets; each comes with its lifetime diagram (time
// across, one row per allocation, '#' where the allocation is live; a lifetime is
// [alloc_at, free_at), so a row ends one column before its free). Offsets follow from
// the documented algorithm: largest footprint first (ties: longer lifetime, earlier
// alloc_at, id), each put in the smallest gap among placed slots whose lifetimes
// intersect its own (ties: lowest offset), else above the highest of them. With the
// default slot_align of 64, footprints are sizes rounded up to 64.
//
// The random traces check the invariants that hold whatever the offsets: every plan
// passes validate() and an independent O(n^2) checker written here, and its slab is
// never below lower_bound(); on tiny traces, an exhaustive search gives the optimum
// (support/optimal_slab.h, shared with tests/property/).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "planner/planner.h"
#include "support/optimal_slab.h"
#include "trace/trace.h"

namespace replayalloc::planner_testing {

using replayalloc::testing::lifetimes_intersect;

inline trace_allocation alloc(std::uint64_t id, std::uint64_t size, std::uint64_t alloc_at,
                              std::uint64_t free_at, std::uint32_t align = 16) {
  trace_allocation a;
  a.id = id;
  a.size = size;
  a.align = align;
  a.alloc_at = alloc_at;
  a.free_at = free_at;
  return a;
}

inline trace make_trace(std::initializer_list<trace_allocation> allocations) {
  trace t;
  t.key = "test";
  t.ops = {"unknown"};
  t.allocations = allocations;
  for (const trace_allocation& a : t.allocations) {
    t.events = std::max(t.events, (a.outlives() ? a.alloc_at : a.free_at) + 1);
  }
  return t;
}

// Plans t, checks the plan with validate(), and returns it.
inline placement plan_and_validate(const trace& t, const planner_options& o = {}) {
  absl::StatusOr<placement> p = plan_greedy_by_size(t, o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {};
  EXPECT_EQ(p->algorithm, "greedy_by_size");
  EXPECT_EQ(p->lower_bound_bytes, lower_bound(t, o));
  const absl::Status v = validate(t, *p, o);
  EXPECT_TRUE(v.ok()) << v;
  return *p;
}

// Plans t with the planner called `name`, checks the plan with validate(), and
// returns it.
inline placement plan_named(const trace& t, std::string_view name) {
  absl::StatusOr<placement> p = make_plan(t, name);
  EXPECT_TRUE(p.ok()) << name << ": " << p.status();
  if (!p.ok()) return {};
  const absl::Status v = validate(t, *p);
  EXPECT_TRUE(v.ok()) << name << ": " << v;
  return *p;
}

// Time:      0 1 2 3 4
// A (1024)   ####
// B (1024)     ######
// C (2048)         ####
// Lower bound 3072 (B + C at 3). An allocator that cannot look ahead puts A at 0 and
// B above it; when C comes, the 1024 bytes A gave back are too few, so C goes on top:
// 4096 bytes. Planners that know C is coming do better.
inline trace fragmenting_trace() {
  return make_trace({alloc(1, 1024, 0, 2), alloc(2, 1024, 1, 4), alloc(3, 2048, 3, 5)});
}

// Note [Size classes, then lifetime]: A 3072 bytes on [0, 2); B, C and D 2048 on
// [1, 4), [2, 4), [3, 4). Lower bound 6144 (B + C + D at 3). Largest first leaves D a
// gap of 1024 between C and B; longest first in the class (all four sizes are in
// [1024, 4096)) reaches the bound.
inline trace one_class_trace() {
  return make_trace({alloc(1, 3072, 0, 2), alloc(2, 2048, 1, 4), alloc(3, 2048, 2, 4), alloc(4, 2048, 3, 4)});
}

// And where largest first is right: A and B 3072 bytes on [0, 3) and [1, 2), C 1024 on
// [2, 7). Lower bound 6144 (A + B at 1). By size C goes where B was, above A; longest
// first puts C at 0, A above it and B above A: 7168.
inline trace long_small_trace() {
  return make_trace({alloc(1, 3072, 0, 3), alloc(2, 3072, 1, 2), alloc(3, 1024, 2, 7)});
}

// ---- random traces ----------------------------------------------------------------

inline std::uint64_t random_size(std::mt19937_64& rng) {
  // Log-uniform over 1 B .. 1 MiB.
  const unsigned e = static_cast<unsigned>(rng() % 21);
  return 1 + rng() % (std::uint64_t{1} << e);
}

inline std::uint32_t random_align(std::mt19937_64& rng) {
  if (rng() % 10 < 6) return 16;
  return std::uint32_t{16} << (rng() % 9);  // 16 .. 4096
}

// A trace as a recorder would see it: one event counter, each allocation and each
// free advancing it; about one allocation in ten outlives the iteration. Ids are
// unique but neither dense nor in trace order.
inline trace random_event_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random";
  t.ops = {"unknown"};
  std::vector<std::size_t> live;
  std::uint64_t clock = 0;
  const std::uint64_t id_base = rng() % 1000;
  while (t.allocations.size() < n || !live.empty()) {
    const bool can_alloc = t.allocations.size() < n;
    if (!live.empty() && (!can_alloc || rng() % 2 == 0)) {
      const std::size_t k = rng() % live.size();
      t.allocations[live[k]].free_at = clock++;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    trace_allocation a;
    a.id = id_base + 7919 * (n - t.allocations.size());
    a.size = random_size(rng);
    a.align = random_align(rng);
    a.alloc_at = clock++;
    if (rng() % 10 != 0) live.push_back(t.allocations.size());
    t.allocations.push_back(a);
  }
  t.events = clock;
  return t;
}

// Lifetimes drawn from a short time range, so many allocations start and end at the
// same positions.
inline trace random_coarse_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "coarse";
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
  std::stable_sort(t.allocations.begin(), t.allocations.end(),
                   [](const trace_allocation& a, const trace_allocation& b) {
                     return a.alloc_at < b.alloc_at;
                   });
  for (const trace_allocation& a : t.allocations) {
    t.events = std::max(t.events, (a.outlives() ? a.alloc_at : a.free_at) + 1);
  }
  return t;
}

// The invariants, checked pair by pair without validate(). Empty when they hold.
inline std::string naive_violation(const trace& t, const placement& p, const planner_options& o,
                                   bool require_all_placed) {
  const auto& all = t.allocations;
  if (p.offsets.size() != all.size()) return "offsets count";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::uint64_t off = p.offsets[i];
    if (all[i].outlives() != (off == not_in_slab)) {
      if (all[i].outlives() || require_all_placed) return "placed " + std::to_string(i);
      continue;
    }
    if (off == not_in_slab) continue;
    if (off % slot_alignment(all[i], o) != 0) return "misaligned " + std::to_string(i);
    if (off > p.slab_bytes || slot_footprint(all[i], o) > p.slab_bytes - off) {
      return "outside " + std::to_string(i);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (p.offsets[j] == not_in_slab || !lifetimes_intersect(all[i], all[j])) continue;
      if (off < p.offsets[j] + slot_footprint(all[j], o) &&
          p.offsets[j] < off + slot_footprint(all[i], o)) {
        return "overlap " + std::to_string(j) + " " + std::to_string(i);
      }
    }
  }
  return "";
}

inline std::uint64_t highest_slot_end(const trace& t, const placement& p, const planner_options& o) {
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    if (p.offsets[i] != not_in_slab) {
      end = std::max(end, p.offsets[i] + slot_footprint(t.allocations[i], o));
    }
  }
  return end;
}

}  // namespace replayalloc::planner_testing
