// Note [Tables that grow before they insert] (support/grow_table.h): an Abseil table that
// is grown with grow_for_insert() before each insert is left exactly as it was when the
// growth cannot get its memory, and goes on working once memory is back; an insert after
// grow_for_insert() never asks for memory, deleted slots or not.
#include "support/grow_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>

#include "absl/container/flat_hash_map.h"

namespace replayalloc::detail {
namespace {

// Counts the allocations and throws std::bad_alloc while `failing` is set.
struct alloc_state {
  bool failing = false;
  int allocations = 0;
};
alloc_state g_alloc;

template <class T>
struct failing_allocator {
  using value_type = T;
  failing_allocator() = default;
  template <class U>
  failing_allocator(const failing_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (g_alloc.failing) throw std::bad_alloc();
    ++g_alloc.allocations;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const failing_allocator<U>&) const noexcept {
    return true;
  }
};

using table = absl::flat_hash_map<std::uint64_t, std::uint64_t, absl::Hash<std::uint64_t>, std::equal_to<std::uint64_t>,
                                  failing_allocator<std::pair<const std::uint64_t, std::uint64_t>>>;

bool holds_all(const table& t, std::uint64_t n) {
  if (t.size() != n) return false;
  for (std::uint64_t k = 0; k < n; ++k) {
    const auto it = t.find(k * 7919);
    if (it == t.end() || it->second != k) return false;
  }
  return true;
}

TEST(GrowTable, AGrowthWithoutMemoryLeavesTheTableAsItWas) {
  table t;
  std::uint64_t n = 0;
  int failed = 0;
  while (n < 2000) {
    // Fail every growth once: the table must be as it was, then grow when memory is back.
    const std::size_t capacity = t.bucket_count();
    g_alloc.failing = true;
    try {
      grow_for_insert(t);
    } catch (const std::bad_alloc&) {
      ++failed;
      EXPECT_EQ(t.bucket_count(), capacity);
      ASSERT_TRUE(holds_all(t, n)) << "a failed growth changed the table at " << n << " elements";
    }
    g_alloc.failing = false;
    grow_for_insert(t);
    const int before = g_alloc.allocations;
    g_alloc.failing = true;  // the insert itself must not ask for memory
    t.emplace(n * 7919, n);
    g_alloc.failing = false;
    EXPECT_EQ(g_alloc.allocations, before);
    ++n;
  }
  EXPECT_TRUE(holds_all(t, n));
  EXPECT_GE(failed, 5) << "the test did not fail the table's growths";
}

TEST(GrowTable, InsertsAmongDeletedSlotsAskForNoMemory) {
  table t;
  // A table that keeps ~40 elements while thousands come and go: its deleted slots fill
  // the room absl counts, and it rehashes in place.
  for (std::uint64_t k = 0; k < 20000; ++k) {
    grow_for_insert(t);
    const int before = g_alloc.allocations;
    g_alloc.failing = true;
    t.emplace(k, k);
    g_alloc.failing = false;
    ASSERT_EQ(g_alloc.allocations, before) << "an insert after grow_for_insert allocated, at " << k;
    if (k >= 40) t.erase(k - 40);
  }
  EXPECT_EQ(t.size(), 40u);
  for (std::uint64_t k = 20000 - 40; k < 20000; ++k) EXPECT_EQ(t.at(k), k);
}

}  // namespace
}  // namespace replayalloc::detail
