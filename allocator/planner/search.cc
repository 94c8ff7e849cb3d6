// search_plan() (search.h): the smallest slab by branch and bound.
//
// Note [Search for the smallest slab]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The question "does a placement fit under capacity C?" is answered by a complete
// depth-first search over canonical placements, after MiniMalloc (Moffitt, ASPLOS
// 2023); the smallest slab is then found by bisection on C, between the lower bound
// (no slab is smaller) and the slab plan_best() reached (one that fits).
//
// The lifetimes, mapped onto positions (Note [Positions] in lifetimes.h), cut time into
// sections; a slot lives in a run of them. Any placement can be pushed down, each slot
// to the lowest aligned offset above the slots that meet it ("gravity"), without
// growing, so only canonical placements need be searched: each slot at the (aligned)
// top of a slot it meets, or at 0. The search places slots in order of their offsets,
// lowest first (ties: a fixed preorder), so a slot's offset is known when it is
// chosen: its `min_off`, the aligned top of the placed slots that meet it. At a node:
//   * canonical order: a slot whose min_off lies below the last slot placed (or equal
//     to it and earlier in the preorder) is not placed there; it waits for a slot
//     above it to lift it;
//   * dominance: a slot is not placed at or above the top any waiting slot would
//     reach at its own min_off (min_height): that slot could go below it, and the
//     placement that puts it there is searched in another branch;
//   * spatial inference: in every section, the slots still to place all meet each
//     other, so they stack above the section's floor (the top of its placed slots,
//     raised to the lowest min_off among its waiting slots, and to the offset just
//     placed, since all later slots go higher): floor + their footprints must fit
//     under C, else the branch is cut.
// Each prunes only placements that another branch, or none, completes: the search
// is complete, so "not found" with no budget exhausted proves C infeasible
// (tests/property/planner_search_test.cc holds it to a brute force).
//
// The order among slots of one min_off is a static preorder; as MiniMalloc does, three
// are tried in turn (by widest lifetime, largest area, busiest section: "WAT", "TAW",
// "TWA"), each within a node budget that doubles each round, so one that happens to
// suit the instance answers early. A capacity none answers within the budget is
// "unknown": the round moves above it, and the next round, with twice the budget,
// starts again from the lowest capacity not proven infeasible.
#include "planner/search.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>
#include <span>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace {

using detail::align_up;
using detail::greedy_input;

constexpr std::uint64_t none = UINT64_MAX;
// Above these the overlap lists would not fit in a sensible memory: the search keeps
// plan_best()'s placement (proven optimal only when it reaches the lower bound).
constexpr std::size_t max_items = 16'384;  // and the recursion of Note [Dynamic decomposition]
constexpr std::uint64_t max_overlaps = 50'000'000;

struct item {
  std::uint64_t fp, al;
  std::uint32_t first, last;  // sections [first, last)
  std::uint32_t alloc;        // allocation index in the trace
};

enum class outcome { found, infeasible, aborted };

class problem {
 public:
  explicit problem(const greedy_input& in) {
    const auto& all = in.tr->allocations;
    for (const std::uint32_t i : in.plannable) {
      items_.push_back({in.footprint[i], in.alignment[i], in.first[i], in.last[i], i});
    }
    sections_ = in.positions;
    // Overlap lists (CSR): by a sweep over sections, each pair once.
    std::vector<std::uint32_t> by_first(items_.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::vector<std::vector<std::uint32_t>> adj(items_.size());
    std::vector<std::uint32_t> active;
    std::uint64_t pairs = 0;
    for (const std::uint32_t k : by_first) {  // items_ are in alloc_at order: first ascends
      std::erase_if(active, [&](std::uint32_t j) { return items_[j].last <= items_[k].first; });
      for (const std::uint32_t j : active) {
        adj[k].push_back(j);
        adj[j].push_back(k);
      }
      pairs += active.size();
      if (pairs > max_overlaps) {
        too_large_ = true;
        return;
      }
      active.push_back(k);
    }
    overlap_begin_.push_back(0);
    for (const auto& a : adj) {
      overlaps_.insert(overlaps_.end(), a.begin(), a.end());
      overlap_begin_.push_back(static_cast<std::uint32_t>(overlaps_.size()));
    }
    // Sections' members (CSR).
    std::vector<std::uint32_t> count(sections_ + 1, 0);
    for (const item& it : items_) {
      for (std::uint32_t s = it.first; s < it.last; ++s) ++count[s + 1];
    }
    std::partial_sum(count.begin(), count.end(), count.begin());
    section_begin_ = count;
    members_.resize(count.back());
    for (std::uint32_t k = 0; k < items_.size(); ++k) {
      for (std::uint32_t s = items_[k].first; s < items_[k].last; ++s) members_[count[s]++] = k;
    }
    // The preorders' fixed keys: width and area in the trace's own time.
    for (std::uint32_t k = 0; k < items_.size(); ++k) {
      const trace_allocation& a = all[items_[k].alloc];
      keys_.push_back({a.free_at - a.alloc_at, (a.free_at - a.alloc_at) * items_[k].fp});
    }
  }

  struct key {
    std::uint64_t width, area;
  };

  bool too_large() const { return too_large_; }
  const std::vector<item>& items() const { return items_; }
  std::size_t sections() const { return sections_; }
  std::span<const std::uint32_t> overlaps(std::uint32_t k) const {
    return {overlaps_.data() + overlap_begin_[k], overlaps_.data() + overlap_begin_[k + 1]};
  }
  std::span<const std::uint32_t> members(std::uint32_t s) const {
    return {members_.data() + section_begin_[s], members_.data() + section_begin_[s + 1]};
  }
  const key& keys(std::uint32_t k) const { return keys_[k]; }

 private:
  std::vector<item> items_;
  std::vector<key> keys_;
  std::size_t sections_ = 0;
  std::vector<std::uint32_t> overlap_begin_, overlaps_, section_begin_, members_;
  bool too_large_ = false;
};

// One capacity, one preorder: the depth-first search of Note [Search for the
// smallest slab], each partition with its own stack of frames, and a partition that
// splits (Note [Dynamic decomposition]) solved part by part, recursively.
//
// Note [Dynamic decomposition]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Between two sections, the cut is the number of waiting slots that live in both.
// When a placement brings a cut to zero, the waiting slots on either side never meet:
// each side is a problem of its own (the floors and min_offs carry what was placed),
// solved alone, from a fresh canonical order. The branch succeeds when every part
// does, and fails as soon as one fails, without trying the other parts' choices
// against it: without this, a failure at the end of the iteration would backtrack
// through every choice made at its start. As MiniMalloc's, the parts leave the state
// as they found it and record their offsets in solution_.
class capacity_search {
 public:
  using clock = std::chrono::steady_clock;
  capacity_search(const problem& p, std::uint64_t capacity, const char* heuristic, std::uint64_t node_limit,
                  clock::time_point deadline, const std::atomic<bool>* stop)
      : p_(p), cap_(capacity), heuristic_(heuristic), limit_(node_limit), deadline_(deadline), stop_(stop) {
    const std::size_t n = p.items().size();
    rank_.assign(n, 0);
    min_off_.assign(n, 0);
    off_.assign(n, none);
    solution_.assign(n, none);
    floor_.assign(p.sections(), 0);
    total_.assign(p.sections(), 0);
    stamp_.assign(p.sections(), 0);
    cuts_.assign(p.sections(), 0);
    for (const item& it : p.items()) {
      for (std::uint32_t s = it.first; s < it.last; ++s) total_[s] += it.fp;
      for (std::uint32_t s = it.first; s + 1 < it.last; ++s) ++cuts_[s];
    }
  }

  outcome run() {
    std::vector<std::uint32_t> all(p_.items().size());
    std::iota(all.begin(), all.end(), 0);
    std::vector<std::uint32_t> cutpoints = {0};
    for (std::uint32_t s = 0; s + 1 < p_.sections(); ++s) {
      if (cuts_[s] == 0) cutpoints.push_back(s + 1);
    }
    cutpoints.push_back(static_cast<std::uint32_t>(p_.sections()));
    return solve_parts(all, cutpoints);
  }

  const std::vector<std::uint64_t>& offsets() const { return solution_; }
  std::uint64_t nodes() const { return nodes_; }
  bool timed_out() const { return timed_out_; }

 private:
  struct cand {
    std::uint64_t off;
    std::uint32_t rank, k;
  };
  struct frame {
    std::size_t begin, end, next;  // this node's candidates in cands_
    std::uint64_t last_off, min_height;
    std::uint32_t last_rank;
    std::uint64_t placed = none;  // the item placed by the current branch
    std::size_t offset_mark = 0, floor_mark = 0;
  };
  struct partition {
    std::vector<std::uint32_t> items;  // its waiting slots
    std::uint32_t lo, hi;              // its sections [lo, hi)
  };

  // The waiting slots of `items`, split at `cutpoints` (ascending, the range's ends
  // first and last), each part solved in turn under its own preorder.
  outcome solve_parts(const std::vector<std::uint32_t>& items, const std::vector<std::uint32_t>& cutpoints) {
    std::vector<std::uint32_t> saved;
    for (std::size_t c = 1; c < cutpoints.size(); ++c) {
      partition part{{}, cutpoints[c - 1], cutpoints[c]};
      for (const std::uint32_t k : items) {
        const item& it = p_.items()[k];
        if (off_[k] == none && it.first < part.hi && part.lo < it.last) part.items.push_back(k);
      }
      if (part.items.empty()) continue;
      // The enclosing partition's frames compare ranks: its slots get theirs back.
      saved.clear();
      for (const std::uint32_t k : part.items) saved.push_back(rank_[k]);
      rank_part(part);
      const outcome out = solve(part);
      for (std::size_t x = 0; x < part.items.size(); ++x) rank_[part.items[x]] = saved[x];
      if (out != outcome::found) return out;
    }
    return outcome::found;
  }

  // A part's preorder, as MiniMalloc's: three letters of W(idth), A(rea) and T(otal:
  // the largest bytes still to place in a section of the slot's), each descending;
  // ties by position in the trace. Totals are those of now, so a part ranks its slots
  // by what is left of the problem, not what was.
  void rank_part(const partition& part) {
    struct keyed {
      std::uint64_t width, area, total;
      std::uint32_t k;
    };
    std::vector<keyed> v;
    v.reserve(part.items.size());
    for (const std::uint32_t k : part.items) {
      const item& it = p_.items()[k];
      std::uint64_t t = 0;
      for (std::uint32_t s = it.first; s < it.last; ++s) t = std::max(t, total_[s]);
      v.push_back({p_.keys(k).width, p_.keys(k).area, t, k});
    }
    auto field = [](char c, const keyed& x) { return c == 'W' ? x.width : c == 'A' ? x.area : x.total; };
    std::sort(v.begin(), v.end(), [&](const keyed& x, const keyed& y) {
      for (const char* c = heuristic_; *c; ++c) {
        if (field(*c, x) != field(*c, y)) return field(*c, x) > field(*c, y);
      }
      return x.k < y.k;
    });
    for (std::uint32_t r = 0; r < v.size(); ++r) rank_[v[r].k] = r;
  }

  outcome solve(const partition& part) {
    std::vector<frame> frames;
    const std::size_t cand_base = cands_.size();
    auto unwind = [&](outcome out) {
      if (out == outcome::found) {
        for (const std::uint32_t k : part.items) {
          if (off_[k] != none) solution_[k] = off_[k];
        }
      }
      while (!frames.empty()) {
        if (frames.back().placed != none) undo(frames.back());
        frames.pop_back();
      }
      cands_.resize(cand_base);
      return out;
    };
    if (!open_frame(part, frames, 0, 0)) return unwind(outcome::found);
    std::vector<std::uint32_t> cutpoints;
    while (!frames.empty()) {
      frame& f = frames.back();
      if (f.placed != none) {
        undo(f);
        f.placed = none;
      }
      const cand* c = next_candidate(f);
      if (c == nullptr) {
        cands_.resize(f.begin);
        frames.pop_back();
        continue;
      }
      if (++nodes_ > limit_ || ((nodes_ & 255) == 0 && out_of_time())) return unwind(outcome::aborted);
      const std::uint32_t k = c->k, r = rank_[k];
      const std::uint64_t at = c->off;
      f.placed = k;
      f.offset_mark = offset_log_.size();
      f.floor_mark = floor_log_.size();
      place(k, at);
      if (!check(part, at)) continue;
      // Cuts this slot leaves at zero split the partition.
      const item& it = p_.items()[k];
      cutpoints.clear();
      for (std::uint32_t s = std::max(it.first, part.lo); s + 1 < std::min(it.last, part.hi); ++s) {
        if (cuts_[s] == 0) cutpoints.push_back(s + 1);
      }
      if (!cutpoints.empty()) {
        cutpoints.insert(cutpoints.begin(), part.lo);
        cutpoints.push_back(part.hi);
        const std::vector<std::uint32_t> points = cutpoints;  // solve_parts recurses
        const outcome out = solve_parts(part.items, points);
        if (out != outcome::infeasible) return unwind(out);
        continue;
      }
      if (!open_frame(part, frames, at, r)) return unwind(outcome::found);
    }
    return unwind(outcome::infeasible);
  }

  bool out_of_time() {
    if ((stop_ != nullptr && stop_->load(std::memory_order_relaxed)) || clock::now() >= deadline_) {
      timed_out_ = true;
    }
    return timed_out_;
  }

  // Pushes the node below a slot placed at (last_off, last_rank); false when every
  // slot of the partition is placed.
  bool open_frame(const partition& part, std::vector<frame>& frames, std::uint64_t last_off,
                  std::uint32_t last_rank) {
    const std::size_t begin = cands_.size();
    std::uint64_t min_height = none;
    for (const std::uint32_t k : part.items) {
      if (off_[k] != none) continue;
      cands_.push_back({min_off_[k], rank_[k], k});
      min_height = std::min(min_height, min_off_[k] + p_.items()[k].fp);
    }
    if (cands_.size() == begin) return false;
    std::sort(cands_.begin() + static_cast<std::ptrdiff_t>(begin), cands_.end(), [](const cand& x, const cand& y) {
      return x.off != y.off ? x.off < y.off : x.rank < y.rank;
    });
    frames.push_back({begin, cands_.size(), begin, last_off, min_height, last_rank});
    return true;
  }

  const cand* next_candidate(frame& f) {
    while (f.next < f.end) {
      const cand& c = cands_[f.next++];
      if (c.off >= f.min_height) {  // dominance; candidates ascend in offset
        f.next = f.end;
        return nullptr;
      }
      if (c.off < f.last_off || (c.off == f.last_off && c.rank < f.last_rank)) continue;  // canonical
      if (c.off + p_.items()[c.k].fp > cap_) continue;
      return &c;
    }
    return nullptr;
  }

  void place(std::uint32_t k, std::uint64_t at) {
    const item& it = p_.items()[k];
    off_[k] = at;
    const std::uint64_t top = at + it.fp;
    ++epoch_;
    touched_.clear();
    for (const std::uint32_t j : p_.overlaps(k)) {
      if (off_[j] != none || min_off_[j] >= top) continue;
      offset_log_.push_back({j, min_off_[j]});
      min_off_[j] = align_up(top, p_.items()[j].al);
      const item& o = p_.items()[j];
      for (std::uint32_t s = o.first; s < o.last; ++s) {
        if (stamp_[s] != epoch_) {
          stamp_[s] = epoch_;
          touched_.push_back(s);
        }
      }
    }
    for (std::uint32_t s = it.first; s < it.last; ++s) {
      floor_log_.push_back({s, floor_[s]});
      floor_[s] = std::max(floor_[s], top);
      total_[s] -= it.fp;
    }
    for (std::uint32_t s = it.first; s + 1 < it.last; ++s) --cuts_[s];
    // A section's floor is at least the lowest min_off of its waiting slots.
    for (const std::uint32_t s : touched_) {
      std::uint64_t low = none;
      for (const std::uint32_t j : p_.members(s)) {
        if (off_[j] == none) low = std::min(low, min_off_[j]);
      }
      if (low != none && floor_[s] < low) {
        floor_log_.push_back({s, floor_[s]});
        floor_[s] = low;
      }
    }
  }

  void undo(const frame& f) {
    const std::uint32_t k = static_cast<std::uint32_t>(f.placed);
    const item& it = p_.items()[k];
    while (floor_log_.size() > f.floor_mark) {
      floor_[floor_log_.back().first] = floor_log_.back().second;
      floor_log_.pop_back();
    }
    while (offset_log_.size() > f.offset_mark) {
      min_off_[offset_log_.back().first] = offset_log_.back().second;
      offset_log_.pop_back();
    }
    for (std::uint32_t s = it.first; s < it.last; ++s) total_[s] += it.fp;
    for (std::uint32_t s = it.first; s + 1 < it.last; ++s) ++cuts_[s];
    off_[k] = none;
  }

  // Spatial inference in the partition's sections after placing a slot at `at`.
  bool check(const partition& part, std::uint64_t at) const {
    for (std::uint32_t s = part.lo; s < part.hi; ++s) {
      if (total_[s] != 0 && std::max(at, floor_[s]) + total_[s] > cap_) return false;
    }
    return true;
  }

  const problem& p_;
  const std::uint64_t cap_;
  const char* const heuristic_;
  std::vector<std::uint32_t> rank_;  // per slot: its rank in its partition's preorder
  const std::uint64_t limit_;
  const clock::time_point deadline_;
  const std::atomic<bool>* stop_;
  std::uint64_t nodes_ = 0;
  bool timed_out_ = false;
  std::vector<std::uint64_t> min_off_, off_, solution_, floor_, total_;
  std::vector<std::uint64_t> stamp_;
  std::vector<std::uint32_t> cuts_;  // per section s: waiting slots living in s and s + 1
  std::uint64_t epoch_ = 0;
  std::vector<std::uint32_t> touched_;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> offset_log_, floor_log_;
  std::vector<cand> cands_;
};

// Note [Rounds of the search]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A round gives every probe the same node budget, twice the last round's. With a
// goal (a slab of at most goal_bytes: MiniMalloc's question) not yet known out of
// reach, a round asks the goal alone, and the first round the lower bound before it
// (a tight capacity is often answered in a few hundred nodes where a looser one takes
// thousands: MiniMalloc's instance C). Without one, a round asks the lowest capacity
// (the lower bound is often reachable), then bisects upward between the lowest
// capacity not yet asked this cycle (`resume`) and the slab it holds, and ends at the
// first capacity it cannot answer: a probe left unknown costs the whole budget three
// times over (one per preorder), so a round that climbed byte by byte to its slab
// spent twenty budgets where one answers. The next round goes on from there; once
// the climb reaches the slab, or comes within 1/16 of the span from the bottom to it,
// it starts again from the bottom with the larger budget: each round's climb halves
// the distance left, so one that went on spent its doubling budgets on the last few
// hundred bytes (MiniMalloc's J: 1,095,680 bytes after 11 rounds and 5 s, 256 under
// its slab; starting again, 1,035,264, under MiniMalloc's capacity).
// Measured beside MiniMalloc on its 11 instances (bench/RESULTS.md, planner-minimalloc).
//
// `probe(cap, limit)` answers one capacity (lowering hi when it finds a slab);
// `done()` says when to stop. lo rises with every capacity proven infeasible.
template <class Probe, class Done>
void search_rounds(std::uint64_t& lo, const std::uint64_t& hi, std::uint64_t goal, std::uint64_t limit, Probe probe,
                   Done done) {
  std::uint64_t resume = 0;
  bool first_round = true;
  for (; !done(); limit *= 2) {
    auto ask = [&](std::uint64_t cap) {
      const outcome out = probe(cap, limit);
      if (out == outcome::infeasible) lo = std::max(lo, cap + 1);  // proven: none of at most cap
      return out;
    };
    auto goal_open = [&] { return goal > lo && goal < hi; };
    if (goal_open()) {
      if (first_round) ask(lo);
      first_round = false;
      if (!done() && goal_open()) ask(goal);
      if (done() || goal_open()) continue;
      // The goal proven out of reach: the rounds go on without it.
    }
    first_round = false;
    // The lowest capacity, once a round; left unknown, the bisection begins above it.
    const std::uint64_t lowest = lo;
    const bool lowest_unknown = !done() && ask(lowest) == outcome::aborted;
    std::uint64_t a = std::max(lo, resume);
    if (a >= hi || (hi - a) * 16 < hi - lo) a = lo;
    if (lowest_unknown) a = std::max(a, lowest + 1);
    while (a < hi && !done()) {
      const std::uint64_t cap = a + (hi - a) / 2;
      const outcome out = ask(cap);
      if (out != outcome::found) a = cap + 1;  // found: hi dropped to the slab found (at most cap)
      if (out == outcome::aborted) break;
    }
    resume = a;
  }
}

}  // namespace

absl::StatusOr<search_result> search_plan(const trace& t, const planner_options& o, const search_options& s) {
  using clock = capacity_search::clock;
  const clock::time_point start = clock::now();
  const clock::time_point deadline =
      s.time_limit_s > 0 ? start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s.time_limit_s))
                         : clock::time_point::max();
  absl::StatusOr<placement> best = plan_best(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(best.status());
  absl::StatusOr<greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  search_result r;
  r.plan = *std::move(best);
  std::uint64_t lo = in->lower_bound, hi = r.plan.slab_bytes;
  auto finish = [&] {
    r.lower_bound = lo;
    r.proven_optimal = lo >= hi;
    r.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return r;
  };
  if (lo >= hi || hi <= s.goal_bytes || in->plannable.size() > max_items) return finish();
  // Stopped while best planned (or before): best's plan, as the search's first check would.
  if (s.stop != nullptr && s.stop->load(std::memory_order_relaxed)) return finish();
  const problem p(*in);
  if (p.too_large()) return finish();

  static constexpr std::array<const char*, 3> heuristics = {"WAT", "TAW", "TWA"};
  bool stopped = false;
  // One capacity under every preorder in turn: found, proven infeasible, or unknown.
  auto probe = [&](std::uint64_t cap, std::uint64_t limit) {
    for (const char* heuristic : heuristics) {
      if (r.nodes >= s.max_nodes) {
        stopped = true;
        return outcome::aborted;
      }
      capacity_search cs(p, cap, heuristic, std::min(limit, s.max_nodes - r.nodes), deadline, s.stop);
      const outcome out = cs.run();
      r.nodes += cs.nodes();
      if (out == outcome::found) {
        std::vector<std::uint64_t> offsets(t.allocations.size(), not_in_slab);
        std::uint64_t slab = 0;
        for (std::size_t k = 0; k < p.items().size(); ++k) {
          offsets[p.items()[k].alloc] = cs.offsets()[k];
          slab = std::max(slab, cs.offsets()[k] + p.items()[k].fp);
        }
        placement cand{std::move(offsets), slab, in->lower_bound, "search"};
        // Never trust a branch-and-bound blindly: a placement that fails the verifier
        // is dropped (and the capacity counts as unknown).
        if (slab >= hi || !validate(t, cand, o).ok()) return outcome::aborted;
        r.plan = std::move(cand);
        hi = slab;
        return outcome::found;
      }
      if (out == outcome::infeasible) return outcome::infeasible;
      if (cs.timed_out()) {
        stopped = true;
        return outcome::aborted;
      }
    }
    return outcome::aborted;
  };
  auto done = [&] { return lo >= hi || stopped || hi <= s.goal_bytes; };
  search_rounds(lo, hi, s.goal_bytes, std::max<std::uint64_t>(1000, 2 * p.items().size()), probe, done);
  return finish();
}

}  // namespace replayalloc
