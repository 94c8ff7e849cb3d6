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
// stack and written with one write(2), as every message (support/log.h). The log
// observes: the engine hands it each decision of the key policy (runtime/key_policy.h)
// and what the mechanism met (a slab made, none to be had), and the reasons said are
// the decisions' own (begin_decision::why) or made here from them (a replay's
// verdict), never read again off the key's state.
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

struct begin_decision;
struct recording_decision;
struct replay_summary;
struct replay_verdict;

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

// The observers. What an iteration's beginning decided (its reason, when it passes
// through); a pass the mechanism made (the mode off, no memory for a recording, no slab
// to be had: `why` a string literal); a new slab made in `ns`; a recording of
// `allocations` ended, and what was decided after it (a plan asked for); a replay's
// figures and verdict (also said at REPLAYALLOC_VERBOSE=3 when it deviated or grew).
void log_begin(iteration_log& log, const begin_decision& b) noexcept;
inline void log_passed(iteration_log& log, const char* why) noexcept { log.passed = why; }
inline void log_slab(iteration_log& log, std::uint64_t ns, std::uint64_t bytes) noexcept {
  log.slab_ns = ns;
  log.slab_bytes = bytes;
}
inline void log_recorded(iteration_log& log, std::uint64_t allocations) noexcept { log.recorded = allocations; }
void log_after_recording(iteration_log& log, const recording_decision& d) noexcept;
void log_replay(iteration_log& log, const char* key, const replay_summary& rs, const replay_verdict& v) noexcept;

// The line of an iteration of `key` (regime, -1 if none), ended at `ended_ns` (before
// its end's own work: planning, the policy) and whose end's work finished now.
// `recorded` / `replayed`: what it was.
void say_iteration(const iteration_log& log, const char* key, int regime, std::uint32_t thread_no,
                   bool recorded, bool replayed, std::uint64_t ended_ns) noexcept;

}  // namespace replayalloc::detail
