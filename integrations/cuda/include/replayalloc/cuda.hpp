// replayalloc/cuda.hpp: the linked caching CUDA allocator.
//
// A memory resource in the manner of RMM's: allocate(bytes, stream) and
// deallocate(ptr, bytes, stream), stream-ordered. Inside a replayalloc::Iteration the
// calling thread's allocations on one stream are recorded, planned and replayed from
// a device slab; misses and allocations outside iterations use cudaMallocAsync.
//
//     replayalloc::cuda::memory_resource mr;
//     for (auto& request : requests) {
//       replayalloc::Iteration it("bert/seq128");
//       void* act = mr.allocate(bytes, stream);
//       ...
//       mr.deallocate(act, bytes, stream);
//     }
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "replayalloc/replayalloc.hpp"

namespace replayalloc::cuda {

/// Thrown by memory_resource::allocate when neither the plan nor cudaMallocAsync
/// can serve a request; what() says what was asked and what the device had.
class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

/// Large-model support and budgets, applied to device plans made after they are set;
/// the environment (REPLAYALLOC_CUDA_BUDGET, REPLAYALLOC_CUDA_LMS_THRESHOLD,
/// REPLAYALLOC_CUDA_LMS_MEMORY) gives the defaults.
struct options {
  std::uint64_t budget_bytes = 0;     ///< slab budget in bytes (0: none)
  double budget_fraction = 0;         ///< or as a fraction of the device's memory
  std::uint64_t lms_threshold = std::uint64_t{1} << 20;  ///< smallest block moved out
  bool lms_pinned = false;            ///< pinned host memory instead of managed memory
};

/// Replaces the CUDA options. Returns false (and changes nothing) for a fraction
/// outside [0, 1] or a zero threshold.
bool configure(const options& o);

/// Statistics of the device domains only.
Stats stats();

class memory_resource {
 public:
  memory_resource() = default;

  /// A block of `bytes` usable in stream order on `stream`. Throws out_of_memory.
  void* allocate(std::size_t bytes, cudaStream_t stream = nullptr);
  /// pre: p came from allocate(bytes, ...). `stream` is where it was last used; when
  /// it is not the block's slab's stream, that stream waits for it (an event).
  void deallocate(void* p, std::size_t bytes, cudaStream_t stream = nullptr) noexcept;

  bool operator==(const memory_resource&) const noexcept { return true; }
};

}  // namespace replayalloc::cuda
