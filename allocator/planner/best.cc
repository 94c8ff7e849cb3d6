// "best": the default planner.
//
// Note [Best of orderings, then improve]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
//   1. Greedy placement (greedy.h) under five orderings, in this order: size class
//      (Note [Size classes, then lifetime]), size, breadth, lifetime, arrival, then
//      first fit in arrival order (first_fit.cc, what a caching allocator would do
//      online). The smallest slab wins (ties: the earlier); as soon as one reaches
//      the lower bound nothing can beat it and the rest are skipped. A run that goes
//      above the best slab so far stops there. Every candidate runs on every trace,
//      so best is never worse than any single ordering or first fit (tests/property:
//      on growing traces such as an LLM's decode steps, and on staircases of crossing
//      lifetimes, first fit is often the smallest of the six). On traces small
//      enough for steps 2 and 3, the size class ordering's placement is set aside
//      (unless it reaches the bound) and the others compete as before it was added;
//      it is taken at the end only when smaller than what steps 2 and 3 made of
//      their winner: a local search from a worse start often ends lower (300 random
//      traces: taking the class ordering as the start made 7 larger, by up to 10%).
//   2. While the winner is above the lower bound, on traces of up to
//      fit_search_max_allocations: the two-sided search of fit_search.cc (Note
//      [Two-sided placement in arrival order]) for a placement under the lower bound,
//      then under it plus 1%, 2% and 5%, within one budget of work. A placement
//      found there is kept ("best(fit)"): it is below the greedy one.
//   3. When step 2 found nothing, on traces of up to max_search_allocations (where
//      the budget pays for many greedy runs), a bounded iterated local search over
//      the winning ordering. The slab's top is set by a critical slot: the last one, in the
//      ordering, of those that end at the top. It went up because slots placed
//      before it, and alive with it, took the space below; so the moves tried are
//      "place the critical allocation just before one of them" (the earliest first,
//      at most max_moves) and "place it first". A move is kept when the slab shrinks,
//      or stays the same with fewer slots at the top (a plateau step that lets the
//      next critical slot be attacked). When no move is kept, the search restarts
//      from the best ordering found so far, perturbed by a few pseudo-random moves of
//      slots towards the front (a fixed seed: the search is deterministic).
//   4. The budgets are fixed amounts of work (greedy_placer::work(), fit_under()'s
//      count), not time, so the result never depends on the machine; each is sized
//      to a millisecond or a few.
// The lower bound is not always reachable (the bytes live at the peak may not tile
// the slab without gaps), so the budget is what usually ends steps 2 and 3.
//
#include <algorithm>
#include <array>
#include <utility>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace {

using detail::greedy_input;
using detail::greedy_placer;

// The improving pass's budget, in the placer's work units (per placement one, plus
// two per slot met: greedy_placer::work(); about 2-5 ns each on a 2020s x86 core): a
// few milliseconds. The units of the placer before the fast tier counted more per
// placement, so this budget buys the placements it bought then, or more.
constexpr std::uint64_t search_work = 1'000'000;
// The fit search's budget (fit_search.cc; its work units cost about the same).
constexpr std::uint64_t fit_work = 150'000;
constexpr std::size_t max_moves = 8;
constexpr std::size_t max_search_allocations = 4096;
constexpr int perturb_moves = 3;

struct candidate {
  std::vector<std::uint32_t> order;
  std::vector<std::uint64_t> offsets;
  std::uint64_t slab = UINT64_MAX;
  std::size_t at_top = 0;  // slots that end at the slab's top
};

// splitmix64: a small deterministic generator for the perturbations.
struct splitmix {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

std::size_t count_at_top(const greedy_input& in, const std::vector<std::uint64_t>& off,
                         std::uint64_t slab) {
  std::size_t k = 0;
  for (const std::uint32_t i : in.plannable) k += off[i] + in.footprint[i] == slab;
  return k;
}

// Moves order[from] to position `to` (< from), shifting the ones between up by one.
void move_earlier(std::vector<std::uint32_t>& order, std::size_t from, std::size_t to) {
  std::rotate(order.begin() + static_cast<std::ptrdiff_t>(to),
              order.begin() + static_cast<std::ptrdiff_t>(from),
              order.begin() + static_cast<std::ptrdiff_t>(from) + 1);
}

class improver {
 public:
  improver(const greedy_input& in, candidate best)
      : in_(in), placer_(in), best_(std::move(best)), rank_(in.footprint.size(), 0) {}

  candidate run() {
    candidate cur = best_;
    splitmix rng{0x7265706c61796131ull ^ in_.plannable.size()};
    while (placer_.work() < search_work && best_.slab > in_.lower_bound) {
      if (step(cur)) {
        if (cur.slab < best_.slab) best_ = cur;
        continue;
      }
      // Stuck: restart from the best ordering, a few slots moved towards the front.
      cur = best_;
      for (int k = 0; k < perturb_moves && cur.order.size() > 1; ++k) {
        const std::size_t from = 1 + rng.next() % (cur.order.size() - 1);
        move_earlier(cur.order, from, rng.next() % from);
      }
      if (!evaluate(cur.order, UINT64_MAX, cur)) break;
      if (cur.slab < best_.slab) best_ = cur;
    }
    return std::move(best_);
  }

 private:
  // Places `order`; fills `out` and returns true unless the slab went above
  // `give_up_above` or the budget is spent.
  bool evaluate(const std::vector<std::uint32_t>& order, std::uint64_t give_up_above,
                candidate& out) {
    if (placer_.work() >= search_work) return false;
    const std::uint64_t slab = placer_.place(order, give_up_above);
    if (slab > give_up_above) return false;
    out.order = order;
    out.offsets = placer_.offsets();
    out.slab = slab;
    out.at_top = count_at_top(in_, out.offsets, slab);
    return true;
  }

  // One improving move from `cur`; false when none of the moves tried is kept.
  bool step(candidate& cur) {
    const auto& all = in_.tr->allocations;
    for (std::size_t r = 0; r < cur.order.size(); ++r) rank_[cur.order[r]] = r;
    // The critical slot: the last placed of those ending at the top.
    std::size_t q = 0;
    for (std::size_t r = 0; r < cur.order.size(); ++r) {
      const std::uint32_t i = cur.order[r];
      if (cur.offsets[i] + in_.footprint[i] == cur.slab) q = r;
    }
    const std::uint32_t c = cur.order[q];
    // Where to move it: before the earliest placed slots alive with it and below it,
    // and to the front.
    std::array<std::size_t, max_moves + 1> to{};
    std::size_t n_to = 0;
    to[n_to++] = 0;
    for (std::size_t r = 0; r < q && n_to < to.size(); ++r) {
      const std::uint32_t j = cur.order[r];
      if (r > 0 && all[j].alloc_at < all[c].free_at && all[c].alloc_at < all[j].free_at &&
          cur.offsets[j] < cur.offsets[c]) {
        to[n_to++] = r;
      }
    }
    candidate next;
    for (std::size_t k = 0; k < n_to; ++k) {
      trial_ = cur.order;
      move_earlier(trial_, q, to[k]);
      if (!evaluate(trial_, cur.slab, next)) continue;
      if (next.slab < cur.slab || next.at_top < cur.at_top) {
        cur = std::move(next);
        return true;
      }
    }
    return false;
  }

  const greedy_input& in_;
  greedy_placer placer_;
  candidate best_;
  std::vector<std::size_t> rank_;
  std::vector<std::uint32_t> trial_;
};

// First fit: not an ordering of the greedy placer (it frees as it goes), so its
// offsets are taken as they are; the search after it starts from them and keeps a move
// only when it beats them. On the same input: the trace is checked and its lifetimes
// and lower bound computed once. True when it replaced `best`.
bool take_first_fit(const greedy_input& in, candidate& best) {
  placement ff = detail::first_fit_placement(in);
  if (ff.slab_bytes >= best.slab) return false;
  best.slab = ff.slab_bytes;
  best.offsets = std::move(ff.offsets);
  best.order = detail::order_by_arrival(in);
  return true;
}

}  // namespace

absl::StatusOr<placement> plan_best(const trace& t, const planner_options& o) {
  absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  using ordering = std::vector<std::uint32_t> (*)(const greedy_input&);
  static constexpr std::array<std::pair<ordering, const char*>, 5> orderings = {{
      {detail::order_by_size_class, "size_class"},
      {detail::order_by_size, "size"},
      {detail::order_by_breadth, "breadth"},
      {detail::order_by_lifetime, "lifetime"},
      {detail::order_by_arrival, "arrival"},
  }};
  greedy_placer placer(*in);
  candidate best;
  const char* winner = orderings[0].second;
  // Where steps 2 and 3 run, they start from the winner of the other orderings, as they
  // did before the size class ordering was added: the class ordering's slab is kept
  // aside and taken at the end only when it is smaller (Note [Size classes, then
  // lifetime]: the local search starts better from some orderings than others, so a
  // smaller start can end larger).
  const bool improved = in->plannable.size() <= std::max(max_search_allocations, detail::fit_search_max_allocations);
  candidate by_class;
  for (std::size_t k = 0; k < orderings.size(); ++k) {
    const auto& [make_order, name] = orderings[k];
    if (k == 1 && improved && best.slab > in->lower_bound) by_class = std::exchange(best, candidate{});
    std::vector<std::uint32_t> order = make_order(*in);
    // Only a strictly smaller slab replaces the best: give up at best.slab - 1.
    const std::uint64_t slab = placer.place(order, best.slab == UINT64_MAX ? UINT64_MAX : best.slab - 1);
    if (slab < best.slab) {
      best.slab = slab;
      best.order = std::move(order);
      best.offsets = placer.offsets();
      winner = name;
    }
    if (best.slab <= in->lower_bound) break;
  }
  if (best.slab > in->lower_bound && take_first_fit(*in, best)) winner = "first_fit";
  std::string algorithm = std::string("best(") + winner + ")";
  // Step 2: the two-sided search under the lower bound, then a little above it.
  std::uint64_t fit_spent = 0;
  for (const std::uint64_t per_mille : {0, 10, 20, 50}) {
    const std::uint64_t target = in->lower_bound + in->lower_bound * per_mille / 1000;
    if (best.slab <= target || fit_spent >= fit_work) break;
    std::vector<std::uint64_t> offsets;
    if (detail::fit_under(*in, target, fit_work - fit_spent, offsets, &fit_spent)) {
      best.slab = 0;
      for (const std::uint32_t i : in->plannable) best.slab = std::max(best.slab, offsets[i] + in->footprint[i]);
      best.offsets = std::move(offsets);
      algorithm = "best(fit)";
      break;
    }
  }
  // Step 3 only on traces small enough that the budget buys many runs: on larger
  // ones a run costs about the budget and moves one slot, which almost never helps.
  if (best.slab > in->lower_bound && algorithm != "best(fit)" && in->plannable.size() <= max_search_allocations) {
    best.at_top = count_at_top(*in, best.offsets, best.slab);
    const std::uint64_t before = best.slab;
    best = improver(*in, std::move(best)).run();
    if (best.slab < before) algorithm = std::string("best(") + winner + "+search)";
  }
  if (by_class.slab < best.slab) {
    best = std::move(by_class);
    algorithm = "best(size_class)";
  }
  placement p;
  p.offsets = std::move(best.offsets);
  p.slab_bytes = in->plannable.empty() ? 0 : best.slab;
  p.lower_bound_bytes = in->lower_bound;
  p.algorithm = std::move(algorithm);
  return p;
}

}  // namespace replayalloc
