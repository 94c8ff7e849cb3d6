// The decisions after a replay (Note [Key policy], runtime/key_policy.h): what a
// replayed iteration's figures say (read_replay), and what the key makes of them
// (decide_after_replay): learned, another regime's, a plan extended, scaled or
// predicted for a larger shape, or a deviation that may mark its context. The other
// decisions (an iteration's beginning, after a recording, a plan's installation) are
// key_policy.cc's; the two files are one module, split at the 600-line limit.
#include "runtime/key_policy.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <optional>

#include "support/config.h"
#include "trace/period.h"
#include "trace/size_model.h"

namespace replayalloc::detail {

namespace {

// Note [Predicted plans] (trace/size_model.h): regime g's envelope raised to the sizes
// fitted at the shape the request that outgrew slot at - 1 (`size` bytes) asks for, plus
// a quarter; null when the regime has no model, the slot cannot say, or nothing grew.
// Only slots whose size varied are raised (those of one fixed size keep matching
// exactly). REQUIRES: the key's mutex held.
std::shared_ptr<const envelope> predicted_envelope(const regime& g, std::uint32_t at, std::uint64_t size) {
  if (at == 0 || g.samples.size() < 2 || g.env == nullptr) return nullptr;
  const std::optional<size_model> m = fit_size_model(g.samples);
  if (!m || at - 1 >= m->coef.size() || m->coef.size() != g.env->tr.allocations.size()) return nullptr;
  const std::optional<double> x = m->solve(at - 1, size);
  if (!x) return nullptr;
  auto env = std::make_shared<envelope>(*g.env);
  const double target = *x * 1.25;
  bool raised = false;
  for (std::size_t i = 0; i < env->tr.allocations.size() && i < env->least.size(); ++i) {
    std::uint64_t& cap = env->tr.allocations[i].size;
    if (env->least[i] >= cap) continue;  // one fixed size: kept exact
    const std::uint64_t want = std::min<std::uint64_t>(m->size_at(i, target), max_request_bytes);
    if (want > cap) {
      cap = want;
      raised = true;
    }
  }
  return raised ? env : nullptr;
}

// Note [Regimes]: a probe is worth its recording when it finds another regime that
// repeats (seen twice, or planned). One that finds a structure never seen before may
// have found a regime at its first recording: the marked context stays marked, once,
// so that the next iteration there is recorded too. Otherwise (the regime that was
// replayed there, or a second new structure in a row: noise) the next probe waits
// four times longer than the last (4, 16, .. 4,096 iterations), and the marked context
// is given back to the regime replayed there. REQUIRES: the key's mutex held.
// Note [Periodic iterations]: a request of a periodic regime outgrew slot at - 1
// (`size` bytes, its first miss: the slot is its own), one whose size varied between
// recordings or steps (the shape's; a slot of one fixed size outgrown is another
// structure's, and the iteration is recorded as before). Its prompt or its batch is
// larger than any recorded, and the sizes that scale with them grow by about the
// same factor: every prefix and tail capacity whose size varied, and each step
// column's base (not its slope: the growth per step is per token), are raised by
// that factor and a quarter (Note [Growth headroom]). An allocation that grows faster
// (attention scores, with the square of the prompt) outgrows again, and the next
// such request raises it further; four in a row without a clean replay stop it.
// Only a request at most max_scaled_growth times its slot: a larger jump (a batch of 8
// after batches of 1 to 3) scaled every slot that varies by the ratio of one of them
// (an attention-score slot grows with the square of the prompt), and the envelope
// with it (T1/B8 of bench/RESULTS.md "Generation": slab 8 -> 51 MiB, 372 MiB peak
// RSS); such a request is recorded instead, and its sizes join the envelope as they
// are (Note [Envelope]): 315 MiB, the same share from the slab.
// Null when nothing grows, or the jump is larger. REQUIRES: the key's mutex held.
constexpr double max_scaled_growth = 2.0;

// Note [Anchored iterations]: auto mode's iterations of a period of structure (a
// decode step whose sizes grow with the sequence, ONNX Runtime's under Node.js) scale
// the same way with no lines: every capacity whose size varied is raised, and, when
// the regime's one recording says of none whether it varies (`guess`: the key is auto
// mode's, whose period was found in structure because its sizes vary), every capacity.
std::shared_ptr<const envelope> scaled_envelope(const regime& g, std::uint32_t at, std::uint64_t size,
                                                bool guess = false) {
  if (at == 0 || g.env == nullptr) return nullptr;
  const envelope& e = *g.env;
  if (at - 1 >= e.tr.allocations.size()) return nullptr;
  const std::uint64_t cap = e.tr.allocations[at - 1].size;
  bool varied = false;
  for (std::size_t i = 0; i < e.tr.allocations.size() && !varied; ++i) varied = e.least[i] < e.tr.allocations[i].size;
  const bool every = guess && !varied;
  // A slot of one fixed size that a request outgrew is another structure's (a kernel
  // that picked another workspace), not a larger shape: recorded as before.
  if (size <= cap || cap == 0 || (e.least[at - 1] >= cap && !every)) return nullptr;
  if (static_cast<double>(size) > max_scaled_growth * static_cast<double>(cap)) return nullptr;
  const double factor = 1.25 * static_cast<double>(size) / static_cast<double>(cap);
  auto scaled = [&](std::uint64_t v) {
    const double raised = static_cast<double>(v) * factor;
    if (raised >= static_cast<double>(max_request_bytes)) return std::uint64_t{max_request_bytes};
    return (static_cast<std::uint64_t>(raised) + 63) & ~std::uint64_t{63};
  };
  auto out = std::make_shared<envelope>(e);
  const step_lines& l = out->lines;
  for (std::size_t i = 0; i < out->tr.allocations.size(); ++i) {
    // The steps of a column with a line: from the line, below.
    if (l.periodic() && i >= l.prefix && i < l.tail_from() && l.kind[(i - l.prefix) % l.period] == step_lines::linear) {
      continue;
    }
    std::uint64_t& c = out->tr.allocations[i].size;
    if (every || out->least[i] < c) c = std::max(c, scaled(c));
  }
  for (std::size_t c = 0; c < l.period; ++c) {
    if (l.kind[c] == step_lines::linear) out->lines.base[c] = scaled(l.base[c]);
  }
  detail::raise_to_lines(*out);
  return out;
}

// Note [Periodic iterations]: an extended envelope holds at most this many steps, and
// at most max_extended_allocations allocations in all.
std::uint64_t max_extended_steps(const step_lines& l) {
  const std::uint64_t fixed = std::uint64_t{l.prefix} + l.tail;
  if (fixed >= max_extended_allocations || l.period == 0) return l.steps;
  return std::max<std::uint64_t>(l.steps, (max_extended_allocations - fixed) / l.period);
}

}  // namespace

replay_reading read_replay(const replay_summary& rs, const policy_settings& s) {
  replay_reading out;
  // A larger shape: at least two slots whose allocation outgrew them (slow_path.cc
  // counts them). One larger block among the same shapes is a deviation; a shape
  // change makes every allocation that scales with it larger.
  // Note [Periodic iterations] (trace/period.h): a request with more steps than a
  // periodic plan overran it: it followed the plan into its tail, and at least half a
  // step's requests after that went to the backend (some of them larger than the tail's
  // slots). That is a longer request, neither a larger shape nor a deviation: the plan
  // is extended by steps (extend_overrun).
  const bool periodic = rs.period != 0;
  out.overran = periodic && rs.first_miss_at > rs.tail_from && rs.misses * 2 >= rs.period;
  out.grew = rs.grown >= 2 && !out.overran;
  const std::uint64_t pct = s.deviation_percent;
  const std::uint32_t planned = rs.planned;
  // A request with fewer steps than a periodic plan replays a prefix of it, so the
  // slots it did not reach are not missing, and its misses count against what it
  // asked for.
  const std::uint64_t asked = periodic ? std::max<std::uint64_t>(std::uint64_t{rs.handed} + rs.misses, 1) : planned;
  const std::uint32_t missing = periodic ? 0 : planned - std::min(rs.handed, planned);
  // An iteration whose requests outgrew their slots is a larger shape, not a deviation:
  // it grows the envelope (decide_after_replay); the recording that does so says
  // whether the program's structure changed too.
  out.deviated = !out.grew && !out.overran && planned > 0 &&
                 (rs.misses * 100 > pct * asked || std::uint64_t{missing} * 100 > pct * planned);
  // Note [One verdict for auto mode]: the slots half of the same reading, against the
  // fewer of the plan's slots and what the client expected.
  std::uint64_t could = periodic ? 0 : planned;
  if (rs.expected != 0) could = planned == 0 ? rs.expected : std::min<std::uint64_t>(rs.expected, planned);
  out.fell_short = std::uint64_t{rs.handed} * 100 < could * (100 - std::min<std::uint64_t>(pct, 100));
  return out;
}

namespace {

// Note [Periodic iterations]: a request with more steps than regime r's periodic plan.
// The envelope is extended to the steps this request needed (its misses, in steps, and
// one more) plus a quarter (Note [Growth headroom]), planned off the request path; the
// plan serves on meanwhile. REQUIRES: the key's mutex held.
void extend_overrun(key_policy_state& e, int r, const replay_summary& rs, const policy_settings& s, replay_verdict& v) {
  regime& g = e.regimes[r];
  const step_lines* l = g.env != nullptr ? &g.env->lines : nullptr;
  if (g.planning == nullptr && s.replays && !e.failed && l != nullptr && l->periodic() && l->period == rs.period) {
    const std::uint64_t needed = l->steps + (rs.misses + l->period - 1) / l->period + 1;
    const std::uint64_t steps = std::min<std::uint64_t>(needed + needed / 4, max_extended_steps(*l));
    if (steps > l->steps) {
      if (std::optional<envelope> longer = extend_envelope(*g.env, static_cast<std::uint32_t>(steps))) {
        v.predicted = std::make_shared<const envelope>(*std::move(longer));
        g.env = v.predicted;
        g.planning = v.predicted.get();
        v.grow_wanted = true;
      }
    }
  }
  e.learn_regime(r);
  v.explained = g.planning != nullptr;
}

// The larger shape of regime r planned at once, without recording it; null when it
// cannot be. Only when the request that outgrew its slot was the iteration's first miss:
// the cursor was on the plan up to it, so the slot is that request's own. A longer prompt
// or a larger batch is the envelope scaled to that request (Note [Periodic iterations]);
// otherwise, at the first outgrown replay, the fitted sizes (Note [Predicted plans]).
// REQUIRES: the key's mutex held.
std::shared_ptr<const envelope> larger_shape(const key_policy_state& e, int r, const replay_summary& rs) {
  const regime& g = e.regimes[r];
  if (rs.first_too_large_at != rs.first_miss_at) return nullptr;
  const bool periodic = rs.period != 0;
  std::shared_ptr<const envelope> p;
  if ((periodic || e.by_shape) && g.grown_in_a_row < 4) {
    p = scaled_envelope(g, rs.first_too_large_at, rs.first_too_large_size, e.by_shape && !periodic);
  }
  if (p == nullptr && g.grown_in_a_row == 1) p = predicted_envelope(g, rs.first_too_large_at, rs.first_too_large_size);
  return p;
}

// An iteration of another structure that nothing explains and no plan grows from. A
// predicted plan that was outgrown at once is followed by a recording. A plan outgrown 4
// times in a row without replaying an iteration cleanly in between does not settle (the
// sizes follow no shape it can learn): from then on an outgrown iteration is a deviation
// like any other, and those in a row retire the plan and set the key aside (Note
// [Setting aside]). When this is the second such iteration in the key's last 8 replays
// that left the plan at the same slot as the one before (one alone is an odd iteration;
// noise leaves it anywhere), the context the iteration came in (the regimes of the two
// before it) is marked: the next iteration in that context records, and says which
// regime comes there (Note [Regimes]). REQUIRES: the key's mutex held.
void unexplained(key_policy_state& e, int r, const replay_summary& rs, bool grew, const policy_settings& s,
                 replay_verdict& v) {
  v.grow_wanted = grew && e.uses >= e.probe_quiet_until && e.regimes[r].grown_in_a_row < 4;
  if (v.grow_wanted) e.regimes[r].grow_wanted = true;
  // Alike: the iteration left the plan at the same slot as the last one that did.
  const bool alike = rs.first_miss_at == e.last_first_miss;
  e.last_first_miss = rs.first_miss_at;
  if (alike && std::popcount(e.structure_deviations & 0xffu) >= 2 && e.uses >= e.probe_quiet_until && s.replays) {
    e.probe_from = r;
    e.probe_found_other = false;
    if (!e.mark_context()) e.probe_left = std::max(e.probe_left, 2u);
  } else {
    e.learn_regime(-1);
  }
}

}  // namespace

replay_verdict decide_after_replay(key_policy_state& e, const replay_summary& rs, const policy_settings& s,
                                   deviation_streak* streak) {
  replay_verdict v;
  const int r = rs.regime;
  const replay_reading read = read_replay(rs, s);
  v.overran = read.overran;
  v.grew = read.grew;
  v.deviated = read.deviated;
  v.fell_short = read.fell_short;
  // Note [Regimes]: an iteration that deviated, or whose requests outgrew their slots,
  // may have followed another structure. It followed another planned regime when that
  // one's slots up to the first request this plan could not serve are this plan's, and
  // its slot there fits that request: learned, and nothing else done. Otherwise a
  // larger shape grows the envelope (the next iteration of this regime records, or it
  // is planned at once, and the plan serves on meanwhile), and an iteration of another
  // structure may mark its context (unexplained).
  const bool other_structure = read.grew || read.deviated;
  e.structure_deviations = (e.structure_deviations << 1) | (other_structure ? 1u : 0u);
  if (e.regimes[r].version == rs.version) {  // `rs.version` is installed, so alive: its plan may be read
    regime& g = e.regimes[r];
    if (read.grew) ++g.grown_in_a_row;
    if (other_structure) g.refuse_first(rs.first_size);  // Note [Regimes by first size]
    if (read.overran) {
      extend_overrun(e, r, rs, s, v);
    } else if (!other_structure) {
      e.failures = 0;
      g.confirmed = true;
      g.grown_in_a_row = 0;
      e.learn_regime(r);
      g.saw_first(rs.first_size);
    } else if (const int other = e.consistent_regime(r, rs.first_miss_at, rs.first_miss_size); other >= 0) {
      // Learned for the prediction; not for the other regime's first sizes: an
      // explanation is a guess (Note [Regimes by first size] takes ranges only from
      // recordings and clean replays).
      e.learn_regime(other);
      v.explained = true;
    } else if (read.grew && g.planning != nullptr) {
      // Note [Background planning]: a larger plan for this regime is on the way (the
      // envelope already grown, or predicted): the iteration that outgrew the plan
      // it replaces is neither a deviation nor a reason to record or predict again.
      e.learn_regime(r);
      v.explained = true;
    } else if (read.grew && s.replays && !e.failed && (v.predicted = larger_shape(e, r, rs)) != nullptr) {
      g.env = v.predicted;
      g.planning = v.predicted.get();
      g.grow_wanted = false;
      v.grow_wanted = true;
      e.learn_regime(r);
    } else {
      unexplained(e, r, rs, read.grew, s, v);
    }
  }
  // Deviation is counted per thread: a thread whose every iteration deviates has a
  // program that changed; threads that deviate now and then, interleaved, do not. An
  // iteration of another planned regime is a wrong prediction, not a deviation; one
  // that outgrew its slots is one only when it does not grow the plan.
  v.counted = (read.deviated || (read.grew && !v.grow_wanted)) && !v.explained;
  if (streak != nullptr) v.retire = streak_retires(*streak, &e, v.counted, rs.from_file, s);
  v.probation = on_probation(e);
  return v;
}

}  // namespace replayalloc::detail
