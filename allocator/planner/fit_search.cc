// A bounded search for a placement under a given capacity, used by "best" (best.cc)
// when the greedy orderings end above the lower bound.
//
// Note [Two-sided placement in arrival order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Slots are taken in the order they are allocated, so the slots a new one must avoid
// are exactly those still live, and each goes in one of at most three places under the
// capacity: the lowest gap that holds it, as high as it fits (against the capacity or
// the bottom of a live slot), or the smallest gap that holds it. When a slot finds no
// place, the search backtracks, most recent choice first. A bad choice in a network's
// trace shows up within a layer or two (the next peak), so backtracking stays local.
// The greedy orderings put every slot at the bottom of some gap; some transformer
// encoders reach the lower bound only when each layer's input alternates between the
// bottom and the top of the slab (the layer's output must avoid its input, and at the
// next peak the attention's and the feed-forward's blocks need all the rest in one
// piece), which this search finds. The search is incomplete (three places per slot),
// so failing proves nothing; it counts its work (nodes and live slots looked at) and
// stops past a budget: deterministic and machine-independent.
//
// Note [Why not a canonical search]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A MiniMalloc-style search (Moffitt, ASPLOS 2023: slots placed bottom-up at their
// floors, with section inference, dominance and decomposition) is complete, but it
// fills the slab bottom-up over the whole iteration, so a wrong choice in one layer
// is found only after the other layers' choices at the same height: on the 12-layer
// encoder its work grew about 100x per layer and 100M units were not enough.
#include <algorithm>

#include "planner/greedy.h"

namespace replayalloc::detail {
namespace {

class arrival_searcher {
 public:
  arrival_searcher(const greedy_input& in, std::uint64_t capacity, std::uint64_t budget)
      : in_(in), capacity_(capacity), budget_(budget), off_(in.tr->allocations.size(), not_in_slab) {}

  // A depth-first search with its own stack (one frame per slot placed: the depth is
  // the trace's length, too deep for the thread's stack).
  bool run() {
    const std::size_t n = in_.plannable.size();
    std::size_t r = 0;  // the next slot to place, in arrival order
    while (true) {
      if (r == n) return true;
      if (++work_ > budget_) return false;
      enter(r);
      // Take the next candidate of the deepest frame that has one; unwind the others.
      while (true) {
        if (frames_.empty()) return false;
        frame& f = frames_.back();
        const std::uint32_t i = in_.plannable[f.r];
        if (f.placed) {  // its subtree failed (and put back what it expired)
          if (in_.footprint[i] != 0) {
            *std::find(active_.begin(), active_.end(), i) = active_.back();
            active_.pop_back();
          }
          off_[i] = not_in_slab;
          f.placed = false;
        }
        if (f.next < f.n_cand && work_ <= budget_) {
          off_[i] = f.cand[f.next++];
          if (in_.footprint[i] != 0) active_.push_back(i);
          f.placed = true;
          r = f.r + 1;
          break;
        }
        while (expired_.size() > f.expired_mark) {
          active_.push_back(expired_.back());
          expired_.pop_back();
        }
        frames_.pop_back();
      }
    }
  }

  const std::vector<std::uint64_t>& offsets() const { return off_; }
  std::uint64_t work() const { return work_; }

 private:
  struct span {
    std::uint64_t begin, end;
  };
  struct frame {
    std::size_t r;             // the slot's rank in arrival order
    std::size_t expired_mark;  // expired_'s size before this slot's frees
    std::uint64_t cand[3];     // the offsets to try, in order
    std::uint32_t n_cand = 0, next = 0;
    bool placed = false;
  };

  // Pushes slot r's frame: drops the slots freed by its allocation, finds its places.
  void enter(std::size_t r) {
    const auto& all = in_.tr->allocations;
    const std::uint32_t i = in_.plannable[r];
    const std::uint64_t fp = in_.footprint[i], al = in_.alignment[i];
    frame f{r, expired_.size(), {}, 0, 0, false};
    if (fp == 0) {  // shares no byte with anything
      f.cand[f.n_cand++] = 0;
      frames_.push_back(f);
      return;
    }
    for (std::size_t a = 0; a < active_.size();) {
      if (all[active_[a]].free_at <= all[i].alloc_at) {
        expired_.push_back(active_[a]);
        active_[a] = active_.back();
        active_.pop_back();
      } else {
        ++a;
      }
    }
    live_.clear();
    for (const std::uint32_t j : active_) live_.push_back({off_[j], off_[j] + in_.footprint[j]});
    work_ += active_.size();
    std::sort(live_.begin(), live_.end(), [](const span& x, const span& y) { return x.begin < y.begin; });
    live_.push_back({capacity_, capacity_});
    // The candidates: lowest fit, highest fit, best fit.
    std::uint64_t lowest = not_in_slab, highest = not_in_slab, best = not_in_slab, best_gap = UINT64_MAX;
    std::uint64_t end = 0;
    for (const span& s : live_) {
      const std::uint64_t lo = align_up(end, al);
      if (s.begin >= lo && s.begin - lo >= fp) {
        if (lowest == not_in_slab) lowest = lo;
        highest = (s.begin - fp) & ~(al - 1);
        if (s.begin - end < best_gap) {
          best_gap = s.begin - end;
          best = lo;
        }
      }
      end = std::max(end, s.end);
    }
    for (const std::uint64_t c : {lowest, highest, best}) {
      if (c != not_in_slab && std::find(f.cand, f.cand + f.n_cand, c) == f.cand + f.n_cand) f.cand[f.n_cand++] = c;
    }
    frames_.push_back(f);
  }

  const greedy_input& in_;
  const std::uint64_t capacity_, budget_;
  std::uint64_t work_ = 0;
  std::vector<std::uint64_t> off_;
  std::vector<std::uint32_t> active_, expired_;
  std::vector<span> live_;
  std::vector<frame> frames_;
};

}  // namespace

bool fit_under(const greedy_input& in, std::uint64_t capacity, std::uint64_t budget,
               std::vector<std::uint64_t>& offsets, std::uint64_t* work) {
  if (in.plannable.empty() || in.plannable.size() > fit_search_max_allocations) return false;
  arrival_searcher a(in, capacity, budget);
  const bool ok = a.run();
  if (work != nullptr) *work += a.work();
  if (ok) offsets = a.offsets();
  return ok;
}

}  // namespace replayalloc::detail
