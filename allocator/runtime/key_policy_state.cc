// The key's policy state (runtime/key_policy_state.h): the regime predictor (Note
// [Regimes]), first-size ranges (Note [Regimes by first size]) and the probes'
// back-off. Plain functions of the state; the caller holds the key's mutex.
#include "runtime/key_policy_state.h"

#include <algorithm>
#include <iterator>

#include "replay/slab_pool.h"

namespace replayalloc::detail {

key_policy_state::key_policy_state() {
  std::fill(std::begin(after1), std::end(after1), -1);
  for (auto& row : after2) std::fill(std::begin(row), std::end(row), -1);
}

int key_policy_state::find_regime(std::uint64_t shape) const {
  for (int r = 0; r < max_regimes; ++r) {
    if (regimes[r].env != nullptr && regimes[r].shape == shape) return r;
  }
  return -1;
}

// Note [Regimes]: what followed the last two regimes, else what followed the last
// one, else the last one itself; with no history (the first iteration, or right after
// a deviation whose regime was not learned), the planned regime seen last. May be
// record_marker: the iteration records.
int key_policy_state::predict_regime() const {
  const int older = history[0];
  const int newest = history[1];
  if (older >= 0 && newest >= 0 && after2[older][newest] != -1) return after2[older][newest];
  if (newest >= 0) return after1[newest] != -1 ? after1[newest] : newest;
  int best = -1;
  for (int r = 0; r < max_regimes; ++r) {
    if (regimes[r].version != nullptr && (best < 0 || regimes[r].last_seen > regimes[best].last_seen)) best = r;
  }
  return best;
}

// Note [Regimes by first size]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In auto mode an iteration's first request is known when it begins, and a key whose
// structure changes with the shape (a kernel that takes more workspaces past some
// length) splits its first sizes into ranges, one per regime: the least and largest
// first request seen to follow each. The iteration follows:
//  * a regime whose range holds `size` (of several, the one whose least first size is
//    the largest; `predicted` when it is one of them);
//  * above every range, the regime with the largest one, when its plan's first slot
//    fits `size` (a scaling slot's growth headroom); else the size is unknown;
//  * below every range, the regime with the least one, when its first slot fits;
//  * between two ranges: unknown;
//  * above or below, unknown as far out as a first size whose replay of that regime
//    was not clean (`refused_above`, `refused_below`): a slot that fits is no sign of
//    the structure. ONNX Runtime's prefill under Node.js (Note [Long pieces between
//    anchors], auto_iteration.h) has no watched attention scores below 16 tokens: those
//    prompts replayed the regime of 16..31, 45 of their ~75 requests missing, every
//    time, and the structure of their own was never recorded.
// An unknown size records (key_policy.cc, decide_begin) rather than replay a plan of
// another structure or one it outgrows: the recording joins the regime of its
// structure, whose range then holds the size, and grows its envelope when larger
// (Note [Envelope]). Gaps between ranges close as sizes in them are recorded (each
// such recording halves a gap on average), so a key with R regimes over lengths 1..L
// records about R log2 L times before every first size is known. A recording that
// finds no regime to join (a structure past max_regimes) backs off like a probe. With
// one regime and one first size (fixed shapes) nothing changes. All this holds for
// iterations that begin at quiet points (Note [Iterations between quiet points]), where
// the first allocation is a request's, and for the rests of long pieces (Note [Long
// pieces between anchors], auto_iteration.h), which begin a period of requests into
// their piece (key_policy_state::at_quiet says either); iterations cut by a count of
// allocations may begin a few allocations off it, so there the first size only chooses
// among two or more regimes (the one whose least first size is the largest at or below
// it) and is never unknown.
bool regime::first_slot_fits(std::uint64_t size) const {
  if (version == nullptr || version->plan.slots.empty()) return false;
  const slot& s = version->plan.slots.front();
  return s.offset != not_in_slab && size <= s.size && size >= s.least;
}

key_policy_state::first_size_pick key_policy_state::regime_for_first_size(std::uint64_t size, int predicted) const {
  int holds = -1, top = -1, bottom = -1, floor = -1, known = 0;
  for (int r = 0; r < max_regimes; ++r) {
    const regime& g = regimes[r];
    if (g.env == nullptr || g.first_lo == 0) continue;
    ++known;
    if (top < 0 || g.first_hi > regimes[top].first_hi) top = r;
    if (bottom < 0 || g.first_lo < regimes[bottom].first_lo) bottom = r;
    if (g.first_lo <= size && (floor < 0 || g.first_lo > regimes[floor].first_lo)) floor = r;
    if (g.first_lo <= size && size <= g.first_hi && (holds < 0 || g.first_lo > regimes[holds].first_lo)) holds = r;
  }
  // Iterations cut by count (a period) may begin off their request's first
  // allocation, so their first sizes pick only among two or more regimes, and are
  // never unknown.
  if (!at_quiet) {
    if (known < 2) return {};
    const int pick = floor >= 0 ? floor : bottom;
    const bool tie = predicted >= 0 && regimes[predicted].env != nullptr &&
                     regimes[predicted].first_lo == regimes[pick].first_lo;
    return {tie ? predicted : pick, false};
  }
  if (holds >= 0) {
    const bool predicted_holds = predicted >= 0 && regimes[predicted].env != nullptr &&
                                 regimes[predicted].first_lo <= size && size <= regimes[predicted].first_hi;
    return {predicted_holds ? predicted : holds, false};
  }
  if (top < 0) return {};
  const regime& t = regimes[top];
  const regime& b = regimes[bottom];
  if (size > t.first_hi) return {top, !t.first_slot_fits(size) || (t.refused_above != 0 && size >= t.refused_above)};
  if (size < b.first_lo) return {bottom, !b.first_slot_fits(size) || size <= b.refused_below};
  // Between two ranges: the regime below, recorded.
  int below = -1;
  for (int r = 0; r < max_regimes; ++r) {
    const regime& g = regimes[r];
    if (g.env == nullptr || g.first_lo == 0 || g.first_hi > size) continue;
    if (below < 0 || g.first_hi > regimes[below].first_hi) below = r;
  }
  return {below >= 0 ? below : bottom, true};
}

void key_policy_state::learn_regime(int r) {
  // A structure seen once is not yet known to repeat: nothing is predicted to come
  // after it, nor it after anything (a probe's one-off iteration would otherwise send
  // every later prediction to a regime without a plan, and each of those records).
  if (r >= 0 && regimes[r].version == nullptr && regimes[r].recordings < 2) r = -1;
  const int older = history[0];
  const int newest = history[1];
  if (r >= 0 && newest >= 0) {
    after1[newest] = static_cast<std::int8_t>(r);
    if (older >= 0) after2[older][newest] = static_cast<std::int8_t>(r);
  }
  history[0] = static_cast<std::int8_t>(newest);
  history[1] = static_cast<std::int8_t>(r);
}

bool key_policy_state::mark_context() {
  const int older = history[0];
  const int newest = history[1];
  if (newest < 0) return false;
  if (older >= 0) {
    after2[older][newest] = record_marker;
  } else {
    after1[newest] = record_marker;
  }
  history[0] = static_cast<std::int8_t>(newest);
  history[1] = -1;
  return true;
}

int key_policy_state::consistent_regime(int r, std::uint32_t at, std::uint64_t size) const {
  if (at == 0) return -1;
  const auto& mine = regimes[r].version->plan.slots;
  const std::uint32_t k = at - 1;
  for (int o = 0; o < max_regimes; ++o) {
    if (o == r || regimes[o].version == nullptr) continue;
    const auto& theirs = regimes[o].version->plan.slots;
    if (theirs.size() <= k || mine.size() < k) continue;
    bool same = true;
    for (std::uint32_t i = 0; i < k && same; ++i) {
      same = std::max(mine[i].least, theirs[i].least) <= std::min(mine[i].size, theirs[i].size);
    }
    if (same && size <= theirs[k].size && size >= theirs[k].least) return o;
  }
  return -1;
}

void key_policy_state::forget_regime(int r) {
  if (last_trace_regime == r) last_trace_regime = -1;
  for (int a = 0; a < max_regimes; ++a) {
    if (after1[a] == r || a == r) after1[a] = -1;
    for (int b = 0; b < max_regimes; ++b) {
      if (after2[a][b] == r || a == r || b == r) after2[a][b] = -1;
    }
  }
  for (auto& h : history) {
    if (h == r) h = -1;
  }
}

int key_policy_state::slot_for_new_regime() const {
  int pick = -1;
  for (int r = 0; r < max_regimes; ++r) {
    const regime& g = regimes[r];
    if (g.env == nullptr) return r;
    if (pick < 0) {
      pick = r;
      continue;
    }
    const regime& p = regimes[pick];
    const bool g_planned = g.version != nullptr;
    const bool p_planned = p.version != nullptr;
    if (g_planned != p_planned ? !g_planned : g.last_seen < p.last_seen) pick = r;
  }
  return pick;
}

void key_policy_state::probe_result(bool found) {
  probe_backoff = found ? 0 : std::min<std::uint64_t>(probe_backoff == 0 ? 4 : probe_backoff * 4, 4096);
  probe_quiet_until = uses + probe_backoff;
}

bool key_policy_state::any_plan() const {
  for (const regime& g : regimes) {
    if (g.version != nullptr) return true;
  }
  return false;
}

std::uint64_t key_policy_state::slab_bytes() const {
  std::uint64_t n = 0;
  for (const regime& g : regimes) n += g.slab_bytes;
  return n;
}

std::uint64_t key_policy_state::lower_bound_bytes() const {
  std::uint64_t n = 0;
  for (const regime& g : regimes) n += g.lower_bound_bytes;
  return n;
}

}  // namespace replayalloc::detail
