// Tests for REPLAYALLOC_CHECK (runtime/check.h, Note [Check mode]). Each test runs in
// a fresh process (a death test, re-executed: the engine reads its options once), turns
// check mode on before the engine starts, and then either runs clean through a replay
// full of deviations, or commits one error and must be stopped with a report that names
// both blocks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "replay/slab_pool.h"
#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/engine.h"
#include "support/options.h"

namespace replayalloc::detail {
namespace {

void start_in_check_mode(std::uint64_t min_size = 0) {
  options o;
  o.mode = run_mode::replay;
  o.check = true;
  o.min_size = min_size;
  o.verbose = 0;
  o.background_planning = false;  // iteration by iteration, as the suite's ENV says (tests/CMakeLists.txt)
  if (!set_process_options(o)) std::abort();
}

// One iteration of key "k": A is freed before B is made, so the plan puts B on A's
// bytes; with `hold_a` the program keeps A alive while it asks for B.
void iteration(bool hold_a, unsigned op) {
  replayalloc_iteration_begin("k");
  replayalloc_set_op(op);
  void* a = replayalloc_malloc(4096);
  std::memset(a, 0xa, 4096);
  if (!hold_a) replayalloc_free(a);
  void* b = replayalloc_malloc(4096);
  std::memset(b, 0xb, 4096);
  replayalloc_free(b);
  if (hold_a) {
    for (int i = 0; i < 4096; ++i) {
      if (static_cast<unsigned char*>(a)[i] != 0xa) std::abort();  // A lost its data
    }
    replayalloc_free(a);
  }
  replayalloc_iteration_end();
}

class CheckMode : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CheckMode, ACleanReplayWithDeviationsRunsToTheEnd) {
  EXPECT_EXIT(
      {
        start_in_check_mode();
        const unsigned op = replayalloc_op_id("aten::conv2d");
        for (int i = 0; i < 4; ++i) iteration(false, op);
        // Held blocks fall back (invariant 1), the checker agrees; frees from other
        // positions, extra blocks, every kind of call.
        for (int i = 0; i < 4; ++i) iteration(true, op);
        replayalloc_iteration_begin("k");
        void* x = replayalloc_calloc(3, 1000);
        void* y = replayalloc_realloc(nullptr, 77);
        y = replayalloc_realloc(y, 9000);
        void* z = replayalloc_aligned_alloc(4 << 20, 100);  // beyond a slot's alignment
        replayalloc_free_sized(x, 3000);
        replayalloc_free(y);
        replayalloc_free(z);
        replayalloc_iteration_end();
        const Stats s = stats();
        std::exit(s.slab_hits > 0 && s.fallbacks > 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CheckMode, DoubleFreeOfASlabBlockIsReportedWithItsOp) {
  EXPECT_DEATH(
      {
        start_in_check_mode();
        const unsigned op = replayalloc_op_id("aten::relu");
        for (int i = 0; i < 3; ++i) iteration(false, op);
        replayalloc_iteration_begin("k");
        void* a = replayalloc_malloc(4096);
        if (!backend::in_slab_range(a)) std::exit(4);
        replayalloc_free(a);
        replayalloc_free(a);
      },
      "double free of 0x[0-9a-f]+ on thread [0-9]+: the slab block of 4096 bytes there "
      "\\(op 'aten::relu'");
}

TEST_F(CheckMode, DoubleFreeOfABackendBlockIsReportedBeforeTheBackendSeesIt) {
  EXPECT_DEATH(
      {
        start_in_check_mode();
        void* a = replayalloc_malloc(100);
        replayalloc_free(a);
        replayalloc_free(a);
      },
      "double free of 0x[0-9a-f]+ .* the backend block of 100 bytes");
}

// Below REPLAYALLOC_MIN_SIZE the entry points hand requests straight to jemalloc's
// malloc (runtime/entry.h), but not in check mode: there every block has its shadow.
TEST_F(CheckMode, BlocksBelowTheMinimumSizeAreCheckedToo) {
  EXPECT_DEATH(
      {
        start_in_check_mode(4096);
        void* a = replayalloc_malloc(100);
        void* b = replayalloc_malloc(200);
        replayalloc_free(b);
        replayalloc_free(a);
        replayalloc_free(a);
      },
      "double free of 0x[0-9a-f]+ .* the backend block of 100 bytes");
}

TEST_F(CheckMode, FreeOfAPointerNeverHandedOutIsReported) {
  EXPECT_DEATH(
      {
        start_in_check_mode();
        char* a = static_cast<char*>(replayalloc_malloc(100));
        replayalloc_free(a + 16);
      },
      "free of 0x[0-9a-f]+ on thread [0-9]+, which was never handed out");
}

// The allocator's own bug, made on purpose: the compiled plan loses its overlap lists,
// so the hot path would hand B out on A's bytes while the program still holds A.
TEST_F(CheckMode, AHandOutOnLiveBytesIsCaughtAndNamesBothBlocks) {
  EXPECT_DEATH(
      {
        start_in_check_mode();
        const unsigned op = replayalloc_op_id("aten::addmm");
        for (int i = 0; i < 3; ++i) iteration(false, op);
        key_entry* e = engine::get().entry_for("k", domain_kind::host, nullptr);
        if (e == nullptr || e->regimes[0].version == nullptr) std::exit(5);
        for (slot& s : e->regimes[0].version->plan.slots) s.overlap_count = 0;
        iteration(true, op);
      },
      "slab hand-out of 4096 bytes at 0x[0-9a-f]+ \\(op 'aten::addmm', thread [0-9]+\\) overlaps "
      "the live slab block of 4096 bytes at 0x[0-9a-f]+ \\(op 'aten::addmm'");
}

// Without check mode the same broken plan would silently corrupt A: the test above is
// the only thing between that bug and lost data, so make sure it is really needed.
TEST_F(CheckMode, WithoutCheckModeTheBrokenPlanLosesData) {
  EXPECT_DEATH(
      {
        options o;
        o.mode = run_mode::replay;
        o.min_size = 0;
        o.verbose = 0;
        o.background_planning = false;  // iteration by iteration, as the suite's ENV says (tests/CMakeLists.txt)
        if (!set_process_options(o)) std::abort();
        for (int i = 0; i < 3; ++i) iteration(false, 0);
        key_entry* e = engine::get().entry_for("k", domain_kind::host, nullptr);
        if (e == nullptr || e->regimes[0].version == nullptr) std::exit(5);
        for (slot& s : e->regimes[0].version->plan.slots) s.overlap_count = 0;
        iteration(true, 0);  // aborts when A's bytes were overwritten by B
        std::exit(0);
      },
      "");
}

// Note [Check mode under memory pressure] (runtime/check.cc): the shadow record's own
// memory runs out (its tree and its table of freed blocks grow as the program's live
// blocks do) while blocks are made and freed: every block is still served and keeps its
// bytes, nothing is reported of the blocks the record could not enter (their frees are
// no "free of a pointer never handed out"), and the process ends normally.
// Blocks made and half of them freed, 40 times, with the engine's next `failures`
// allocations failing each time; then every block freed.
void churn_while_the_record_runs_out() {
  start_in_check_mode();
  replayalloc_free(replayalloc_malloc(64));  // the engine and its record made first
  std::vector<std::pair<void*, std::size_t>> held;
  std::uint64_t tag = 1;
  for (int failures = 1; failures <= 40; ++failures) {
    backend::fail_engine_allocations(failures);
    for (int i = 0; i < 300; ++i) {
      const std::size_t n = 64 + 16 * static_cast<std::size_t>(i % 50);
      void* p = replayalloc_malloc(n);
      if (p == nullptr) std::exit(20);
      std::memset(p, static_cast<int>(tag & 0xff), n);
      held.emplace_back(p, n);
      ++tag;
    }
    // Frees while the record's memory is short too: half of what is held.
    for (std::size_t i = 0; i < held.size() / 2; ++i) {
      replayalloc_free(held[i].first);
      held[i].first = nullptr;
    }
    std::erase_if(held, [](const std::pair<void*, std::size_t>& h) { return h.first == nullptr; });
    backend::fail_engine_allocations(0);
  }
  for (const auto& h : held) replayalloc_free(h.first);
}

TEST_F(CheckMode, OutOfMemoryForTheShadowRecordStopsNothing) {
  EXPECT_EXIT(
      {
        churn_while_the_record_runs_out();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace replayalloc::detail
