// integrations/cuda/device_domain.h: the device domain's entry points.
//
// Layer: integration (cuda), internal to the libraries that build the device domain
// (device_domain.cc and its parts, integrations/cuda/CMakeLists.txt). The public
// faces over these are replayalloc/cuda.h (C, PyTorch's pluggable allocator) and
// replayalloc/cuda.hpp (the memory resource), in cuda_api.cc, and, in the LD_PRELOAD
// library, the interposed cudaMalloc/cudaFree/cudaMallocAsync/cudaFreeAsync
// (hooks/cuda_hooks.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace replayalloc::detail {

// How a block was asked for: where its miss goes, and what its free promises.
enum class device_api : std::uint8_t {
  stream_ordered,  // cudaMallocAsync, the memory resource, PyTorch: misses on cudaMallocAsync
  synchronous,     // cudaMalloc: misses on cudaMalloc; a slab block's free waits for the device
};

// A device block of `size` bytes usable on `stream` of `device` (the current one).
// Inside the thread's iteration, from the (device, stream) slab; else from the runtime.
// Returns null when neither can serve it (device_last_error() says why).
void* device_alloc(std::size_t size, int device, cudaStream_t stream,
                   device_api api = device_api::stream_ordered);
// As device_alloc (stream-ordered), saying whether the block is a slab's (true) or the
// runtime's (false): the native allocator's reserved bytes (native_allocator.cc) without
// a lookup of the block's slab.
void* device_alloc_tagged(std::size_t size, int device, cudaStream_t stream, bool& from_slab);
// pre: p from device_alloc (any thread) or null. `stream` is where p was last used.
void device_free(void* p, int device, cudaStream_t stream,
                 device_api api = device_api::stream_ordered);
// The runtime's error of the calling thread's last failed device_alloc.
cudaError_t device_last_error();

}  // namespace replayalloc::detail
