#include "replay/slab_pool.h"

#include <atomic>
#include <cstdint>
#include <new>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "support/log.h"

namespace replayalloc::detail {

namespace {

std::atomic<std::size_t> g_host_slab_limit{SIZE_MAX};

class host_slab_source final : public slab_source {
 public:
  host_slab_source(bool prefault, bool purge) : prefault_(prefault), purge_(purge) {}
  void* map(std::size_t bytes, const char** why) override {
    // The iterations this slab will serve were served by the backend until now
    // (recorded, or passed through while other threads held the slabs): their blocks
    // are free there but their pages resident. Give them back before the slab's pages
    // are faulted in, so peak RSS is not both (one purge per slab made).
    if (purge_) backend::release_free_memory();
    bool over = false;
    void* p = backend::map_slab(bytes, bytes, prefault_,
                                g_host_slab_limit.load(std::memory_order_relaxed), &over);
    if (p == nullptr) *why = over ? slab_limit_reason : "the slab range is full or the system has no memory";
    return p;
  }
  void unmap(void* p, std::size_t bytes) override { backend::unmap_slab(p, bytes); }
  void set_owner(void* p, std::size_t bytes, slab* owner) override {
    backend::set_chunk_owner(p, bytes, owner);
  }

 private:
  bool prefault_;
  bool purge_;
};

}  // namespace

void set_host_slab_limit(std::size_t bytes) {
  g_host_slab_limit.store(bytes, std::memory_order_relaxed);
}

slab_source& host_slabs(bool prefault) {
  static host_slab_source with(true, true), without(false, true);
  return prefault ? static_cast<slab_source&>(with) : without;
}

slab_source& host_probation_slabs() {
  static host_slab_source probation(false, false);
  return probation;
}

namespace {

// The registry of live versions. Lock order: engine mutex, key mutexes, this, pool
// mutexes, the slab range's. A version registers when made (no lock held) and
// unregisters when it deletes itself (after its pool mutex is released).
std::mutex g_registry_mu;
plan_version* g_registry = nullptr;

}  // namespace

plan_version::plan_version() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  registry_next = g_registry;
  if (g_registry != nullptr) g_registry->registry_prev = this;
  g_registry = this;
}

plan_version::~plan_version() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (registry_prev != nullptr) registry_prev->registry_next = registry_next; else g_registry = registry_next;
  if (registry_next != nullptr) registry_next->registry_prev = registry_prev;
}

void lock_versions_for_fork() {
  g_registry_mu.lock();
  for (plan_version* v = g_registry; v != nullptr; v = v->registry_next) v->lock_for_fork();
}

std::size_t plan_versions_alive() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::size_t n = 0;
  for (plan_version* v = g_registry; v != nullptr; v = v->registry_next) ++n;
  return n;
}

void unlock_versions_after_fork() {
  for (plan_version* v = g_registry; v != nullptr; v = v->registry_next) v->unlock_after_fork();
  g_registry_mu.unlock();
}

bool plan_version::claim(std::uint32_t max_slabs, slab_claim* c, const char** why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_) {
    *why = "plan retired";
    return false;
  }
  if (free_ != nullptr) {
    c->s = free_;
    free_ = c->s->next_free;
    c->s->next_free = nullptr;
    return true;
  }
  if (slabs_ >= max_slabs) {
    *why = "REPLAYALLOC_MAX_SLABS slabs of this plan are busy";
    return false;
  }
  ++slabs_;  // reserve the place; made by finish(), outside the lock
  c->s = nullptr;
  return true;
}

slab* plan_version::finish(slab_claim c, void* context, const char** why) {
  slab* s = c.s;
  if (s == nullptr) {
    const std::size_t n_slots = plan.slots.size();
    const std::size_t n_rows = plan.offset_rows.size();
    void* mem = source->map(plan.slab_bytes, why);
    void* state = backend::fallback_calloc((n_slots + 1) * sizeof(std::atomic<std::uint32_t>));
    void* rows = backend::fallback_calloc((n_rows + 1) * sizeof(std::atomic<std::uint32_t>));
    void* obj = backend::fallback_alloc(sizeof(slab), alignof(slab));
    if (mem == nullptr || state == nullptr || rows == nullptr || obj == nullptr) {
      if (mem != nullptr) source->unmap(mem, plan.slab_bytes);
      if (state != nullptr) backend::fallback_free(state);
      if (rows != nullptr) backend::fallback_free(rows);
      if (obj != nullptr) backend::fallback_free(obj);
      if (mem != nullptr) *why = "no memory for a slab's bookkeeping";
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        --slabs_;
        last = retired_ && slabs_ == 0;
      }
      if (last) {
        this->~plan_version();
        backend::fallback_free(this);
      }
      return nullptr;
    }
    s = new (obj) slab;
    s->base = static_cast<std::uint8_t*>(mem);
    s->mapped = plan.slab_bytes;
    s->version = this;
    s->state = static_cast<std::atomic<std::uint32_t>*>(state);
    s->slot_at = static_cast<std::atomic<std::uint32_t>*>(rows);
    source->set_owner(mem, plan.slab_bytes, s);
  }
  source->on_acquire(s, context);
  // A new epoch: every state word from the previous iteration now reads "not handed
  // out". Before the epoch field wraps, clear the words instead.
  std::uint32_t tag = s->live_tag.load(std::memory_order_relaxed) + 4;
  if (tag < 4) {
    for (std::size_t i = 0; i < plan.slots.size(); ++i) s->state[i].store(0, std::memory_order_relaxed);
    tag = 4 | slot_live;
  }
  s->refs.store(0, std::memory_order_relaxed);
  s->live_tag.store(tag, std::memory_order_release);
  return s;
}

void plan_version::release(slab* s) {
  source->on_release(s);
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!retired_) {
      s->next_free = free_;
      free_ = s;
      return;
    }
    destroy(s);
    last = slabs_ == 0;
  }
  if (last) {
    this->~plan_version();
    backend::fallback_free(this);
  }
}

void plan_version::retire() {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_ = true;
    while (free_ != nullptr) {
      slab* s = free_;
      free_ = s->next_free;
      destroy(s);
    }
    last = slabs_ == 0;
  }
  if (last) {
    this->~plan_version();
    backend::fallback_free(this);
  }
}

std::size_t plan_version::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t bytes = 0;
  while (free_ != nullptr) {
    slab* s = free_;
    free_ = s->next_free;
    bytes += s->mapped;
    destroy(s);
  }
  return bytes;
}

std::uint32_t plan_version::slab_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_;
}

void plan_version::destroy(slab* s) {
  source->set_owner(s->base, s->mapped, nullptr);
  source->unmap(s->base, s->mapped);
  backend::fallback_free(s->state);
  backend::fallback_free(s->slot_at);
  s->~slab();
  backend::fallback_free(s);
  --slabs_;
}

}  // namespace replayalloc::detail
