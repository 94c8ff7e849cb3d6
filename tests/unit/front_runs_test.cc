// The front cache's runs (Note [Runs for medium blocks], backend/front_runs.h) on their
// own, over memory the test hands out: every block lies inside its run, blocks never
// overlap, the page map says a run's class for the pages its blocks begin in, and a run is given
// back, whole and at the address it came from, once no block is out of it, and a block
// outside the range goes to jemalloc (give_back reads no page byte for it). The range
// starts where it may in a process (a page past a 64 KiB boundary here: under valgrind
// the cache's range is not 64 KiB-aligned, and a run's table index must still name it).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "backend/front_runs.h"

namespace {

namespace front = replayalloc::detail::backend::front;

constexpr std::size_t kArea = std::size_t{64} << 20;
std::uintptr_t g_next = 0;     // the test's bump pointer for runs
std::uintptr_t g_end = 0;
std::vector<std::uintptr_t> g_made;
std::vector<std::uintptr_t> g_given;

void* run_memory(std::size_t bytes, unsigned) noexcept {
  const std::uintptr_t start = (g_next + bytes - 1) & ~(bytes - 1);
  if (start + bytes > g_end) return nullptr;
  g_next = start + bytes;
  g_made.push_back(start);
  return reinterpret_cast<void*>(start);
}
void run_release(void* p) noexcept { g_given.push_back(reinterpret_cast<std::uintptr_t>(p)); }
std::uint64_t g_ms = 0;  // the test's clock (Note [Empty runs kept])
std::uint64_t clock_ms() noexcept { return g_ms; }

// A fresh area whose range starts at a 64 KiB boundary, half of it the runs' range,
// with the test's bump pointer, records and clock reset (area null where it cannot be
// mapped), and the runs configured over it for classes 1, 2, ... of the sizes given.
struct test_range {
  void* area = nullptr;
  std::uintptr_t base = 0;
  std::size_t span = kArea / 2;
  std::vector<std::atomic<std::uint8_t>> page_map;
  std::vector<std::byte> table;  // the runs' table
  std::uint32_t class_size[front::max_classes] = {};
};
test_range fresh_range(std::initializer_list<std::uint32_t> sizes, front::run_idle_fn idle = nullptr) {
  test_range r;
  r.area = ::mmap(nullptr, kArea, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r.area == MAP_FAILED) return test_range{};
  r.base = (reinterpret_cast<std::uintptr_t>(r.area) + 0xffff) & ~std::uintptr_t{0xffff};
  g_next = r.base;
  g_end = r.base + r.span;
  g_made.clear();
  g_given.clear();
  g_ms = 0;
  r.page_map = std::vector<std::atomic<std::uint8_t>>(r.span >> front::page_map_shift);
  unsigned k = 1;
  for (std::uint32_t size : sizes) r.class_size[k++] = size;
  r.table = std::vector<std::byte>(front::run_table_bytes(r.span));
  if (!front::configure_runs(r.class_size, r.base, r.span, r.page_map.data(), r.table.data(), &run_memory, &run_release,
                             &clock_ms, idle)) {
    ::munmap(r.area, kArea);
    return test_range{};
  }
  return r;
}

TEST(FrontRuns, BlocksLieInTheirRunsAndRunsGoBackWhole) {
  void* area = ::mmap(nullptr, kArea, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(area, MAP_FAILED);
  // The range: a page past the first 64 KiB boundary of the area.
  const std::uintptr_t base = ((reinterpret_cast<std::uintptr_t>(area) + 0xffff) & ~std::uintptr_t{0xffff}) + 4096;
  const std::size_t span = kArea / 2;
  g_next = base;
  g_end = base + span;
  std::vector<std::atomic<std::uint8_t>> page_map(span >> front::page_map_shift);
  std::uint32_t class_size[front::max_classes] = {};
  class_size[1] = 2048;    // a small class: runs of 64 KiB, 32 blocks
  class_size[2] = 5120;    // 256 KiB (its 16 blocks want 128 KiB: run_slot_bytes), 44 blocks in 224 KiB
  class_size[3] = 20480;   // 512 KiB, 22 blocks (Note [A run a size step short of its slot]: 448 KiB of them)
  class_size[4] = 131072;  // 1 MiB, 7 blocks (896 KiB)
  class_size[5] = 163840;  // above
  class_size[6] = 24576;   // runs of 512 KiB, as class 3's
  g_ms = 0;  // stopped: no stash decays in this test
  std::vector<std::byte> table(front::run_table_bytes(span));
  ASSERT_TRUE(
      front::configure_runs(class_size, base, span, page_map.data(), table.data(), &run_memory, &run_release, &clock_ms));
  EXPECT_FALSE(front::run_class(0));
  EXPECT_TRUE(front::run_class(1));
  EXPECT_TRUE(front::run_class(2));
  EXPECT_TRUE(front::run_class(4));
  EXPECT_FALSE(front::run_class(5));

  const std::size_t run_bytes[] = {0, 64 << 10, 256 << 10, 512 << 10, 1 << 20};
  for (unsigned k = 1; k <= 4; ++k) {
    g_made.clear();
    g_given.clear();
    const std::size_t size = class_size[k];
    std::vector<void*> blocks;
    while (blocks.size() < 100) {
      front::free_list more{nullptr, 0, 0};
      void* p = front::run_take(k, 0, &more, 3);
      ASSERT_NE(p, nullptr);
      ASSERT_LE(more.count, 2u);
      blocks.push_back(p);
      for (void* q = more.head; q != nullptr; q = *static_cast<void**>(q)) blocks.push_back(q);
    }
    const std::size_t per_run = replayalloc::detail::backend::run_extent_bytes(run_bytes[k]) / size;
    EXPECT_EQ(per_run, front::run_blocks(k)) << size;
    EXPECT_EQ(g_made.size(), (blocks.size() + per_run - 1) / per_run) << size;
    std::vector<std::uintptr_t> sorted;
    for (void* p : blocks) {
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      const std::uintptr_t run = a & ~(run_bytes[k] - 1);
      ASSERT_TRUE(std::find(g_made.begin(), g_made.end(), run) != g_made.end()) << size << ": a block outside every run";
      ASSERT_LE(a + size, run + replayalloc::detail::backend::run_extent_bytes(run_bytes[k]))
          << size << ": a block past its run's extent";
      EXPECT_EQ(page_map[(a - base) >> front::page_map_shift].load(), k);
      std::memset(p, static_cast<int>(k), size);
      sorted.push_back(a);
    }
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 1; i < sorted.size(); ++i) ASSERT_GE(sorted[i] - sorted[i - 1], size) << "blocks overlap";
    // Given back in another order than taken: each run whole once its last block is in,
    // the one the pool keeps and the others to the stash (Note [Empty runs kept]), then
    // all of them to the arena.
    std::reverse(blocks.begin(), blocks.end());
    for (void* p : blocks) front::run_give(p, k);
    EXPECT_TRUE(g_given.empty()) << size << ": the pool keeps one empty run, the stash the others";
    replayalloc::detail::backend::front_cache_counts c;
    front::run_counts(&c);
    EXPECT_EQ(c.stashed_bytes, (g_made.size() - 1) * run_bytes[k]) << size;
    front::release_empty_runs();
    front::run_counts(&c);
    EXPECT_EQ(c.stashed_bytes, 0u) << size;
    std::sort(g_made.begin(), g_made.end());
    std::sort(g_given.begin(), g_given.end());
    EXPECT_EQ(g_given, g_made) << size << ": runs given back are not the runs made";
    for (std::uintptr_t run : g_made) {
      for (std::size_t off = 0; off < run_bytes[k]; off += 4096) {
        ASSERT_EQ(page_map[(run + off - base) >> front::page_map_shift].load(), 0u) << "a run given back still marked";
      }
    }
  }
  // An empty run one class keeps serves another class of the same run size (its pages
  // already made) before the arena is asked for a new one: its page bytes are the new
  // class's where the new class's blocks begin, and 0 where only the old one's did.
  g_made.clear();
  g_given.clear();
  void* a = front::run_take(3, 0, nullptr, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(g_made.size(), 1u);
  const std::uintptr_t run = reinterpret_cast<std::uintptr_t>(a) & ~std::uintptr_t{(512 << 10) - 1};
  front::run_give(a, 3);
  EXPECT_TRUE(g_given.empty()) << "class 3's pool keeps its one empty run";
  void* b = front::run_take(6, 0, nullptr, 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(g_made.size(), 1u) << "a run was made where another class kept an empty one of its size";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) & ~std::uintptr_t{(512 << 10) - 1}, run);
  EXPECT_EQ(page_map[(run - base) >> front::page_map_shift].load(), 6u);
  EXPECT_EQ(page_map[(run + 24576 - base) >> front::page_map_shift].load(), 6u);
  EXPECT_EQ(page_map[(run + 20480 - base) >> front::page_map_shift].load(), 0u) << "class 3's block's page still marked";
  std::memset(b, 6, 24576);
  front::run_give(b, 6);
  front::release_empty_runs();
  EXPECT_EQ(g_given, g_made) << "the run went back once, to where it came from";
  // A list given back whole (the depot full, a purge: give_back_list): blocks of two
  // classes' pools in turns, runs of 20 going empty in it (more than it holds back at
  // once), and a block outside the range among them. Each run goes back whole once its
  // last block is in, but the one each pool keeps; the outside block goes to jemalloc.
  g_made.clear();
  g_given.clear();
  std::vector<void*> listed;
  static void* outside[2];  // a block of jemalloc's: not in the range
  for (unsigned k : {1u, 2u}) {
    const std::size_t per_run = front::run_blocks(k);
    for (std::size_t i = 0; i < 20 * per_run; ++i) {
      void* p = front::run_take(k, 0, nullptr, 1);
      ASSERT_NE(p, nullptr);
      std::memset(p, static_cast<int>(k), class_size[k]);
      listed.push_back(p);
    }
  }
  ASSERT_EQ(g_made.size(), 40u);
  std::vector<void*> mixed;  // class 1's and class 2's blocks in turns, then the rest
  const std::size_t ones = 20 * std::size_t{front::run_blocks(1)};
  for (std::size_t i = 0, j = ones; i < ones || j < listed.size();) {
    if (i < ones) mixed.push_back(listed[i++]);
    if (j < listed.size()) mixed.push_back(listed[j++]);
    if (mixed.size() == 100) mixed.push_back(outside);
  }
  void* head = nullptr;
  for (auto it = mixed.rbegin(); it != mixed.rend(); ++it) {
    *static_cast<void**>(*it) = head;
    head = *it;
  }
  front::give_back_list(head);
  const auto out = reinterpret_cast<std::uintptr_t>(outside);
  EXPECT_EQ(std::count(g_given.begin(), g_given.end(), out), 1) << "the block outside the range";
  EXPECT_EQ(g_given.size(), 1u) << "every run kept (two by the pools, the rest stashed), the outside block given";
  replayalloc::detail::backend::front_cache_counts stashed;
  front::run_counts(&stashed);
  EXPECT_EQ(stashed.stashed_bytes, 19 * run_bytes[1] + 19 * run_bytes[2]);
  front::release_empty_runs();
  g_given.erase(std::remove(g_given.begin(), g_given.end(), out), g_given.end());
  std::sort(g_made.begin(), g_made.end());
  std::sort(g_given.begin(), g_given.end());
  EXPECT_EQ(g_given, g_made) << "runs given back are not the runs made";
  front::free_list none{nullptr, 0, 0};
  EXPECT_EQ(g_made.size(), 40u);
  void* again = front::run_take(1, 0, &none, 1);
  ASSERT_NE(again, nullptr) << "a run made again after they all went back";
  front::run_give(again, 1);
  front::release_empty_runs();
  // A block outside the range (jemalloc's, on a list filled after jemalloc tore down the
  // thread's state) goes back to jemalloc, below the range and above it: no page byte is
  // read for it.
  g_given.clear();
  void* below = reinterpret_cast<void*>(base - 4096);
  void* above = reinterpret_cast<void*>(base + span + (std::size_t{8} << 20));
  front::give_back(below);
  front::give_back(above);
  EXPECT_EQ(g_given, (std::vector<std::uintptr_t>{base - 4096, base + span + (std::size_t{8} << 20)}));
  ::munmap(area, kArea);
}

// Note [Empty runs kept]: a burst's emptied runs serve the next burst without the arena
// (a class of the same run size takes them too); a stash gives back to the arena, once a
// second, the runs it held all through the last second, and none it needed; a run of
// another size has the arena's stashed runs whose pages could hold it given back first
// (one of a larger size, else the smaller ones), and release_stashed_runs
// (before a block above the runs' classes) and release_empty_runs give back every one.
TEST(FrontRuns, EmptiedRunsServeTheNextBurstAndThoseIdleForASecondGoBack) {
  // Runs of 64 KiB (32 blocks), 256 KiB (44: run_slot_bytes) and 64 KiB (64).
  test_range range = fresh_range({2048, 5120, 1024});
  ASSERT_NE(range.area, nullptr);
  void* area = range.area;
  const std::uintptr_t base = range.base;
  const auto& page_map = range.page_map;
  const auto& class_size = range.class_size;
  const auto counts = [] {
    replayalloc::detail::backend::front_cache_counts c;
    front::run_counts(&c);
    return c;
  };
  // n blocks of class k, written whole.
  const auto take = [&](unsigned k, std::size_t n) {
    std::vector<void*> out;
    for (std::size_t i = 0; i < n; ++i) {
      void* p = front::run_take(k, 0, nullptr, 1);
      if (p == nullptr) break;
      std::memset(p, static_cast<int>(k), class_size[k]);
      out.push_back(p);
    }
    return out;
  };
  const auto give = [&](const std::vector<void*>& blocks) {
    for (void* p : blocks) {
      const unsigned k = page_map[(reinterpret_cast<std::uintptr_t>(p) - base) >> front::page_map_shift].load();
      ASSERT_TRUE(front::run_class(k));
      front::run_give(p, k);
    }
  };
  const std::size_t run = 64 << 10;

  // A burst of four runs, freed: the pool keeps one, the stash three; none to the arena.
  const std::vector<void*> burst = take(1, 4 * 32);
  ASSERT_EQ(burst.size(), 4 * 32u);
  ASSERT_EQ(g_made.size(), 4u);
  give(burst);
  EXPECT_TRUE(g_given.empty());
  const auto first = counts();
  EXPECT_EQ(first.stashed_bytes, 3 * run);
  // The next burst, of class 1 and of class 3 (runs of 64 KiB too): the kept and the
  // stashed runs serve it, none is made, and each block's page says its new class.
  const std::vector<void*> next = take(3, 2 * 64);
  const std::vector<void*> more = take(1, 2 * 32);
  ASSERT_EQ(next.size() + more.size(), 2 * 64 + 2 * 32u);
  EXPECT_EQ(g_made.size(), 4u) << "a run was made while the stash kept runs of its size";
  EXPECT_EQ(counts().runs_reused - first.runs_reused, 3u);
  EXPECT_EQ(counts().stashed_bytes, 0u);
  std::vector<std::uintptr_t> starts;
  for (void* p : next) starts.push_back(reinterpret_cast<std::uintptr_t>(p));
  for (void* p : more) starts.push_back(reinterpret_cast<std::uintptr_t>(p));
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 1; i < starts.size(); ++i) ASSERT_GE(starts[i] - starts[i - 1], 1024u) << "blocks overlap";
  give(next);
  give(more);
  EXPECT_TRUE(g_given.empty());
  EXPECT_EQ(counts().stashed_bytes, 2 * run) << "two kept by the pools of classes 1 and 3, two stashed";

  // Runs held out across the clock's seconds. At 0 ms three runs of class 1 go out: the
  // pool's kept one and the two stashed (the stash's low mark 0).
  const std::vector<void*> a = take(1, 32);
  const std::vector<void*> b = take(1, 32);
  const std::vector<void*> c = take(1, 32);
  EXPECT_EQ(g_made.size(), 4u);
  EXPECT_EQ(counts().stashed_bytes, 0u);
  // At 1,000 ms: a's run is kept by the pool, b's stashed; the stash needed every run it
  // had in the last second, so none goes to the arena.
  g_ms = 1000;
  give(a);
  give(b);
  EXPECT_TRUE(g_given.empty()) << "a run the stash needed in the last second went to the arena";
  EXPECT_EQ(counts().stashed_bytes, run);
  // At 2,000 ms: c's run stashed; the stash held one run all through the last second,
  // which goes to the arena; one stays.
  g_ms = 2000;
  give(c);
  EXPECT_EQ(g_given.size(), 1u) << "the run the stash held idle for a second";
  EXPECT_EQ(counts().stashed_bytes, run);
  // A run of another size (256 KiB): the arena's stashed runs go back before it is made.
  const std::size_t given = g_given.size();
  const std::vector<void*> wide = take(2, 1);
  ASSERT_EQ(wide.size(), 1u);
  EXPECT_EQ(g_given.size(), given + 1) << "the stashed run of 64 KiB was not given back first";
  EXPECT_EQ(g_made.size(), 5u);
  EXPECT_EQ(counts().stashed_bytes, 0u);
  // Three runs of 256 KiB freed (one kept, two stashed). A run of 64 KiB the arena makes
  // (class 1's kept run and class 3's taken first) has one of them given back before
  // it, whose pages hold it, not both: the other serves the next burst of 256 KiB.
  const std::vector<void*> wider = take(2, 3 * front::run_blocks(2) - 1);
  give(wide);
  give(wider);
  EXPECT_EQ(counts().stashed_bytes, std::size_t{512} << 10);
  const std::size_t made = g_made.size();
  std::vector<void*> narrow;
  while (g_made.size() == made) {
    const std::vector<void*> one = take(1, 1);
    ASSERT_EQ(one.size(), 1u);
    narrow.push_back(one[0]);
  }
  EXPECT_EQ(g_given.size(), given + 2) << "not one stashed run of 256 KiB given back for the run of 64 KiB";
  EXPECT_EQ(counts().stashed_bytes, std::size_t{256} << 10) << "the stash of 256 KiB emptied for a run of 64 KiB";
  give(narrow);
  // The arena's stashes given back (as before a block above the runs' classes is made),
  // then every kept run.
  front::release_stashed_runs(0);
  EXPECT_EQ(counts().stashed_bytes, 0u);
  front::release_empty_runs();
  std::sort(g_made.begin(), g_made.end());
  std::sort(g_given.begin(), g_given.end());
  EXPECT_EQ(g_given, g_made) << "every run made went back once, whole";
  EXPECT_EQ(counts().stashed_bytes, 0u);
  ::munmap(area, kArea);
}

}  // namespace

// run_take's `fresh` (Note [Large blocks in the front cache]): a batch carves at most that
// many blocks where nothing of the run was written since the arena made it (their links
// would fault in pages no request may use), and any number where blocks were carved
// before, in this run's earlier life or another class's; without it (~0u), every block
// asked for, whatever was written, and never none.
TEST(FrontRuns, ABatchCarvesAtMostItsFreshBlocksWhereNothingWasWritten) {
  // Runs of 1 MiB (25 blocks of 35 KiB in its 896 KiB: Note [A run a size step short of
  // its slot]), 1 MiB (21 of 42 KiB) and 128 KiB (16).
  test_range range = fresh_range({35840, 43008, 8192});
  ASSERT_NE(range.area, nullptr);
  void* area = range.area;
  const auto& class_size = range.class_size;
  // Takes up to `want` blocks of class k, `fresh` of them new at most; returns them all.
  const auto take = [&](unsigned k, unsigned want, unsigned fresh) {
    std::vector<void*> out;
    front::free_list more{nullptr, 0, 0};
    void* p = front::run_take(k, 0, &more, want, fresh);
    if (p == nullptr) return out;
    out.push_back(p);
    for (void* q = more.head; q != nullptr; q = *static_cast<void**>(q)) out.push_back(q);
    return out;
  };
  std::vector<void*> blocks = take(1, 16, 1);
  EXPECT_EQ(blocks.size(), 1u) << "a new run's batch carved blocks nothing had written";
  ASSERT_EQ(g_made.size(), 1u);
  for (int i = 0; i < 4; ++i) {
    const std::vector<void*> more = take(1, 16, 2);
    EXPECT_EQ(more.size(), 2u);
    blocks.insert(blocks.end(), more.begin(), more.end());
  }
  ASSERT_EQ(blocks.size(), 9u);
  for (void* p : blocks) front::run_give(p, 1);  // the run empty: kept by its pool, carved again
  // Its first nine blocks were written: a batch of 16 gets those and one fresh.
  blocks = take(1, 16, 1);
  EXPECT_EQ(blocks.size(), 10u);
  EXPECT_EQ(g_made.size(), 1u);
  for (void* p : blocks) front::run_give(p, 1);
  // Another class of the same run size takes the empty run, and what class 1 wrote of it
  // (10 blocks of 35 KiB: 350 KiB) counts for it: 9 blocks of 42 KiB begin there.
  blocks = take(2, 16, 1);
  EXPECT_EQ(g_made.size(), 1u) << "the empty run of class 1 was not taken";
  EXPECT_EQ(blocks.size(), 10u);
  for (void* p : blocks) front::run_give(p, 2);
  // No limit (the lists' fills): every block asked for, whether written or not (a limit
  // that wrapped around would have given none here, where part of the run was written).
  blocks = take(2, 16, ~0u);
  EXPECT_EQ(blocks.size(), 16u);
  const std::vector<void*> rest = take(2, 16, ~0u);
  EXPECT_EQ(rest.size(), 5u) << "the run's other blocks, to its end (21 a run)";
  for (void* p : blocks) front::run_give(p, 2);
  for (void* p : rest) front::run_give(p, 2);
  // Blocks in a run never overlap however they were carved: 25 of class 1, batches of 7.
  std::vector<std::uintptr_t> all;
  std::vector<void*> held;
  while (held.size() < 25) {
    const std::vector<void*> more = take(1, 7, 1);
    ASSERT_FALSE(more.empty());
    for (void* p : more) {
      held.push_back(p);
      all.push_back(reinterpret_cast<std::uintptr_t>(p));
    }
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 1; i < all.size(); ++i) ASSERT_GE(all[i] - all[i - 1], class_size[1]) << "blocks overlap";
  for (void* p : held) front::run_give(p, 1);
  front::release_empty_runs();
  ::munmap(area, kArea);
}

namespace {

// The blocks the test keeps "waiting" per class (a thread's list and the depot's, in the
// cache), linked through their first words, and the classes `idle` was asked for.
void* g_waiting[front::max_classes];
std::vector<unsigned> g_idled;
void idle(unsigned k) noexcept {
  g_idled.push_back(k);
  front::give_back_list(g_waiting[k]);
  g_waiting[k] = nullptr;
}
void wait(void* p, unsigned k) {
  *static_cast<void**>(p) = g_waiting[k];
  g_waiting[k] = p;
}

}  // namespace

// Note [Idle blocks before a new run]: before a run of 1 MiB is made of fresh memory,
// the blocks of the other classes of its size that wait on lists go back to their runs,
// and a run they leave empty serves the new class; a run they do not leave empty keeps
// them for its own class's next requests; the smaller runs never ask.
TEST(FrontRuns, BlocksWaitingOnListsGoBackBeforeARunIsMadeOfFreshMemory) {
  // Runs of 1 MiB: 25 blocks of 35 KiB, 21 of 42 KiB (in their 896 KiB: Note [A run a
  // size step short of its slot]); of 128 KiB: 16 of 8 KiB, 21 of 6 KiB.
  test_range range = fresh_range({35840, 43008, 8192, 6144}, &idle);
  ASSERT_NE(range.area, nullptr);
  std::fill(std::begin(g_waiting), std::end(g_waiting), nullptr);
  g_idled.clear();
  const auto take = [](unsigned k, std::size_t n) {
    std::vector<void*> out;
    for (std::size_t i = 0; i < n; ++i) {
      void* p = front::run_take(k, 0, nullptr, 1);
      if (p == nullptr) break;
      out.push_back(p);
    }
    return out;
  };
  const auto run_of = [](void* p) { return reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{(1 << 20) - 1}; };
  // 24 caches of 35 KiB, then each a row longer: 42 KiB taken, the 35 KiB block freed to
  // a list. The first 21 fill a new run (the 35 KiB blocks still out of theirs).
  const std::vector<void*> forty = take(1, 24);
  ASSERT_EQ(forty.size(), 24u);
  ASSERT_EQ(g_made.size(), 1u);
  EXPECT_EQ(g_idled, std::vector<unsigned>{2}) << "a run of 1 MiB made without asking the other class of its size";
  g_idled.clear();
  // empties_a_run: the lists hold every block out of the run, in two lists, or one fewer
  // (then one block, of another run, does not make it so).
  for (std::size_t i = 0; i < 24; ++i) *static_cast<void**>(forty[i]) = i % 12 == 11 ? nullptr : forty[i + 1];
  void* both[] = {forty[0], forty[12]};
  EXPECT_TRUE(front::empties_a_run(1, both, 2));
  EXPECT_FALSE(front::empties_a_run(1, both, 1));
  EXPECT_FALSE(front::empties_a_run(2, both, 2)) << "blocks of another class counted";
  void* rest[] = {forty[1], forty[12]};
  EXPECT_FALSE(front::empties_a_run(1, rest, 2));
  std::vector<void*> grown;
  for (std::size_t i = 0; i < 24; ++i) {
    const std::vector<void*> p = take(2, 1);
    ASSERT_EQ(p.size(), 1u);
    grown.push_back(p[0]);
    wait(forty[i], 1);
    if (i == 20) {  // one run made, at the first (nothing waited then)
      EXPECT_EQ(g_idled, std::vector<unsigned>{1});
      ASSERT_EQ(g_made.size(), 2u);
      g_idled.clear();
    }
  }
  // The 22nd block of 42 KiB needed a run: the 21 blocks of 35 KiB waiting then went
  // back to their run, which three still out of it kept (so a run was made), and those
  // three, freed to the list after, wait there still.
  EXPECT_EQ(g_idled, std::vector<unsigned>{1});
  EXPECT_EQ(g_made.size(), 3u) << "a run was reused whose blocks were still out of it";
  // Its 21 blocks given back serve the class's next requests without a run made.
  const std::vector<void*> again = take(1, 21);
  EXPECT_EQ(g_made.size(), 3u) << "the blocks given back did not serve their class";
  for (void* p : again) EXPECT_EQ(run_of(p), run_of(forty[0]));
  for (void* p : again) wait(p, 1);
  // The next step (49 KiB: class 2 again here): every block of 35 KiB waits, their run
  // goes empty and serves class 2's new blocks, of no fresh memory.
  g_idled.clear();
  const std::vector<void*> more = take(2, 21 - 3);  // the second run of class 2 full
  EXPECT_EQ(g_made.size(), 3u);
  const std::vector<void*> last = take(2, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(g_idled, std::vector<unsigned>{1});
  EXPECT_EQ(g_made.size(), 3u) << "a run was made of fresh memory where one waited empty on lists";
  EXPECT_EQ(run_of(last[0]), run_of(forty[0])) << "the new class's block is not in the emptied run";
  // The smaller runs never ask: 16 blocks of 8 KiB wait on a list, and 6 KiB's run is
  // made of fresh memory.
  g_idled.clear();
  const std::vector<void*> eight = take(3, 16);
  for (void* p : eight) wait(p, 3);
  const std::vector<void*> six = take(4, 1);
  ASSERT_EQ(six.size(), 1u);
  EXPECT_EQ(g_idled, std::vector<unsigned>{});
  EXPECT_EQ(g_made.size(), 5u);
  // A run all of whose blocks out wait counts where it is at least a quarter written: the 16
  // blocks of 8 KiB, not the one block of 6 KiB (its run's pages are not worth taking).
  void* waiting_eight[] = {g_waiting[3]};
  EXPECT_TRUE(front::empties_a_run(3, waiting_eight, 1));
  *static_cast<void**>(six[0]) = nullptr;
  void* waiting_six[] = {six[0]};
  EXPECT_FALSE(front::empties_a_run(4, waiting_six, 1)) << "a run of one block written, taken from its class";
  // Everything back: every run made goes back once, whole.
  for (unsigned k = 1; k < 5; ++k) idle(k);
  for (void* p : grown) front::run_give(p, 2);
  for (void* p : more) front::run_give(p, 2);
  front::run_give(last[0], 2);
  front::run_give(six[0], 4);
  front::release_empty_runs();
  std::sort(g_made.begin(), g_made.end());
  std::sort(g_given.begin(), g_given.end());
  EXPECT_EQ(g_given, g_made);
  ::munmap(range.area, kArea);
}
