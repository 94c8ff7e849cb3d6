// The replay contract (replay_contract.h) over the CUDA device domain: iterations
// marked on the host (replayalloc_iteration_begin/end open and close the thread's
// device iteration), blocks from replayalloc::cuda::memory_resource on one stream, over
// the simulated runtime (tests/cuda_fake: device memory is host memory, so the
// contract's patterns are written and read in place).
//
// On a real GPU: build this file and replay_contract.cc into a target linked against
// replayalloc_cuda (tests/contract/CMakeLists.txt says where), drop the fake_cuda calls
// (slab_memory from cudaMemGetInfo instead) and override domain::fill and
// domain::intact with cudaMemcpy through a host buffer: device memory is not the
// host's to read. Nothing else changes.
#include <cuda_runtime_api.h>

#include "contract/replay_contract.h"
#include "device_slabs.h"  // integrations/cuda: device_slab_owner
#include "fake_cudart.h"
#include "replayalloc/cuda.hpp"

namespace replayalloc::contract {
namespace {

class cuda_domain final : public domain {
 public:
  cuda_domain() {
    fake_cuda::set_device_memory(std::size_t{16} << 30);
    cudaStreamCreate(&stream_);
  }
  void begin(const std::string& key) override { replayalloc_iteration_begin(key.c_str()); }
  void end() override { replayalloc_iteration_end(); }
  void* alloc(std::size_t size) override { return mr_.allocate(size, stream_); }
  void free(void* p, std::size_t size) override { mr_.deallocate(p, size, stream_); }
  bool in_slab(const void* p) const override { return detail::device_slab_owner(p) != nullptr; }
  Stats stats() const override { return cuda::stats(); }  // the device domains' only
  std::uint64_t slab_memory() const override { return fake_cuda::device_memory_used(); }
  std::size_t alignment() const override { return 256; }  // what cudaMalloc promises

 private:
  cuda::memory_resource mr_;
  cudaStream_t stream_ = nullptr;
};

domain& cuda_device() {
  static auto* d = new cuda_domain;
  return *d;
}

INSTANTIATE_TEST_SUITE_P(cuda_fake, ReplayContract,
                         ::testing::Values(domain_param{"memory_resource", cuda_device}),
                         domain_param_name);

}  // namespace
}  // namespace replayalloc::contract
