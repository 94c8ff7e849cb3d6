// replayalloc/runtime/iteration_log.h: what happened to one iteration, said at its end.
//
// Layer: runtime.
//
// Note [The iteration log]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A slow iteration under replayalloc has a reason the statistics only sum up: it was
// recorded, it waited for its plan, its slab was made and faulted in (the backend's
// free pages purged first), it deviated and the plan grew or was dropped, it passed
// through because no slab was free. At REPLAYALLOC_VERBOSE=3 every iteration ends with
// one line on stderr saying which, with its duration, so that the slowest 1% of a
// service's requests can be matched with what the allocator did in them (bench/RESULTS.md,
// issue 34: the tails). Off (below 3), an iteration's begin and end pay one load and
// one branch each, outside the per-allocation paths; the line is formatted on the
// stack and written with one write(2), as every message (support/log.h).
#pragma once

#include <cstdint>

#include "support/log.h"

namespace replayalloc::detail {

struct iteration_log {
  std::uint64_t began_ns = 0;      // 0: the log is off for this iteration
  std::uint64_t slab_ns = 0;       // making a new slab: the backend's purge, the map, its faults
  std::uint64_t slab_bytes = 0;    // that slab's size (0: none made)
  const char* passed = nullptr;    // why it passed through the backend, when it did
  std::uint64_t recorded = 0;      // allocations recorded, when it was recorded
  std::uint32_t handed = 0;        // replayed: blocks handed out from the slab
  std::uint32_t planned = 0;       // replayed: slots in its plan
  std::uint64_t misses = 0;        // replayed: requests the plan did not serve
  const char* verdict = nullptr;   // replayed: what its end made of a deviation
  bool submitted = false;          // a plan was asked for at its end
};

// Monotonic nanoseconds (clock_gettime: the vDSO, no system call).
std::uint64_t monotonic_ns() noexcept;

// Starts `log` for an iteration when REPLAYALLOC_VERBOSE is 3 or more; marks it off
// otherwise (its other fields are then written but never read).
inline void open_iteration_log(iteration_log& log) noexcept {
  log.began_ns = 0;
  if (log_verbosity() >= static_cast<int>(log_level::debug)) [[unlikely]] {
    log = iteration_log{};
    log.began_ns = monotonic_ns();
  }
}

// The line of an iteration of `key` (regime, -1 if none), ended at `ended_ns` (before
// its end's own work: planning, the policy) and whose end's work finished now.
// `recorded` / `replayed`: what it was.
void say_iteration(const iteration_log& log, const char* key, int regime, std::uint32_t thread_no,
                   bool recorded, bool replayed, std::uint64_t ended_ns) noexcept;

}  // namespace replayalloc::detail
