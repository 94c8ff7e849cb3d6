// First fit, online, in arrival order: what a caching allocator does. Events are
// taken in time order (at one position, frees before allocations, as everywhere);
// each allocation takes the lowest aligned gap between the slots live at that moment
// that holds it, else goes above the highest; a free gives its bytes back at once.
// It cannot look ahead, so it fragments; reported next to the offline planners to
// show what planning buys. The engine never uses it.
//
// Note [First fit over a tree of gaps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `best` runs first fit on every trace (Note [Best of orderings, then improve]). It
// walked the live slots in offset order at every allocation: on a real trace with
// ~3,000 buffers live at once (bench/planner/iopddl) that walk was 15% of best's
// time. The live slots never overlap, so what lies below the highest is a set of
// gaps; they are kept in a treap by start, each node holding the longest gap of its
// subtree, and an allocation takes the leftmost gap at least its footprint long whose
// aligned start still holds it (a gap that fails only by its alignment is passed and
// the search goes on to its right): O(log n) per event where gaps are long enough, the
// same offsets as the walk (tests/property/fast_placer_test.cc compares the two).
// Where few slots are live at once the walk is cheaper (the synthetic traces of
// bench/planner: first fit took 1.9x the walk's instructions in the tree), so the tree
// is used only on traces with more than tree_above slots live at some moment.
#include <algorithm>
#include <map>

#include "planner/greedy.h"
#include "support/status.h"

namespace replayalloc {
namespace detail {
namespace {

// The gaps below the highest live slot, in a treap keyed by start.
class gap_tree {
 public:
  static constexpr std::uint32_t nil = UINT32_MAX;

  // Adds [start, end), start < end, disjoint from every gap held.
  void insert(std::uint64_t start, std::uint64_t end) {
    const std::uint32_t n = make(start, end);
    std::uint32_t l = nil, r = nil;
    split(root_, start, l, r);
    root_ = merge(merge(l, n), r);
  }
  // Removes the gap that starts at `start` (there is one).
  void erase(std::uint64_t start) {
    std::uint32_t l = nil, m = nil, r = nil;
    split(root_, start, l, r);      // l: < start
    split(r, start + 1, m, r);      // m: the gap itself
    if (m != nil) free_.push_back(m);
    root_ = merge(l, r);
  }
  // The gap starting at `start`, or nil.
  std::uint32_t at(std::uint64_t start) const {
    for (std::uint32_t t = root_; t != nil;) {
      if (nodes_[t].start == start) return t;
      t = start < nodes_[t].start ? nodes_[t].left : nodes_[t].right;
    }
    return nil;
  }
  // The gap with the largest start below `x`, or nil.
  std::uint32_t before(std::uint64_t x) const {
    std::uint32_t best = nil;
    for (std::uint32_t t = root_; t != nil;) {
      if (nodes_[t].start < x) {
        best = t;
        t = nodes_[t].right;
      } else {
        t = nodes_[t].left;
      }
    }
    return best;
  }
  // The leftmost gap that holds `fp` bytes at an `al`-aligned offset, or nil.
  std::uint32_t first_fit(std::uint64_t fp, std::uint64_t al) const {
    for (std::uint64_t from = 0;;) {
      const std::uint32_t g = leftmost(root_, from, fp);
      if (g == nil) return nil;
      const node& n = nodes_[g];
      if (align_up(n.start, al) + fp <= n.end) return g;
      from = n.start + 1;
    }
  }
  std::uint64_t start(std::uint32_t g) const { return nodes_[g].start; }
  std::uint64_t end(std::uint32_t g) const { return nodes_[g].end; }

 private:
  struct node {
    std::uint64_t start, end, longest;  // longest: of its subtree's gaps
    std::uint64_t priority;
    std::uint32_t left, right;
  };

  std::uint32_t make(std::uint64_t start, std::uint64_t end) {
    // splitmix64 of a counter: deterministic priorities.
    std::uint64_t z = (seed_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    const node n{start, end, end - start, z ^ (z >> 31), nil, nil};
    if (!free_.empty()) {
      const std::uint32_t i = free_.back();
      free_.pop_back();
      nodes_[i] = n;
      return i;
    }
    nodes_.push_back(n);
    return static_cast<std::uint32_t>(nodes_.size() - 1);
  }
  std::uint64_t longest(std::uint32_t t) const { return t == nil ? 0 : nodes_[t].longest; }
  void update(std::uint32_t t) {
    node& n = nodes_[t];
    n.longest = std::max({n.end - n.start, longest(n.left), longest(n.right)});
  }
  // l: the gaps starting below `key`; r: the others.
  void split(std::uint32_t t, std::uint64_t key, std::uint32_t& l, std::uint32_t& r) {
    if (t == nil) {
      l = r = nil;
      return;
    }
    if (nodes_[t].start < key) {
      split(nodes_[t].right, key, nodes_[t].right, r);
      l = t;
    } else {
      split(nodes_[t].left, key, l, nodes_[t].left);
      r = t;
    }
    update(t);
  }
  std::uint32_t merge(std::uint32_t l, std::uint32_t r) {
    if (l == nil) return r;
    if (r == nil) return l;
    if (nodes_[l].priority > nodes_[r].priority) {
      nodes_[l].right = merge(nodes_[l].right, r);
      update(l);
      return l;
    }
    nodes_[r].left = merge(l, nodes_[r].left);
    update(r);
    return r;
  }
  // The leftmost gap starting at `from` or above and at least `fp` long, or nil.
  std::uint32_t leftmost(std::uint32_t t, std::uint64_t from, std::uint64_t fp) const {
    if (t == nil || nodes_[t].longest < fp) return nil;
    const node& n = nodes_[t];
    if (n.start < from) return leftmost(n.right, from, fp);
    if (const std::uint32_t g = leftmost(n.left, from, fp); g != nil) return g;
    if (n.end - n.start >= fp) return t;
    return leftmost(n.right, from, fp);
  }

  std::vector<node> nodes_;
  std::vector<std::uint32_t> free_;
  std::uint32_t root_ = nil;
  std::uint64_t seed_ = 0;
};

// Above this many slots live at once, the tree of gaps (Note [First fit over a tree of gaps]).
constexpr std::size_t tree_above = 64;

// The walk: each allocation goes over the live slots in offset order.
void walk_placement(const greedy_input& in, const std::vector<std::uint32_t>& frees, placement& p) {
  const auto& all = in.tr->allocations;
  std::map<std::uint64_t, std::uint64_t> live;  // offset -> end, of the live slots
  std::size_t next_free = 0;
  for (const std::uint32_t i : in.plannable) {
    for (; next_free < frees.size() && all[frees[next_free]].free_at <= all[i].alloc_at; ++next_free) {
      live.erase(p.offsets[frees[next_free]]);
    }
    const std::uint64_t fp = in.footprint[i], al = in.alignment[i];
    std::uint64_t end = 0, off = 0;
    bool found = false;
    for (const auto& [start, stop] : live) {
      off = align_up(end, al);
      if (off + fp <= start) {
        found = true;
        break;
      }
      end = std::max(end, stop);
    }
    if (!found) off = align_up(end, al);
    p.offsets[i] = off;
    live.emplace(off, off + fp);
    p.slab_bytes = std::max(p.slab_bytes, off + fp);
  }
}

// The most slots live at once.
std::size_t most_live(const greedy_input& in, const std::vector<std::uint32_t>& frees) {
  const auto& all = in.tr->allocations;
  std::size_t live = 0, most = 0, next_free = 0;
  for (const std::uint32_t i : in.plannable) {
    for (; next_free < frees.size() && all[frees[next_free]].free_at <= all[i].alloc_at; ++next_free) --live;
    most = std::max(most, ++live);
  }
  return most;
}

}  // namespace

placement first_fit_placement(const greedy_input& in, first_fit_index index) {
  const auto& all = in.tr->allocations;
  placement p;
  p.algorithm = "first_fit";
  p.lower_bound_bytes = in.lower_bound;
  p.offsets.assign(all.size(), not_in_slab);

  // Frees in time order; allocations come in time order from the trace itself.
  std::vector<std::uint32_t> frees = in.plannable;
  std::stable_sort(frees.begin(), frees.end(),
                   [&](std::uint32_t x, std::uint32_t y) { return all[x].free_at < all[y].free_at; });
  if (index == first_fit_index::walk ||
      (index == first_fit_index::automatic && most_live(in, frees) <= tree_above)) {
    walk_placement(in, frees, p);
    return p;
  }
  gap_tree gaps;
  std::uint64_t top = 0;  // the end of the highest live slot (0: none live)
  std::size_t next_free = 0;
  for (const std::uint32_t i : in.plannable) {
    const trace_allocation& a = all[i];
    for (; next_free < frees.size() && all[frees[next_free]].free_at <= a.alloc_at; ++next_free) {
      const std::uint32_t f = frees[next_free];
      const std::uint64_t off = p.offsets[f], stop = off + in.footprint[f];
      // The freed bytes join the gaps on either side.
      std::uint64_t from = off, to = stop;
      if (const std::uint32_t l = gaps.before(off); l != gap_tree::nil && gaps.end(l) == off) {
        from = gaps.start(l);
        gaps.erase(from);
      }
      if (stop == top) {
        top = from;  // the highest slot freed: what lies below it is no gap any more
        continue;
      }
      if (const std::uint32_t r = gaps.at(stop); r != gap_tree::nil) {
        to = gaps.end(r);
        gaps.erase(stop);
      }
      gaps.insert(from, to);
    }
    const std::uint64_t fp = in.footprint[i], al = in.alignment[i];
    std::uint64_t off = 0;
    if (const std::uint32_t g = gaps.first_fit(fp, al); g != gap_tree::nil) {
      const std::uint64_t gs = gaps.start(g), ge = gaps.end(g);
      off = align_up(gs, al);
      gaps.erase(gs);
      if (off > gs) gaps.insert(gs, off);
      if (ge > off + fp) gaps.insert(off + fp, ge);
    } else {
      off = align_up(top, al);
      if (off > top) gaps.insert(top, off);
      top = off + fp;
    }
    p.offsets[i] = off;
    p.slab_bytes = std::max(p.slab_bytes, off + fp);
  }
  return p;
}

}  // namespace detail

absl::StatusOr<placement> plan_first_fit(const trace& t, const planner_options& o) {
  absl::StatusOr<detail::greedy_input> in = detail::prepare_greedy(t, o);
  REPLAYALLOC_RETURN_IF_ERROR(in.status());
  return detail::first_fit_placement(*in);
}

}  // namespace replayalloc
