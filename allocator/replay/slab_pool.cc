#include "replay/slab_pool.h"

#include <new>

#include "backend/slab_range.h"
#include "support/log.h"

namespace replayalloc::detail {

slab* plan_version::acquire(std::uint32_t max_slabs, bool prefault, const char** why) {
  slab* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (retired_) {
      *why = "plan retired";
      return nullptr;
    }
    if (free_ != nullptr) {
      s = free_;
      free_ = s->next_free;
      s->next_free = nullptr;
    } else if (slabs_ >= max_slabs) {
      *why = "REPLAYALLOC_MAX_SLABS slabs of this plan are busy";
      return nullptr;
    } else {
      ++slabs_;  // reserve the place; made below, outside the lock
    }
  }
  if (s == nullptr) {
    const std::size_t n_slots = plan.slots.size();
    const std::size_t n_rows = plan.offset_rows.size();
    void* mem = backend::map_slab(plan.slab_bytes, plan.slab_bytes, prefault);
    void* state = backend::fallback_calloc((n_slots + 1) * sizeof(std::atomic<std::uint32_t>));
    void* rows = backend::fallback_calloc((n_rows + 1) * sizeof(std::atomic<std::uint32_t>));
    void* obj = backend::fallback_alloc(sizeof(slab), alignof(slab));
    if (mem == nullptr || state == nullptr || rows == nullptr || obj == nullptr) {
      if (mem != nullptr) backend::unmap_slab(mem, plan.slab_bytes);
      if (state != nullptr) backend::fallback_free(state);
      if (rows != nullptr) backend::fallback_free(rows);
      if (obj != nullptr) backend::fallback_free(obj);
      std::lock_guard<std::mutex> lock(mu_);
      --slabs_;
      *why = "no memory for a new slab";
      return nullptr;
    }
    s = new (obj) slab;
    s->base = static_cast<std::uint8_t*>(mem);
    s->mapped = plan.slab_bytes;
    s->version = this;
    s->state = static_cast<std::atomic<std::uint32_t>*>(state);
    s->slot_at = static_cast<std::atomic<std::uint32_t>*>(rows);
    backend::set_chunk_owner(mem, plan.slab_bytes, s);
  }
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

std::uint32_t plan_version::slab_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_;
}

void plan_version::destroy(slab* s) {
  backend::set_chunk_owner(s->base, s->mapped, nullptr);
  backend::unmap_slab(s->base, s->mapped);
  backend::fallback_free(s->state);
  backend::fallback_free(s->slot_at);
  s->~slab();
  backend::fallback_free(s);
  --slabs_;
}

}  // namespace replayalloc::detail
