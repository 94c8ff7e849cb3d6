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

// "device D has X MiB free of Y MiB" (or that it did not say), for messages.
void describe_device_memory(char* buf, std::size_t cap);

}  // namespace replayalloc::detail
