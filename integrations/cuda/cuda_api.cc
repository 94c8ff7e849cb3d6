// The CUDA integration's public faces over the device domain: replayalloc/cuda.hpp
// (cuda::configure, cuda::stats, the memory resource) and replayalloc/cuda.h (the C
// functions PyTorch's CUDAPluggableAllocator and the Python package load).
//
// Layer: integration (cuda), over device_domain.h and runtime/domain.h. Owns no
// state: each function turns its caller's contract (exceptions, the current device,
// void* streams) into the device domain's. Never: an exception out of a C function or
// out of deallocate.
#include <string>

#include "device_domain.h"
#include "device_slabs.h"
#include "large_model.h"
#include "replayalloc/cuda.h"
#include "replayalloc/cuda.hpp"
#include "runtime/domain.h"
#include "runtime_table.h"

namespace replayalloc::cuda {

bool configure(const options& o) {
  if (o.budget_fraction < 0 || o.budget_fraction > 1 || o.lms_threshold == 0) return false;
  detail::set_cuda_options(o);
  return true;
}

Stats stats() { return detail::domain_stats(detail::domain_kind::device); }

void* memory_resource::allocate(std::size_t bytes, cudaStream_t stream) {
  int dev = 0;
  detail::cuda_rt().get_device(&dev);
  void* p = detail::device_alloc(bytes, dev, stream);
  if (p == nullptr) {
    char mem[128];
    detail::describe_device_memory(mem, sizeof mem);
    throw out_of_memory("replayalloc: cannot allocate " + std::to_string(bytes) +
                        " bytes of device memory (" + mem + ")");
  }
  return p;
}

void memory_resource::deallocate(void* p, std::size_t, cudaStream_t stream) noexcept {
  int dev = 0;
  detail::cuda_rt().get_device(&dev);
  detail::device_free(p, dev, stream);
}

}  // namespace replayalloc::cuda

extern "C" {

REPLAYALLOC_EXPORT void* replayalloc_cuda_alloc(size_t size, int device, void* stream) {
  return replayalloc::detail::device_alloc(size, device, static_cast<cudaStream_t>(stream));
}

REPLAYALLOC_EXPORT void replayalloc_cuda_free(void* ptr, size_t, int device, void* stream) {
  replayalloc::detail::device_free(ptr, device, static_cast<cudaStream_t>(stream));
}

REPLAYALLOC_EXPORT size_t replayalloc_cuda_stats_json(char* buf, size_t cap) {
  return replayalloc::detail::domain_stats_json(replayalloc::detail::domain_kind::device, buf, cap);
}

}  // extern "C"
