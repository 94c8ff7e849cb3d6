// The replay contract (replay_contract.h) over the LD_PRELOAD library's entry points:
// hooks/preload.cc and the core built as libreplayalloc_preload.so is (its variant,
// replayalloc_core_preload: auto mode, 4 KiB minimum) are linked into this test, so
// malloc and free are the library's for the whole process, gtest included, exactly as
// under LD_PRELOAD; the program marks its iterations with the C API the library
// exports. Run in-process, the test can also ask the slab range who owns a block.
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "backend/slab_range.h"
#include "contract/replay_contract.h"
#include "replayalloc/replayalloc.h"

namespace replayalloc::contract {
namespace {

// Through malloc and free, or (cxx) through C++'s operator new and sized delete, what
// libtorch's containers call: sized delete has a path of its own (entry_free_sized in
// runtime/entry.h).
class preload_domain final : public domain {
 public:
  explicit preload_domain(bool cxx) : cxx_(cxx) {}
  void begin(const std::string& key) override { replayalloc_iteration_begin(key.c_str()); }
  void end() override { replayalloc_iteration_end(); }
  void* alloc(std::size_t size) override { return cxx_ ? ::operator new(size) : std::malloc(size); }  // the hooks
  void free(void* p, std::size_t size) override {
    if (cxx_) {
      ::operator delete(p, size);
    } else {
      std::free(p);
    }
  }
  bool in_slab(const void* p) const override { return detail::backend::in_slab_range(p); }
  Stats stats() const override { return replayalloc::stats(); }
  std::uint64_t slab_memory() const override { return replayalloc::stats().mapped_bytes; }
  std::size_t alignment() const override { return 16; }

 private:
  bool cxx_;
};

domain& preload() {
  static auto* d = new preload_domain(false);
  return *d;
}

domain& preload_new() {
  static auto* d = new preload_domain(true);
  return *d;
}

INSTANTIATE_TEST_SUITE_P(preload, ReplayContract,
                         ::testing::Values(domain_param{"malloc", preload}, domain_param{"new", preload_new}),
                         domain_param_name);

// Sized delete of blocks below the minimum while the thread records and replays: they
// go straight to jemalloc (entry_free_sized), and the recording, the plan and the
// replay of the planned blocks around them are those of unsized frees; `frees` counts
// the slab blocks among them, no other. A planned (slab) block given a wrong, small
// size still goes back to its slot.
TEST(PreloadSizedDelete, SmallBlocksBesideARecordingAndItsReplay) {
  constexpr int kIterations = 6;
  constexpr std::size_t kBig = 64 * 1024;
  const Stats before = replayalloc::stats();
  void* last_big[4] = {};
  for (int i = 0; i < kIterations; ++i) {
    replayalloc::Iteration it("preload/sized-delete");
    void* big[4] = {};
    for (int b = 0; b < 4; ++b) {
      void* p = ::operator new(kBig * (b + 1));
      std::memset(p, 0x40 + b, kBig * (b + 1));
      big[b] = p;
      for (std::size_t n : {16, 24, 100, 1000, 4000}) {  // below the 4 KiB minimum
        auto* q = static_cast<unsigned char*>(::operator new(n));
        std::memset(q, 0x11, n);
        ::operator delete(q, n);
      }
    }
    for (int b = 0; b < 4; ++b) {
      const auto* q = static_cast<const unsigned char*>(big[b]);
      for (std::size_t k = 0; k < kBig * (b + 1); k += 4096) ASSERT_EQ(q[k], 0x40 + b) << "iteration " << i;
    }
    if (i == kIterations - 1) std::memcpy(last_big, big, sizeof big);
    for (int b = 0; b < 4; ++b) {
      // The last iteration frees its largest block with a wrong size: undefined in the
      // program, safe here (the slab range is asked first).
      const std::size_t told = i == kIterations - 1 && b == 3 ? 64 : kBig * (b + 1);
      ::operator delete(big[b], told);
    }
    replayalloc_wait_plans();  // Note [Background planning]: a plan made is there next
  }
  const Stats after = replayalloc::stats();
  EXPECT_GE(after.plans, before.plans + 1);
  EXPECT_GE(after.slab_hits - before.slab_hits, 4u * 2) << "the planned blocks were not replayed";
  for (void* p : last_big) EXPECT_TRUE(detail::backend::in_slab_range(p));
  // Every slab block handed out went back to its slab, the wrongly sized one too.
  EXPECT_EQ(after.frees - before.frees, after.slab_hits - before.slab_hits);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);
  EXPECT_EQ(after.double_frees, before.double_frees);
  // The slab's slots are free again: the next iteration replays all four.
  const Stats replay_before = replayalloc::stats();
  {
    replayalloc::Iteration it("preload/sized-delete");
    for (int b = 0; b < 4; ++b) {
      void* p = ::operator new(kBig * (b + 1));
      for (std::size_t n : {16, 24, 100, 1000, 4000}) ::operator delete(::operator new(n), n);
      ::operator delete(p, kBig * (b + 1));
    }
  }
  const Stats replay_after = replayalloc::stats();
  EXPECT_EQ(replay_after.slab_hits - replay_before.slab_hits, 4u);
  EXPECT_EQ(replay_after.frees - replay_before.frees, 4u) << "a slab block's sized delete was not counted";
}


// Sized deletes on a thread auto mode watches, outside any iteration: a small block of
// the front cache's goes to its class's list (the next request of that size gets it
// back), and a block of 9,000 bytes given a wrong, small size (undefined in the
// program) still goes to its own class's list, by the cache's page map, not to the one
// the size names: entry_free_sized sends both from the front cache's part of the gate's
// range, whatever the thread's gate.
TEST(PreloadSizedDelete, SmallSizesOnAWatchedThreadGoToTheBlocksOwnLists) {
  (void)replayalloc::stats();
  detail::backend::start_fallback_now();  // Note [The fallback made when first needed]: as a program that allocates much
  if (detail::backend::g_gate_range.front == 0) GTEST_SKIP() << "the front cache is off";
  std::thread([] {
    void* watched = std::malloc(64 * 1024);  // at the minimum or more: the thread is watched
    ASSERT_NE(watched, nullptr);
    std::memset(watched, 1, 64 * 1024);
    for (std::size_t n : {16, 100, 1000, 4000}) {
      auto* p = static_cast<unsigned char*>(::operator new(n));
      std::memset(p, 0x5a, n);
      ::operator delete(p, n);
      void* q = ::operator new(n);
      EXPECT_EQ(q, p) << n << " B: the block did not go back to its list";
      ::operator delete(q, n);
    }
    void* medium = ::operator new(9000);
    std::memset(medium, 0x33, 9000);
    void* small = ::operator new(64);
    ::operator delete(medium, 64);  // the wrong size
    void* again = ::operator new(9000);
    EXPECT_EQ(again, medium) << "a 9,000-byte block freed with a size of 64 left its class";
    void* other = ::operator new(64);
    EXPECT_NE(other, medium) << "a 9,000-byte block handed out for 64 bytes";
    ::operator delete(other, 64);
    ::operator delete(again, 9000);
    ::operator delete(small, 64);
    std::free(watched);
  }).join();
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The engine made and the fallback's start with it (Note [The fallback made when first
// needed]: otherwise after the process's first requests), as a program that allocates
// much has them: its settings and the front cache are what these tests are about.
void start_fallback() {
  (void)replayalloc::stats();
  detail::backend::start_fallback_now();
}

// jemalloc's size setting `name` (opt.*, arenas.*) once the engine is made (it tunes the
// fallback): what the preload library's malloc_conf and the engine left.
std::size_t size_setting(const char* name) {
  (void)replayalloc::stats();
  std::size_t value = 0;
  std::size_t len = sizeof value;
  EXPECT_EQ(mallctl(name, &value, &len, nullptr, 0), 0) << name;
  return value;
}

// Runs f on a new thread (every thread's fallback arena is the same one: Note [The
// fallback's shared arena]).
template <typename F>
void on_new_thread(F f) {
  std::thread t([&] { f(); });
  t.join();
}

// The first and the last CPU this process may run on (-1, -1: none readable).
std::pair<int, int> allowed_cpus() {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof all, &all) != 0) return {-1, -1};
  int first = -1;
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &all)) continue;
    if (first < 0) first = c;
    last = c;
  }
  return {first, last};
}

// Runs f on a new thread bound to `cpu` (the front cache's arena is its CPU's: Note
// [The front cache's arena]).
template <typename F>
void on_cpu(int cpu, F f) {
  on_new_thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    f();
  });
}

// Note [The fallback's huge blocks] (backend/jemalloc_backend.cc): in the preload
// library, a block of 8 MiB or more that goes back to the fallback keeps its pages for
// the next one (jemalloc's own default purges them at the free, and every page faults
// in again), unless MALLOC_CONF says otherwise. In jemalloc's arena 0, which the
// option alone does not reach, and which every thread's blocks come from (Note [The
// fallback's shared arena]).
TEST(PreloadFallback, KeepsTheFreedPagesOfHugeBlocks) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  start_fallback();
  EXPECT_EQ(size_setting("opt.oversize_threshold"), 0u) << "jemalloc did not read the preload library's malloc_conf";
  on_new_thread([&] {
    unsigned arena = 1;
    std::size_t len = sizeof arena;
    ASSERT_EQ(mallctl("thread.arena", &arena, &len, nullptr, 0), 0);
    ASSERT_EQ(arena, 0u) << "the test means to exercise arena 0";
    constexpr std::size_t kSize = std::size_t{32} << 20;
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    for (int round = 0; round < 2; ++round) {
      void* p = detail::backend::fallback_alloc(kSize, 16);
      ASSERT_NE(p, nullptr);
      // 4 KiB pages even where transparent huge pages are `always`, so that a purged
      // block shows as 8,192 faults rather than 16.
      const std::uintptr_t first = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
      const std::uintptr_t last = (reinterpret_cast<std::uintptr_t>(p) + kSize) & ~(page - 1);
      madvise(reinterpret_cast<void*>(first), last - first, MADV_NOHUGEPAGE);
      const long before = minor_faults();
      std::memset(p, round + 1, kSize);
      const long faults = minor_faults() - before;
      detail::backend::fallback_free(p);
      // The first round faults its pages in; the second reuses them.
      if (round == 1) EXPECT_LT(faults, 512) << "a freed 32 MiB block's pages were given back at once";
    }
  });
}

// Note [The fallback's dirty extents] (backend/jemalloc_backend.cc): a burst of large
// blocks freed together and allocated again gets the pages the first burst left
// dirty; with jemalloc's default (an extent reused for requests of at least a 64th of
// its size) the second burst is carved from fresh address space and every block's page
// faults in again (736 of the 1,000 blocks here with the option at 6).
TEST(PreloadFallback, ABurstOfLargeBlocksFreedTogetherReusesTheirPages) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  start_fallback();
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  if (check != nullptr && std::strcmp(check, "0") != 0) GTEST_SKIP() << "check mode shadows every block itself";
  EXPECT_EQ(size_setting("opt.lg_extent_max_active_fit"), 16u)
      << "jemalloc did not read the preload library's malloc_conf";
  const int cpu = allowed_cpus().first;
  ASSERT_GE(cpu, 0);
  // One CPU, so that both bursts come from the same arenas (the front cache's is its
  // CPU's; Note [The fallback's shared arena]).
  on_cpu(cpu, [&] {
    // The arena's decay held while the test runs: what is tested is reuse, and a loaded
    // machine may keep the thread off its CPU between the bursts long enough for jemalloc
    // to purge the first burst's pages (its own decay, 10 s, not the fit).
    unsigned arena = 0;
    std::size_t len = sizeof arena;
    ASSERT_EQ(mallctl("thread.arena", &arena, &len, nullptr, 0), 0);
    const std::string decay = "arena." + std::to_string(arena) + ".dirty_decay_ms";
    ssize_t was = 0;
    ssize_t never = -1;
    len = sizeof was;
    ASSERT_EQ(mallctl(decay.c_str(), &was, &len, &never, sizeof never), 0);
    constexpr std::size_t kSize = 200000;
    constexpr int kBlocks = 1000;
    std::vector<unsigned char*> blocks(kBlocks);
    long second_burst_faults = 0;
    for (int round = 0; round < 2; ++round) {
      const long before = minor_faults();
      for (unsigned char*& p : blocks) {
        p = static_cast<unsigned char*>(detail::backend::fallback_alloc(kSize, 16));
        ASSERT_NE(p, nullptr);
        p[0] = static_cast<unsigned char>(round + 1);
      }
      if (round == 1) second_burst_faults = minor_faults() - before;
      for (unsigned char* p : blocks) {
        EXPECT_EQ(p[0], round + 1);
        detail::backend::fallback_free(p);
      }
    }
    EXPECT_EQ(mallctl(decay.c_str(), nullptr, nullptr, &was, sizeof was), 0);
    EXPECT_LT(second_burst_faults, kBlocks / 10) << "the second burst did not reuse the first burst's pages";
  });
}

// stats.arenas.<arena>.<field> after refreshing the statistics: large.nmalloc, the large
// blocks the arena handed out (thread-cache hits are not in it); pdirty, its dirty pages.
template <typename T>
T arena_stat(unsigned arena, const char* field) {
  std::uint64_t epoch = 1;
  std::size_t len = sizeof epoch;
  mallctl("epoch", &epoch, &len, &epoch, len);
  const std::string name = "stats.arenas." + std::to_string(arena) + "." + field;
  T n = 0;
  len = sizeof n;
  EXPECT_EQ(mallctl(name.c_str(), &n, &len, nullptr, 0), 0) << name;
  return n;
}
std::uint64_t arena_large_mallocs(unsigned arena) { return arena_stat<std::uint64_t>(arena, "large.nmalloc"); }
std::size_t arena_dirty_pages(unsigned arena) { return arena_stat<std::size_t>(arena, "pdirty"); }

// Note [The fallback's thread cache] (backend/jemalloc_backend.cc): jemalloc's own thread
// cache keeps its default, 32 KiB, and a large block the fallback serves again and again
// on one thread (here 96 KiB, 3 times that) comes from the front cache's lists after the
// first time, neither from the thread's arena nor from the front cache's (without the
// front cache, every one of them would be an arena allocation). Auto mode's rule for
// blocks that never overlap still sees 128 KiB kept per thread.
TEST(PreloadFallback, ServesRecurringLargeBlocksWithoutAnArena) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  start_fallback();
  const char* off = std::getenv("REPLAYALLOC_FRONT_CACHE");
  if (off != nullptr && std::strcmp(off, "0") == 0) GTEST_SKIP() << "REPLAYALLOC_FRONT_CACHE=0";
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  if (check != nullptr && std::strcmp(check, "0") != 0) GTEST_SKIP() << "check mode has no front cache";
  EXPECT_EQ(size_setting("arenas.tcache_max"), std::size_t{32} << 10) << "jemalloc's thread cache is not at its default";
  EXPECT_EQ(detail::backend::thread_cache_max(), std::size_t{128} << 10)
      << "auto mode's rule does not see what the front cache keeps";
  unsigned arena = 0;
  std::size_t len = sizeof arena;
  ASSERT_EQ(mallctl("thread.arena", &arena, &len, nullptr, 0), 0);
  void* first = detail::backend::fallback_alloc(16, 16);  // opens the thread's front cache
  ASSERT_NE(first, nullptr);
  unsigned front = 0;
  unsigned sharing = 0;
  ASSERT_TRUE(detail::backend::front_cache_arena(&front, &sharing)) << "the front cache is off";
  constexpr std::size_t kSize = std::size_t{96} << 10;
  constexpr int kPairs = 1000;
  const std::uint64_t before = arena_large_mallocs(arena) + arena_large_mallocs(front);
  for (int i = 0; i < kPairs; ++i) {
    auto* p = static_cast<unsigned char*>(detail::backend::fallback_alloc(kSize, 16));
    ASSERT_NE(p, nullptr);
    p[0] = p[kSize - 1] = static_cast<unsigned char>(i);  // a block the program uses
    detail::backend::fallback_free(p);
  }
  EXPECT_LE(arena_large_mallocs(arena) + arena_large_mallocs(front) - before, 2u)
      << "the fallback's recurring 96 KiB blocks were taken from an arena each time";
  detail::backend::fallback_free(first);
}

// Note [The fallback's thread cache] and Note [Zeroing by memset]: the pages of large
// blocks a thread calloc'd and freed serve its next callocs of another class, zeroed
// (ONNX Runtime's outputs copied by Node.js into calloc'd buffers a row longer each
// step). With jemalloc's thread cache at 128 KiB the freed blocks waited in the cache's
// bin of their class and the next class faulted fresh pages in (208 of 192 here).
TEST(PreloadFallback, LargeCallocsOfAnotherClassReuseTheFreedPages) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  start_fallback();
  constexpr int kBlocks = 16;
  constexpr std::size_t kFirst = std::size_t{64} << 10;
  constexpr std::size_t kNext = std::size_t{48} << 10;
  void* first[kBlocks];
  for (void*& p : first) {
    p = detail::backend::fallback_calloc(kFirst);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kFirst);  // the program's data
  }
  for (void* p : first) detail::backend::fallback_free(p);
  void* next[kBlocks] = {};
  int not_zero = 0;
  const long before = minor_faults();
  for (void*& q : next) {
    auto* p = static_cast<unsigned char*>(detail::backend::fallback_calloc(kNext));
    ASSERT_NE(p, nullptr);
    for (std::size_t k = 0; k < kNext; k += 256) not_zero += p[k] != 0 ? 1 : 0;
    not_zero += p[kNext - 1] != 0 ? 1 : 0;
    std::memset(p, 2, kNext);
    q = p;
  }
  const long faults = minor_faults() - before;
  for (void* p : next) detail::backend::fallback_free(p);
  EXPECT_EQ(not_zero, 0) << "a calloc'd block held the freed blocks' bytes";
  EXPECT_LT(faults, kBlocks) << "the 48 KiB callocs faulted " << faults << " pages in where 1 MiB of freed pages waited";
}

// Note [The fallback's shared arena] (backend/jemalloc_backend.cc): every thread's
// fallback blocks come from one arena, so a thread that exits leaves that arena's free
// pages to the threads still running, where jemalloc's default (an arena per thread)
// purges them all at its exit, and its successor faults them back in; and a large block
// one thread freed serves another thread's next one.
TEST(PreloadFallback, AThreadThatExitsLeavesItsPagesToTheOtherThreads) {
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF is set";
  start_fallback();
  (void)replayalloc::stats();
  unsigned narenas = 0;
  std::size_t l = sizeof narenas;
  ASSERT_EQ(mallctl("opt.narenas", &narenas, &l, nullptr, 0), 0);
  EXPECT_EQ(narenas, 1u) << "jemalloc did not read the preload library's malloc_conf";
  unsigned mine = UINT32_MAX;
  l = sizeof mine;
  ASSERT_EQ(mallctl("thread.arena", &mine, &l, nullptr, 0), 0);
  // The arena's dirty pages of earlier tests purged first, and its decay held while the
  // test runs: what is tested is which pages the exit leaves, and a loaded machine may
  // keep a thread off its CPU long enough for jemalloc's own decay (10 s) to purge them.
  const std::string purge = "arena." + std::to_string(mine) + ".purge";
  ASSERT_EQ(mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0), 0);
  const std::string decay = "arena." + std::to_string(mine) + ".dirty_decay_ms";
  ssize_t was = 0;
  ssize_t never = -1;
  l = sizeof was;
  ASSERT_EQ(mallctl(decay.c_str(), &was, &l, &never, sizeof never), 0);
  // A worker on one CPU uses and frees 12 MiB of 3 MiB blocks (above the front cache's
  // classes: Note [Large blocks in the front cache]; dirty pages of the arena) and
  // exits; then a thread on another CPU, where there is one, allocates the same.
  const auto [first, last] = allowed_cpus();
  ASSERT_GE(first, 0);
  constexpr std::size_t kBlock = std::size_t{3} << 20;
  unsigned theirs = UINT32_MAX;
  std::size_t dirty_at_exit = 0;
  on_cpu(last, [&] {
    void* blocks[4];
    for (void*& b : blocks) {
      b = detail::backend::fallback_alloc(kBlock, 16);
      ASSERT_NE(b, nullptr);
      std::memset(b, 1, kBlock);
    }
    for (void* b : blocks) detail::backend::fallback_free(b);
    std::size_t n = sizeof theirs;
    ASSERT_EQ(mallctl("thread.arena", &theirs, &n, nullptr, 0), 0);
    dirty_at_exit = arena_dirty_pages(theirs);
  });
  EXPECT_EQ(theirs, mine) << "two threads used different arenas";
  ASSERT_GE(dirty_at_exit, std::size_t{512}) << "the worker's freed blocks were not dirty pages of its arena";
  // The arena still has a thread: the worker's exit purged nothing.
  EXPECT_GE(arena_dirty_pages(theirs), dirty_at_exit / 2) << "the worker's exit purged the arena a running thread still uses";
  // The next thread's 3 MiB blocks are the worker's pages (jemalloc takes one of the four
  // from fresh pages all the same: ~770 faults; with an arena per CPU, all 3,072).
  long faults = 0;
  on_cpu(first, [&] {
    const long before = minor_faults();
    void* again[4];
    for (void*& b : again) {
      b = detail::backend::fallback_alloc(kBlock, 16);
      ASSERT_NE(b, nullptr);
      std::memset(b, 2, kBlock);
    }
    faults = minor_faults() - before;
    for (void* b : again) detail::backend::fallback_free(b);
  });
  EXPECT_EQ(mallctl(decay.c_str(), nullptr, nullptr, &was, sizeof was), 0);
  EXPECT_LT(faults, 1536) << "the worker's freed pages did not serve the next thread (" << faults
                          << " faults for 3,072 pages)";
}

}  // namespace
}  // namespace replayalloc::contract
