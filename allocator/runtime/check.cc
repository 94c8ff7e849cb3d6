// The shadow record of Note [Check mode].
#include "runtime/check.h"

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "runtime/thread_state.h"
#include "support/log.h"
#include "support/reentry.h"

namespace replayalloc::detail::check {

std::atomic<bool> g_enabled{false};

namespace {

struct block {
  std::size_t size;
  std::uint32_t op;
  std::uint32_t thread;
  bool in_slab;
};

template <class K, class V>
using imap = absl::btree_map<K, V, std::less<K>, backend::internal_allocator<std::pair<const K, V>>>;
template <class K, class V>
using ihash = absl::flat_hash_map<K, V, absl::Hash<K>, std::equal_to<K>,
                                  backend::internal_allocator<std::pair<const K, V>>>;

// Recently freed blocks, to tell a double free from a wild one: forgotten in bulk
// when it grows past this many.
constexpr std::size_t freed_memory = std::size_t{1} << 16;

struct shadow {
  std::mutex mu;
  imap<std::uintptr_t, block> live;
  ihash<std::uintptr_t, block> freed;
};

const char* (*g_op_name)(std::uint32_t) = nullptr;

shadow& map() {
  static shadow* s = [] {
    reentry_guard guard;
    void* mem = backend::fallback_alloc(sizeof(shadow), alignof(shadow));
    if (mem == nullptr) std::abort();
    return new (mem) shadow;
  }();
  return *s;
}

const char* name(std::uint32_t op) {
  const char* n = g_op_name != nullptr ? g_op_name(op) : nullptr;
  return n != nullptr ? n : "unknown";
}

[[noreturn]] void fail() {
  REPLAYALLOC_LOG(error, "REPLAYALLOC_CHECK: aborting");
  std::abort();
}

}  // namespace

void enable(const char* (*op_name)(std::uint32_t)) {
  g_op_name = op_name;
  map();
  g_enabled.store(true, std::memory_order_release);
}


void on_alloc(const void* p, std::size_t size, std::uint32_t op, std::uint32_t thread,
              bool in_slab) {
  reentry_guard guard;
  shadow& s = map();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t n = size == 0 ? 1 : size;
  std::lock_guard<std::mutex> lock(s.mu);
  // The live block starting at or after p, and the one before it.
  auto it = s.live.lower_bound(a);
  const block* hit = nullptr;
  std::uintptr_t at = 0;
  if (it != s.live.end() && it->first < a + n) {
    hit = &it->second;
    at = it->first;
  } else if (it != s.live.begin()) {
    auto prev = std::prev(it);
    if (prev->first + (prev->second.size == 0 ? 1 : prev->second.size) > a) {
      hit = &prev->second;
      at = prev->first;
    }
  }
  if (hit != nullptr) {
    REPLAYALLOC_LOG(error,
                    "REPLAYALLOC_CHECK: %s hand-out of %zu bytes at %p (op '%s', thread %u) "
                    "overlaps the live %s block of %zu bytes at %p (op '%s', thread %u): memory "
                    "still in use handed out again",
                    in_slab ? "slab" : "backend", size, p, name(op), thread,
                    hit->in_slab ? "slab" : "backend", hit->size, reinterpret_cast<void*>(at),
                    name(hit->op), hit->thread);
    fail();
  }
  s.live.emplace(a, block{size, op, thread, in_slab});
  s.freed.erase(a);
}

void on_free(const void* p, std::uint32_t thread) {
  reentry_guard guard;
  shadow& s = map();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(a);
  if (it != s.live.end()) {
    if (s.freed.size() >= freed_memory) s.freed.clear();
    s.freed.emplace(a, it->second);
    s.live.erase(it);
    return;
  }
  auto old = s.freed.find(a);
  if (old != s.freed.end()) {
    REPLAYALLOC_LOG(error,
                    "REPLAYALLOC_CHECK: double free of %p on thread %u: the %s block of %zu bytes "
                    "there (op '%s', allocated on thread %u) was freed already",
                    p, thread, old->second.in_slab ? "slab" : "backend", old->second.size,
                    name(old->second.op), old->second.thread);
  } else {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_CHECK: free of %p on thread %u, which was never handed out",
                    p, thread);
  }
  fail();
}

void lock_for_fork() {
  if (enabled()) map().mu.lock();
}

void unlock_after_fork() {
  if (enabled()) map().mu.unlock();
}

}  // namespace replayalloc::detail::check
