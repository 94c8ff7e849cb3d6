#include "replay/slab_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "support/log.h"

namespace replayalloc::detail {

namespace {

std::atomic<std::size_t> g_host_slab_limit{SIZE_MAX};

// A slot the hit never serves: no request fits it, no free cursor reaches its `need`.
void make_unservable(slot_record& r) {
  r.least = unservable_least;
  r.span = 0;
  r.need = UINTPTR_MAX;
}

// The slab's replay state (slot_record.h), resolved to its base.
void fill_records(const compiled_plan& plan, slab* s) {
  const std::size_t n = plan.slots.size();
  const std::uint32_t m = s->free_count;
  free_entry* first = s->first_frees();
  free_entry* second = s->second_frees();
  for (std::size_t i = 0; i <= n; ++i) {
    slot_record* r = new (&s->recs[i]) slot_record{};
    r->index = static_cast<std::uint32_t>(i);
    r->state.store(0, std::memory_order_relaxed);
    make_unservable(*r);
    r->ptr = nullptr;
    if (i == n) continue;  // the end: serves nothing
    const slot& sl = plan.slots[i];
    if (sl.offset == not_in_slab) continue;
    r->ptr = s->base + sl.offset;
    // A block the malloc family hands out is at least malloc_align aligned; a slot that
    // is not (a plan file may ask for less) is left to the slow path. So is a slot that
    // serves no size at all: smaller than the minimum size, which raised its least above
    // it (a plan made with a lower REPLAYALLOC_MIN_SIZE); its span would wrap.
    if (sl.offset % malloc_align != 0 || sl.need_rank == no_rank || sl.least > sl.size) continue;
    r->least = sl.least;
    r->span = sl.size - sl.least;
    r->need = sl.need_rank == 0 ? 0 : reinterpret_cast<std::uintptr_t>(first + sl.need_rank);
  }
  // Sentinels: an address no block has (odd), and the end record (never live).
  static constexpr std::uintptr_t no_block = 1;
  for (free_entry* copy : {first, second}) {
    for (std::uint32_t k = 0; k < m; ++k) {
      const std::uint32_t i = plan.free_order[k];
      copy[k] = free_entry{s->recs[i].ptr, &s->recs[i]};
    }
    copy[m] = free_entry{reinterpret_cast<const std::uint8_t*>(no_block), &s->recs[n]};
  }
}

class host_slab_source final : public slab_source {
 public:
  host_slab_source(bool prefault, bool purge) : prefault_(prefault), purge_(purge) {}
  void* map(std::size_t bytes, const char** why) override {
    // The iterations this slab will serve were served by the backend until now
    // (recorded, or passed through while other threads held the slabs): their blocks
    // are free there but their pages resident. Give them back before the slab's pages
    // are faulted in, so peak RSS is not both (one purge per slab made, when those
    // pages are most of what the backend holds free: backend.h).
    if (purge_) backend::release_free_memory(bytes);
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
  bool makes_ahead() const override { return prefault_ && purge_; }

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

bool plan_version::claim_first(slab_claim* c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_ || slabs_ != 0) return false;
  ++slabs_;  // as claim(): the place of a new slab, made by stock()
  c->s = nullptr;
  return true;
}

bool plan_version::stock(slab_claim c) {
  const char* why = "";
  slab* s = finish(c, nullptr, &why);
  if (s == nullptr) return false;
  release(s);  // into the pool, or unmapped if the version was retired meanwhile
  return true;
}

slab* plan_version::finish(slab_claim c, void* context, const char** why) {
  slab* s = c.s;
  if (s == nullptr) {
    const std::size_t n_slots = plan.slots.size();
    const std::size_t n_frees = plan.free_order.size();
    void* mem = source->map(plan.slab_bytes, why);
    void* recs = backend::fallback_alloc((n_slots + 1) * sizeof(slot_record), alignof(slot_record));
    void* frees = backend::fallback_alloc(2 * (n_frees + 1) * sizeof(free_entry), alignof(free_entry));
    void* obj = backend::fallback_alloc(sizeof(slab), alignof(slab));
    if (mem == nullptr || recs == nullptr || frees == nullptr || obj == nullptr) {
      if (mem != nullptr) source->unmap(mem, plan.slab_bytes);
      if (recs != nullptr) backend::fallback_free(recs);
      if (frees != nullptr) backend::fallback_free(frees);
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
    s->recs = static_cast<slot_record*>(recs);
    s->frees = static_cast<free_entry*>(frees);
    s->free_count = static_cast<std::uint32_t>(n_frees);
    fill_records(plan, s);
    source->set_owner(mem, plan.slab_bytes, s);
  }
  source->on_acquire(s, context);
  // Every slot reads "not reached" again. No other thread reads these words now: the
  // slab came back drained (every block freed), and its next block is handed out
  // after this returns.
  for (std::size_t i = 0; i < plan.slots.size(); ++i) {
    s->recs[i].state.store(slot_unreached, std::memory_order_relaxed);
  }
  s->refs.store(0, std::memory_order_relaxed);
  return s;
}

slot_record* slab::live_block_at(std::uint64_t offset, bool* planned) const {
  const compiled_plan& plan = version->plan;
  const auto row = plan.offset_rows.find(offset);
  if (planned != nullptr) *planned = row != plan.offset_rows.end();
  if (row == plan.offset_rows.end()) return nullptr;
  const std::uint32_t* b = plan.row_slots.data() + plan.row_begin[row->second];
  const std::uint32_t* e = plan.row_slots.data() + plan.row_begin[row->second + 1];
  const std::uint32_t* it = std::partition_point(
      b, e, [&](std::uint32_t i) { return recs[i].state.load(std::memory_order_acquire) == slot_dead; });
  return it == e ? nullptr : &recs[*it];
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
  backend::fallback_free(s->recs);
  backend::fallback_free(s->frees);
  s->~slab();
  backend::fallback_free(s);
  --slabs_;
}

}  // namespace replayalloc::detail
