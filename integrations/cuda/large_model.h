// integrations/cuda/large_model.h: large-model support (LMS) and the CUDA options.
//
// Layer: integration (cuda), over runtime/domain.h. Owns the cuda::options in force
// (cuda::configure(), else the environment's REPLAYALLOC_CUDA_* settings), the
// placement adjuster of device keys that moves large allocations out of a slab over
// budget (Note [Large-model support], large_model.cc), and the set of blocks served
// from managed (or pinned host) memory in their place, which only its own functions
// allocate and free. Never on the hot path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "replayalloc/cuda.hpp"
#include "runtime/domain.h"

namespace replayalloc::detail {

// The options in force: those last given to set_cuda_options(), else the
// environment's (read once). Any thread.
cuda::options cuda_options();
// pre: o is valid (cuda::configure checks). Applies to device plans made after.
void set_cuda_options(const cuda::options& o);

// The placement adjuster of device keys (runtime/domain.h: placement_adjuster).
const char* lms_adjust(const trace& t, placement& p, void* arg);

// A block for a slot large-model support moved out of the slab (backend_kind::managed):
// managed memory, or pinned host memory with lms_pinned. *p is set and registered as
// managed on success; the runtime's error otherwise (*p unspecified).
cudaError_t managed_alloc(void** p, std::size_t size);
// Frees p when it is a managed block (true); false, doing nothing, otherwise.
// One atomic load when there is none.
bool managed_free(void* p);

}  // namespace replayalloc::detail
