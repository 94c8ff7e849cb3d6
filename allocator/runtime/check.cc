// The shadow record of Note [Check mode].
#include "runtime/check.h"

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <new>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "runtime/thread_state.h"
#include "support/grow_table.h"
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
  // Note [Check mode under memory pressure]: some block handed out is not in `live`.
  bool incomplete = false;
};

const char* (*g_op_name)(std::uint32_t) = nullptr;

shadow* g_shadow = nullptr;  // made by enable(), before any block is handed out

shadow& map() { return *g_shadow; }

const char* name(std::uint32_t op) {
  const char* n = g_op_name != nullptr ? g_op_name(op) : nullptr;
  return n != nullptr ? n : "unknown";
}

[[noreturn]] void fail() {
  REPLAYALLOC_LOG(error, "REPLAYALLOC_CHECK: aborting");
  std::abort();
}

// Note [Check mode under memory pressure]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The shadow record takes memory as the program's live blocks grow (the tree of live
// blocks, the table of freed ones), from the backend, which may run out. Neither may
// stop the program (the allocation interface never throws; a free that throws is
// std::terminate) nor lose a block: where the tree cannot enter a block, the block is
// served all the same, unrecorded, and the record is incomplete from then on (one
// error says so): a free of a pointer it does not know may be of such a block, and is
// no longer reported, while a hand-out over a block it knows and a double free it
// remembers still are. Abseil's btree allocates each node before it changes the tree,
// so an insert that throws leaves it whole; the table of freed blocks grows before it
// inserts (Note [Tables that grow before they insert]), and a freed block it cannot
// remember is forgotten, as it forgets them in bulk anyway (a double free of it is then
// reported as a free of a pointer never handed out, or not at all once incomplete).
void lost(shadow& s, const void* p, std::size_t size) {
  if (!s.incomplete) {
    REPLAYALLOC_LOG(error, "REPLAYALLOC_CHECK: out of memory for the shadow record at the block of %zu bytes at %p "
                    "(%zu blocks live in it): that block and any other it cannot enter are served unchecked, and "
                    "from now on a free of a pointer it does not know is not reported",
                    size, p, s.live.size());
  }
  s.incomplete = true;
}

}  // namespace

bool enable(const char* (*op_name)(std::uint32_t)) {
  g_op_name = op_name;
  if (g_shadow == nullptr) {
    reentry_guard guard;
    void* mem = backend::fallback_alloc(sizeof(shadow), alignof(shadow));
    if (mem == nullptr) {
      REPLAYALLOC_LOG(error, "REPLAYALLOC_CHECK=1: no memory for the shadow record (%zu bytes); the allocator runs "
                      "unchecked", sizeof(shadow));
      return false;
    }
    g_shadow = new (mem) shadow;
  }
  g_enabled.store(true, std::memory_order_release);
  return true;
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
  s.freed.erase(a);
  try {
    s.live.emplace(a, block{size, op, thread, in_slab});
  } catch (const std::bad_alloc&) {
    lost(s, p, size);  // Note [Check mode under memory pressure]
  }
}

void on_free(const void* p, std::uint32_t thread) {
  reentry_guard guard;
  shadow& s = map();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(a);
  if (it != s.live.end()) {
    if (s.freed.size() >= freed_memory) s.freed.clear();
    try {
      grow_for_insert(s.freed);  // Note [Check mode under memory pressure]
      s.freed.emplace(a, it->second);
    } catch (const std::bad_alloc&) {
      s.freed.erase(a);  // forgotten: its older record, if any, is not this block
    }
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
    // Note [Check mode under memory pressure]: perhaps a block the record could not enter.
    if (s.incomplete) return;
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
