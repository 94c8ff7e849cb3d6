// The inline path below the minimum with a minimum above the front cache's lists (Note
// [Below the minimum, narrowed], backend/front_classes.cc). Run with
// REPLAYALLOC_MIN_SIZE=1M (tests/CMakeLists.txt): every request under 1 MiB goes from
// the entry point straight to the plain malloc, so the plain malloc must be the front
// cache's malloc that asks the size (64 KiB-1 MiB to its large classes), not the one
// narrowed to its lists, whose class table ends at 64 KiB.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "replayalloc/replayalloc.h"
#include "support/pattern.h"

namespace {

namespace be = replayalloc::detail::backend;
using replayalloc::testing::fill;
using replayalloc::testing::intact;

constexpr std::size_t kMin = std::size_t{1} << 20;  // REPLAYALLOC_MIN_SIZE of this suite

// The front cache is on in this binary (jemalloc's own entry points are linked), not in
// the AddressSanitizer build (no plain entry points there).
bool front_cache_on() {
  replayalloc_free(replayalloc_malloc(64));  // makes the engine
  be::start_fallback_now();  // Note [The fallback made when first needed]
  return be::front_cache_stats().largest != 0;
}

TEST(EntryWideMinimum, NarrowedOnlyWhereEverySizeBelowTheMinimumIsTheListsOwn) {
  if (!front_cache_on()) GTEST_SKIP() << "no front cache in this build";
  EXPECT_EQ(be::front_malloc_below(0), &be::front_malloc);
  EXPECT_NE(be::front_malloc_below(1), &be::front_malloc);
  EXPECT_NE(be::front_malloc_below(4096), &be::front_malloc);
  EXPECT_NE(be::front_malloc_below(65536 + 1), &be::front_malloc);  // 64 KiB: a list's
  EXPECT_EQ(be::front_malloc_below(65536 + 2), &be::front_malloc);
  EXPECT_EQ(be::front_malloc_below(kMin), &be::front_malloc);
  // This suite's minimum keeps the malloc that asks.
  EXPECT_EQ(be::g_plain_malloc.load(), &be::front_malloc);
}

// Every size below the minimum, the lists' and the large classes' above them, served
// on the inline path: all live at once, each written whole and intact when freed. (A
// narrowed malloc would read past the class table for the sizes above 64 KiB: that
// fails here only as what lies there decides; the test above is the one that must.)
TEST(EntryWideMinimum, EverySizeBelowTheMinimumIsServedWhole) {
  if (!front_cache_on()) GTEST_SKIP() << "no front cache in this build";
  const std::size_t sizes[] = {0,     8,      16,     1000,   4096,   65535,  65536,  65537,
                               65552, 81920,  100000, 131072, 262145, 524288, 999999, kMin - 1};
  struct held {
    void* p;
    std::size_t size;
    std::uint64_t tag;
  };
  std::vector<held> live;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
      const std::size_t n = sizes[i];
      void* p = replayalloc_malloc(n);
      ASSERT_NE(p, nullptr) << n << " B";
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n << " B";
      EXPECT_GE(replayalloc_usable_size(p), n) << n << " B";
      const std::uint64_t tag = round * 100 + i;
      if (n > 0) fill(p, n, tag);
      live.push_back({p, n, tag});
    }
  }
  for (const held& h : live) {
    if (h.size > 0) EXPECT_TRUE(intact(h.p, h.size, h.tag)) << h.size << " B block overwritten";
    replayalloc_free(h.p);
  }
}

}  // namespace
