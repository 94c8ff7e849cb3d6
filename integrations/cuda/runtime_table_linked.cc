// The runtime table of the linked builds: the CUDA runtime's own functions
// (runtime_table.h). The LD_PRELOAD library has its own (hooks/cuda_hooks.cc).
#include "runtime_table.h"

namespace replayalloc::detail {

const cuda_runtime_table& cuda_rt() {
  static constexpr cuda_runtime_table table{
      &::cudaMalloc,         &::cudaFree,
      &::cudaMallocAsync,    &::cudaFreeAsync,
      &::cudaMallocManaged,  &::cudaHostAlloc,
      &::cudaFreeHost,       &::cudaMemGetInfo,
      &::cudaGetDevice,      &::cudaGetLastError,
      &::cudaGetErrorString, &::cudaStreamSynchronize,
      &::cudaDeviceSynchronize, &::cudaStreamIsCapturing,
      &::cudaEventCreateWithFlags, &::cudaEventRecord,
      &::cudaStreamWaitEvent, &::cudaEventDestroy,
  };
  return table;
}

}  // namespace replayalloc::detail
