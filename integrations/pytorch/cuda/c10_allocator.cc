// integrations/pytorch/cuda/c10_allocator.cc: replayalloc as PyTorch's CUDA allocator,
// natively: a c10::cuda::CUDACachingAllocator::CUDAAllocator over the native core
// (replayalloc/cuda_native.hpp), installed in place of the caching allocator.
//
// Layer: integration (pytorch), a PyTorch C++ extension. It is built against the torch
// that imports it, by torch.utils.cpp_extension (replayalloc.torch.use_for_cuda(); the
// interface changes between torch releases, so it is compiled where it runs, never
// shipped compiled), and links libreplayalloc_cuda.so, the library the Python package
// loads: one core in the process, whose iterations (replayalloc.torch.iteration) decide
// what a plan serves.
//
// Note [The native route]
// ~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's pluggable route (torch.cuda.memory.CUDAPluggableAllocator) calls a C
// function per allocation and keeps its own map from pointer to size, device and stream
// under a mutex, to find them again at the free; its memory API (memory_allocated,
// memory_stats, snapshots) knows nothing. Here:
//  * allocate() returns a DataPtr whose context is the core's block record, and whose
//    deleter frees that record: no map and no lock on an allocation or free a slab
//    serves (the core's Note [Block records]).
//  * getDeviceStats, resetPeakStats, resetAccumulatedStats, snapshot and cacheInfo are
//    the core's statistics, segments and free memory in c10's shapes, so
//    torch.cuda.memory_allocated(), max_memory_reserved(), memory_stats(), _snapshot()
//    and cuDNN's benchmark mode see replayalloc's slabs and blocks.
//  * CUDA graphs (Note [Graph pools]).
//
// Note [Graph pools]
// ~~~~~~~~~~~~~~~~~~
// A graph captured by torch.cuda.graph keeps the addresses its kernels were captured
// with: every replay writes them. Between beginAllocateToPool and endAllocateToPool,
// requests on the capturing streams (the filter PyTorch passes) are therefore served
// from the graph's pool and never from a slab, whose bytes the next iteration of the
// same key would hand to other tensors while the graph can still replay over them.
// A pool's blocks come from cudaMalloc (in relaxed capture mode, as the caching
// allocator's do); a block freed returns to its pool's free list, reused only by later
// requests of the same pool on the same stream (the order a replay runs them in), and
// the memory goes back to the runtime at releasePool, once every block of the pool is
// free. Pools are a slow path under a mutex; outside captures, allocate() reads one
// relaxed counter more.
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "replayalloc/cuda_native.hpp"

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
namespace native = replayalloc::cuda::native;

// The pool id type (c10::cuda::MempoolId_t; the namespace it lives in moves between
// releases, the field that carries it does not).
using mempool_t = std::remove_cvref_t<decltype(CCA::SegmentInfo{}.owner_private_pool_id)>;

void delete_block(void* ctx) { native::free_block(ctx); }

// ---- Graph pools (Note [Graph pools]) ------------------------------------------

struct pool_block;

struct graph_pool {
  mempool_t id{};
  int device = 0;
  std::function<bool(cudaStream_t)> filter;  // while capturing into it
  int use_count = 0;                         // createOrIncrefPool less releasePool
  bool capturing = false;
  bool released = false;
  std::vector<pool_block*> blocks;              // every block the pool owns
  std::multimap<std::size_t, pool_block*> free;  // by size: free blocks
};

struct pool_block {
  void* ptr = nullptr;
  std::size_t size = 0;       // rounded, what cudaMalloc gave
  std::size_t requested = 0;  // while live
  cudaStream_t stream = nullptr;
  graph_pool* pool = nullptr;
  bool live = false;
};

std::mutex g_pools_mu;
std::vector<std::unique_ptr<graph_pool>> g_pools;  // under g_pools_mu
std::atomic<int> g_capturing[native::max_devices];  // pools capturing per device
// Pool memory, for the device statistics (under g_pools_mu).
std::int64_t g_pool_reserved[native::max_devices], g_pool_allocated[native::max_devices];
std::int64_t g_pool_segments[native::max_devices], g_pool_blocks[native::max_devices];

graph_pool* find_pool(int device, const mempool_t& id) {
  for (auto& p : g_pools) {
    if (p->device == device && p->id == id && !p->released) return p.get();
  }
  return nullptr;
}

// The pool capturing on (device, stream), or null. Under g_pools_mu.
graph_pool* capturing_pool(int device, cudaStream_t stream) {
  for (auto& p : g_pools) {
    if (p->device == device && p->capturing && !p->released && p->filter && p->filter(stream)) return p.get();
  }
  return nullptr;
}

// Returns a released pool's memory once none of its blocks is live. Under g_pools_mu.
void maybe_drop(graph_pool* p) {
  if (!p->released) return;
  for (pool_block* b : p->blocks) {
    if (b->live) return;
  }
  // Called from a DataPtr's deleter too: errors are warnings, never exceptions.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(p->device));
  C10_CUDA_CHECK_WARN(cudaDeviceSynchronize());  // a replay may still be running
  for (pool_block* b : p->blocks) {
    C10_CUDA_CHECK_WARN(cudaFree(b->ptr));
    g_pool_reserved[p->device] -= static_cast<std::int64_t>(b->size);
    --g_pool_segments[p->device];
    delete b;
  }
  g_pools.erase(std::find_if(g_pools.begin(), g_pools.end(), [p](auto& q) { return q.get() == p; }));
}

void delete_pool_block(void* ctx) {
  auto* b = static_cast<pool_block*>(ctx);
  std::lock_guard<std::mutex> lock(g_pools_mu);
  b->live = false;
  g_pool_allocated[b->pool->device] -= static_cast<std::int64_t>(b->size);
  --g_pool_blocks[b->pool->device];
  b->pool->free.emplace(b->size, b);
  maybe_drop(b->pool);
}

c10::DataPtr pool_allocate(graph_pool* p, std::size_t n, int device, cudaStream_t stream) {
  const std::size_t size = (n + 511) & ~std::size_t{511};
  pool_block* b = nullptr;
  for (auto it = p->free.lower_bound(size); it != p->free.end() && it->first <= 2 * size; ++it) {
    if (it->second->stream == stream) {
      b = it->second;
      p->free.erase(it);
      break;
    }
  }
  if (b == nullptr) {
    void* ptr = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t err = cudaMalloc(&ptr, size);
    C10_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "replayalloc: cudaMalloc of ", size,
                       " bytes for a CUDA graph's pool failed on device ", device, ": ", cudaGetErrorString(err));
    }
    b = new pool_block{ptr, size, 0, stream, p, false};
    p->blocks.push_back(b);
    g_pool_reserved[device] += static_cast<std::int64_t>(size);
    ++g_pool_segments[device];
  }
  b->live = true;
  b->requested = n;
  g_pool_allocated[device] += static_cast<std::int64_t>(b->size);
  ++g_pool_blocks[device];
  return {b->ptr, b, &delete_pool_block, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device))};
}

// ---- The allocator --------------------------------------------------------------

// One of c10's Stat (its namespace, too, moves between releases).
template <class Stat>
void fill(Stat& to, const native::stat& s, std::int64_t extra) {
  to.current = s.current + extra;
  to.peak = std::max(s.peak, s.current) + extra;
  to.allocated = s.allocated;
  to.freed = s.freed;
}

class ReplayallocCUDAAllocator final : public CCA::CUDAAllocator {
 public:
  ReplayallocCUDAAllocator() { std::fill(std::begin(fraction_), std::end(fraction_), 1.0); }

  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    if (g_capturing[device].load(std::memory_order_relaxed) != 0) [[unlikely]] {
      std::lock_guard<std::mutex> lock(g_pools_mu);
      if (graph_pool* p = capturing_pool(device, stream); p != nullptr && n != 0) {
        return pool_allocate(p, n, device, stream);
      }
    }
    native::allocation a;
    try {
      a = native::allocate(n, device, stream);
    } catch (const std::bad_alloc& e) {
      out_of_memory(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    } catch (const std::exception& e) {
      TORCH_CHECK(false, e.what());
    }
    return {a.ptr, a.ctx, &delete_block, c10::Device(c10::kCUDA, device)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  void* raw_alloc(size_t n) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    return raw_alloc_with_stream(n, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(size_t n, cudaStream_t stream) override {
    const c10::DeviceIndex device = c10::cuda::current_device();
    try {
      return native::raw_alloc(n, device, stream);
    } catch (const std::bad_alloc& e) {
      out_of_memory(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    }
  }
  void raw_delete(void* p) override { native::raw_delete(p); }

  void init(int device_count) override {
    TORCH_CHECK(device_count <= native::max_devices, "replayalloc: ", device_count,
                " CUDA devices, more than the ", native::max_devices, " it serves");
    initialized_ = true;
  }
  bool initialized() override { return initialized_; }

  // replayalloc's device memory is the plans' slabs and what misses take from
  // cudaMallocAsync; a fraction is kept for PyTorch's getter and not enforced.
  double getMemoryFraction(c10::DeviceIndex device) { return fraction_[device]; }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(fraction >= 0 && fraction <= 1, "replayalloc: a memory fraction must be in [0, 1], not ", fraction);
    TORCH_WARN_ONCE("replayalloc does not cap a device's memory by a fraction (set_per_process_memory_fraction): "
                    "its slabs are sized by the plans; REPLAYALLOC_CUDA_BUDGET bounds them");
    fraction_[device] = fraction;
  }
  std::vector<CCA::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) { return {}; }
  void enable(bool value) { enabled_ = value; }
  bool isEnabled() const { return enabled_; }

  void emptyCache(mempool_t /*id*/) { native::empty_cache(); }
  void emptyCache() { native::empty_cache(); }

  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override {
    *largest_block = native::largest_block(device);
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = native::base_allocation(ptr, size);
    TORCH_CHECK(base != nullptr, "replayalloc: ", ptr, " is not inside a block replayalloc handed out");
    return base;
  }

  using CCA::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (ptr.get_deleter() == &delete_block && ptr.get_context() != nullptr) {
      native::record_stream(static_cast<native::block*>(ptr.get_context()), stream.stream());
    } else if (ptr.get_deleter() == &delete_pool_block) {
      std::lock_guard<std::mutex> lock(g_pools_mu);
      static_cast<pool_block*>(ptr.get_context())->stream = nullptr;  // never reused in the pool
    }
  }

  CCA::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const native::device_stats s = native::stats(device);
    std::int64_t pool_reserved = 0, pool_allocated = 0, pool_segments = 0, pool_blocks = 0;
    {
      std::lock_guard<std::mutex> lock(g_pools_mu);
      pool_reserved = g_pool_reserved[device];
      pool_allocated = g_pool_allocated[device];
      pool_segments = g_pool_segments[device];
      pool_blocks = g_pool_blocks[device];
    }
    CCA::DeviceStats d;
    // replayalloc has no small and large pools: every figure is the aggregate's and the
    // large pool's (index 2), the small pool's stay 0.
    for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
      fill(d.allocation[i], s.allocation, pool_blocks);
      fill(d.segment[i], s.segment, pool_segments);
      fill(d.active[i], s.active, pool_blocks);
      fill(d.allocated_bytes[i], s.allocated_bytes, pool_allocated);
      fill(d.reserved_bytes[i], s.reserved_bytes, pool_reserved);
      fill(d.active_bytes[i], s.active_bytes, pool_allocated);
      fill(d.requested_bytes[i], s.requested_bytes, pool_allocated);
    }
    d.num_ooms = s.num_ooms;
    return d;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { native::reset_accumulated_stats(device); }
  void resetPeakStats(c10::DeviceIndex device) override { native::reset_peak_stats(device); }

  // No trace is kept (recordHistory): include_traces changes nothing.
  CCA::SnapshotInfo snapshot(mempool_t /*id*/, bool /*include_traces*/) { return make_snapshot(); }
  CCA::SnapshotInfo snapshot(mempool_t /*id*/) { return make_snapshot(); }
  CCA::SnapshotInfo snapshot() { return make_snapshot(); }

  // CUDA graphs: Note [Graph pools].
  void beginAllocateToPool(c10::DeviceIndex device, mempool_t id, std::function<bool(cudaStream_t)> filter) override {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    graph_pool* p = pool(device, id);
    TORCH_CHECK(!p->capturing, "replayalloc: a capture into this graph pool is already under way");
    p->filter = std::move(filter);
    p->capturing = true;
    ++p->use_count;  // every begin is balanced by a releasePool (CUDAGraph::reset, use_mem_pool's exit)
    g_capturing[device].fetch_add(1, std::memory_order_relaxed);
  }
  void endAllocateToPool(c10::DeviceIndex device, mempool_t id) override {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    graph_pool* p = find_pool(device, id);
    if (p == nullptr || !p->capturing) return;
    p->capturing = false;
    p->filter = nullptr;
    g_capturing[device].fetch_sub(1, std::memory_order_relaxed);
  }
  void releasePool(c10::DeviceIndex device, mempool_t id) override {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    graph_pool* p = find_pool(device, id);
    if (p == nullptr || --p->use_count > 0) return;
    if (p->capturing) {
      p->capturing = false;
      g_capturing[device].fetch_sub(1, std::memory_order_relaxed);
    }
    p->released = true;
    maybe_drop(p);
  }
  // Graphs (and MemPools) that share a pool hold a count of it (torch 2.8 and newer).
  void createOrIncrefPool(c10::DeviceIndex device, mempool_t id, std::shared_ptr<CCA::CUDAAllocator> = nullptr) {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    ++pool(device, id)->use_count;
  }
  int getPoolUseCount(c10::DeviceIndex device, mempool_t id) {
    std::lock_guard<std::mutex> lock(g_pools_mu);
    graph_pool* p = find_pool(device, id);
    return p == nullptr ? 0 : p->use_count;
  }
  void setUseOnOOM(c10::DeviceIndex, mempool_t, bool) {}
  void setNoSplit(c10::DeviceIndex, mempool_t) {}

  CCA::ShareableHandle shareIpcHandle(void*) override {
    TORCH_CHECK(false, "replayalloc does not share device memory between processes (CUDA IPC): "
                       "use PyTorch's caching allocator in processes that share CUDA tensors");
  }
  std::shared_ptr<void> getIpcDevPtr(std::string) override {
    TORCH_CHECK(false, "replayalloc does not open CUDA IPC handles: use PyTorch's caching allocator "
                       "in processes that share CUDA tensors");
  }

  void recordHistory(bool enabled, CCA::CreateContextFn, size_t, CCA::RecordContext, bool,
                     const std::vector<std::string>&) {
    warn_history(enabled);
  }
  void recordHistory(bool enabled, CCA::CreateContextFn, size_t, CCA::RecordContext, bool) { warn_history(enabled); }
  void recordHistory(bool enabled, CCA::CreateContextFn, size_t, CCA::RecordContext) { warn_history(enabled); }

  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mu_);
    observers_.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(CCA::AllocatorTraceTracker) override {
    TORCH_WARN_ONCE("replayalloc keeps no allocation trace: an allocator trace tracker is never called");
  }

  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      C10_CUDA_CHECK(err);
    }
    // Misses come from the device's default pool (cudaMallocAsync): open it to the peer.
    cudaMemPool_t pool = nullptr;
    C10_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = dev_to_access;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    C10_CUDA_CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                          cudaStream_t stream, bool p2p_enabled) override {
    if (p2p_enabled || dst_device == src_device) {
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    }
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }

  std::shared_ptr<CCA::AllocatorState> getCheckpointState(c10::DeviceIndex, mempool_t) override {
    TORCH_CHECK(false, "replayalloc does not checkpoint a graph pool's state (CUDA graph trees of "
                       "torch.compile's mode=\"reduce-overhead\"): use PyTorch's caching allocator there");
  }
  CCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex, std::shared_ptr<CCA::AllocatorState>) override {
    TORCH_CHECK(false, "replayalloc does not checkpoint a graph pool's state (CUDA graph trees of "
                       "torch.compile's mode=\"reduce-overhead\"): use PyTorch's caching allocator there");
  }

  std::string name() override { return "replayalloc"; }

 private:
  // The pool (device, id), made when new. Under g_pools_mu.
  static graph_pool* pool(int device, const mempool_t& id) {
    if (graph_pool* p = find_pool(device, id)) return p;
    g_pools.push_back(std::make_unique<graph_pool>());
    graph_pool* p = g_pools.back().get();
    p->id = id;
    p->device = device;
    return p;
  }

  static void warn_history(bool enabled) {
    if (enabled) {
      TORCH_WARN_ONCE("replayalloc records no allocation history: memory snapshots list its slabs and blocks, "
                      "without stacks or a trace");
    }
  }

  void out_of_memory(int device) {
    std::vector<CCA::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(observers_mu_);
      observers = observers_;
    }
    if (observers.empty()) return;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    const std::int64_t allocated = native::stats(device).allocated_bytes.current;
    for (auto& f : observers) f(device, allocated, total_b, free_b);
  }

  static CCA::SnapshotInfo make_snapshot() {
    CCA::SnapshotInfo info;
    for (const native::segment_info& s : native::snapshot()) {
      CCA::SegmentInfo seg;
      seg.device = static_cast<c10::DeviceIndex>(s.device);
      seg.address = s.address;
      seg.total_size = s.total_size;
      seg.requested_size = s.requested_size;
      seg.allocated_size = s.allocated_size;
      seg.active_size = s.allocated_size;
      seg.stream = s.stream;
      seg.is_large = true;
      for (const native::block_info& b : s.blocks) {
        CCA::BlockInfo bi;
        bi.size = b.size;
        bi.requested_size = b.requested;
        bi.allocated = b.allocated;
        bi.active = b.allocated;
        seg.blocks.push_back(std::move(bi));
      }
      info.segments.push_back(std::move(seg));
    }
    std::lock_guard<std::mutex> lock(g_pools_mu);
    for (auto& p : g_pools) {
      for (pool_block* b : p->blocks) {  // each cudaMalloc of a graph pool: one segment
        CCA::SegmentInfo seg;
        seg.device = static_cast<c10::DeviceIndex>(p->device);
        seg.address = reinterpret_cast<std::uintptr_t>(b->ptr);
        seg.total_size = b->size;
        seg.requested_size = b->live ? b->requested : 0;
        seg.allocated_size = b->live ? b->size : 0;
        seg.active_size = seg.allocated_size;
        seg.stream = b->stream;
        seg.is_large = true;
        seg.owner_private_pool_id = p->id;
        CCA::BlockInfo bi;
        bi.size = b->size;
        bi.requested_size = seg.requested_size;
        bi.allocated = b->live;
        bi.active = b->live;
        seg.blocks.push_back(std::move(bi));
        info.segments.push_back(std::move(seg));
      }
    }
    return info;
  }

  // Nothing to set up: the core serves from its first call.
  bool initialized_ = true;
  bool enabled_ = true;
  double fraction_[native::max_devices];
  std::mutex observers_mu_;
  std::vector<CCA::OutOfMemoryObserver> observers_;
};

std::shared_ptr<ReplayallocCUDAAllocator> g_allocator;

// Makes replayalloc the process's CUDA allocator. PyTorch refuses once its own has
// served (changeCurrentAllocator: "Can't swap an already initialized allocator").
void install() {
  if (g_allocator) return;
  auto a = std::make_shared<ReplayallocCUDAAllocator>();
  torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(a);
  g_allocator = std::move(a);
}

bool installed() { return g_allocator != nullptr && CCA::get() == g_allocator.get(); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "replayalloc as PyTorch's CUDA allocator (native route; replayalloc.torch.use_for_cuda)";
  m.def("install", &install, "Makes replayalloc the CUDA allocator (before the first CUDA tensor)");
  m.def("installed", &installed, "Whether replayalloc's native allocator is the current CUDA allocator");
}
