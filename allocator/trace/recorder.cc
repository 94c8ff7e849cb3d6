#include "trace/recorder.h"

#include "support/grow_table.h"

namespace replayalloc::detail {

void trace_recorder::begin(std::uint32_t thread, std::uintptr_t owner) {
  if (owner != owner_ || owner == 0) hints_.clear();
  owner_ = owner;
  allocs_.clear();
  live_.clear();
  filter_.clear();
  clock_ = 0;
  thread_ = thread;
}

void trace_recorder::record_alloc(const void* p, std::uint64_t size, std::uint32_t align,
                                  std::uint32_t op) {
  // Note [A recording handed over, not copied]: the last recording's count and an
  // eighth more, at the first allocation (inside the engine's guard, as every one is).
  if (allocs_.capacity() == 0 && last_size_ != 0) allocs_.reserve(last_size_ + last_size_ / 8);
  const auto id = static_cast<std::uint32_t>(allocs_.size());
  trace_allocation a;
  a.id = id;
  a.size = size;
  a.align = align;
  a.op = op;
  a.alloc_at = clock_++;
  a.thread = thread_;
  allocs_.push_back(a);
  // If p is already in the map, another thread freed the earlier block and the
  // backend reused its address: the earlier block stays "outliving".
  grow_for_insert(live_);  // Note [Tables that grow before they insert]
  if (const auto [it, fresh] = live_.try_emplace(p, id); fresh) {
    filter_.add(p);
  } else {
    it->second = id;
  }
}

bool trace_recorder::record_free(const void* p) {
  const auto it = live_.find(p);
  if (it == live_.end()) return false;
  allocs_[it->second].free_at = clock_++;
  live_.erase(it);
  filter_.remove(p);
  return true;
}

}  // namespace replayalloc::detail
