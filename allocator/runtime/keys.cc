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
#include "support/grow_table.h"

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
    grow_for_insert(keys_);  // Note [Tables that grow before they insert]
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

}  // namespace replayalloc::detail
