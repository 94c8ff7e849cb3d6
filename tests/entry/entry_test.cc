// The entry points' shortcuts (runtime/entry.h, engine.h: alloc_below_min; the
// plain-free gate of thread_state.h and free_backend_filtered; backend: jemalloc's own
// malloc/free, release_free_memory; the live filters of recordings and auto mode). Run with REPLAYALLOC_MIN_SIZE=1K (tests/CMakeLists.txt): the
// shortcuts must serve exactly what the engine's slow path served, count it the same
// way, and never disturb a replay.
#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "backend/front_inline.h"
#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/auto_detect.h"
#include "runtime/engine.h"
#include "runtime/shortcuts.h"
#include "runtime/thread_state.h"
#include "support/live_filter.h"
#include "support/pattern.h"
#include "trace/recorder.h"

namespace {

using replayalloc::detail::backend::in_slab_range;
using replayalloc::testing::fill;
using replayalloc::testing::intact;

constexpr std::size_t kMin = 1024;  // REPLAYALLOC_MIN_SIZE of this suite

struct held {
  void* p;
  std::size_t size;
  std::uint64_t tag;
};

// One iteration of `key`: planned-size blocks interleaved with small ones (below the
// minimum), all filled and checked; returns how many planned-size blocks were in a slab.
int mixed_iteration(const char* key, std::uint64_t salt, int* small_in_slab) {
  replayalloc::Iteration it(key);
  // 0 and 8: under malloc_align, which the plain malloc serves aligned to it.
  const std::size_t sizes[] = {64, 8192, 100, 16384, 512, 0, 8, 24576, 1000};
  std::vector<held> live;
  int big_in_slab = 0;
  for (std::size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const std::size_t n = sizes[i];
    void* p = replayalloc_malloc(n);
    EXPECT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n << " B";
    if (n >= kMin) {
      big_in_slab += in_slab_range(p) ? 1 : 0;
    } else if (in_slab_range(p)) {
      ++*small_in_slab;
    }
    if (n > 0) fill(p, n, salt * 100 + i);
    live.push_back({p, n, salt * 100 + i});
  }
  for (const held& h : live) {
    if (h.size > 0) EXPECT_TRUE(intact(h.p, h.size, h.tag)) << h.size << " B block overwritten";
    replayalloc_free(h.p);
  }
  return big_in_slab;
}

// Requests below the minimum never touch the plan: the planned blocks around them
// replay, they come from the backend, 16-byte aligned, and nothing counts them (Note
// [Below the minimum, inline]): not as requests, pass-through or frees (`frees`
// counts the slab's blocks).
TEST(Entry, BelowMinimumBypassesThePlanWithoutDisturbingIt) {
  int small_in_slab = 0;
  int replayed = 0;
  for (int i = 0; i < 8; ++i) replayed = mixed_iteration("entry/mixed", i, &small_in_slab);
  ASSERT_EQ(replayed, 3) << "the planned blocks between small ones did not replay";
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mixed_iteration("entry/mixed", 100 + i, &small_in_slab), 3);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(small_in_slab, 0) << "a request below the minimum was served from a slab";
  EXPECT_EQ(after.slab_hits - before.slab_hits, 4u * 3);
  EXPECT_EQ(after.allocations - before.allocations, 4u * 3) << "only the planned blocks are counted";
  EXPECT_EQ(after.below_min_size - before.below_min_size, 0u);
  EXPECT_EQ(after.passthrough - before.passthrough, 0u);
  EXPECT_EQ(after.fallbacks - before.fallbacks, 0u);
  EXPECT_EQ(after.frees - before.frees, 4u * 3);
}

// Outside any iteration: the same shortcut, uncounted, on the inline path (under 16
// bytes too) and calloc's; calloc zeroes.
TEST(Entry, BelowMinimumOutsideIterationsAndCalloc) {
  const replayalloc::Stats before = replayalloc::stats();
  std::vector<void*> blocks;
  for (std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{16}, std::size_t{200}, kMin - 1}) {
    void* p = replayalloc_malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n << " B";
    std::memset(p, 0xab, n);
    blocks.push_back(p);
    auto* z = static_cast<unsigned char*>(replayalloc_calloc(n, 1));
    ASSERT_NE(z, nullptr);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(z[i], 0) << "calloc(" << n << ") byte " << i;
    blocks.push_back(z);
  }
  for (void* p : blocks) replayalloc_free(p);
  // Note [Small callocs zeroed by memset]: a block freed dirty and handed out again by
  // calloc (the front cache's lists are last in, first out) comes back zeroed.
  int reused = 0;
  for (std::size_t n : {std::size_t{1}, std::size_t{24}, std::size_t{64}, std::size_t{200}, kMin - 1}) {
    void* d = replayalloc_malloc(n);
    ASSERT_NE(d, nullptr);
    std::memset(d, 0xcd, n);
    replayalloc_free(d);
    auto* z = static_cast<unsigned char*>(replayalloc_calloc(1, n));
    ASSERT_NE(z, nullptr);
    reused += z == d;
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(z[i], 0) << "calloc(" << n << ") of a dirty block, byte " << i;
    replayalloc_free(z);
  }
  EXPECT_GT(reused, 0) << "no calloc took a block freed dirty just before (nothing tested)";
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.allocations - before.allocations, 0u) << "a request below the minimum was counted";
  EXPECT_EQ(after.below_min_size - before.below_min_size, 0u);
  EXPECT_EQ(after.frees - before.frees, 0u) << "a backend block's free was counted";
}

// One ladder (runtime/host_slow_path.cc): calloc and an alignment beyond a slot's climb
// the rungs malloc climbs. calloc outside iterations passes through, counted as malloc's
// pass is; inside a replayed iteration its slot's bytes come zeroed, though the
// iteration before wrote them, and so does a miss's backend block; a request aligned
// beyond max_slot_align is the backend's, aligned, uncounted, and leaves the replay
// around it undisturbed.
TEST(Entry, CallocAndOverAlignedRequestsClimbTheOneLadder) {
  std::thread([] {
    constexpr std::size_t kBig = 8192;
    constexpr std::size_t kHuge = 2 * replayalloc::detail::max_slot_align;
    auto zeroed = [](const void* p, std::size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < n; ++i) {
        if (b[i] != 0) return false;
      }
      return true;
    };
    // Outside iterations: registers the thread, then one calloc passes through.
    replayalloc_free(replayalloc_malloc(kBig));
    void* dirty = replayalloc_malloc(kBig);
    std::memset(dirty, 0xab, kBig);
    replayalloc_free(dirty);
    replayalloc::Stats before = replayalloc::stats();
    auto* z = static_cast<unsigned char*>(replayalloc_calloc(kBig / 16, 16));
    ASSERT_NE(z, nullptr);
    EXPECT_TRUE(zeroed(z, kBig)) << "calloc passed through returned non-zero bytes";
    replayalloc::Stats after = replayalloc::stats();
    EXPECT_EQ(after.passthrough - before.passthrough, 1u);
    EXPECT_EQ(after.allocations - before.allocations, 1u);
    EXPECT_EQ(after.bytes_from_backend - before.bytes_from_backend, kBig);
    replayalloc_free(z);
    // Iterations: calloc'd blocks the plan serves, each written over before its free.
    int zero_failures = 0;
    int in_slab = 0;
    std::uint64_t hits_last = 0;
    for (int i = 0; i < 6; ++i) {
      before = replayalloc::stats();
      void* huge = nullptr;
      {
        replayalloc::Iteration it("ladder/calloc");
        void* a = replayalloc_calloc(1, kBig);
        void* b = replayalloc_calloc(2, kBig);
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        zero_failures += zeroed(a, kBig) ? 0 : 1;
        zero_failures += zeroed(b, 2 * kBig) ? 0 : 1;
        if (i >= 4) {
          in_slab += (in_slab_range(a) ? 1 : 0) + (in_slab_range(b) ? 1 : 0);
          // Beyond the recording: a miss, the backend's block, zeroed.
          void* extra = replayalloc_calloc(4, kBig);
          ASSERT_NE(extra, nullptr);
          EXPECT_FALSE(in_slab_range(extra));
          EXPECT_TRUE(zeroed(extra, 4 * kBig)) << "a replay's miss returned non-zero bytes";
          std::memset(extra, 0xcd, 4 * kBig);
          replayalloc_free(extra);
          // Aligned beyond a slot: the backend's, between the replayed blocks.
          ASSERT_EQ(replayalloc_posix_memalign(&huge, kHuge, kBig), 0);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(huge) % kHuge, 0u);
          EXPECT_FALSE(in_slab_range(huge));
        }
        std::memset(a, 0xab, kBig);
        std::memset(b, 0xab, 2 * kBig);
        replayalloc_free(b);
        replayalloc_free(a);
      }
      after = replayalloc::stats();
      if (i >= 4) {
        hits_last = after.slab_hits - before.slab_hits;
        // The two slots and the miss (a fallback); the aligned request is not counted.
        EXPECT_EQ(after.fallbacks - before.fallbacks, 1u);
        EXPECT_EQ(after.allocations - before.allocations, 3u);
        replayalloc_free(huge);
      }
    }
    EXPECT_EQ(zero_failures, 0) << "calloc returned a block with non-zero bytes";
    EXPECT_EQ(in_slab, 4) << "the replayed iterations' calloc'd blocks did not come from the slab";
    EXPECT_EQ(hits_last, 2u);
  }).join();
}

// Note [Passes granted ahead] (runtime/shortcuts.h): outside iterations, a thread's
// first request at or above the minimum grants the ones after it to the inline entry
// point, which serves them from the backend and counts them as the slow path did; the
// engine takes them back at its door (here: the statistics, an iteration's begin), so
// that an iteration records and replays every request as before, and a request the
// backend cannot serve still fails with ENOMEM, uncounted.
TEST(Entry, PassesGrantedAheadServeUntilTheEnginesDoorAndNoFurther) {
  std::thread([] {
    // Read afresh each time (a reference kept across calls confuses UBSan's checks).
    auto pass_left = [] { return replayalloc::detail::tls_state.pass_left; };
    const std::size_t sizes[] = {kMin, 4096, 70000, 4096};
    auto churn = [&](std::uint64_t salt) {
      std::vector<held> live;
      for (std::size_t n : sizes) {
        void* p = replayalloc_malloc(n);
        EXPECT_NE(p, nullptr);
        fill(p, n, salt + n);
        live.push_back({p, n, salt + n});
      }
      for (const held& h : live) {
        EXPECT_TRUE(intact(h.p, h.size, h.tag)) << h.size << " B overwritten";
        replayalloc_free(h.p);
      }
    };
    churn(0);  // registers the thread (the engine's way, which may make the engine), then passes
    // Granted only where the backend has a plain malloc (not under AddressSanitizer):
    // elsewhere nothing is granted, and the rest holds the same.
    const bool plain = replayalloc::detail::backend::g_plain_malloc.load() != nullptr;
    ASSERT_EQ(pass_left() != 0, plain) << "a pass-through outside iterations granted nothing (or granted without a plain malloc)";
    const replayalloc::Stats before = replayalloc::stats();
    ASSERT_EQ(pass_left(), 0u) << "the statistics (the engine) left passes granted";
    churn(1);
    EXPECT_EQ(pass_left(), plain ? UINT64_MAX - 3 : 0) << "the first pass-through did not grant the others";
    const replayalloc::Stats outside = replayalloc::stats();
    EXPECT_EQ(pass_left(), 0u) << "entering the engine did not take the passes back";
    EXPECT_EQ(outside.passthrough - before.passthrough, 4u) << "a pass granted ahead was not counted";
    EXPECT_EQ(outside.allocations - before.allocations, 4u);
    EXPECT_EQ(outside.bytes_from_backend - before.bytes_from_backend, kMin + 4096 + 70000 + 4096);
    // An iteration records and replays every request: no pass survives its begin.
    int in_slab = 0;
    for (int i = 0; i < 4; ++i) {
      churn(1);  // passes again between iterations
      {
        replayalloc::Iteration it("passes-granted-ahead");
        EXPECT_EQ(pass_left(), 0u) << "a pass survived the iteration's begin";
        std::vector<held> live;
        for (std::size_t n : sizes) {
          void* p = replayalloc_malloc(n);
          ASSERT_NE(p, nullptr);
          if (i >= 2) in_slab += in_slab_range(p) ? 1 : 0;
          fill(p, n, 100 + i + n);
          live.push_back({p, n, 100 + i + n});
        }
        EXPECT_EQ(pass_left(), 0u) << "an iteration's request was granted passes";
        for (const held& h : live) {
          EXPECT_TRUE(intact(h.p, h.size, h.tag));
          replayalloc_free(h.p);
        }
      }
    }
    EXPECT_EQ(in_slab, 8) << "the iterations after the recording were not served from the slab";
    // A request the backend cannot serve (128 TiB, the largest the engine passes on;
    // beyond pass_inline_max, so the slow path's): it says so and counts nothing; it
    // takes one pass, as the slow path's count of a rest always did.
    churn(2);
    const std::uint64_t left = pass_left();
    const std::uint64_t passed = replayalloc::detail::tls_state.host.passthrough.load();
    errno = 0;
    EXPECT_EQ(replayalloc_malloc(std::size_t{1} << 47), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(replayalloc::detail::tls_state.host.passthrough.load(), passed) << "a request the backend failed was counted";
    EXPECT_EQ(pass_left(), plain ? left - 1 : 0);
  }).join();
}

// Note [Aligned requests in the front cache]: an aligned request at or above the minimum
// with passes granted takes one (inline where the front cache serves it, its class
// aligned as asked; the slow path elsewhere: off, or AddressSanitizer's build), counted as
// a malloc's pass is: the statistics see every one, and its block is aligned and keeps its
// bytes. (The inline way's cost is perf.instruction_counts' passed_memalign_4096.)
TEST(Entry, AlignedPassesGrantedAheadAreCountedAsMallocsAre) {
  std::thread([] {
    auto pass_left = [] { return replayalloc::detail::tls_state.pass_left; };
    auto churn = [](std::size_t align) {
      std::vector<held> live;
      for (std::size_t n : {kMin, std::size_t{6000}, std::size_t{40000}}) {
        void* p = replayalloc_aligned_alloc(align, n);
        EXPECT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << n << " B aligned to " << align;
        fill(p, n, align + n);
        live.push_back({p, n, align + n});
      }
      for (const held& h : live) {
        EXPECT_TRUE(intact(h.p, h.size, h.tag)) << h.size << " B overwritten";
        replayalloc_free(h.p);
      }
    };
    churn(64);  // registers the thread, then grants passes (where the backend has a plain malloc)
    const bool inline_aligned = replayalloc::detail::backend::g_plain_memalign.load() != nullptr;
    const replayalloc::Stats before = replayalloc::stats();
    void* first = replayalloc_malloc(kMin);  // the slow path's pass-through grants the others
    replayalloc_free(first);
    const std::uint64_t left = pass_left();
    churn(64);
    churn(4096);
    if (inline_aligned) EXPECT_EQ(pass_left(), left - 6) << "the aligned requests did not take granted passes inline";
    // posix_memalign's inline way (Note [posix_memalign's two ways]) takes them as
    // aligned_alloc does, and leaves errno as it was.
    std::vector<held> live;
    for (std::size_t n : {kMin, std::size_t{6000}, std::size_t{40000}}) {
      void* p = nullptr;
      errno = 1234;
      ASSERT_EQ(replayalloc_posix_memalign(&p, 64, n), 0);
      EXPECT_EQ(errno, 1234) << "posix_memalign(64, " << n << ") changed errno";
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << n;
      fill(p, n, n);
      live.push_back({p, n, n});
    }
    for (const held& h : live) {
      EXPECT_TRUE(intact(h.p, h.size, h.tag)) << h.size << " B overwritten";
      replayalloc_free(h.p);
    }
    if (inline_aligned) EXPECT_EQ(pass_left(), left - 9) << "posix_memalign did not take granted passes inline";
    const replayalloc::Stats after = replayalloc::stats();
    EXPECT_EQ(after.passthrough - before.passthrough, 10u) << "an aligned pass was not counted";
    EXPECT_EQ(after.allocations - before.allocations, 10u);
    EXPECT_EQ(after.bytes_from_backend - before.bytes_from_backend, 4 * kMin + 3 * (6000 + 40000));
  }).join();
}

// Note [The plain-free gate]: while a key records, its frees take the slow path, which
// records them, even below the minimum and beside the gate's shortcut: the plan that
// follows reuses the bytes of blocks freed early, so the replayed iterations hit only
// if the recording saw those frees. `frees` counts each slab block freed, once (the
// predicted free), and nothing else. (The engine's own frees never reach the C API's
// free in this binary; the gate test below checks that they close the gate.)
TEST(Entry, RecordingsSeeTheirFreesAndFreesCountSlabBlocks) {
  constexpr int kBlocks = 48;
  const replayalloc::Stats before = replayalloc::stats();
  for (int i = 0; i < 4; ++i) {
    replayalloc::Iteration it("entry/counted");
    for (int b = 0; b < kBlocks; ++b) {
      void* p = replayalloc_malloc(kMin * 4);
      ASSERT_NE(p, nullptr);
      fill(p, kMin * 4, b);
      void* q = replayalloc_malloc(100);  // below the minimum
      ASSERT_NE(q, nullptr);
      replayalloc_free(q);
      ASSERT_TRUE(intact(p, kMin * 4, b));
      replayalloc_free(p);  // freed at once: one slot's bytes serve every block
    }
  }
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.frees - before.frees, 2u * kBlocks) << "a slab block's free went uncounted, or was counted twice";
  EXPECT_EQ(after.slab_hits - before.slab_hits, 2u * kBlocks) << "iterations 3 and 4 replay (2 recordings)";
}

// The gate's bits are `gate`, and the inline free's range says the same (Note [The
// plain-free gate]): the gate's range while the gate is open (the slab range, with the
// front cache's below it: Note [The gate's range]), every address while it is closed.
::testing::AssertionResult gate_is(std::uint32_t gate) {
  // (tls_state named each time, not bound to a reference: see the test below.)
  using replayalloc::detail::tls_state;
  const auto& slab = replayalloc::detail::backend::g_slab_range;
  const auto& range = replayalloc::detail::backend::g_gate_range;
  if (tls_state.free_gate != gate) return ::testing::AssertionFailure() << "gate " << tls_state.free_gate << ", expected " << gate;
  if (range.from + range.span != slab.base + slab.bytes || range.from > slab.base || range.front != slab.base - range.from) {
    return ::testing::AssertionFailure() << "the gate's range [" << range.from << ", +" << range.span << ") with "
                                         << range.front << " bytes of the front cache's does not end with the slab range";
  }
  // The inline free asks the slab's part first (Note [The gate's range]).
  const bool open_range = tls_state.look_from == range.from + range.front &&
                          tls_state.look_span == range.span - range.front && tls_state.look_front == range.front;
  const bool closed_range = tls_state.look_from == 0 && tls_state.look_span == UINTPTR_MAX && tls_state.look_front == 0;
  if (gate == 0 ? !open_range : !closed_range) {
    return ::testing::AssertionFailure() << "gate " << gate << " but the inline free's range is [" << tls_state.look_from
                                         << ", +" << tls_state.look_span << ")";
  }
  return ::testing::AssertionSuccess();
}

// Note [The plain-free gate]: open (0) exactly while a backend block's free needs
// nothing but the backend's free. Inside the engine its frees are the engine's
// (uncounted; under the preload library they come through the interposed free), while
// a key records its frees are recorded; both close the gate, and it opens again after.
TEST(Entry, ThePlainFreeGateOpensOnlyWhenNothingNeedsToSeeTheFree) {
  using replayalloc::detail::gate_engine;
  using replayalloc::detail::gate_recording;
  using replayalloc::detail::gate_unready;
  using replayalloc::detail::tls_state;
  replayalloc_free(replayalloc_malloc(64));  // registers the thread
  // Sanitizer builds keep the backend's plain free null (fallback_free unpoisons):
  // their gate stays closed for that reason alone.
  const std::uint32_t idle =
      replayalloc::detail::backend::g_plain_free.load() != nullptr ? 0u : gate_unready;
  EXPECT_TRUE(gate_is(idle)) << "registered, idle";
#if !defined(__SANITIZE_ADDRESS__)
  // (Not under GCC's UBSan: it reports binding a reference to an extern initial-exec
  // thread_local, inlined into an executable, as binding to null.)
  {
    replayalloc::detail::reentry_guard outer;
    EXPECT_TRUE(gate_is(idle | gate_engine));
    {
      replayalloc::detail::reentry_guard inner;
      EXPECT_TRUE(gate_is(idle | gate_engine));
    }
    EXPECT_TRUE(gate_is(idle | gate_engine)) << "the outer guard still holds";
  }
  EXPECT_TRUE(gate_is(idle));
#endif
  for (int i = 0; i < 3; ++i) {
    {
      replayalloc::Iteration it("entry/gate");
      replayalloc_free(replayalloc_malloc(kMin * 2));
      EXPECT_TRUE(gate_is(idle | (i < 2 ? gate_recording : 0u))) << "iteration " << i;
    }
    EXPECT_TRUE(gate_is(idle)) << "after iteration " << i;
  }
}

// The backend's fast entry points are in use (this build links jemalloc) and keep
// glibc's contract: 16-byte alignment at every size, sized frees accepted.
TEST(Entry, JemallocFastEntryPointsKeepTheContract) {
  ASSERT_TRUE(replayalloc::detail::backend::use_fast_entry_points());
  namespace be = replayalloc::detail::backend;
  for (std::size_t n = 0; n <= 64; ++n) {
    void* p = be::fallback_alloc(n, 16);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u) << n << " B";
    EXPECT_GE(be::fallback_usable_size(p), n);
    if (n % 2 == 0) {
      be::fallback_free(p);
    } else {
      be::fallback_free_sized(p, n, 16);
    }
  }
  void* a = be::fallback_alloc(100, 4096);  // aligned requests keep mallocx
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
  be::fallback_free_sized(a, 100, 4096);
}

// Note [Below the minimum, narrowed]: with this suite's minimum (1 KiB, under the front
// cache's 64 KiB) the inline path's plain malloc is the front cache's without its test
// of the size (tests/entry/entry_wide_min_test.cc: a minimum above it keeps the test).
TEST(Entry, BelowAMinimumUnderTheListsThePlainMallocIsNarrowed) {
  namespace be = replayalloc::detail::backend;
  replayalloc_free(replayalloc_malloc(kMin));  // makes the engine
  be::start_fallback_now();  // Note [The fallback made when first needed]
  if (be::front_cache_stats().largest == 0) GTEST_SKIP() << "no front cache in this build";
  EXPECT_NE(be::g_plain_malloc.load(), &be::front_malloc);
  EXPECT_EQ(be::g_plain_malloc.load(), be::front_malloc_below(kMin));
  const be::front_cache_counts cache = be::front_cache_stats();
  for (std::size_t n = 0; n < kMin; n += 8) {  // every size below the minimum: the cache's
    void* p = replayalloc_malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_LT(reinterpret_cast<std::uintptr_t>(p) - cache.base, cache.span) << n << " B not the front cache's";
    if (n > 0) fill(p, n, n);
    if (n > 0) EXPECT_TRUE(intact(p, n, n));
    replayalloc_free(p);
  }
}

// Note [The page map's bytes off their pages' starts] (backend/front_inline.h): a free
// reads its block's byte of the page map and then writes the block's first word, so the
// byte must not share its low 12 bits with that word (4K aliasing: a pair on one block
// ran 8-9% slower). The blocks a process has first, those of the arenas' first runs at
// 16 MiB into the range, had their page's byte at offset 0 of the map's page, under the
// link of the block that begins the page. Checked on the cache's own first blocks of
// several classes, and on the byte of every page that begins 64 KiB (a run's start)
// in the range's first 256 MiB.
TEST(Entry, AFreesPageMapByteNeverSharesTheLowBitsOfTheBlocksLink) {
  namespace be = replayalloc::detail::backend;
  replayalloc_free(replayalloc_malloc(kMin));  // makes the engine
  be::start_fallback_now();
  const be::front_cache_counts cache = be::front_cache_stats();
  if (cache.largest == 0) GTEST_SKIP() << "no front cache in this build";
  auto byte_offset = [&](std::uintptr_t at) {  // the low 12 bits of the byte of `at`'s page
    return reinterpret_cast<std::uintptr_t>(&be::front::g_page_class[(at - cache.base) >> 12]) & 4095;
  };
  std::vector<void*> held_blocks;
  int page_starts = 0;
  for (const std::size_t size : {64, 1024, 4096, 16384}) {
    for (int i = 0; i < 64; ++i) {
      void* p = be::front_malloc(size);
      ASSERT_NE(p, nullptr);
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      ASSERT_LT(a - cache.base, cache.span) << size << " B not the front cache's";
      const std::uintptr_t link = a & 4095, byte = byte_offset(a);
      EXPECT_FALSE(byte >= link && byte < link + sizeof(void*))
          << size << " B block at page offset " << link << ": its page's byte at " << byte;
      page_starts += link == 0 ? 1 : 0;
      held_blocks.push_back(p);
    }
  }
  EXPECT_GT(page_starts, 64) << "the 4 and 16 KiB blocks begin pages";
  for (void* p : held_blocks) be::front_free(p);
  // Every run's start (a multiple of 64 KiB: runs are aligned to their size): its byte
  // past the first 32 bytes of every 64, where no block of 32 B or more begins.
  const std::uintptr_t first = (cache.base + 0xffff) & ~std::uintptr_t{0xffff};
  for (std::uintptr_t at = first; at < cache.base + (std::size_t{256} << 20); at += 0x10000) {
    ASSERT_GE(byte_offset(at) % 64, 8u) << "the page " << ((at - cache.base) >> 20) << " MiB into the range";
    ASSERT_NE(byte_offset(at) % 32, 0u) << "the page " << ((at - cache.base) >> 20) << " MiB into the range";
  }
}

std::uint64_t jemalloc_dirty_bytes(unsigned arena = MALLCTL_ARENAS_ALL) {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  mallctl("epoch", &epoch, &len, &epoch, len);
  std::size_t pdirty = 0;
  len = sizeof pdirty;
  char name[64];
  std::snprintf(name, sizeof name, "stats.arenas.%u.pdirty", arena);
  if (mallctl(name, &pdirty, &len, nullptr, 0) != 0) return 0;
  return std::uint64_t{pdirty} * 4096;
}

// One iteration of `key`: `blocks` blocks of `size` bytes, all live at once, written,
// then freed.
void blocks_iteration(const char* key, int blocks, std::size_t size) {
  replayalloc::Iteration it(key);
  std::vector<void*> live;
  for (int i = 0; i < blocks; ++i) {
    void* p = replayalloc_malloc(size);
    ASSERT_NE(p, nullptr);
    std::memset(p, i, size);
    live.push_back(p);
  }
  for (void* p : live) replayalloc_free(p);
}

// While in scope, `arena`'s dirty pages do not decay (dirty_decay_ms -1): what it holds
// is what the code under test left or purged, whatever the time the test takes.
class decay_kept_while_in_scope {
 public:
  explicit decay_kept_while_in_scope(unsigned arena) : arena_(arena) {
    std::snprintf(name_, sizeof name_, "arena.%u.dirty_decay_ms", arena_);
    std::size_t len = sizeof saved_;
    ssize_t never = -1;
    EXPECT_EQ(mallctl(name_, &saved_, &len, &never, sizeof never), 0);
  }
  ~decay_kept_while_in_scope() { mallctl(name_, nullptr, nullptr, &saved_, sizeof saved_); }
  decay_kept_while_in_scope(const decay_kept_while_in_scope&) = delete;
  decay_kept_while_in_scope& operator=(const decay_kept_while_in_scope&) = delete;

 private:
  unsigned arena_;
  char name_[48];
  ssize_t saved_ = 10000;
};

// `mib` MiB of the program's own from the backend, written and freed: dirty pages in
// this thread's jemalloc arena.
void free_pages_of_the_program(int mib) {
  namespace be = replayalloc::detail::backend;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < mib; ++i) {
    void* p = be::fallback_alloc(kMiB, 16);
    ASSERT_NE(p, nullptr);
    std::memset(p, i, kMiB);
    blocks.push_back(p);
  }
  for (void* p : blocks) be::fallback_free(p);
}

// When a slab is made, the blocks its iterations had from jemalloc until then (the
// recordings', back in jemalloc and unused from then on) are returned to the system
// before the slab is faulted in.
TEST(Entry, RecordedPagesAreReturnedWhenTheSlabIsMade) {
  constexpr int kBlocks = 48;
  constexpr std::size_t kSize = std::size_t{1} << 20;  // 48 MiB live at the peak
  auto iteration = [] { blocks_iteration("entry/release", kBlocks, kSize); };
  const std::uint64_t plans = replayalloc::stats().plans;
  iteration();  // recorded (REPLAYALLOC_RECORD_ITERATIONS=2: not planned yet)
  ASSERT_EQ(replayalloc::stats().plans, plans);
  // Free pages in jemalloc, or blocks the front cache keeps (Note [Large blocks in the
  // front cache]), which go back to jemalloc before the purge.
  const replayalloc::detail::backend::front_cache_counts held = replayalloc::detail::backend::front_cache_stats();
  const std::uint64_t dirty_recorded = jemalloc_dirty_bytes() + held.depot_bytes[2] + held.thread_large_bytes;
  ASSERT_GE(dirty_recorded, std::uint64_t{32} << 20) << "jemalloc did not keep the recording's pages";
  iteration();  // recorded again: planned at its end, its slab made with the plan
  ASSERT_EQ(replayalloc::stats().plans, plans + 1);
  const std::uint64_t hits = replayalloc::stats().slab_hits;
  iteration();  // replayed
  ASSERT_EQ(replayalloc::stats().slab_hits, hits + kBlocks);
  EXPECT_LT(jemalloc_dirty_bytes(), std::uint64_t{4} << 20) << "the recordings' pages were kept";
}

// ...but a slab that is small against the backend's free pages leaves them alone: they
// are mostly the rest of the program's, which it would fault back in, and jemalloc's
// decay returns the recording's few within seconds (backend::release_free_memory).
TEST(Entry, ASmallSlabLeavesTheProgramsOtherFreePagesAlone) {
  free_pages_of_the_program(128);  // dirty in jemalloc
  ASSERT_GE(jemalloc_dirty_bytes(), std::uint64_t{48} << 20) << "jemalloc did not keep the freed pages";
  auto iteration = [] { blocks_iteration("entry/small-slab", 4, 64 * 1024); };
  const std::uint64_t dirty_before = jemalloc_dirty_bytes();
  const std::uint64_t plans = replayalloc::stats().plans;
  iteration();  // recorded
  iteration();  // recorded again: planned at its end, its 256 KiB slab made with the plan
  ASSERT_EQ(replayalloc::stats().plans, plans + 1);
  const std::uint64_t hits = replayalloc::stats().slab_hits;
  iteration();  // replayed
  ASSERT_EQ(replayalloc::stats().slab_hits, hits + 4);
  // A purge leaves under 4 MiB (the test above); decay alone keeps most of them.
  EXPECT_GE(jemalloc_dirty_bytes(), dirty_before / 2)
      << "a 256 KiB slab gave back the program's free pages (" << (dirty_before >> 20) << " MiB)";
}

// ...and when the backend's free pages are mostly other threads' (a service whose
// inference threads each have an arena of their own, Note [Purging what a slab
// replaces]), the arena of the thread that makes the slab is purged, the others kept.
TEST(Entry, ASlabReturnsItsOwnThreadsPagesAndLeavesOtherThreadsAlone) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  unsigned main_arena = 0;
  std::size_t len = sizeof main_arena;
  ASSERT_EQ(mallctl("thread.arena", &main_arena, &len, nullptr, 0), 0);
  // jemalloc's decay returns dirty pages as time passes (how many depends on what the
  // earlier tests freed and when): none decay here, so only a purge gives them back.
  const decay_kept_while_in_scope no_decay(main_arena);
  free_pages_of_the_program(128);  // this thread's: dirty in its arena
  const std::uint64_t main_dirty = jemalloc_dirty_bytes(main_arena);
  ASSERT_GE(main_dirty, std::uint64_t{48} << 20) << "jemalloc did not keep the freed pages";
  std::uint64_t recorded_dirty = 0, replayed_dirty = ~std::uint64_t{0};
  std::uint64_t hits = 0;
  std::thread worker([&] {
    unsigned arena = 0;  // an arena of its own, as jemalloc gives each new thread
    std::size_t n = sizeof arena;
    ASSERT_EQ(mallctl("arenas.create", &arena, &n, nullptr, 0), 0);
    ASSERT_EQ(mallctl("thread.arena", nullptr, nullptr, &arena, sizeof arena), 0);
    const decay_kept_while_in_scope no_decay_here(arena);
    // Blocks of 3 MiB, above the front cache's classes: from the thread's arena.
    auto iteration = [] { blocks_iteration("entry/own-arena", 8, 3 * kMiB); };  // 24 MiB live at the peak
    iteration();  // recorded
    recorded_dirty = jemalloc_dirty_bytes(arena);
    // Recorded again: planned at its end, and its 24 MiB slab made with the plan (Note
    // [The first slab with the plan]), after a purge.
    iteration();
    const std::uint64_t before = replayalloc::stats().slab_hits;
    iteration();  // replayed
    hits = replayalloc::stats().slab_hits - before;
    replayed_dirty = jemalloc_dirty_bytes(arena);
  });
  worker.join();
  ASSERT_EQ(hits, 8u) << "the third iteration was not replayed";
  ASSERT_GE(recorded_dirty, std::uint64_t{16} << 20) << "jemalloc did not keep the recordings' pages";
  EXPECT_LT(replayed_dirty, std::uint64_t{4} << 20)
      << "the slab's own thread kept its recordings' pages (" << (recorded_dirty >> 20) << " MiB)";
  EXPECT_GE(jemalloc_dirty_bytes(main_arena), main_dirty / 2) << "another thread's free pages were given back";
}

// ...and the blocks of 64 KiB-2 MiB, which come from the front cache's arena (Note [Large
// blocks in the front cache]): the thread's cache and the depot give theirs back and the
// thread's front arena is purged, while another thread's free pages stay.
TEST(Entry, ASlabReturnsItsThreadsFrontCachePagesAndLeavesOtherThreadsAlone) {
  namespace be = replayalloc::detail::backend;
  (void)replayalloc::stats();  // the engine made: it enables the front cache
  be::start_fallback_now();  // Note [The fallback made when first needed]
  if (be::front_cache_stats().largest == 0) GTEST_SKIP() << "no front cache in this build";
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  unsigned main_arena = 0;
  std::size_t len = sizeof main_arena;
  ASSERT_EQ(mallctl("thread.arena", &main_arena, &len, nullptr, 0), 0);
  const decay_kept_while_in_scope no_decay(main_arena);
  be::front_cache_release();  // what earlier tests left in the depot
  std::vector<void*> big;
  for (int i = 0; i < 16; ++i) big.push_back(be::fallback_alloc(3 * kMiB, 16));  // this thread's arena
  for (void* p : big) std::memset(p, 1, 3 * kMiB);
  for (void* p : big) be::fallback_free(p);
  const std::uint64_t main_dirty = jemalloc_dirty_bytes(main_arena);
  ASSERT_GE(main_dirty, std::uint64_t{24} << 20) << "jemalloc did not keep the freed pages";
  std::uint64_t recorded = 0, replayed = ~std::uint64_t{0}, hits = 0;
  std::thread worker([&] {
    auto iteration = [] { blocks_iteration("entry/front-arena", 24, kMiB); };  // 24 MiB live at the peak
    iteration();  // recorded
    unsigned front = 0, sharing = 0;
    ASSERT_TRUE(be::front_cache_arena(&front, &sharing)) << "the thread has no front cache";
    ASSERT_NE(front, main_arena);
    const decay_kept_while_in_scope no_decay_here(front);
    const be::front_cache_counts held = be::front_cache_stats();
    recorded = jemalloc_dirty_bytes(front) + held.depot_bytes[2] + held.thread_large_bytes;
    iteration();  // recorded again: planned at its end, its 24 MiB slab made with the plan
    const std::uint64_t before = replayalloc::stats().slab_hits;
    iteration();  // replayed
    hits = replayalloc::stats().slab_hits - before;
    replayed = jemalloc_dirty_bytes(front) + be::front_cache_stats().thread_large_bytes;
  });
  worker.join();
  ASSERT_EQ(hits, 24u) << "the third iteration was not replayed";
  ASSERT_GE(recorded, std::uint64_t{16} << 20) << "the recordings' blocks were neither cached nor dirty";
  EXPECT_LT(replayed, std::uint64_t{4} << 20)
      << "the slab's own thread kept its recordings' pages (" << (recorded >> 20) << " MiB)";
  EXPECT_GE(jemalloc_dirty_bytes(main_arena), main_dirty / 2) << "another thread's free pages were given back";
}

// ...and an arena two threads share (more threads than jemalloc's arenas) holds what
// both left: its pages are purged when they are at most three times the slab for each
// thread using it.
TEST(Entry, ASlabPurgesAnArenaItsThreadSharesByTheThreadsUsingIt) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  unsigned arena = 0;
  std::size_t n = sizeof arena;
  ASSERT_EQ(mallctl("arenas.create", &arena, &n, nullptr, 0), 0);
  std::atomic<int> stage{0};
  std::thread other([&] {  // the other thread of the arena: 64 MiB of its own, freed
    ASSERT_EQ(mallctl("thread.arena", nullptr, nullptr, &arena, sizeof arena), 0);
    free_pages_of_the_program(64);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();  // still using the arena
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::uint64_t before = 0, after = ~std::uint64_t{0}, hits = 0;
  std::thread worker([&] {
    ASSERT_EQ(mallctl("thread.arena", nullptr, nullptr, &arena, sizeof arena), 0);
    auto iteration = [] { blocks_iteration("entry/shared-arena", 10, kMiB); };  // 10 MiB live at the peak
    iteration();
    before = jemalloc_dirty_bytes(arena);  // the other's pages (jemalloc keeps ~40 MiB): above 3 x 10
    iteration();  // planned at its end, its 10 MiB slab made with the plan
    const std::uint64_t h = replayalloc::stats().slab_hits;
    iteration();  // replayed
    hits = replayalloc::stats().slab_hits - h;
    after = jemalloc_dirty_bytes(arena);
  });
  worker.join();
  stage = 2;
  other.join();
  ASSERT_EQ(hits, 10u) << "the third iteration was not replayed";
  ASSERT_GT(before, std::uint64_t{30} << 20) << "the shared arena holds less than three slabs' worth";
  ASSERT_LE(before, std::uint64_t{60} << 20) << "the shared arena holds more than six slabs' worth";
  EXPECT_LT(after, std::uint64_t{4} << 20) << "the shared arena kept " << (before >> 20) << " MiB";
}

// Note [Zeroing by memset]: a large block calloc'd again from jemalloc's free pages is
// zeroed in place (memset), not given back to the kernel and faulted in again by the
// program's writes; and whichever way it is zeroed, every byte of it is zero. On the
// main thread (jemalloc's arena 0) and on a thread of its own; sizes in and above the
// fallback's thread cache (128 KiB: Note [The fallback's thread cache]; 256 KiB and up are
// served by the arenas of copied hooks). jemalloc's own arenas keep their hooks. Failed without
// those arenas, when the thread cache was jemalloc's 32 KiB: 65 page faults for the 64
// pages of 256 KiB.
void calloc_again_is_zeroed_in_place() {
  constexpr std::size_t kPage = 4096;
  const std::size_t sizes[] = {20 * 1024, 48 * 1024, 256 * 1024, 1 << 20, 3 << 20};
  for (std::size_t n : sizes) {
    auto* first = static_cast<unsigned char*>(replayalloc_calloc(1, n));
    ASSERT_NE(first, nullptr);
    std::memset(first, 0xA5, n);  // dirty: the next block of this size must be zeroed
    replayalloc_free(first);
    rusage before{};
    getrusage(RUSAGE_THREAD, &before);
    auto* again = static_cast<unsigned char*>(replayalloc_calloc(1, n));
    ASSERT_NE(again, nullptr);
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < n; ++i) nonzero += again[i] != 0 ? 1 : 0;
    std::memset(again, 0x5A, n);  // the program writes what it asked for
    rusage after{};
    getrusage(RUSAGE_THREAD, &after);
    EXPECT_EQ(nonzero, 0u) << n << " B: calloc returned " << nonzero << " non-zero bytes";
    EXPECT_LT(after.ru_minflt - before.ru_minflt, 4)
        << n << " B: " << after.ru_minflt - before.ru_minflt << " page faults for " << n / kPage
        << " pages: the block's pages were given back to be zeroed";
    replayalloc_free(again);
  }
}

TEST(Entry, ALargeBlockCallocdAgainIsZeroedInPlace) {
  (void)replayalloc::stats();  // the engine, which gives the fallback its settings
  extent_hooks_t* hooks_before = nullptr;
  std::size_t len = sizeof hooks_before;
  ASSERT_EQ(mallctl("arena.0.extent_hooks", &hooks_before, &len, nullptr, 0), 0);
  calloc_again_is_zeroed_in_place();  // the main thread
  std::thread other(calloc_again_is_zeroed_in_place);
  other.join();
  extent_hooks_t* hooks_after = nullptr;
  ASSERT_EQ(mallctl("arena.0.extent_hooks", &hooks_after, &len, nullptr, 0), 0);
  EXPECT_EQ(hooks_after, hooks_before) << "jemalloc's arena 0 (and its metadata's base) got other hooks";
}

// Note [Zeroing by memset], data safety: four threads calloc large blocks (above the
// thread cache, in the fallback's own arenas, and below it) of random sizes, each
// checked zero, filled with its own pattern, held a while, handed to another thread
// half of the time, and checked intact before it is freed there: a block handed out
// over a live one, or not zeroed, is found.
TEST(Entry, LargeCallocsOnManyThreadsNeverOverlapAndAreZero) {
  (void)replayalloc::stats();
  constexpr int kThreads = 4, kRounds = 400;
  struct handed {
    unsigned char* p;
    std::size_t n;
    std::uint64_t tag;
  };
  std::mutex mu;
  std::vector<handed> shared;  // blocks handed to whichever thread takes them
  std::atomic<int> bad{0};
  auto worker = [&](int w) {
    std::uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(w + 1);
    auto next = [&x] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return x;
    };
    std::vector<handed> mine;
    auto release = [&](const handed& h) {
      if (!intact(h.p, h.n, h.tag)) ++bad;
      replayalloc_free(h.p);
    };
    for (int r = 0; r < kRounds; ++r) {
      const std::size_t n = 16384 + next() % (next() % 4 == 0 ? 3u << 20 : 200u << 10);
      auto* p = static_cast<unsigned char*>(replayalloc_calloc(1, n));
      if (p == nullptr) {
        ++bad;
        continue;
      }
      for (std::size_t i = 0; i < n; i += 509) bad += p[i] != 0 ? 1 : 0;
      bad += p[n - 1] != 0 ? 1 : 0;
      const std::uint64_t tag = (static_cast<std::uint64_t>(w) << 32) | static_cast<std::uint64_t>(r);
      fill(p, n, tag);
      if (next() % 2 == 0) {
        std::lock_guard<std::mutex> lock(mu);
        shared.push_back({p, n, tag});
      } else {
        mine.push_back({p, n, tag});
      }
      if (mine.size() > 8) {  // free one of the thread's own, not the newest
        const std::size_t i = next() % (mine.size() - 1);
        release(mine[i]);
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
      }
      std::vector<handed> taken;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (shared.size() > 8) {
          taken.push_back(shared.front());
          shared.erase(shared.begin());
        }
      }
      for (const handed& h : taken) release(h);  // maybe another thread's block
    }
    for (const handed& h : mine) release(h);
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) threads.emplace_back(worker, w);
  for (std::thread& t : threads) t.join();
  for (const handed& h : shared) {
    if (!intact(h.p, h.n, h.tag)) ++bad;
    replayalloc_free(h.p);
  }
  EXPECT_EQ(bad.load(), 0) << "blocks not zeroed or overwritten while live";
}

// Note [Live filters]: a bucket is non-zero exactly while a block whose first page
// hashes to it is in the table.
TEST(Entry, LiveFilterCountsLiveBlocks) {
  auto* f = new replayalloc::detail::live_filter;
  auto* p = reinterpret_cast<const void*>(std::uintptr_t{0x7f0000100000});
  auto* q = reinterpret_cast<const void*>(std::uintptr_t{0x7f0000100800});  // same page
  auto* r = reinterpret_cast<const void*>(std::uintptr_t{0x7f0000200000});  // another bucket
  EXPECT_FALSE(f->maybe_live(p));
  f->add(p);
  f->add(q);
  EXPECT_TRUE(f->maybe_live(p));
  EXPECT_TRUE(f->maybe_live(q));
  EXPECT_FALSE(f->maybe_live(r));
  f->remove(p);
  EXPECT_TRUE(f->maybe_live(q)) << "one block of the bucket is still live";
  f->remove(q);
  EXPECT_FALSE(f->maybe_live(q));
  f->add(r);
  f->clear();
  EXPECT_FALSE(f->maybe_live(r));
  // Note [Filters of one-byte counts]: 254 blocks of one bucket counted exactly; a count
  // that reaches 255 stays "maybe" until clear(), never "no" while a block is live.
  for (int i = 0; i < 254; ++i) f->add(p);
  for (int i = 0; i < 253; ++i) f->remove(p);
  EXPECT_TRUE(f->maybe_live(p)) << "one of 254 blocks still live";
  f->remove(p);
  EXPECT_FALSE(f->maybe_live(p));
  for (int i = 0; i < 300; ++i) f->add(p);
  for (int i = 0; i < 299; ++i) f->remove(p);
  EXPECT_TRUE(f->maybe_live(p)) << "a bucket past 255 said no while one of its blocks was live";
  f->remove(p);
  EXPECT_TRUE(f->maybe_live(p)) << "a saturated count moved";
  f->clear();
  EXPECT_FALSE(f->maybe_live(p));
  delete f;
}

// Note [A watcher's filter zeroed by the kernel]: the watcher's filter counts as the
// inline one, over memory that came zeroed, and a page of its counts is faulted in only
// when a bucket on it is counted (fresh anonymous memory, as jemalloc's calloc hands out
// a new watcher's: mincore says which pages are resident).
TEST(Entry, WatchersFilterTouchesOnlyThePagesOfItsBuckets) {
  using replayalloc::detail::zeroed_live_filter;
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, zeroed_live_filter::bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  const auto resident = [&] {
    std::vector<unsigned char> in(zeroed_live_filter::bytes / static_cast<std::size_t>(page));
    EXPECT_EQ(mincore(mem, zeroed_live_filter::bytes, in.data()), 0);
    int n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
  };
  {
    zeroed_live_filter f(mem);
    EXPECT_EQ(resident(), 0);
    // Blocks on pages 0x7f0000100..0x7f00001ff: 256 buckets in a row (their counts of
    // one byte on at most two pages of 4 KiB), and two blocks on one page.
    std::vector<const void*> blocks;
    for (std::uintptr_t pg = 0x7f0000100; pg < 0x7f0000200; ++pg) blocks.push_back(reinterpret_cast<const void*>(pg << 12));
    blocks.push_back(reinterpret_cast<const void*>(std::uintptr_t{0x7f0000100800}));
    for (const void* b : blocks) EXPECT_FALSE(f.maybe_live(b));
    for (const void* b : blocks) f.add(b);
    for (const void* b : blocks) EXPECT_TRUE(f.maybe_live(b));
    EXPECT_FALSE(f.maybe_live(reinterpret_cast<const void*>(std::uintptr_t{0x7f0000300000})));
    EXPECT_LE(resident(), 2) << "the counts of other buckets were written";
    f.remove(blocks.back());
    EXPECT_TRUE(f.maybe_live(blocks.front())) << "one block of the bucket is still live";
    for (std::size_t i = 0; i + 1 < blocks.size(); ++i) f.remove(blocks[i]);
    for (const void* b : blocks) EXPECT_FALSE(f.maybe_live(b));
    EXPECT_LE(resident(), 2);
    f.add(blocks.front());
    f.clear();
    EXPECT_FALSE(f.maybe_live(blocks.front()));
  }
  munmap(mem, zeroed_live_filter::bytes);
}

// The recorder's filter follows its table of live blocks, also when the backend hands
// out an address again that the recording still holds (another thread freed it): one
// entry, so one free empties the bucket; a recording's end clears it.
TEST(Entry, RecorderFilterFollowsItsLiveBlocks) {
  auto* rec = new replayalloc::detail::trace_recorder;
  auto* p = reinterpret_cast<const void*>(std::uintptr_t{0x7f0000100000});
  auto* r = reinterpret_cast<const void*>(std::uintptr_t{0x7f0000200000});
  rec->begin(0);
  EXPECT_FALSE(rec->maybe_live(p));
  rec->record_alloc(p, 8192, 16, 0);
  rec->record_alloc(p, 8192, 16, 0);  // reused address: the earlier block outlives
  rec->record_alloc(r, 8192, 16, 0);
  EXPECT_TRUE(rec->maybe_live(p));
  EXPECT_TRUE(rec->record_free(p));
  EXPECT_FALSE(rec->maybe_live(p)) << "a freed block's bucket still counts";
  EXPECT_FALSE(rec->record_free(p));
  EXPECT_TRUE(rec->maybe_live(r));
  const replayalloc::trace t = rec->finish("filter", [](std::uint32_t) { return std::string("unknown"); });
  EXPECT_EQ(t.allocations.size(), 3u);
  EXPECT_FALSE(rec->maybe_live(r)) << "the recording ended with r live; its bucket still counts";
  delete rec;
}

// Note [Op tags from the last recording] (trace/recorder.h): a recording of the same
// owner offers, at each position, the op its last recording gave the same size there;
// another size, a position past its end, another owner or none: nothing.
TEST(Entry, RecorderHintsTheLastRecordingsOpsOfTheSameOwner) {
  auto* rec = new replayalloc::detail::trace_recorder;
  auto at = [](std::uintptr_t i) { return reinterpret_cast<const void*>(std::uintptr_t{0x7f0000100000} + i * 4096); };
  rec->begin(0, /*owner=*/1);
  EXPECT_EQ(rec->hint(8192), 0u) << "no recording yet";
  rec->record_alloc(at(0), 8192, 16, 7);
  rec->record_alloc(at(1), 16384, 16, 9);
  rec->record_alloc(at(2), 4096, 16, 0);
  (void)rec->finish("k", [](std::uint32_t) { return std::string("op"); });
  rec->begin(0, 1);
  EXPECT_EQ(rec->hint(8192), 7u);
  EXPECT_EQ(rec->hint(16384), 0u) << "position 0 had another size";
  rec->record_alloc(at(0), 8192, 16, 7);
  EXPECT_EQ(rec->hint(16384), 9u);
  rec->record_alloc(at(1), 32768, 16, 3);  // this recording deviates here
  EXPECT_EQ(rec->hint(4096), 0u) << "an untagged allocation hints nothing";
  rec->record_alloc(at(2), 4096, 16, 0);
  EXPECT_EQ(rec->hint(8192), 0u) << "past the last recording's end";
  (void)rec->finish("k", [](std::uint32_t) { return std::string("op"); });
  rec->begin(0, 1);
  rec->record_alloc(at(0), 8192, 16, 7);
  EXPECT_EQ(rec->hint(32768), 3u) << "the hints are the latest recording's";
  (void)rec->finish("k", [](std::uint32_t) { return std::string("op"); });
  rec->begin(0, 2);
  EXPECT_EQ(rec->hint(8192), 0u) << "another owner's recording";
  (void)rec->finish("k2", [](std::uint32_t) { return std::string("op"); });
  rec->begin(0, 0);
  EXPECT_EQ(rec->hint(8192), 0u) << "a recording of nobody's";
  delete rec;
}

// The engine asks the call-stack tagger only where the key's last recording gave no
// op: a key recorded twice unwinds the stack for the first recording's allocations,
// not again for the second's, and both recordings name their blocks the same.
std::atomic<int> g_unwinds{0};
std::atomic<unsigned> g_stack_op{0};
std::uint32_t counting_stack_op() {
  g_unwinds.fetch_add(1);
  return g_stack_op.load();
}

TEST(Entry, ASecondRecordingTakesItsOpTagsFromTheFirst) {
  using replayalloc::detail::g_untagged_op_source;
  g_stack_op = replayalloc_op_id("a <- stack");
  const auto before = g_untagged_op_source.exchange(&counting_stack_op);
  replayalloc_set_op(0);
  auto iteration = [](const char* key) {
    std::vector<void*> blocks;
    EXPECT_EQ(replayalloc_iteration_begin(key), 0);
    const int recording = replayalloc_iteration_recording();
    for (int i = 0; i < 40; ++i) blocks.push_back(replayalloc_malloc(kMin * (1 + i % 5)));
    for (void* p : blocks) replayalloc_free(p);
    replayalloc_iteration_end();
    return recording;
  };
  g_unwinds = 0;
  ASSERT_EQ(iteration("entry/op-hints"), 1) << "the first iteration of a new key records";
  EXPECT_EQ(g_unwinds.load(), 40) << "the first recording tags every block by its stack";
  g_unwinds = 0;
  ASSERT_EQ(iteration("entry/op-hints"), 1) << "REPLAYALLOC_RECORD_ITERATIONS is 2 in this suite";
  EXPECT_EQ(g_unwinds.load(), 0) << "the second recording unwound stacks its first had tagged";
  g_unwinds = 0;
  ASSERT_EQ(iteration("entry/op-hints-2"), 1);
  EXPECT_EQ(g_unwinds.load(), 40) << "another key's recording took the first key's tags";
  g_untagged_op_source.store(before);
  replayalloc_wait_plans();
  const std::string path = ::testing::TempDir() + "op_hints.csv";
  ASSERT_EQ(replayalloc_save_trace("entry/op-hints", path.c_str()), 0);
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char line[512];
  int tagged = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) tagged += std::strstr(line, "a <- stack") != nullptr;
  std::fclose(f);
  EXPECT_EQ(tagged, 40) << "the saved recording names every block after its stack";
}

}  // namespace
