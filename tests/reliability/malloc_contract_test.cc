// The malloc contract of the C API on its edge cases, as glibc documents it: size 0,
// SIZE_MAX, calloc overflow, alignments that are not powers of two or too large,
// realloc to 0 and from NULL, free(NULL), the usable size of every kind of block.
// Every case runs in three places: outside an iteration, inside one being recorded,
// and inside one being replayed (with slab blocks live, and slab blocks as the
// subject where a case takes a block).
//
// Run with REPLAYALLOC_MIN_SIZE=32 (CMakeLists.txt), so blocks below the minimum size
// (served around the plan) are one of the kinds.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "support/block_ledger.h"
#include "support/pattern.h"

namespace {

using replayalloc::detail::backend::in_slab_range;
using replayalloc::testing::block_ledger;
using replayalloc::testing::checked_block;
using replayalloc::testing::fill;
using replayalloc::testing::intact;

constexpr std::size_t k_min_size = 32;  // REPLAYALLOC_MIN_SIZE for this suite

enum class place { outside, recording, replaying };

std::string name_of(place p) {
  return p == place::outside ? "Outside" : p == place::recording ? "Recording" : "Replaying";
}

// The iteration the replaying place warms up and then replays: its blocks come from
// the slab, and stay live while the case runs.
struct warm_block {
  std::size_t size;
  std::size_t align;  // 0: malloc
};
constexpr warm_block k_warm[] = {{4096, 0}, {1000, 0}, {512, 256}, {200, 0}};

std::vector<void*> warm_blocks() {
  std::vector<void*> ps;
  for (const warm_block& w : k_warm) {
    ps.push_back(w.align == 0 ? replayalloc_malloc(w.size) : replayalloc_aligned_alloc(w.align, w.size));
  }
  return ps;
}

class MallocContract : public ::testing::TestWithParam<place> {
 protected:
  void SetUp() override {
    const std::string key = std::string("contract/") +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (GetParam() == place::recording) {
      ASSERT_EQ(replayalloc_iteration_begin(key.c_str()), 0);
      ASSERT_EQ(replayalloc_iteration_recording(), 1);
    } else if (GetParam() == place::replaying) {
      for (int i = 0; i < 3; ++i) {  // two identical recordings make the plan
        ASSERT_EQ(replayalloc_iteration_begin(key.c_str()), 0);
        for (void* p : warm_blocks()) replayalloc_free(p);
        ASSERT_EQ(replayalloc_iteration_end(), 0);
      }
      ASSERT_EQ(replayalloc_iteration_begin(key.c_str()), 0);
      ASSERT_EQ(replayalloc_iteration_recording(), 0);
      const std::vector<void*> ps = warm_blocks();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        ASSERT_TRUE(in_slab_range(ps[i])) << "warm block " << i << " is not from the slab";
        slab_.push_back({ps[i], k_warm[i].size, 7000 + i});
        ledger_.admit(slab_.back(), k_warm[i].align == 0 ? 16 : k_warm[i].align);
      }
    }
  }

  void TearDown() override {
    for (const checked_block& b : slab_) {
      if (b.p == nullptr) continue;
      ledger_.take(b);
      replayalloc_free(b.p);
    }
    if (GetParam() != place::outside) EXPECT_EQ(replayalloc_iteration_end(), 0);
    EXPECT_EQ(ledger_.check_all(), 0u);
    EXPECT_EQ(ledger_.failures(), 0u) << "a block was misaligned, overlapped or overwritten";
  }

  // A block to use as the subject of a case: a slab block when replaying (it leaves
  // slab_, the case owns it), else a fresh malloc.
  checked_block subject(std::size_t fallback_size) {
    for (checked_block& b : slab_) {
      if (b.p != nullptr && b.size >= 64) {
        checked_block s = b;
        b.p = nullptr;
        ledger_.take(s);
        return s;
      }
    }
    return {replayalloc_malloc(fallback_size), fallback_size, 0};
  }

  // Admits a block with all of its usable bytes, which must be at least `size`.
  void admit_usable(void* p, std::size_t size, std::size_t align, std::uint64_t tag) {
    ASSERT_NE(p, nullptr);
    const std::size_t usable = replayalloc_usable_size(p);
    EXPECT_GE(usable, size) << "usable size below the size asked for";
    held_.push_back({p, usable, tag});
    ledger_.admit(held_.back(), align);
  }

  void free_held() {
    for (const checked_block& b : held_) {
      ledger_.take(b);
      replayalloc_free(b.p);
    }
    held_.clear();
  }

  block_ledger ledger_;
  std::vector<checked_block> slab_;  // live slab blocks (replaying)
  std::vector<checked_block> held_;
};

TEST_P(MallocContract, SizeZeroGivesDistinctFreeableBlocks) {
  errno = 0;
  void* a = replayalloc_malloc(0);
  void* b = replayalloc_malloc(0);
  void* c = replayalloc_calloc(0, 5);
  void* d = replayalloc_calloc(5, 0);
  void* e = replayalloc_aligned_alloc(64, 0);
  void* f = replayalloc_realloc(nullptr, 0);  // glibc: a block, as malloc(0)
  void* g = nullptr;
  EXPECT_EQ(replayalloc_posix_memalign(&g, 32, 0), 0);
  EXPECT_EQ(errno, 0);
  for (void* p : {a, b, c, d, e, f, g}) admit_usable(p, 0, 16, 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(e) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(g) % 32, 0u);
  free_held();
}

TEST_P(MallocContract, EveryBlockIsSixteenByteAlignedAndAsLargeAsAskedFor) {
  // glibc: "always a multiple of eight (or sixteen on 64-bit systems)", whatever the
  // size; below, at and above REPLAYALLOC_MIN_SIZE, through every entry point.
  std::uint64_t tag = 1;
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 13)) {
    admit_usable(replayalloc_malloc(n), n, 16, tag++);
    void* z = replayalloc_calloc(1, n);
    ASSERT_NE(z, nullptr);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<unsigned char*>(z)[i], 0) << n;
    admit_usable(z, n, 16, tag++);
    admit_usable(replayalloc_realloc(nullptr, n), n, 16, tag++);
    admit_usable(replayalloc_aligned_alloc(8, n), n, 16, tag++);
  }
  free_held();
}

TEST_P(MallocContract, ImpossibleSizesFailWithEnomem) {
  const std::size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2, std::size_t{PTRDIFF_MAX} + 1,
                              (std::size_t{1} << 47) + 1};
  for (std::size_t n : huge) {
    errno = 0;
    EXPECT_EQ(replayalloc_malloc(n), nullptr) << n;
    EXPECT_EQ(errno, ENOMEM) << "malloc(" << n << ")";
    errno = 0;
    EXPECT_EQ(replayalloc_calloc(1, n), nullptr) << n;
    EXPECT_EQ(errno, ENOMEM) << "calloc(1, " << n << ")";
    errno = 0;
    EXPECT_EQ(replayalloc_aligned_alloc(64, n), nullptr) << n;
    EXPECT_EQ(errno, ENOMEM) << "aligned_alloc(64, " << n << ")";
    errno = 0;
    EXPECT_EQ(replayalloc_realloc(nullptr, n), nullptr) << n;
    EXPECT_EQ(errno, ENOMEM) << "realloc(NULL, " << n << ")";
    void* out = &out;
    errno = 0;
    EXPECT_EQ(replayalloc_posix_memalign(&out, 64, n), ENOMEM) << n;
    EXPECT_EQ(out, &out) << "posix_memalign changed *memptr on failure";
    EXPECT_EQ(errno, 0) << "posix_memalign(64, " << n << ") set errno (posix_memalign(3): it is not set)";
  }
  // calloc: count * size overflows.
  const std::pair<std::size_t, std::size_t> overflow[] = {
      {SIZE_MAX, 2}, {2, SIZE_MAX}, {std::size_t{1} << 32, std::size_t{1} << 32}, {SIZE_MAX, SIZE_MAX}};
  for (auto [count, size] : overflow) {
    errno = 0;
    EXPECT_EQ(replayalloc_calloc(count, size), nullptr) << count << " x " << size;
    EXPECT_EQ(errno, ENOMEM) << "calloc(" << count << ", " << size << ")";
  }
  // The failures left every live block alone, and the allocator still serves.
  admit_usable(replayalloc_malloc(100), 100, 16, 1);
  free_held();
}

TEST_P(MallocContract, AlignmentsArePowersOfTwoUpToAnySize) {
  std::uint64_t tag = 1;
  for (std::size_t a = 1; a <= (std::size_t{8} << 20); a *= 2) {
    const std::size_t n = 100 + a % 1000;
    void* p = replayalloc_aligned_alloc(a, n);
    ASSERT_NE(p, nullptr) << "aligned_alloc(" << a << ")";
    admit_usable(p, n, a < 16 ? 16 : a, tag++);
    if (a >= sizeof(void*)) {
      void* q = nullptr;
      ASSERT_EQ(replayalloc_posix_memalign(&q, a, n), 0) << a;
      admit_usable(q, n, a < 16 ? 16 : a, tag++);
    }
  }
  free_held();
}

TEST_P(MallocContract, BadAlignmentsAreEinval) {
  // aligned_alloc: C17 and the header (glibc >= 2.38): NULL and EINVAL for an
  // alignment that is not a power of two. posix_memalign: EINVAL also for one that is
  // not a multiple of sizeof(void*); it returns the error, leaves errno and *memptr.
  for (std::size_t a : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{48},
                        std::size_t{4097}, SIZE_MAX, SIZE_MAX / 2}) {
    errno = 0;
    EXPECT_EQ(replayalloc_aligned_alloc(a, 64), nullptr) << a;
    EXPECT_EQ(errno, EINVAL) << "aligned_alloc(" << a << ", 64)";
  }
  for (std::size_t a : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{3},
                        std::size_t{24}, SIZE_MAX}) {
    void* out = &out;
    errno = 0;
    EXPECT_EQ(replayalloc_posix_memalign(&out, a, 64), EINVAL) << a;
    EXPECT_EQ(errno, 0) << "posix_memalign(" << a << ") set errno";
    EXPECT_EQ(out, &out);
  }
  // A power of two too large for any block: ENOMEM.
  errno = 0;
  EXPECT_EQ(replayalloc_aligned_alloc(std::size_t{1} << 62, 64), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST_P(MallocContract, ReallocFromNullToZeroAndOfSlabBlocks) {
  // realloc(NULL, n) is malloc(n).
  void* p = replayalloc_realloc(nullptr, 300);
  ASSERT_NE(p, nullptr);
  fill(p, 300, 5);
  // Grow, shrink, same size: the common prefix moves with the block.
  for (std::size_t n : {std::size_t{5000}, std::size_t{40}, std::size_t{40}, std::size_t{70000},
                        std::size_t{300}}) {
    const std::size_t keep = std::min<std::size_t>(n, 300);
    void* q = replayalloc_realloc(p, n);
    ASSERT_NE(q, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 16, 0u);
    EXPECT_TRUE(intact(q, std::min<std::size_t>(keep, 40), 5)) << "realloc to " << n << " lost bytes";
    EXPECT_GE(replayalloc_usable_size(q), n);
    p = q;
  }
  // realloc(p, SIZE_MAX): NULL, ENOMEM, p untouched and still the caller's.
  errno = 0;
  EXPECT_EQ(replayalloc_realloc(p, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_TRUE(intact(p, 40, 5));
  // realloc(p, 0): glibc frees p and returns NULL.
  EXPECT_EQ(replayalloc_realloc(p, 0), nullptr);

  // The same on the subject block (a slab block when replaying).
  checked_block s = subject(1000);
  ASSERT_NE(s.p, nullptr);
  fill(s.p, s.size, 9);
  errno = 0;
  EXPECT_EQ(replayalloc_realloc(s.p, SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_TRUE(intact(s.p, s.size, 9)) << "a failed realloc changed the block";
  void* grown = replayalloc_realloc(s.p, s.size * 3);
  ASSERT_NE(grown, nullptr);
  EXPECT_TRUE(intact(grown, s.size, 9)) << "realloc lost the block's bytes";
  void* shrunk = replayalloc_realloc(grown, s.size / 2);
  ASSERT_NE(shrunk, nullptr);
  EXPECT_TRUE(intact(shrunk, s.size / 2, 9));
  EXPECT_EQ(replayalloc_realloc(shrunk, 0), nullptr);

  checked_block t = subject(2000);
  ASSERT_NE(t.p, nullptr);
  EXPECT_EQ(replayalloc_realloc(t.p, 0), nullptr);  // frees it, slab block or not
}

TEST_P(MallocContract, FreeOfNullDoesNothing) {
  errno = 0;
  replayalloc_free(nullptr);
  replayalloc_free_sized(nullptr, 0);
  replayalloc_free_sized(nullptr, 100);
  EXPECT_EQ(errno, 0);
  EXPECT_EQ(replayalloc_usable_size(nullptr), 0u);
}

TEST_P(MallocContract, UsableSizeOfEveryKindOfBlock) {
  struct kind {
    const char* name;
    void* p;
    std::size_t size;
    std::size_t align;
  };
  std::vector<kind> kinds = {
      {"fallback (a size no plan has)", replayalloc_malloc(12345), 12345, 16},
      {"below REPLAYALLOC_MIN_SIZE", replayalloc_malloc(k_min_size - 7), k_min_size - 7, 16},
      {"zero bytes", replayalloc_malloc(0), 0, 16},
      {"calloc", replayalloc_calloc(7, 9), 63, 16},
      {"aligned 4096", replayalloc_aligned_alloc(4096, 100), 100, 4096},
      {"aligned beyond a slot (4 MiB)", replayalloc_aligned_alloc(std::size_t{4} << 20, 100), 100,
       std::size_t{4} << 20},
      {"large (8 MiB)", replayalloc_malloc(std::size_t{8} << 20), std::size_t{8} << 20, 16},
  };
  std::uint64_t tag = 1;
  for (const kind& k : kinds) {
    SCOPED_TRACE(k.name);
    admit_usable(k.p, k.size, k.align, tag++);
  }
  // Slab blocks (replaying): at least their size, and every usable byte is theirs.
  for (checked_block& b : slab_) {
    if (b.p == nullptr) continue;
    SCOPED_TRACE("slab block");
    checked_block s = b;
    b.p = nullptr;
    ledger_.take(s);
    admit_usable(s.p, s.size, 16, tag++);
  }
  free_held();
}

INSTANTIATE_TEST_SUITE_P(Places, MallocContract,
                         ::testing::Values(place::outside, place::recording, place::replaying),
                         [](const ::testing::TestParamInfo<place>& i) { return name_of(i.param); });

}  // namespace
