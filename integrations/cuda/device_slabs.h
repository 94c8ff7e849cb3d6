// integrations/cuda/device_slabs.h: device slabs and their owners.
//
// Layer: integration (cuda), over runtime/domain.h. Owns the slab source of every
// device key (slabs from the runtime's cudaMalloc, each starting on a chunk boundary)
// and the table that names a slab from any pointer into it, so a free finds its slab
// in O(1) without a lock (invariant 3). Also where a slab's stream order is kept:
// Note [Device streams] in device_slabs.cc.
// Never: a device call on the hot path (slabs are made and retired on slow paths only;
// a lookup is loads only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "runtime/domain.h"

namespace replayalloc::detail {

// What a device iteration passes to domain_open: reaches slab_source::on_acquire.
struct acquire_context {
  cudaStream_t stream;  // the stream the iteration's blocks are used on
};

// The slab source of device keys (never destroyed).
slab_source& device_slabs();

// The device slab owning p, or null when p lies in none. Lock-free; any thread.
slab* device_slab_owner(const void* p);

// A device slab as a memory snapshot lists it: where it is, how large, on which
// device, and the stream whose work last used it (null: none yet).
struct device_slab_info {
  int device;
  const void* base;
  std::size_t bytes;
  const void* stream;
};

// Calls f for every device slab mapped now, under the slab source's mutex (f must not
// map or unmap a slab). Slow path: snapshots.
void device_slab_visit(absl::FunctionRef<void(const device_slab_info&)> f);

// Called after a device slab is mapped (+bytes) or unmapped (-bytes), with the device
// it lives on; one observer (the native allocator's statistics, native_allocator.cc),
// set once. Slow path only.
using device_slab_observer = void (*)(int device, std::int64_t bytes);
void set_device_slab_observer(device_slab_observer f);

// Note [Device streams]: `waiter`'s later work runs after what is enqueued on `other`
// now (an event recorded there, which `waiter` waits on; without an event, the host
// waits for `other`). Never blocks the host when an event can be had.
void order_after(cudaStream_t waiter, cudaStream_t other);

// "device D has X MiB free of Y MiB" (or that it did not say), for messages.
void describe_device_memory(char* buf, std::size_t cap);

}  // namespace replayalloc::detail
