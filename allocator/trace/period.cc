// Note [Periodic iterations] (trace/period.h): finding the step, the regime signature,
// and envelopes of requests of different lengths.
#include "trace/period.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "support/config.h"
#include "support/hash.h"

namespace replayalloc {

namespace {

// How allocation i is made and freed, without its size: what find_period compares.
struct token {
  std::uint64_t gap = 0;   // events since the allocation before
  std::uint64_t life = 0;  // events until its free (0 when held to the end)
  std::uint32_t align = 0;
  std::uint8_t kind = 0;   // 0 freed in the iteration, 1 freed after the last allocation, 2 outlives
  friend bool operator==(const token&, const token&) = default;
};

std::vector<token> tokens_of(const trace& t) {
  const std::size_t n = t.allocations.size();
  std::vector<token> out(n);
  const std::uint64_t last_at = n == 0 ? 0 : t.allocations.back().alloc_at;
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    token& k = out[i];
    k.gap = a.alloc_at - (i == 0 ? 0 : t.allocations[i - 1].alloc_at);
    k.align = a.align;
    if (a.outlives()) {
      k.kind = 2;
    } else if (a.free_at > last_at) {
      k.kind = 1;  // held to the end: where among the end's frees does not matter
    } else {
      k.life = a.free_at - a.alloc_at;
    }
  }
  return out;
}

std::uint64_t hash_token(std::uint64_t h, const token& k) {
  h = detail::fnv1a(h, k.gap);
  h = detail::fnv1a(h, k.life);
  return detail::fnv1a(h, (std::uint64_t{k.align} << 8) | k.kind);
}

// The run of allocations i with tok[i] == tok[i + q] through position `at`: [lo, hi),
// grown from [lo, hi) = [from, to), which holds at and is known to be in it.
std::pair<std::size_t, std::size_t> run_around(const std::vector<token>& tok, std::size_t q, std::size_t from,
                                               std::size_t to) {
  const std::size_t n = tok.size();
  std::size_t lo = from, hi = to;
  while (lo > 0 && tok[lo - 1] == tok[lo - 1 + q]) --lo;
  while (hi + q < n && tok[hi] == tok[hi + q]) ++hi;
  return {lo, hi};
}

// Note [Runs of a period's multiples]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// find_period's candidates are mostly multiples of one another (a step, two steps, ...),
// and each one's run spans the whole periodic part: scanned from its anchor, ~70 runs
// a trace, most of find_period's work. Where tok[i] == tok[i + q0] on [lo0, hi0), also
// tok[i] == tok[i + m * q0] on [lo0, hi0 - (m - 1) * q0) (a chain of m equal steps), so
// the run of a multiple q of a period already scanned starts from that span when it
// holds the candidate's position, and is scanned only beyond it: the same run (the
// largest holding the position), found in a few comparisons.
struct known_run {
  std::size_t q, lo, hi;
};

std::pair<std::size_t, std::size_t> run_of(const std::vector<token>& tok, std::size_t q, std::size_t at,
                                          std::vector<known_run>& known) {
  std::size_t from = at, to = at;
  for (const known_run& k : known) {
    if (q % k.q != 0 || k.hi < q - k.q) continue;
    const std::size_t end = k.hi - (q - k.q);  // the chain's span: [k.lo, end)
    if (k.lo <= at && at < end && end - k.lo > to - from) from = k.lo, to = end;
  }
  const auto run = run_around(tok, q, from, to);
  known.push_back({q, run.first, run.second});
  return run;
}

// At most this many candidate periods are tried per anchor, nearest first.
constexpr int max_candidates = 24;
// Allocations compared to accept a candidate (a window of the anchor's neighbours).
constexpr std::size_t window = 8;

}  // namespace

trace_period find_period(const trace& t) {
  trace_period best;
  const std::vector<token> tok = tokens_of(t);
  const std::size_t n = tok.size();
  if (n < 2 * 2) return best;
  std::size_t best_cover = 0;
  std::size_t best_lo = 0;
  std::vector<known_run> known;  // Note [Runs of a period's multiples]
  for (const std::size_t anchor : {n / 2, (3 * n) / 4, n / 4}) {
    const std::size_t w = std::min(window, n - anchor);
    int tried = 0;
    for (std::size_t j = anchor; j-- > 0 && tried < max_candidates;) {
      if (!(tok[j] == tok[anchor])) continue;
      bool same = true;
      for (std::size_t k = 1; k < w && same; ++k) same = tok[j + k] == tok[anchor + k];
      if (!same) continue;
      ++tried;
      const std::size_t q = anchor - j;
      const auto [lo, hi] = run_of(tok, q, j, known);
      const std::size_t steps = (hi + q - lo) / q;
      if (steps < 2) continue;
      const std::size_t cover = steps * q;
      if (cover > best_cover || (cover == best_cover && q < best.period)) {
        best_cover = cover;
        best_lo = lo;
        best.period = static_cast<std::uint32_t>(q);
        best.steps = static_cast<std::uint32_t>(steps);
      }
    }
  }
  if (best.period == 0) return best;
  best.prefix = static_cast<std::uint32_t>(best_lo);
  best.tail = static_cast<std::uint32_t>(n - best_lo - std::size_t{best.steps} * best.period);
  best.step_events = t.allocations[best.prefix + best.period].alloc_at - t.allocations[best.prefix].alloc_at;
  // The structure without its number of steps: prefix, one step, tail (not the events
  // after the last allocation: the frees of blocks held to the end, one per step).
  std::uint64_t h = detail::fnv1a(detail::fnv_offset, 0x9e7104d1u);
  h = detail::fnv1a(h, best.prefix);
  h = detail::fnv1a(h, best.period);
  h = detail::fnv1a(h, best.tail);
  h = detail::fnv1a(h, best.step_events);
  for (std::size_t i = 0; i < std::size_t{best.prefix} + best.period; ++i) h = hash_token(h, tok[i]);
  for (std::size_t i = best.tail_from(); i < n; ++i) h = hash_token(h, tok[i]);
  best.signature = h;
  return best;
}

std::uint64_t regime_signature(const trace& t) {
  const trace_period p = find_period(t);
  return p.found() ? p.signature : t.shape_signature();
}

namespace {

// Size of column c at step s on the line (base + slope * s), at least 1 byte and at
// most the request limit.
std::uint64_t on_line(const step_lines& l, std::size_t c, std::uint64_t s) {
  const std::uint64_t v = l.base[c] + l.slope[c] * s;
  return std::clamp<std::uint64_t>(v, 1, detail::max_request_bytes);
}

// The columns' lines of one recording with period p: a column of one size is fixed; one
// whose sizes lie on a line (within 64 bytes or 1/64 of the size above the points:
// allocators round sizes up) is linear; any other keeps its recorded capacities.
step_lines lines_of(const trace& t, const trace_period& p) {
  step_lines l;
  l.prefix = p.prefix;
  l.period = p.period;
  l.steps = p.steps;
  l.tail = p.tail;
  l.step_events = p.step_events;
  l.slope.assign(p.period, 0);
  l.base.assign(p.period, 0);
  l.kind.assign(p.period, step_lines::fixed);
  l.varies.assign(p.period, 0);
  for (std::size_t c = 0; c < p.period; ++c) {
    auto size = [&](std::size_t s) { return t.allocations[p.prefix + s * p.period + c].size; };
    const std::size_t k = p.steps;
    bool same = true;
    bool rising = true;
    for (std::size_t s = 1; s < k; ++s) {
      same = same && size(s) == size(0);
      rising = rising && size(s) >= size(s - 1);
    }
    if (same) {
      l.base[c] = size(0);
      continue;
    }
    if (!rising) {
      l.kind[c] = step_lines::irregular;
      continue;
    }
    const std::uint64_t slope = (size(k - 1) - size(0) + (k - 2)) / (k - 1);
    std::uint64_t base = 0;
    for (std::size_t s = 0; s < k; ++s) base = std::max(base, size(s) > slope * s ? size(s) - slope * s : 0);
    bool close = true;
    for (std::size_t s = 0; s < k && close; ++s) {
      const std::uint64_t above = base + slope * s - size(s);
      close = above <= std::max<std::uint64_t>(64, size(s) / 64);
    }
    l.kind[c] = close ? step_lines::linear : step_lines::irregular;
    l.slope[c] = close ? slope : 0;
    l.base[c] = close ? base : 0;
  }
  return l;
}

}  // namespace

namespace detail {

// Raises every step's capacity (and the tail's last step, the columns' positions at
// step `steps`) to its column's line, and lets a column whose recordings disagree serve
// any smaller request.
bool raise_to_lines(envelope& e) {
  bool rose = false;
  const step_lines& l = e.lines;
  for (std::size_t s = 0; s <= l.steps; ++s) {
    for (std::size_t c = 0; c < l.period; ++c) {
      const std::size_t i = l.prefix + s * l.period + c;
      if (i >= e.tr.allocations.size()) break;
      // One size everywhere: kept exact (Note [Envelope]); no line: as recorded.
      if (l.kind[c] != step_lines::linear) continue;
      std::uint64_t& cap = e.tr.allocations[i].size;
      const std::uint64_t line = on_line(l, c, s);
      if (line > cap) {
        cap = line;
        rose = true;
      }
      if (l.varies[c]) e.least[i] = 1;
    }
  }
  return rose;
}

}  // namespace detail

namespace {

// Where allocation i of a recording with `steps` steps sits in an envelope of the same
// structure with `into_steps` steps (>= steps).
std::size_t position_in(const step_lines& l, std::uint32_t steps, std::uint32_t into_steps, std::size_t i) {
  const std::size_t tail_from = std::size_t{l.prefix} + std::size_t{steps} * l.period;
  return i < tail_from ? i : i + std::size_t{into_steps - steps} * l.period;
}

// Folds the capacities of `t` (`steps` steps, no more than `into` has) into `into`, and
// `least` (per allocation of t; null: t's sizes) into its least sizes.
bool fold_sizes(envelope& into, const trace& t, std::uint32_t steps, const std::vector<std::uint64_t>* least) {
  bool grew = false;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const std::size_t at = position_in(into.lines, steps, into.lines.steps, i);
    if (at >= into.tr.allocations.size()) break;
    const std::uint64_t size = t.allocations[i].size;
    grew = detail::fold_slot(into, at, size, least != nullptr ? (*least)[i] : size) || grew;
  }
  return grew;
}

// The lines of both: fixed where both had the same single size; irregular where either
// was; else the larger slope and base of each column (a line above both).
void merge_lines(step_lines& into, const step_lines& other) {
  for (std::size_t c = 0; c < into.period && c < other.period; ++c) {
    std::uint8_t& k = into.kind[c];
    into.varies[c] = into.varies[c] || other.varies[c] || k != other.kind[c] || into.base[c] != other.base[c] ||
                     into.slope[c] != other.slope[c];
    if (k == step_lines::irregular || other.kind[c] == step_lines::irregular) {
      k = step_lines::irregular;
      into.slope[c] = into.base[c] = 0;
      continue;
    }
    if (k == step_lines::fixed && other.kind[c] == step_lines::fixed && into.base[c] == other.base[c]) continue;
    k = step_lines::linear;
    into.slope[c] = std::max(into.slope[c], other.slope[c]);
    into.base[c] = std::max(into.base[c], other.base[c]);
  }
}

}  // namespace

namespace detail {

void add_period(envelope& e, const trace_period& p) {
  if (!p.found()) return;
  e.lines = lines_of(e.tr, p);
  raise_to_lines(e);
}

bool merge_periodic(envelope& into, const trace& t, const trace_period& p) {
  if (p.steps > into.lines.steps) {
    // The longer request's structure, with the shorter ones' capacities and least sizes
    // folded in.
    envelope longer = make_envelope(t, &p);
    fold_sizes(longer, into.tr, into.lines.steps, &into.least);
    merge_lines(longer.lines, into.lines);
    raise_to_lines(longer);
    into = std::move(longer);
    return true;
  }
  bool grew = fold_sizes(into, t, p.steps, nullptr);
  merge_lines(into.lines, lines_of(t, p));
  return raise_to_lines(into) || grew;
}

}  // namespace detail

std::optional<envelope> extend_envelope(const envelope& e, std::uint32_t steps) {
  const step_lines& l = e.lines;
  if (!l.periodic() || steps <= l.steps || l.steps == 0) return std::nullopt;
  const std::vector<trace_allocation>& in = e.tr.allocations;
  const std::size_t n = in.size();
  const std::size_t tail_from = l.tail_from();
  if (tail_from > n) return std::nullopt;
  const std::uint32_t added = steps - l.steps;
  const std::uint64_t shift = std::uint64_t{added} * l.step_events;
  // Events where the tail begins (its first allocation; the end when there is none),
  // and the iteration's last allocation: a free after it is counted from the end.
  const std::uint64_t tail_at = tail_from < n ? in[tail_from].alloc_at : e.tr.events;
  const std::uint64_t last_at = n == 0 ? 0 : in.back().alloc_at;
  // A free moves with the tail when it happens in the tail after its first step (the
  // end's frees, the tail's own blocks), not when it is a step's block freed by the
  // next step (the first step-length of the tail).
  auto moves = [&](std::uint64_t f) { return f != never_freed && f >= tail_at && (f > last_at || f >= tail_at + l.step_events); };
  // A step's block freed by a later step than the next (a key/value cache handed on
  // until the step after next has run: Python's `past` is rebound only when the call
  // that read it returns) is freed in the tail, or after the last allocation, for the
  // last steps; it is freed relative to its step, not with the tail, when the same
  // column of the step before lived as long. Taken with the tail, every added step's
  // block would be held to the end: the slab grew by a step's bytes per added step (a
  // 5.4x longer request planned 583 MiB, not 20). A relative free taken for one that
  // is not would only cost hits: the replay never hands bytes out before it has seen
  // the frees of their earlier sharers (Note [Freed prefix]).
  auto relative = [&](std::size_t i) {
    if (i < std::size_t{l.prefix} + l.period || i >= tail_from) return false;
    const trace_allocation& a = in[i];
    const trace_allocation& b = in[i - l.period];
    return a.free_at != never_freed && b.free_at != never_freed && a.free_at - a.alloc_at == b.free_at - b.alloc_at;
  };
  envelope out;
  out.tr.key = e.tr.key;
  out.tr.ops = e.tr.ops;
  out.tr.events = e.tr.events + shift;
  out.lines = l;
  out.lines.steps = steps;
  out.tr.allocations.reserve(n + std::size_t{added} * l.period);
  out.least.reserve(n + std::size_t{added} * l.period);
  std::uint64_t next_id = 0;
  for (const trace_allocation& a : in) next_id = std::max(next_id, a.id + 1);
  for (std::size_t i = 0; i < tail_from; ++i) {
    trace_allocation a = in[i];
    if (moves(a.free_at) && !relative(i)) a.free_at += shift;
    out.tr.allocations.push_back(a);
    out.least.push_back(e.least[i]);
  }
  // New steps: copies of the last full step, `k` steps later; a column without a line
  // at the largest capacity it has in any step.
  const std::size_t last_step = tail_from - l.period;
  std::vector<std::uint64_t> column_max(l.period, 0);
  for (std::size_t i = l.prefix; i < tail_from; ++i) {
    std::uint64_t& m = column_max[(i - l.prefix) % l.period];
    m = std::max(m, in[i].size);
  }
  for (std::uint32_t k = 1; k <= added; ++k) {
    const std::uint64_t by = std::uint64_t{k} * l.step_events;
    const std::uint64_t s = l.steps - 1 + k;
    for (std::size_t c = 0; c < l.period; ++c) {
      trace_allocation a = in[last_step + c];
      a.id = next_id++;
      a.alloc_at += by;
      if (a.free_at != never_freed) a.free_at += moves(a.free_at) && !relative(last_step + c) ? shift : by;
      if (l.kind[c] == step_lines::linear) a.size = std::max(a.size, on_line(l, c, s));
      if (l.kind[c] == step_lines::irregular) a.size = column_max[c];
      out.tr.allocations.push_back(a);
      out.least.push_back(l.varies[c] || l.kind[c] == step_lines::irregular ? 1 : a.size);
    }
  }
  // The tail moves by the added steps. Beyond its first step-length (raised to the
  // lines below, as a step), an allocation on its column's line at its position (one
  // more step whose blocks are freed otherwise: the last decode step, whose caches are
  // held to the end) keeps to the line at its new position.
  for (std::size_t i = tail_from; i < n; ++i) {
    trace_allocation a = in[i];
    a.alloc_at += shift;
    if (a.free_at != never_freed) a.free_at += shift;
    const std::size_t c = (i - tail_from) % l.period;
    const std::uint64_t s = l.steps + (i - tail_from) / l.period;
    if (i >= tail_from + l.period && l.kind[c] == step_lines::linear) {
      const std::uint64_t was = on_line(l, c, s);
      if (a.size <= was && was - a.size <= std::max<std::uint64_t>(64, a.size / 64)) {
        a.size = std::max(a.size, on_line(l, c, s + added));
      }
    }
    out.tr.allocations.push_back(a);
    out.least.push_back(e.least[i]);
  }
  detail::raise_to_lines(out);
  if (!check_trace(out.tr).ok()) return std::nullopt;
  return out;
}

}  // namespace replayalloc
