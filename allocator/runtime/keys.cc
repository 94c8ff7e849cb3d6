// The key table (runtime/engine.h): one entry per plan key, made on first use (its
// saved plan loaded, plan_store.cc), and the bounds on what keys and slabs may cost
// (Note [Bounds]).
#include <algorithm>
#include <iterator>
#include <utility>
#include <new>
#include <vector>

#include "backend/backend.h"
#include "replay/slab_pool.h"
#include "runtime/engine.h"
#include "support/log.h"
#include "support/reentry.h"

namespace replayalloc::detail {

key_entry* engine::entry_for(std::string_view key, domain_kind kind, slab_source* source,
                             placement_adjuster adjust, void* adjust_arg) {
  reentry_guard guard;
  key_entry* e = nullptr;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(absl::string_view(key.data(), key.size()));
    if (it != keys_.end()) {
      e = it->second;
      e->users.fetch_add(1, std::memory_order_relaxed);
      e->last_used = ++use_clock_;
      return e;
    }
    void* mem = backend::fallback_alloc(sizeof(key_entry), alignof(key_entry));
    if (mem == nullptr) return nullptr;
    e = new (mem) key_entry;
    e->key.assign(key.data(), key.size());
    e->kind = kind;
    e->source = source;
    e->adjust = adjust;
    e->adjust_arg = adjust_arg;
    e->users.store(1, std::memory_order_relaxed);
    e->last_used = ++use_clock_;
    keys_.emplace(e->key, e);
    if (keys_.size() > opts_.max_plans) evict_idle_keys_locked(e);
  } catch (const std::bad_alloc&) {
    // The map could not grow: this iteration passes through (domain_begin(null)).
    if (e != nullptr && keys_.find(e->key) == keys_.end()) {
      e->~key_entry();
      backend::fallback_free(e);
    }
    REPLAYALLOC_LOG(warning, "out of memory making the entry of key '%.*s'; its iteration passes through",
                    static_cast<int>(key.size()), key.data());
    return nullptr;
  }
  if ((opts_.plan_dir[0] != '\0' || opts_.plan_cache[0] != '\0') && replays()) {
    try {
      load_saved_plan(*e);
    } catch (const std::bad_alloc&) {
      REPLAYALLOC_LOG(warning, "out of memory loading the plan of '%s'; recording it instead", e->key.c_str());
    }
  }
  return e;
}

// Note [Bounds]
// ~~~~~~~~~~~~~
// A service fed ever-new shapes makes ever-new keys. Two settings bound what they cost.
// REPLAYALLOC_MAX_PLANS bounds the keys remembered: past it, the least recently used
// key no thread holds is forgotten (its plan retired, so its slabs are unmapped as soon
// as they drain; its recordings dropped); asked for again, it records again.
// REPLAYALLOC_MAX_SLAB_MEMORY bounds the host slab bytes committed: a slab that would
// pass it is not made until idle slabs (waiting in their pools) of the least recently
// used other keys are unmapped; when that is not enough the iteration passes through to
// the backend, like any iteration without a slab. Neither ever touches a slab in use.
void engine::evict_idle_keys_locked(const key_entry* keep) {
  while (keys_.size() > opts_.max_plans) {
    key_entry* victim = nullptr;
    for (const auto& [k, e] : keys_) {
      if (e == keep || e->users.load(std::memory_order_acquire) != 0) continue;
      if (victim == nullptr || e->last_used < victim->last_used) victim = e;
    }
    if (victim == nullptr) return;  // every key is in use: over the bound until one ends
    plan_version* v[max_regimes] = {};
    {
      std::lock_guard<std::mutex> lock(victim->mu);
      for (int r = 0; r < max_regimes; ++r) std::swap(v[r], victim->regimes[r].version);
    }
    keys_.erase(victim->key);
    REPLAYALLOC_LOG(info, "forgetting the least recently used key '%s' (REPLAYALLOC_MAX_PLANS=%u)",
                    victim->key.c_str(), opts_.max_plans);
    victim->~key_entry();
    backend::fallback_free(victim);
    for (plan_version* old : v) {
      if (old == nullptr) continue;
      plans_evicted_.fetch_add(1, std::memory_order_relaxed);
      old->retire();
    }
  }
}

std::size_t engine::trim_idle_slabs(const key_entry* except, std::size_t want) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<key_entry*, backend::internal_allocator<key_entry*>> order;
  try {
    order.reserve(keys_.size());
    for (const auto& [k, e] : keys_) {
      if (e != except && e->kind == domain_kind::host) order.push_back(e);
    }
  } catch (const std::bad_alloc&) {
    return 0;
  }
  std::sort(order.begin(), order.end(),
            [](const key_entry* a, const key_entry* b) { return a->last_used < b->last_used; });
  std::size_t freed = 0;
  for (key_entry* e : order) {
    std::lock_guard<std::mutex> elock(e->mu);
    for (const regime& g : e->regimes) {
      if (g.version != nullptr) freed += g.version->trim();
    }
    if (freed >= want) break;
  }
  return freed;
}

key_entry::key_entry() {
  std::fill(std::begin(after1), std::end(after1), -1);
  for (auto& row : after2) std::fill(std::begin(row), std::end(row), -1);
}

int key_entry::find_regime(std::uint64_t shape) const {
  for (int r = 0; r < max_regimes; ++r) {
    if (regimes[r].env != nullptr && regimes[r].shape == shape) return r;
  }
  return -1;
}

// Note [Regimes]: what followed the last two regimes, else what followed the last
// one, else the last one itself; with no history (the first iteration, or right after
// a deviation whose regime was not learned), the planned regime seen last. May be
// record_marker: the iteration records.
int key_entry::predict_regime() const {
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
//  * between two ranges: unknown.
// An unknown size records (key_policy.cc, decide_begin) rather than replay a plan of
// another structure or one it outgrows: the recording joins the regime of its
// structure, whose range then holds the size, and grows its envelope when larger
// (Note [Envelope]). Gaps between ranges close as sizes in them are recorded (each
// such recording halves a gap on average), so a key with R regimes over lengths 1..L
// records about R log2 L times before every first size is known. A recording that
// finds no regime to join (a structure past max_regimes) backs off like a probe. With
// one regime and one first size (fixed shapes) nothing changes. All this holds for
// iterations that begin at quiet points (Note [Iterations between quiet points]),
// where the first allocation is a request's; iterations cut by a count of allocations
// may begin a few allocations off it, so there the first size only chooses among two
// or more regimes (the one whose least first size is the largest at or below it) and
// is never unknown.
bool regime::first_slot_fits(std::uint64_t size) const {
  if (version == nullptr || version->plan.slots.empty()) return false;
  const slot& s = version->plan.slots.front();
  return s.offset != not_in_slab && size <= s.size && size >= s.least;
}

key_entry::first_size_pick key_entry::regime_for_first_size(std::uint64_t size, int predicted) const {
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
  if (size > regimes[top].first_hi) return {top, !regimes[top].first_slot_fits(size)};
  if (size < regimes[bottom].first_lo) return {bottom, !regimes[bottom].first_slot_fits(size)};
  // Between two ranges: the regime below, recorded.
  int below = -1;
  for (int r = 0; r < max_regimes; ++r) {
    const regime& g = regimes[r];
    if (g.env == nullptr || g.first_lo == 0 || g.first_hi > size) continue;
    if (below < 0 || g.first_hi > regimes[below].first_hi) below = r;
  }
  return {below >= 0 ? below : bottom, true};
}

void key_entry::learn_regime(int r) {
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

bool key_entry::mark_context() {
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

int key_entry::consistent_regime(int r, std::uint32_t at, std::uint64_t size) const {
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

void key_entry::forget_regime(int r) {
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

int key_entry::slot_for_new_regime() const {
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

void key_entry::probe_result(bool found) {
  probe_backoff = found ? 0 : std::min<std::uint64_t>(probe_backoff == 0 ? 4 : probe_backoff * 4, 4096);
  probe_quiet_until = uses + probe_backoff;
}

bool key_entry::any_plan() const {
  for (const regime& g : regimes) {
    if (g.version != nullptr) return true;
  }
  return false;
}

std::uint64_t key_entry::slab_bytes() const {
  std::uint64_t n = 0;
  for (const regime& g : regimes) n += g.slab_bytes;
  return n;
}

std::uint64_t key_entry::lower_bound_bytes() const {
  std::uint64_t n = 0;
  for (const regime& g : regimes) n += g.lower_bound_bytes;
  return n;
}

}  // namespace replayalloc::detail
