// replayalloc/support/reentry.h: the thread-local depth of invariant 5's guard.
//
// Layer: support. While a thread is inside the engine's slow paths (recording,
// planning, making a slab, printing statistics), any allocation it makes, directly
// or from a library the engine calls, must not come back into the engine: with the
// LD_PRELOAD library that would re-enter the engine's locks. The guard
// (runtime/thread_state.h: reentry_guard) marks those regions and counts them here;
// the entry points send re-entrant calls straight to the backend.
#pragma once

#include "support/config.h"

namespace replayalloc::detail {

inline thread_local int reentry_depth REPLAYALLOC_TLS_IE = 0;

inline bool in_engine() noexcept { return reentry_depth != 0; }

}  // namespace replayalloc::detail
