// integrations/cuda/runtime_table.h: the CUDA runtime functions the device domain calls.
//
// Layer: integration (cuda). device_domain.cc calls the runtime only through this
// table, so that one source serves two builds:
//  * linked (replayalloc_cuda, the Python library, the tests over the simulated
//    runtime): the table holds the runtime's own functions (runtime_table_linked.cc);
//  * the LD_PRELOAD library, which must not link libcudart (programs without CUDA
//    load it too) and which defines cudaMalloc & co itself: the table is filled on
//    first use with the next definitions after the library's own (dlsym RTLD_NEXT,
//    hooks/cuda_hooks.cc), so the domain never calls back into the interposed symbols.
//
// Every entry is non-null. Where no runtime is loaded, each function returns
// cudaErrorInitializationError (the string functions say why).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace replayalloc::detail {

struct cuda_runtime_table {
  cudaError_t (*malloc)(void**, std::size_t);
  cudaError_t (*free)(void*);
  cudaError_t (*malloc_async)(void**, std::size_t, cudaStream_t);
  cudaError_t (*free_async)(void*, cudaStream_t);
  cudaError_t (*malloc_managed)(void**, std::size_t, unsigned int);
  cudaError_t (*host_alloc)(void**, std::size_t, unsigned int);
  cudaError_t (*free_host)(void*);
  cudaError_t (*mem_get_info)(std::size_t*, std::size_t*);
  cudaError_t (*get_device)(int*);
  cudaError_t (*get_last_error)();
  const char* (*get_error_string)(cudaError_t);
  cudaError_t (*stream_synchronize)(cudaStream_t);
  cudaError_t (*device_synchronize)();
  cudaError_t (*stream_is_capturing)(cudaStream_t, cudaStreamCaptureStatus*);
  cudaError_t (*event_create_with_flags)(cudaEvent_t*, unsigned int);
  cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
  cudaError_t (*stream_wait_event)(cudaStream_t, cudaEvent_t, unsigned int);
  cudaError_t (*event_destroy)(cudaEvent_t);
};

// The table of this build. Thread-safe; never allocates through the engine (the
// preload build resolves it under the reentry guard).
const cuda_runtime_table& cuda_rt();

}  // namespace replayalloc::detail
