// replayalloc/cuda_native.hpp: the native allocator's core, for PyTorch's CUDA side.
//
// What a c10::cuda::CUDACachingAllocator::CUDAAllocator of replayalloc's own needs
// that the memory resource (replayalloc/cuda.hpp) does not give: a handle per block
// that a DataPtr carries as its context (so that the free needs no map of pointers),
// recordStream, per-device statistics in the caching allocator's shape (its
// DeviceStats: memory_allocated, memory_reserved, their peaks, memory_stats), the
// segments of a memory snapshot, cacheInfo and emptyCache. Torch-free: the adapter
// that maps it onto a given torch's CUDAAllocator interface is built against that
// torch (integrations/pytorch/cuda/c10_allocator.cc, which links libreplayalloc_cuda.so:
// these functions are its exports); this core is tested over the simulated runtime
// (tests/cuda/native_test.cc).
//
//     auto a = replayalloc::cuda::native::allocate(bytes, device, stream);
//     // DataPtr(a.ptr, a.ctx, &replayalloc::cuda::native::free_block, Device(kCUDA, device))
//     replayalloc::cuda::native::record_stream(a.ctx, other_stream);  // used there too
//     replayalloc::cuda::native::free_block(a.ctx);  // the DataPtr's deleter
//
// Blocks are served as the memory resource's are: inside a replayalloc::Iteration on
// the calling thread, from the (device, stream) slab of the iteration's plan; else,
// and for every miss, from cudaMallocAsync on the block's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "replayalloc/cuda.hpp"
#include "replayalloc/export.h"

namespace replayalloc::cuda::native {

/// The handle of a block: a DataPtr's context. Opaque; valid from allocate to
/// free_block.
struct block;

struct allocation {
  void* ptr = nullptr;
  block* ctx = nullptr;
};

/// A block of `bytes` on `device` (0 <= device < max_devices; the caller has made it
/// current, as PyTorch's CUDAGuard does), used in stream order on `stream`. Throws
/// out_of_memory when neither the plan nor the runtime can serve it, and
/// std::invalid_argument for a device outside the range.
REPLAYALLOC_EXPORT allocation allocate(std::size_t bytes, int device, cudaStream_t stream);

/// Frees a block (null: nothing). Any thread. When record_stream named other streams
/// than the block's own, the block's stream first waits for each of them (an event
/// recorded there now), so the bytes are reused only after their work; never blocks
/// the host (but see record_stream).
REPLAYALLOC_EXPORT void free_block(void* ctx) noexcept;

/// The block is also used on `stream`: its free will order its reuse after the work
/// enqueued there until then. The block's own stream, or one already named, changes
/// nothing. Beyond max_recorded_streams other streams the free waits for the device
/// instead (counted: device_stats::synchronized_frees).
REPLAYALLOC_EXPORT void record_stream(block* b, cudaStream_t stream) noexcept;
inline constexpr int max_recorded_streams = 6;

/// The block's pointer, size asked for, device and stream.
REPLAYALLOC_EXPORT void* block_ptr(const block* b) noexcept;
REPLAYALLOC_EXPORT std::size_t block_size(const block* b) noexcept;
REPLAYALLOC_EXPORT int block_device(const block* b) noexcept;
REPLAYALLOC_EXPORT cudaStream_t block_stream(const block* b) noexcept;

/// Raw allocations (PyTorch's raw_alloc/raw_delete: cuDNN and cuBLAS workspaces,
/// NCCL): blocks known by their pointer only, kept in a map under a mutex. raw_delete
/// of a pointer raw_alloc did not return logs an error and does nothing.
REPLAYALLOC_EXPORT void* raw_alloc(std::size_t bytes, int device, cudaStream_t stream);
REPLAYALLOC_EXPORT void raw_delete(void* p) noexcept;

inline constexpr int max_devices = 64;

/// One statistic as PyTorch's caching allocator keeps it.
struct stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  ///< added since the last reset_accumulated_stats
  std::int64_t freed = 0;      ///< taken away since then
};

/// A device's statistics, in the fields of c10's DeviceStats that have a meaning
/// here (its aggregate pool; replayalloc has no small and large pools, no splits).
struct device_stats {
  stat allocation;       ///< blocks handed out (allocate and raw_alloc)
  stat segment;          ///< slabs mapped, and blocks taken from the runtime
  stat active;           ///< as allocation: a block freed is reusable at once (stream order)
  stat allocated_bytes;  ///< bytes of the live blocks, rounded up to 256 (what cudaMalloc aligns to)
  stat reserved_bytes;   ///< bytes of the slabs plus those of the runtime's live blocks
  stat active_bytes;     ///< as allocated_bytes
  stat requested_bytes;  ///< bytes asked for by the live blocks
  std::int64_t num_ooms = 0;             ///< allocate or raw_alloc that threw out_of_memory
  std::int64_t synchronized_frees = 0;   ///< frees that waited for the device (record_stream)
  std::int64_t blocks_from_slab = 0;     ///< since the last reset_accumulated_stats
};

/// The device's statistics. Any thread; each figure is read once (a snapshot of
/// counters that other threads move, as PyTorch's are between calls).
REPLAYALLOC_EXPORT device_stats stats(int device);
/// Every peak becomes its current value.
REPLAYALLOC_EXPORT void reset_peak_stats(int device);
/// Every allocated and freed count, num_ooms, synchronized_frees and blocks_from_slab
/// start again from 0.
REPLAYALLOC_EXPORT void reset_accumulated_stats(int device);

/// For cacheInfo (cuDNN's benchmark mode sizes its workspace by it): the largest block
/// a request could get now, the device's free memory as the runtime reports it (misses
/// go to cudaMallocAsync, which can use all of it); 0 when the runtime does not say.
REPLAYALLOC_EXPORT std::size_t largest_block(int device);

/// emptyCache: for every device, waits for it, then gives the runtime's pool back to
/// it (cudaMemPoolTrimTo 0). Slabs stay: they are plans' memory.
REPLAYALLOC_EXPORT void empty_cache() noexcept;

/// The block containing p and its size (getBaseAllocation): for a block of a slab,
/// the slab; for a block from the runtime, the block. Null when p is in neither
/// (or a runtime block's interior: only its first byte is known).
REPLAYALLOC_EXPORT void* base_allocation(void* p, std::size_t* size);

/// A memory snapshot's segments (torch.cuda.memory._snapshot()).
struct block_info {
  std::uintptr_t address = 0;
  std::size_t size = 0;        ///< rounded, as allocated_bytes
  std::size_t requested = 0;
  bool allocated = true;       ///< false: the free space between and after blocks
};
struct segment_info {
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;
  std::size_t requested_size = 0;
  cudaStream_t stream = nullptr;
  bool slab = false;  ///< a plan's slab; false: one block from the runtime
  std::vector<block_info> blocks;  ///< in address order, with the free space between
};
/// Every slab and every live block from the runtime, in address order. Not atomic with
/// other threads' allocations (a block allocated or freed meanwhile may show or not).
REPLAYALLOC_EXPORT std::vector<segment_info> snapshot();

}  // namespace replayalloc::cuda::native
