// The front cache's runs (Note [Runs for medium blocks], backend/front_runs.cc) on their
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
#include <cstdint>
#include <cstring>
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
  class_size[2] = 5120;    // runs of 128 KiB, 25 blocks
  class_size[3] = 20480;   // 512 KiB, 25 blocks
  class_size[4] = 131072;  // 1 MiB, 8 blocks
  class_size[5] = 163840;  // above
  class_size[6] = 24576;   // runs of 512 KiB, as class 3's
  ASSERT_TRUE(front::configure_runs(class_size, base, span, page_map.data(), &run_memory, &run_release));
  EXPECT_FALSE(front::run_class(0));
  EXPECT_TRUE(front::run_class(1));
  EXPECT_TRUE(front::run_class(2));
  EXPECT_TRUE(front::run_class(4));
  EXPECT_FALSE(front::run_class(5));

  const std::size_t run_bytes[] = {0, 64 << 10, 128 << 10, 512 << 10, 1 << 20};
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
    const std::size_t per_run = run_bytes[k] / size;
    EXPECT_EQ(g_made.size(), (blocks.size() + per_run - 1) / per_run) << size;
    std::vector<std::uintptr_t> sorted;
    for (void* p : blocks) {
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      const std::uintptr_t run = a & ~(run_bytes[k] - 1);
      ASSERT_TRUE(std::find(g_made.begin(), g_made.end(), run) != g_made.end()) << size << ": a block outside every run";
      ASSERT_LE(a + size, run + run_bytes[k]) << size << ": a block past its run's end";
      EXPECT_EQ(page_map[(a - base) >> front::page_map_shift].load(), k);
      std::memset(p, static_cast<int>(k), size);
      sorted.push_back(a);
    }
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 1; i < sorted.size(); ++i) ASSERT_GE(sorted[i] - sorted[i - 1], size) << "blocks overlap";
    // Given back in another order than taken: each run whole once its last block is in,
    // all but the one the pool keeps, then that one.
    std::reverse(blocks.begin(), blocks.end());
    for (void* p : blocks) front::run_give(p, k);
    EXPECT_EQ(g_given.size(), g_made.size() - 1) << size << ": the pool keeps one empty run";
    front::release_empty_runs();
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
    const std::size_t per_run = run_bytes[k] / class_size[k];
    for (std::size_t i = 0; i < 20 * per_run; ++i) {
      void* p = front::run_take(k, 0, nullptr, 1);
      ASSERT_NE(p, nullptr);
      std::memset(p, static_cast<int>(k), class_size[k]);
      listed.push_back(p);
    }
  }
  ASSERT_EQ(g_made.size(), 40u);
  std::vector<void*> mixed;  // class 1's and class 2's blocks in turns, then the rest
  const std::size_t ones = 20 * (run_bytes[1] / class_size[1]);
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
  EXPECT_EQ(g_given.size(), 1 + 40 - 2u) << "every run but the two pools' kept ones, the outside block";
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

}  // namespace
