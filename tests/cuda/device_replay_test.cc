// The CUDA integration against the simulated runtime: device iterations replay from
// a slab, deviations fall back without overwriting live blocks, stream order is kept
// with events, out-of-memory is an error message, and large-model support moves big
// blocks to managed memory when the plan does not fit its budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cuda_runtime_api.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "replayalloc/cuda.h"
#include "replayalloc/cuda.hpp"
#include "support/pattern.h"

namespace {

using replayalloc::testing::fill;
using replayalloc::testing::intact;
using ::testing::HasSubstr;

struct block {
  void* p;
  std::size_t size;
  std::uint64_t tag;
};

bool log_has(const std::string& needle) {
  for (const std::string& l : fake_cuda::log()) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

int count_in_log(const std::string& prefix) {
  int n = 0;
  for (const std::string& l : fake_cuda::log()) n += l.rfind(prefix, 0) == 0;
  return n;
}

// One device iteration of an inference-shaped pattern; returns the pointers.
std::vector<void*> device_iteration(replayalloc::cuda::memory_resource& mr, const char* key,
                                    cudaStream_t s, std::uint64_t salt,
                                    std::vector<std::size_t> sizes = {1 << 20, 256 << 10, 64 << 10,
                                                                      512 << 10, 4096}) {
  std::vector<void*> ptrs;
  replayalloc::Iteration it(key);
  std::vector<block> live;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    block b{mr.allocate(sizes[i], s), sizes[i], salt * 100 + i};
    fill(b.p, b.size, b.tag);  // the simulated device memory is host memory
    ptrs.push_back(b.p);
    live.push_back(b);
    if (live.size() > 2) {
      EXPECT_TRUE(intact(live.front().p, live.front().size, live.front().tag));
      mr.deallocate(live.front().p, live.front().size, s);
      live.erase(live.begin());
    }
  }
  for (const block& b : live) {
    EXPECT_TRUE(intact(b.p, b.size, b.tag));
    mr.deallocate(b.p, b.size, s);
  }
  return ptrs;
}

class Device : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda::set_device_memory(std::size_t{16} << 30);
    cudaStreamCreate(&s1_);
    cudaStreamCreate(&s2_);
    fake_cuda::clear_log();
  }
  void TearDown() override {
    cudaStreamDestroy(s1_);
    cudaStreamDestroy(s2_);
  }
  replayalloc::cuda::memory_resource mr_;
  cudaStream_t s1_ = nullptr, s2_ = nullptr;
};

TEST_F(Device, IterationsReplayFromADeviceSlab) {
  const replayalloc::Stats before = replayalloc::cuda::stats();
  std::vector<void*> steady;
  for (int i = 0; i < 8; ++i) {
    if (i == 2) fake_cuda::clear_log();
    std::vector<void*> ptrs = device_iteration(mr_, "dev-model", s1_, i);
    if (i == 3) steady = ptrs;
    if (i > 3) EXPECT_EQ(ptrs, steady);
  }
  const replayalloc::Stats after = replayalloc::cuda::stats();
  EXPECT_EQ(after.slab_hits - before.slab_hits, 6u * 5);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  // From the first replay on, one slab was made and nothing went to cudaMallocAsync.
  EXPECT_EQ(count_in_log("malloc "), 1);
  EXPECT_EQ(count_in_log("malloc_async"), 0);
  EXPECT_GE(after.slab_bytes, after.lower_bound_bytes);
}

// Shapes that change on the device (Note [Envelope]): a sequence length drawn per
// iteration scales every block but a fixed workspace; once the largest length has been
// seen every iteration is served from the device slab, every block intact (the
// simulated device memory is host memory, checked byte for byte).
TEST_F(Device, AVariableSequenceLengthReplaysFromOneDevicePlan) {
  const replayalloc::Stats before = replayalloc::cuda::stats();
  std::mt19937 rng(9);
  std::vector<std::size_t> lengths = {256, 16};
  for (int i = 0; i < 30; ++i) lengths.push_back(16 + rng() % 241);
  replayalloc::Stats steady;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (i == 4) steady = replayalloc::cuda::stats();
    const std::size_t t = lengths[i];
    device_iteration(mr_, "dev-varlen", s1_, 200 + i, {t * 4096, t * 12288, 64 << 10, t * t * 64, t * 4096});
  }
  const replayalloc::Stats after = replayalloc::cuda::stats();
  EXPECT_EQ(after.slab_hits - steady.slab_hits, 5u * (lengths.size() - 4));
  EXPECT_EQ(after.fallbacks, steady.fallbacks);
  EXPECT_LE(after.plans - before.plans, 2u);
}

TEST_F(Device, OutsideAnIterationMissesGoToMallocAsyncOnTheRequestStream) {
  void* p = mr_.allocate(1000, s2_);
  EXPECT_TRUE(log_has("malloc_async " + fake_cuda::name(s2_) + ": 1000"));
  mr_.deallocate(p, 1000, s2_);
  EXPECT_TRUE(log_has("free_async " + fake_cuda::name(s2_)));
}

TEST_F(Device, ABlockHeldLongerIsNeverOverwritten) {
  for (int i = 0; i < 3; ++i) device_iteration(mr_, "dev-held", s1_, 10 + i);
  const replayalloc::Stats before = replayalloc::cuda::stats();
  // Hold the first block across the whole iteration: later blocks planned on its
  // bytes must go elsewhere.
  replayalloc::Iteration it("dev-held");
  std::vector<block> live;
  const std::size_t sizes[] = {1 << 20, 256 << 10, 64 << 10, 512 << 10, 4096};
  for (std::size_t i = 0; i < 5; ++i) {
    block b{mr_.allocate(sizes[i], s1_), sizes[i], 500 + i};
    fill(b.p, b.size, b.tag);
    live.push_back(b);
  }
  for (const block& b : live) {
    EXPECT_TRUE(intact(b.p, b.size, b.tag)) << b.size;
    mr_.deallocate(b.p, b.size, s1_);
  }
  // The plan had put later blocks on the held ones' bytes: they fell back.
  EXPECT_GT(replayalloc::cuda::stats().fallback_overlap_live, before.fallback_overlap_live);
}

TEST_F(Device, AFreeOnAnotherStreamMakesTheSlabStreamWait) {
  for (int i = 0; i < 3; ++i) device_iteration(mr_, "dev-xstream", s1_, 20 + i);
  fake_cuda::clear_log();
  {
    replayalloc::Iteration it("dev-xstream");
    void* a = mr_.allocate(1 << 20, s1_);
    mr_.deallocate(a, 1 << 20, s2_);  // last used on s2
    const std::vector<std::string> log = fake_cuda::log();
    const std::string rec = "record ", wait = "wait " + fake_cuda::name(s1_);
    auto r = std::find_if(log.begin(), log.end(), [&](const std::string& l) {
      return l.rfind(rec, 0) == 0 && l.find(fake_cuda::name(s2_)) != std::string::npos;
    });
    ASSERT_NE(r, log.end()) << "no event recorded on the freeing stream";
    auto w = std::find_if(r, log.end(), [&](const std::string& l) { return l.rfind(wait, 0) == 0; });
    ASSERT_NE(w, log.end()) << "the slab's stream does not wait for the freeing stream";
    EXPECT_THAT(*w, HasSubstr("from " + fake_cuda::name(s2_)));
    // The rest of the iteration, as planned.
    std::vector<void*> rest;
    for (std::size_t n : {std::size_t{256} << 10, std::size_t{64} << 10, std::size_t{512} << 10,
                          std::size_t{4096}}) {
      rest.push_back(mr_.allocate(n, s1_));
    }
    for (void* p : rest) mr_.deallocate(p, 0, s1_);
  }
}

TEST_F(Device, ASlabTakenOnAnotherStreamWaitsForItsLastStream) {
  for (int i = 0; i < 3; ++i) device_iteration(mr_, "dev-switch", s1_, 30 + i);
  fake_cuda::clear_log();
  device_iteration(mr_, "dev-switch", s2_, 33);
  const std::vector<std::string> log = fake_cuda::log();
  const bool waited = std::any_of(log.begin(), log.end(), [&](const std::string& l) {
    return l.rfind("wait " + fake_cuda::name(s2_), 0) == 0 &&
           l.find("from " + fake_cuda::name(s1_)) != std::string::npos;
  });
  EXPECT_TRUE(waited) << "the slab moved from s1 to s2 without an event";
}

TEST_F(Device, TwoThreadsOnTheirOwnStreamsUseTheirOwnSlabs) {
  for (int i = 0; i < 3; ++i) device_iteration(mr_, "dev-threads", s1_, 40 + i);
  // Both threads hold their first block at the same moment: one slab each.
  std::barrier meet(2);
  void* first[2] = {nullptr, nullptr};
  auto run = [&](int k, cudaStream_t s) {
    replayalloc::Iteration it("dev-threads");
    void* p = mr_.allocate(1 << 20, s);
    fill(p, 1 << 20, 90 + k);
    first[k] = p;
    meet.arrive_and_wait();
    EXPECT_TRUE(intact(p, 1 << 20, 90 + k));
    mr_.deallocate(p, 1 << 20, s);
  };
  const replayalloc::Stats before = replayalloc::cuda::stats();
  std::thread ta(run, 0, s1_), tb(run, 1, s2_);
  ta.join();
  tb.join();
  EXPECT_NE(first[0], first[1]);
  EXPECT_EQ(replayalloc::cuda::stats().slab_hits - before.slab_hits, 2u);
}

TEST_F(Device, ThreadsThatOnlyPassThroughLeaveNoDanglingState) {
  const replayalloc::Stats before = replayalloc::cuda::stats();
  for (int k = 0; k < 8; ++k) {
    std::thread([&] {
      void* p = mr_.allocate(4096, s1_);  // no iteration: cudaMallocAsync
      mr_.deallocate(p, 4096, s1_);
    }).join();
    replayalloc::cuda::stats();  // reads every registered domain: none may be gone
  }
  const replayalloc::Stats after = replayalloc::cuda::stats();
  EXPECT_EQ(after.passthrough - before.passthrough, 8u);
  EXPECT_EQ(after.frees - before.frees, 0u) << "frees counts slab blocks only";
}

TEST_F(Device, OutOfMemoryIsAClearErrorNotACrash) {
  for (int i = 0; i < 2; ++i) device_iteration(mr_, "dev-oom", s1_, 70 + i);
  fake_cuda::set_device_memory(fake_cuda::device_memory_used() + (std::size_t{1} << 20));
  ::testing::internal::CaptureStderr();
  // The plan's slab (about 2 MiB) cannot be made: the iteration passes through.
  std::vector<void*> ptrs = device_iteration(mr_, "dev-oom", s1_, 72, {64 << 10, 4096, 512});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("does not fit"));
  EXPECT_THAT(err, HasSubstr("MiB free of"));
  // A request beyond what the device has: an exception that says so.
  try {
    mr_.allocate(std::size_t{8} << 30, s1_);
    FAIL() << "expected out_of_memory";
  } catch (const replayalloc::cuda::out_of_memory& e) {
    EXPECT_THAT(e.what(), HasSubstr("8589934592 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("MiB free"));
  }
  EXPECT_EQ(replayalloc_cuda_alloc(std::size_t{8} << 30, 0, s1_), nullptr);
}

TEST_F(Device, LargeModelSupportMovesBigBlocksToManagedMemory) {
  replayalloc::cuda::options o;
  o.budget_bytes = std::size_t{1} << 20;   // 1 MiB of slab
  o.lms_threshold = std::size_t{512} << 10;
  ASSERT_TRUE(replayalloc::cuda::configure(o));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 2; ++i) device_iteration(mr_, "dev-lms", s1_, 80 + i);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("large-model support"));
  fake_cuda::clear_log();
  const replayalloc::Stats before = replayalloc::cuda::stats();
  for (int i = 0; i < 3; ++i) device_iteration(mr_, "dev-lms", s1_, 82 + i);
  const replayalloc::Stats after = replayalloc::cuda::stats();
  // The 1 MiB and 512 KiB blocks come from managed memory, the three others from the slab.
  EXPECT_EQ(count_in_log("managed 1048576"), 3);
  EXPECT_EQ(count_in_log("managed 524288"), 3);
  EXPECT_EQ(count_in_log("free_managed"), 6);
  EXPECT_EQ(after.slab_hits - before.slab_hits, 9u);
  EXPECT_EQ(after.backend_planned - before.backend_planned, 6u);
  ASSERT_TRUE(replayalloc::cuda::configure(replayalloc::cuda::options{}));
  EXPECT_FALSE(replayalloc::cuda::configure([] {
    replayalloc::cuda::options bad;
    bad.budget_fraction = 1.5;
    return bad;
  }()));
}

TEST_F(Device, PluggableAllocatorFunctionsFollowPyTorchsSignatures) {
  void* (*alloc)(size_t, int, void*) = replayalloc_cuda_alloc;
  void (*release)(void*, size_t, int, void*) = replayalloc_cuda_free;
  for (int i = 0; i < 4; ++i) {
    replayalloc::Iteration it("dev-pluggable");
    void* a = alloc(4096, 0, s1_);
    void* b = alloc(8192, 0, s1_);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    release(a, 4096, 0, s1_);
    release(b, 8192, 0, s1_);
  }
  char json[2048];
  ASSERT_LT(replayalloc_cuda_stats_json(json, sizeof json), sizeof json);
  EXPECT_THAT(std::string(json), HasSubstr("\"slab_hits\""));
}

}  // namespace
