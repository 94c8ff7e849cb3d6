// The native allocator's core (replayalloc/cuda_native.hpp) over the simulated runtime:
// what PyTorch's CUDAAllocator adapter relies on. Block handles carry what the free
// needs; recordStream orders a block's reuse after every stream it was used on;
// the statistics are PyTorch's memory_allocated/memory_reserved and their peaks, per
// device; a snapshot lists the slabs with their live blocks; bad input is an error,
// never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "replayalloc/cuda_native.hpp"
#include "replayalloc/replayalloc.hpp"
#include "support/pattern.h"

namespace {

namespace native = replayalloc::cuda::native;
using replayalloc::testing::fill;
using replayalloc::testing::intact;
using ::testing::HasSubstr;

// Lines of the simulated runtime's log from the first one starting with `prefix`.
std::vector<std::string> log_lines(const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& l : fake_cuda::log()) {
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  }
  return out;
}

std::size_t round256(std::size_t n) { return (n + 255) & ~std::size_t{255}; }

// log[at] and log[at + 1] order `own`'s later work after `other`'s: an event recorded on
// `other`, then `own` waiting for it.
void expect_waits(const std::vector<std::string>& log, std::size_t at, cudaStream_t own, cudaStream_t other) {
  ASSERT_GT(log.size(), at + 1) << ::testing::PrintToString(log);
  EXPECT_THAT(log[at], ::testing::MatchesRegex("record ev[0-9]+ " + fake_cuda::name(other)));
  EXPECT_THAT(log[at + 1], ::testing::MatchesRegex("wait " + fake_cuda::name(own) + " ev[0-9]+ from " +
                                                   fake_cuda::name(other)));
}

class Native : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda::set_device_memory(std::size_t{16} << 30);
    cudaSetDevice(0);
    cudaStreamCreate(&s1_);
    cudaStreamCreate(&s2_);
    cudaStreamCreate(&s3_);
    native::reset_accumulated_stats(0);
    native::reset_peak_stats(0);
    fake_cuda::clear_log();
  }
  void TearDown() override {
    cudaStreamDestroy(s1_);
    cudaStreamDestroy(s2_);
    cudaStreamDestroy(s3_);
  }

  // One inference-shaped iteration under `key` on s1: every block filled and checked
  // while the next ones are live. Returns the pointers in allocation order.
  std::vector<void*> iteration(const char* key, std::uint64_t salt) {
    const std::vector<std::size_t> sizes = {1 << 20, 256 << 10, 64 << 10, 512 << 10, 4096};
    replayalloc::Iteration it(key);
    std::vector<native::allocation> live;
    std::vector<void*> ptrs;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      native::allocation a = native::allocate(sizes[i], 0, s1_);
      EXPECT_EQ(native::block_ptr(a.ctx), a.ptr);
      EXPECT_EQ(native::block_size(a.ctx), sizes[i]);
      fill(a.ptr, sizes[i], salt * 10 + i);
      ptrs.push_back(a.ptr);
      live.push_back(a);
      if (live.size() > 2) {
        EXPECT_TRUE(intact(live.front().ptr, native::block_size(live.front().ctx), salt * 10 + (i - 2)));
        native::free_block(live.front().ctx);
        live.erase(live.begin());
      }
    }
    for (std::size_t k = 0; k < live.size(); ++k) {
      EXPECT_TRUE(intact(live[k].ptr, native::block_size(live[k].ctx), salt * 10 + sizes.size() - live.size() + k));
      native::free_block(live[k].ctx);
    }
    return ptrs;
  }

  cudaStream_t s1_ = nullptr, s2_ = nullptr, s3_ = nullptr;
};

// PyTorch's memory_allocated/max_memory_allocated/memory_reserved under replay: the
// steady iterations come from the slab (one cudaMalloc for it, no cudaMallocAsync),
// their bytes are counted while live and the slab as reserved.
TEST_F(Native, ReplayedBlocksComeFromTheSlabAndTheStatisticsFollowThem) {
  std::vector<void*> steady;
  for (int i = 0; i < 6; ++i) {
    if (i == 3) {
      fake_cuda::clear_log();
      native::reset_accumulated_stats(0);
      native::reset_peak_stats(0);
    }
    std::vector<void*> ptrs = iteration("native-model", i);
    if (i == 3) steady = ptrs;
    if (i > 3) EXPECT_EQ(ptrs, steady);
  }
  const native::device_stats s = native::stats(0);
  EXPECT_EQ(s.blocks_from_slab, 3 * 5);
  EXPECT_EQ(log_lines("malloc_async").size(), 0u);
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocation.allocated, 15);
  EXPECT_EQ(s.allocation.freed, 15);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  // At most three blocks live at once; the largest three consecutive: 1 MiB + 256 KiB + 64 KiB.
  EXPECT_EQ(s.allocated_bytes.peak, (1 << 20) + (256 << 10) + (64 << 10));
  EXPECT_EQ(s.active_bytes.peak, s.allocated_bytes.peak);
  // The slab is reserved (one segment at least as large as the peak of live bytes).
  EXPECT_GE(s.reserved_bytes.current, s.allocated_bytes.peak);
  EXPECT_GE(s.segment.current, 1);
}

// Blocks from the runtime (outside an iteration) are segments of their own: reserved
// while live, given back at the free.
TEST_F(Native, BlocksFromTheRuntimeAreReservedWhileLive) {
  const native::device_stats before = native::stats(0);
  native::allocation a = native::allocate(1000, 0, s2_);
  native::allocation b = native::allocate(70000, 0, s2_);
  EXPECT_THAT(log_lines("malloc_async"), ::testing::ElementsAre("malloc_async " + fake_cuda::name(s2_) + ": 1000",
                                                                "malloc_async " + fake_cuda::name(s2_) + ": 70000"));
  native::device_stats s = native::stats(0);
  EXPECT_EQ(s.allocation.current - before.allocation.current, 2);
  EXPECT_EQ(s.allocated_bytes.current - before.allocated_bytes.current,
            static_cast<std::int64_t>(round256(1000) + round256(70000)));
  EXPECT_EQ(s.requested_bytes.current - before.requested_bytes.current, 71000);
  EXPECT_EQ(s.reserved_bytes.current - before.reserved_bytes.current,
            static_cast<std::int64_t>(round256(1000) + round256(70000)));
  EXPECT_EQ(s.segment.current - before.segment.current, 2);
  native::free_block(a.ctx);
  native::free_block(b.ctx);
  EXPECT_EQ(log_lines("free_async " + fake_cuda::name(s2_)).size(), 2u);
  s = native::stats(0);
  EXPECT_EQ(s.allocation.current, before.allocation.current);
  EXPECT_EQ(s.reserved_bytes.current, before.reserved_bytes.current);
  EXPECT_EQ(s.segment.current, before.segment.current);
  EXPECT_EQ(s.reserved_bytes.peak - before.reserved_bytes.current,
            static_cast<std::int64_t>(round256(1000) + round256(70000)));
}

// recordStream: the free makes the block's stream wait for an event recorded on each
// stream the block was also used on, before the bytes can be reused; nothing when it
// was used on its own stream only, and one event per stream however often it was named.
TEST_F(Native, RecordStreamOrdersTheReuseAfterEveryStreamTheBlockWasUsedOn) {
  native::allocation a = native::allocate(4096, 0, s1_);
  native::record_stream(a.ctx, s1_);  // its own: nothing
  native::record_stream(a.ctx, s2_);
  native::record_stream(a.ctx, s3_);
  native::record_stream(a.ctx, s2_);  // again: nothing more
  fake_cuda::clear_log();
  native::free_block(a.ctx);
  const std::vector<std::string> log = fake_cuda::log();
  ASSERT_EQ(log.size(), 5u) << ::testing::PrintToString(log);
  expect_waits(log, 0, s1_, s2_);
  expect_waits(log, 2, s1_, s3_);
  EXPECT_EQ(log[4], "free_async " + fake_cuda::name(s1_));

  native::allocation b = native::allocate(4096, 0, s1_);
  fake_cuda::clear_log();
  native::free_block(b.ctx);  // a record reused: the last block's streams are not its own
  EXPECT_THAT(fake_cuda::log(), ::testing::ElementsAre("free_async " + fake_cuda::name(s1_)));
}

// A block of a slab used on another stream too: the slab's stream waits before the
// next iteration reuses its bytes.
TEST_F(Native, RecordStreamOnASlabBlockMakesTheSlabsStreamWait) {
  for (int i = 0; i < 4; ++i) iteration("native-rs", i);
  replayalloc::Iteration it("native-rs");
  const std::int64_t from_slab = native::stats(0).blocks_from_slab;
  native::allocation a = native::allocate(1 << 20, 0, s1_);
  ASSERT_EQ(native::stats(0).blocks_from_slab, from_slab + 1);
  native::record_stream(a.ctx, s2_);
  fake_cuda::clear_log();
  native::free_block(a.ctx);
  const std::vector<std::string> log = fake_cuda::log();
  ASSERT_EQ(log.size(), 2u) << ::testing::PrintToString(log);
  expect_waits(log, 0, s1_, s2_);
}

// More streams than a record holds: the free waits for the device instead, and says so
// in the statistics.
TEST_F(Native, MoreRecordedStreamsThanTheRecordHoldsWaitForTheDevice) {
  std::vector<cudaStream_t> extra(native::max_recorded_streams + 1);
  for (cudaStream_t& s : extra) cudaStreamCreate(&s);
  native::allocation a = native::allocate(4096, 0, s1_);
  for (cudaStream_t s : extra) native::record_stream(a.ctx, s);
  fake_cuda::clear_log();
  native::free_block(a.ctx);
  EXPECT_THAT(fake_cuda::log(), ::testing::ElementsAre("sync_device", "free_async " + fake_cuda::name(s1_)));
  EXPECT_EQ(native::stats(0).synchronized_frees, 1);
  for (cudaStream_t s : extra) cudaStreamDestroy(s);
}

// Frees on other threads (PyTorch frees a tensor wherever its last reference goes):
// every block intact until its free, the counters back to where they were, and the
// records reused rather than made without end.
TEST_F(Native, BlocksFreedOnAnotherThreadAreCountedAndTheirRecordsReused) {
  const native::device_stats before = native::stats(0);
  constexpr int rounds = 50, per_round = 300;
  for (int r = 0; r < rounds; ++r) {
    std::vector<native::allocation> made;
    {
      replayalloc::Iteration it("native-threads");
      for (int i = 0; i < per_round; ++i) {
        native::allocation a = native::allocate(4096 + 256 * (i % 7), 0, s1_);
        fill(a.ptr, native::block_size(a.ctx), r * 1000 + i);
        made.push_back(a);
      }
    }
    std::thread other([&] {
      for (int i = 0; i < per_round; ++i) {
        EXPECT_TRUE(intact(made[i].ptr, native::block_size(made[i].ctx), r * 1000 + i));
        native::free_block(made[i].ctx);
      }
    });
    other.join();
  }
  const native::device_stats s = native::stats(0);
  EXPECT_EQ(s.allocation.current, before.allocation.current);
  EXPECT_EQ(s.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(s.allocation.allocated - before.allocation.allocated, rounds * per_round);
  EXPECT_EQ(s.allocation.peak, before.allocation.current + per_round);
}

// Many threads allocating and freeing each other's blocks (a DataPtr's last reference
// goes anywhere) while another reads the statistics and snapshots: every block intact
// until its free, no counter below zero, then a snapshot with every live block in it
// and none overlapping, and every counter back where it was at the end. Records move between the
// threads' lists and the global list (each thread frees more than it allocates in some
// rounds, fewer in others).
TEST_F(Native, ThreadsFreeingEachOthersBlocksWhileSnapshotsAreTaken) {
  const native::device_stats before = native::stats(0);
  constexpr int threads = 4, rounds = 30, per_round = 150;
  std::mutex mu;
  std::vector<std::pair<native::allocation, std::uint64_t>> shared;
  std::atomic<bool> done{false};
  std::atomic<int> bad_snapshots{0};
  std::thread reader([&] {
    while (!done.load()) {
      const native::device_stats s = native::stats(0);
      if (s.allocation.current < 0 || s.allocated_bytes.current < 0 || s.requested_bytes.current < 0) ++bad_snapshots;
      // A snapshot taken while blocks come and go: not atomic, but never a crash.
      std::size_t n = 0;
      for (const native::segment_info& seg : native::snapshot()) n += seg.blocks.size();
      (void)n;
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      cudaSetDevice(0);
      std::mt19937 rng(t);
      const std::string key = "native-mt-" + std::to_string(t);
      for (int r = 0; r < rounds; ++r) {
        std::vector<std::pair<native::allocation, std::uint64_t>> mine;
        {
          std::optional<replayalloc::Iteration> it;
          if (r % 3 != 0) it.emplace(key.c_str());
          for (int i = 0; i < per_round; ++i) {
            const std::size_t size = 4096 + 512 * (i % 9);
            native::allocation a = native::allocate(size, 0, s1_);
            const std::uint64_t tag = (std::uint64_t(t) << 32) | (r * 1000 + i);
            fill(a.ptr, size, tag);
            mine.emplace_back(a, tag);
          }
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          shared.insert(shared.end(), mine.begin(), mine.end());
        }
        const int take = per_round / 2 + static_cast<int>(rng() % per_round);
        for (int k = 0; k < take; ++k) {
          std::pair<native::allocation, std::uint64_t> b;
          {
            std::lock_guard<std::mutex> lock(mu);
            if (shared.empty()) break;
            const std::size_t at = rng() % shared.size();
            b = shared[at];
            shared[at] = shared.back();
            shared.pop_back();
          }
          EXPECT_TRUE(intact(b.first.ptr, native::block_size(b.first.ctx), b.second));
          native::free_block(b.first.ctx);
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  reader.join();
  // Quiescent: every block still live is in the snapshot, and no two overlap.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> listed;
  for (const native::segment_info& seg : native::snapshot()) {
    for (const native::block_info& b : seg.blocks) {
      if (b.allocated) listed.emplace_back(b.address, b.address + b.size);
    }
  }
  std::sort(listed.begin(), listed.end());
  for (std::size_t i = 1; i < listed.size(); ++i) EXPECT_LE(listed[i - 1].second, listed[i].first);
  for (auto& [a, tag] : shared) {
    const auto p = reinterpret_cast<std::uintptr_t>(a.ptr);
    EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [p](const auto& l) { return l.first == p; }));
  }
  for (auto& [a, tag] : shared) {
    EXPECT_TRUE(intact(a.ptr, native::block_size(a.ctx), tag));
    native::free_block(a.ctx);
  }
  EXPECT_EQ(bad_snapshots.load(), 0);
  const native::device_stats s = native::stats(0);
  EXPECT_EQ(s.allocation.current, before.allocation.current);
  EXPECT_EQ(s.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(s.requested_bytes.current, before.requested_bytes.current);
  EXPECT_EQ(s.allocation.allocated - before.allocation.allocated, threads * rounds * per_round);
}

// fork() while other threads move records through the global list and the raw map: the
// child (as a DataLoader worker dropping inherited tensors) frees and allocates without
// hanging on a lock a thread of the parent held (without the locks taken around fork,
// a child hung within 200 forks in each of two runs).
TEST_F(Native, AForkedChildFreesAndAllocatesWhileTheParentsThreadsHeldTheLocks) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        std::vector<void*> raw;
        for (int i = 0; i < 64; ++i) raw.push_back(native::raw_alloc(4096, 0, s1_));
        std::thread other([&] {
          for (void* p : raw) native::raw_delete(p);  // records to another thread's list
        });
        other.join();
      }
    });
  }
  std::vector<native::allocation> inherited;
  for (int i = 0; i < 700; ++i) inherited.push_back(native::allocate(4096, 0, s1_));
  for (int round = 0; round < 200; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::int64_t live = native::stats(0).allocation.current;
      for (native::allocation& a : inherited) native::free_block(a.ctx);  // past the list's limit: the global list
      for (int i = 0; i < 300; ++i) native::free_block(native::allocate(8192, 0, s1_).ctx);
      void* p = native::raw_alloc(4096, 0, s1_);
      native::raw_delete(p);
      _exit(native::stats(0).allocation.current == live - 700 ? 0 : 1);
    }
    int status = -1;
    for (int waited = 0; waited < 5000; ++waited) {  // 10 s
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      ::usleep(2000);
    }
    if (!WIFEXITED(status)) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "fork round " << round << ": the child hung";
      break;
    }
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  stop = true;
  for (std::thread& t : busy) t.join();
  for (native::allocation& a : inherited) native::free_block(a.ctx);
}

// raw_alloc/raw_delete (workspaces): counted as any block; a pointer raw_alloc did not
// return is an error message, not a crash, and changes nothing.
TEST_F(Native, RawDeleteOfAPointerItDidNotHandOutIsAnError) {
  void* p = native::raw_alloc(8192, 0, s1_);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(native::stats(0).allocation.current, 1);
  int not_ours = 0;
  ::testing::internal::CaptureStderr();
  native::raw_delete(&not_ours);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("raw_delete"));
  EXPECT_THAT(err, HasSubstr("did not return; ignored"));
  EXPECT_EQ(native::stats(0).allocation.current, 1);
  native::raw_delete(p);
  EXPECT_EQ(native::stats(0).allocation.current, 0);
  native::raw_delete(nullptr);
}

TEST_F(Native, ABlockFreedTwiceIsAnErrorNotASecondFree) {
  native::allocation a = native::allocate(4096, 0, s1_);
  native::free_block(a.ctx);
  fake_cuda::clear_log();
  ::testing::internal::CaptureStderr();
  native::free_block(a.ctx);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("freed twice"));
  EXPECT_TRUE(fake_cuda::log().empty());
  EXPECT_EQ(native::stats(0).allocation.current, 0);
}

TEST_F(Native, StatisticsArePerDeviceAndABadDeviceIsAnError) {
  const native::device_stats zero0 = native::stats(0);
  native::reset_accumulated_stats(1);
  const native::device_stats zero1 = native::stats(1);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  native::allocation a = native::allocate(5000, 1, s2_);
  EXPECT_EQ(native::stats(1).allocation.current - zero1.allocation.current, 1);
  EXPECT_EQ(native::stats(1).requested_bytes.current - zero1.requested_bytes.current, 5000);
  EXPECT_EQ(native::stats(0).allocation.current, zero0.allocation.current);
  cudaSetDevice(0);
  native::free_block(a.ctx);  // from another current device: its own device's counters
  EXPECT_EQ(native::stats(1).allocation.current, zero1.allocation.current);
  EXPECT_EQ(native::stats(1).allocation.freed, 1);
  EXPECT_THROW(native::allocate(64, native::max_devices, s1_), std::invalid_argument);
  EXPECT_THROW(native::allocate(64, -1, s1_), std::invalid_argument);
  EXPECT_THROW(native::stats(native::max_devices), std::invalid_argument);
}

// reset_peak_stats: peaks fall to the current values (torch.cuda.reset_peak_memory_stats);
// reset_accumulated_stats: allocated and freed counts start again.
TEST_F(Native, ResettingPeaksAndAccumulatedCounts) {
  native::allocation big = native::allocate(1 << 20, 0, s1_);
  native::allocation small = native::allocate(4096, 0, s1_);
  native::free_block(big.ctx);
  EXPECT_EQ(native::stats(0).allocated_bytes.peak, (1 << 20) + 4096);
  native::reset_peak_stats(0);
  EXPECT_EQ(native::stats(0).allocated_bytes.peak, 4096);
  EXPECT_EQ(native::stats(0).reserved_bytes.peak, native::stats(0).reserved_bytes.current);
  native::reset_accumulated_stats(0);
  native::device_stats s = native::stats(0);
  EXPECT_EQ(s.allocation.allocated, 0);
  EXPECT_EQ(s.allocation.freed, 0);
  EXPECT_EQ(s.allocation.current, 1);
  native::free_block(small.ctx);
  s = native::stats(0);
  EXPECT_EQ(s.allocation.freed, 1);
  EXPECT_EQ(s.allocated_bytes.freed, 4096);
}

// A snapshot (torch.cuda.memory._snapshot()): the slab as one segment whose blocks are
// the live ones at their addresses and the free space between, covering it exactly;
// each runtime block a segment of its own.
TEST_F(Native, ASnapshotListsTheSlabWithItsLiveBlocksAndEachRuntimeBlock) {
  for (int i = 0; i < 4; ++i) iteration("native-snap", i);
  native::allocation outside = native::allocate(3000, 0, s2_);
  replayalloc::Iteration it("native-snap");
  native::allocation a = native::allocate(1 << 20, 0, s1_);
  native::allocation b = native::allocate(256 << 10, 0, s1_);
  const std::vector<native::segment_info> segs = native::snapshot();
  const native::segment_info* slab = nullptr;
  const native::segment_info* own = nullptr;
  for (const native::segment_info& s : segs) {
    if (s.slab && s.address <= reinterpret_cast<std::uintptr_t>(a.ptr) &&
        reinterpret_cast<std::uintptr_t>(a.ptr) < s.address + s.total_size) {
      slab = &s;
    }
    if (!s.slab && s.address == reinterpret_cast<std::uintptr_t>(outside.ptr)) own = &s;
  }
  ASSERT_NE(slab, nullptr);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(slab->device, 0);
  EXPECT_EQ(slab->stream, s1_);
  EXPECT_EQ(slab->allocated_size, (1u << 20) + (256u << 10));
  EXPECT_EQ(slab->requested_size, (1u << 20) + (256u << 10));
  std::uintptr_t at = slab->address;
  int allocated = 0;
  for (const native::block_info& bl : slab->blocks) {
    EXPECT_EQ(bl.address, at);
    at += bl.size;
    if (bl.allocated) {
      ++allocated;
      EXPECT_TRUE(bl.address == reinterpret_cast<std::uintptr_t>(a.ptr) ||
                  bl.address == reinterpret_cast<std::uintptr_t>(b.ptr));
    }
  }
  EXPECT_EQ(at, slab->address + slab->total_size);
  EXPECT_EQ(allocated, 2);
  EXPECT_EQ(own->total_size, round256(3000));
  EXPECT_EQ(own->requested_size, 3000u);
  ASSERT_EQ(own->blocks.size(), 1u);
  EXPECT_TRUE(std::is_sorted(segs.begin(), segs.end(), [](const auto& x, const auto& y) {
    return x.address < y.address;
  }));

  // getBaseAllocation: a slab block's base is its slab; a runtime block is its own.
  std::size_t size = 0;
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(native::base_allocation(b.ptr, &size)), slab->address);
  EXPECT_EQ(size, slab->total_size);
  EXPECT_EQ(native::base_allocation(outside.ptr, &size), outside.ptr);
  EXPECT_EQ(size, 3000u);
  int unknown = 0;
  EXPECT_EQ(native::base_allocation(&unknown, &size), nullptr);
  native::free_block(b.ctx);
  native::free_block(a.ctx);
  native::free_block(outside.ctx);
}

TEST_F(Native, EmptyCacheWaitsForEachDeviceAndTrimsItsPool) {
  native::free_block(native::allocate(4096, 0, s1_).ctx);
  fake_cuda::clear_log();
  native::empty_cache();
  EXPECT_THAT(fake_cuda::log(), ::testing::ElementsAre("sync_device", "trim pool0 0", "sync_device", "trim pool1 0"));
  int device = -1;
  cudaGetDevice(&device);
  EXPECT_EQ(device, 0);  // the current device as it was
}

TEST_F(Native, OutOfMemoryThrowsWithWhatWasAskedAndIsCounted) {
  fake_cuda::set_device_memory(std::size_t{1} << 20);
  try {
    native::allocate(std::size_t{8} << 20, 0, s1_);
    FAIL() << "no exception";
  } catch (const replayalloc::cuda::out_of_memory& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot allocate 8388608 bytes of device memory on device 0"));
  }
  EXPECT_EQ(native::stats(0).num_ooms, 1);
  EXPECT_EQ(native::stats(0).allocation.current, 0);
  EXPECT_EQ(native::largest_block(0), std::size_t{1} << 20);
}

TEST_F(Native, NoBytesIsNoBlock) {
  const native::allocation a = native::allocate(0, 0, s1_);
  EXPECT_EQ(a.ptr, nullptr);
  EXPECT_EQ(a.ctx, nullptr);
  native::free_block(nullptr);
  native::record_stream(nullptr, s2_);
  EXPECT_EQ(native::stats(0).allocation.current, 0);
  EXPECT_TRUE(fake_cuda::log().empty());
}

}  // namespace
