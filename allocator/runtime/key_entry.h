// replayalloc/runtime/key_entry.h: one plan key's entry in the engine's table.
//
// Layer: runtime. The entry is the key's policy state (runtime/key_policy_state.h: its
// regimes, what predicts the next, probes, failures; read and written by the decisions
// of runtime/key_policy.h, under the entry's mutex) and what the engine needs of it as
// a table entry (the mutex, its domain's slab source, its users).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "replay/slab_pool.h"
#include "runtime/domain.h"
#include "runtime/key_policy_state.h"
#include "runtime/thread_state.h"

namespace replayalloc::detail {

// placement_adjuster (runtime/domain.h): how a device domain moves allocations out of
// a slab that would not fit its memory budget (large-model support).

struct key_entry : key_policy_state {
  std::mutex mu;
  domain_kind kind = domain_kind::host;
  slab_source* source = nullptr;        // where this key's slabs come from
  placement_adjuster adjust = nullptr;  // optional, with its argument
  void* adjust_arg = nullptr;
  // Under the engine's mutex: when a thread last asked for this key, and how many
  // threads hold it now (from entry_for to domain_end; atomic so domain_end can drop
  // its hold without the mutex). Only an entry nobody holds is evicted.
  std::uint64_t last_used = 0;
  std::atomic<std::uint32_t> users{0};
};

}  // namespace replayalloc::detail
