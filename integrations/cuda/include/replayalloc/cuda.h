/* replayalloc/cuda.h: replayalloc for CUDA device memory, as C functions.
 *
 * The first two have exactly the signatures PyTorch's CUDAPluggableAllocator loads
 * (torch.cuda.memory.CUDAPluggableAllocator(path, "replayalloc_cuda_alloc",
 * "replayalloc_cuda_free")); replayalloc.torch.use_for_cuda() does that for you.
 *
 * Inside an iteration (replayalloc_iteration_begin/end on the calling thread), the
 * thread's device allocations on one (device, stream) are recorded, planned into a
 * device slab (cudaMalloc) and replayed; everything else goes to cudaMallocAsync on
 * the request's stream. Blocks freed on another stream than their slab's are made
 * safe with an event the slab's stream waits on; no host synchronisation.
 */
#ifndef REPLAYALLOC_CUDA_H_
#define REPLAYALLOC_CUDA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaStream_t is a pointer type; taking void* keeps this header free of CUDA's. */
void *replayalloc_cuda_alloc(size_t size, int device, void *stream);
void replayalloc_cuda_free(void *ptr, size_t size, int device, void *stream);

/* Statistics of the device domains only, as replayalloc_stats_json. */
size_t replayalloc_cuda_stats_json(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* REPLAYALLOC_CUDA_H_ */
