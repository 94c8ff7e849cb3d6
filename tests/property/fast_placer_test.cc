// The fast tier (issue 32, item 2): greedy_placer must give, for every ordering, the
// very offsets of the placer it replaced (reference_greedy_placer.h), on random traces
// of several kinds: inference-like layer chains, random overlap, staircases, many
// equal sizes, alignments of 1 byte to 4 KiB, lifetimes that all start at a few
// positions, sizes whose slab passes 2^40 bytes, slots that touch end to end, and
// traces long enough that its index has lifetimes both shorter and longer
// than its window (Note [Time index]).
// Every ordering best.cc tries, plus shuffled orders (the improving pass's are
// arbitrary), plus the early stop at give_up_above. A difference in one offset fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../../bench/planner/synthetic.h"
#include "planner/greedy.h"
#include "random_traces.h"
#include "reference_greedy_placer.h"

namespace replayalloc {
namespace {

using namespace testing_random;
using detail::greedy_input;

// A trace with sizes from a handful of values: many ties in every ordering's keys.
trace equal_sizes_trace(std::mt19937_64& rng, std::size_t n) {
  trace t = event_trace(rng, n);
  const std::uint64_t sizes[3] = {1 + rng() % 4096, 64, 1 + rng() % 100'000};
  for (trace_allocation& a : t.allocations) a.size = sizes[rng() % 3];
  return t;
}

// Sizes near 2^38: the slab passes 2^40 bytes, where the placer sorts pairs instead of
// one-word keys (Note [One-word sort keys]).
trace huge_sizes_trace(std::mt19937_64& rng, std::size_t n) {
  trace t = event_trace(rng, n);
  for (trace_allocation& a : t.allocations) a.size = (std::uint64_t{1} << 38) + rng() % (std::uint64_t{1} << 37);
  return t;
}

// Alignments of 1 byte to 4 KiB on any trace (the slot alignment is varied apart).
void vary_alignments(std::mt19937_64& rng, trace& t) {
  for (trace_allocation& a : t.allocations) a.align = std::uint32_t{1} << (rng() % 13);
}

// Sizes of one or two slots: many slots that touch end to end, which a union of long
// slots merges (Note [Long slots as unions]).
trace touching_trace(std::mt19937_64& rng, std::size_t n) {
  trace t = rng() % 2 == 0 ? event_trace(rng, n) : coarse_trace(rng, n);
  const std::uint64_t sizes[3] = {64, 64, 128};
  for (trace_allocation& a : t.allocations) {
    a.size = sizes[rng() % 3];
    a.align = 64;
  }
  return t;
}

trace random_kind(std::mt19937_64& rng, int kind, std::size_t n) {
  switch (kind) {
    case 0: return bench::inference_like(std::max<std::size_t>(n, 8), rng());
    case 1: return bench::random_overlap(n, rng());
    case 2: return bench::staircase(n, rng());
    case 3: return equal_sizes_trace(rng, n);
    case 4: return event_trace(rng, n);
    case 5: return coarse_trace(rng, n);
    case 6: return chain_trace(rng, n);
    case 7: return multi_stream_staircase(rng, 2 + rng() % 5, n);
    case 8: return decode_trace(rng, 1 + rng() % 4, 2 + n / 40);
    case 9: return touching_trace(rng, n);
    default: return huge_sizes_trace(rng, n);
  }
}
constexpr int kinds = 11;

// Places `order` with both placers, with and without an early stop; any difference in
// the slab or in one offset is a failure naming the allocation.
void expect_same_placement(const greedy_input& in, detail::greedy_placer& fast,
                           testing::reference_greedy_placer& ref, const std::vector<std::uint32_t>& order,
                           const char* what) {
  SCOPED_TRACE(what);
  const std::uint64_t want = ref.place(order);
  const std::uint64_t got = fast.place(order);
  ASSERT_EQ(got, want) << "slab";
  for (const std::uint32_t i : in.plannable) {
    ASSERT_EQ(fast.offsets()[i], ref.offsets()[i]) << "allocation index " << i;
  }
  if (want == 0) return;
  // Stopped below the slab: both give up (a value above the limit), or neither.
  const std::uint64_t limit = want - 1 - want / 16;
  const std::uint64_t ref_stop = ref.place(order, limit);
  const std::uint64_t fast_stop = fast.place(order, limit);
  EXPECT_EQ(ref_stop > limit, fast_stop > limit);
}

// Returns whether the placer kept this trace's starts as unions (Note [Starts as
// unions]); *partials, whether its blocks' partial long slots (Note [Partial blocks as
// unions]).
bool check_every_ordering(const trace& t, const planner_options& o, std::mt19937_64& rng, bool* partials = nullptr) {
  const absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, o);
  EXPECT_TRUE(in.ok()) << in.status();
  if (!in.ok()) return false;
  detail::greedy_placer fast(*in);
  testing::reference_greedy_placer ref(*in);
  expect_same_placement(*in, fast, ref, detail::order_by_size(*in), "size");
  expect_same_placement(*in, fast, ref, detail::order_by_size_class(*in), "size class");
  expect_same_placement(*in, fast, ref, detail::order_by_breadth(*in), "breadth");
  expect_same_placement(*in, fast, ref, detail::order_by_lifetime(*in), "lifetime");
  expect_same_placement(*in, fast, ref, detail::order_by_arrival(*in), "arrival");
  std::vector<std::uint32_t> shuffled = in->plannable;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  expect_same_placement(*in, fast, ref, shuffled, "shuffled");
  // Reversed arrival: every slot met starts after the one placed.
  shuffled = detail::order_by_arrival(*in);
  std::reverse(shuffled.begin(), shuffled.end());
  expect_same_placement(*in, fast, ref, shuffled, "reversed arrival");
  if (partials != nullptr) *partials = fast.partials_as_unions();
  return fast.starts_as_unions();
}

planner_options random_options(std::mt19937_64& rng) {
  return planner_options{.slot_align = std::uint64_t{1} << (rng() % 8)};  // 1 .. 128
}

TEST(FastPlacer, SameOffsetsAsTheReferenceOnSmallTraces) {
  std::mt19937_64 rng(0xfa57'0001);
  for (int iter = 0; iter < 3000; ++iter) {
    SCOPED_TRACE(iter);
    trace t = random_kind(rng, iter % kinds, 1 + rng() % 120);
    if (rng() % 4 == 0) vary_alignments(rng, t);
    check_every_ordering(t, random_options(rng), rng);
    if (HasFailure()) return;
  }
}

// Long enough that the index holds lifetimes longer than its window in a tree of
// several levels, and that one window holds many slots.
TEST(FastPlacer, SameOffsetsAsTheReferenceOnLargerTraces) {
  std::mt19937_64 rng(0xfa57'0002);
  for (int iter = 0; iter < 66; ++iter) {
    SCOPED_TRACE(iter);
    // Coarse lifetimes meet a quarter of the trace each: fewer of them.
    const std::size_t n = iter % kinds == 5 ? 300 + rng() % 1000 : 1000 + rng() % 5000;
    trace t = random_kind(rng, iter % kinds, n);
    if (iter % 5 == 4) vary_alignments(rng, t);
    check_every_ordering(t, random_options(rng), rng);
    if (HasFailure()) return;
  }
}

// A third of the buffers live over half the trace or more, the rest a few steps, as in a
// real trace of thousands of buffers live at once (bench/planner/iopddl): lifetimes
// that span many others' starts, which the placer keeps as unions (Note [Starts as
// unions]); sizes of one or two slots on some, so that slots touch.
trace wide_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random/wide";
  t.ops = {"unknown"};
  const std::uint64_t range = 2 * n;
  const bool touching = rng() % 2 == 0;
  for (std::size_t i = 0; i < n; ++i) {
    trace_allocation a;
    a.id = 5 * i + 2;
    a.size = touching ? 64 * (1 + rng() % 2) : random_size(rng);
    a.align = touching ? 64 : random_align(rng);
    a.alloc_at = rng() % range;
    a.free_at = a.alloc_at + 1 + (rng() % 3 == 0 ? n + rng() % n : rng() % 8);
    t.allocations.push_back(a);
  }
  in_arrival_order(t);
  return t;
}

TEST(FastPlacer, SameOffsetsAsTheReferenceWhereLifetimesSpanManyStarts) {
  std::mt19937_64 rng(0xfa57'0005);
  for (int iter = 0; iter < 6; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = wide_trace(rng, 2500 + rng() % 1000);
    EXPECT_TRUE(check_every_ordering(t, random_options(rng), rng)) << "the starts were scanned, not united";
    if (HasFailure()) return;
  }
}

// Hundreds of long slots made at one moment, or freed at one (a real trace's buffers
// made together, S_1 repeated): the blocks holding those moments keep them as unions per
// position (Note [Partial blocks as unions]), with the reference's offsets.
trace piled_trace(std::mt19937_64& rng, std::size_t n) {
  trace t;
  t.key = "random/piled";
  t.ops = {"unknown"};
  const std::uint64_t range = 2 * n;
  std::uint64_t id = 0;
  auto add = [&](std::uint64_t at, std::uint64_t free_at) {
    trace_allocation a;
    a.id = 7 * id++ + 3;
    a.size = rng() % 3 == 0 ? 64 * (1 + rng() % 4) : random_size(rng);
    a.align = 64;
    a.alloc_at = at;
    a.free_at = free_at;
    t.allocations.push_back(a);
  };
  for (int g = 0; g < 3; ++g) {  // made together; half of them freed together too
    const std::uint64_t at = rng() % range, end = at + n / 2 + rng() % n;
    for (std::size_t k = 0; k < 300 + rng() % 200; ++k) add(at, k % 2 == 0 ? end : at + n / 4 + rng() % n);
  }
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint64_t at = rng() % range;
    add(at, at + 1 + (rng() % 4 == 0 ? n / 2 + rng() % n : rng() % 8));
  }
  in_arrival_order(t);
  return t;
}

TEST(FastPlacer, SameOffsetsAsTheReferenceWhereHundredsOfLongSlotsBeginOrEndAtOneMoment) {
  std::mt19937_64 rng(0xfa57'0006);
  int as_unions = 0;
  for (int iter = 0; iter < 8; ++iter) {
    SCOPED_TRACE(iter);
    bool partials = false;
    check_every_ordering(piled_trace(rng, 1500 + rng() % 1000), random_options(rng), rng, &partials);
    as_unions += partials;
    if (HasFailure()) return;
  }
  EXPECT_GE(as_unions, 4) << "the piles should mostly fall inside a block";
}

// work() counts, per placement, one plus two per placed slot whose lifetime meets its
// own, each once, whether the index keeps it alone or merged into a union (Note [Long
// slots as unions]): best.cc's budgets, counted in work, buy what they bought.
TEST(FastPlacer, WorkCountsEachSlotMetOnce) {
  std::mt19937_64 rng(0xfa57'0004);
  for (int iter = 0; iter < 150; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = random_kind(rng, iter % kinds, 1 + rng() % 700);
    const absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, random_options(rng));
    ASSERT_TRUE(in.ok()) << in.status();
    std::vector<std::uint32_t> order = in->plannable;
    std::shuffle(order.begin(), order.end(), rng);
    if (iter % 3 == 0) order = detail::order_by_size(*in);
    std::uint64_t want = 0;
    std::vector<std::uint32_t> placed;
    for (const std::uint32_t i : order) {
      std::uint64_t met = 0;
      for (const std::uint32_t j : placed) met += in->first[j] < in->last[i] && in->first[i] < in->last[j];
      want += 1 + 2 * met;
      placed.push_back(i);
    }
    detail::greedy_placer fast(*in);
    fast.place(order);
    ASSERT_EQ(fast.work(), want);
    fast.place(order);  // a second run counts the same again
    ASSERT_EQ(fast.work(), 2 * want);
  }
}

// The planners by name still give what the reference gives for their ordering.
TEST(FastPlacer, EachGreedyPlannerIsTheReferenceUnderItsOrdering) {
  std::mt19937_64 rng(0xfa57'0003);
  using ordering = std::vector<std::uint32_t> (*)(const greedy_input&);
  const std::pair<const char*, ordering> planners[] = {{"greedy_by_size", detail::order_by_size},
                                                       {"greedy_by_size_class", detail::order_by_size_class},
                                                       {"greedy_by_breadth", detail::order_by_breadth},
                                                       {"greedy_by_lifetime", detail::order_by_lifetime},
                                                       {"greedy_by_arrival", detail::order_by_arrival}};
  for (int iter = 0; iter < 200; ++iter) {
    SCOPED_TRACE(iter);
    const trace t = random_kind(rng, iter % kinds, 1 + rng() % 400);
    const planner_options o = random_options(rng);
    const absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, o);
    ASSERT_TRUE(in.ok()) << in.status();
    testing::reference_greedy_placer ref(*in);
    for (const auto& [name, make_order] : planners) {
      const absl::StatusOr<placement> p = make_plan(t, name, o);
      ASSERT_TRUE(p.ok()) << name << ": " << p.status();
      ASSERT_EQ(p->slab_bytes, ref.place(make_order(*in))) << name;
      ASSERT_EQ(p->offsets, ref.offsets()) << name;
    }
  }
}

// Note [First fit over a tree of gaps]: the tree gives the same offsets as the walk over
// the live slots, on every kind of trace above, with alignments of 1 byte to 4 KiB, and
// on traces with thousands of buffers live at once; the automatic choice gives them too.
TEST(FirstFit, TheTreeOfGapsGivesTheWalksOffsets) {
  std::mt19937_64 rng(0xfa57'0006);
  for (int iter = 0; iter < 2000; ++iter) {
    SCOPED_TRACE(iter);
    const std::size_t n = iter % 100 == 99 ? 2000 + rng() % 2000 : 1 + rng() % 300;
    trace t = iter % 50 == 49 ? wide_trace(rng, n) : random_kind(rng, iter % kinds, n);
    if (rng() % 4 == 0) vary_alignments(rng, t);
    const planner_options o = random_options(rng);
    const absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, o);
    ASSERT_TRUE(in.ok()) << in.status();
    const placement want = detail::first_fit_placement(*in, detail::first_fit_index::walk);
    for (const auto index : {detail::first_fit_index::tree, detail::first_fit_index::automatic}) {
      const placement got = detail::first_fit_placement(*in, index);
      ASSERT_EQ(got.slab_bytes, want.slab_bytes);
      for (const std::uint32_t i : in->plannable) {
        ASSERT_EQ(got.offsets[i], want.offsets[i]) << "allocation index " << i;
      }
    }
    ASSERT_TRUE(validate(t, want, o).ok()) << validate(t, want, o);
  }
}

}  // namespace
}  // namespace replayalloc
