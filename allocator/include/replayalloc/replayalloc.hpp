// replayalloc/replayalloc.hpp: the C++ API, a thin layer over replayalloc.h.
#pragma once

#include <cstdint>
#include <string>

#include "replayalloc/replayalloc.h"

namespace replayalloc {

/// One iteration of `key` on this thread, for the scope's lifetime.
///
///     for (auto& request : requests) {
///       replayalloc::Iteration it("bert/seq128");
///       serve(request);
///     }
class Iteration {
 public:
  explicit Iteration(const char* key) noexcept : rc_(replayalloc_iteration_begin(key)) {}
  explicit Iteration(const std::string& key) noexcept : Iteration(key.c_str()) {}
  ~Iteration() {
    if (rc_ >= 0) replayalloc_iteration_end();
  }
  Iteration(const Iteration&) = delete;
  Iteration& operator=(const Iteration&) = delete;

  /// False when the key was invalid (nothing was begun).
  bool ok() const noexcept { return rc_ >= 0; }
  /// True when it joined an iteration already open on this thread.
  bool nested() const noexcept { return rc_ == REPLAYALLOC_NESTED; }

 private:
  int rc_;
};

/// Sets this thread's op tag for the scope's lifetime, restoring the previous one.
class OpScope {
 public:
  explicit OpScope(unsigned op_id) noexcept : prev_(replayalloc_current_op()) {
    replayalloc_set_op(op_id);
  }
  ~OpScope() { replayalloc_set_op(prev_); }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  unsigned prev_;
};

/// A snapshot of the process-wide statistics (the same numbers as the JSON).
struct Stats {
  std::uint64_t allocations = 0;      ///< requests at or above REPLAYALLOC_MIN_SIZE (host: smaller ones are not counted)
  std::uint64_t slab_hits = 0;        ///< served from a slab
  std::uint64_t fallbacks = 0;        ///< replaying, but served by the backend (sum below)
  std::uint64_t fallback_size_mismatch = 0;
  std::uint64_t fallback_beyond_plan = 0;
  std::uint64_t fallback_overlap_live = 0;
  std::uint64_t fallback_alignment = 0;
  std::uint64_t fallback_no_slab = 0;
  std::uint64_t fallback_too_large = 0;  ///< larger than the slot's capacity (a new largest shape)
  std::uint64_t backend_planned = 0;  ///< outlived the recording: backend, as planned
  std::uint64_t passthrough = 0;      ///< no replaying iteration (or the CUDA domain's below the minimum)
  std::uint64_t below_min_size = 0;   ///< the CUDA domain's requests below its minimum (the host counts none)
  std::uint64_t frees = 0;            ///< slab blocks freed (a backend block's free is not counted)
  std::uint64_t remote_frees = 0;     ///< slab blocks freed outside their iteration
  std::uint64_t invalid_frees = 0;
  std::uint64_t double_frees = 0;
  std::uint64_t bytes_from_slab = 0;
  std::uint64_t bytes_from_backend = 0;  ///< of the requests at or above REPLAYALLOC_MIN_SIZE
  std::uint64_t iterations = 0;
  std::uint64_t recordings = 0;
  std::uint64_t plans = 0;
  std::uint64_t rerecords = 0;
  std::uint64_t plans_loaded = 0;       ///< plans read from REPLAYALLOC_PLAN_DIR and used
  std::uint64_t plan_files_ignored = 0; ///< plan files refused (corrupt, stale, other program)
  std::uint64_t plans_evicted = 0;      ///< plans dropped for REPLAYALLOC_MAX_PLANS
  std::uint64_t plans_grown = 0;        ///< plans replaced by a larger envelope (a larger shape seen)
  std::uint64_t set_asides = 0;         ///< times a key that does not repeat was set aside (backed off)
  std::uint64_t keys_given_up = 0;      ///< times a key was given up for a long while (Note [Setting aside])
  std::uint64_t iterations_set_aside = 0;  ///< iterations passed through while their key was set aside
  std::uint64_t auto_rests = 0;         ///< times auto mode stopped watching a thread with no period
  std::uint64_t probes = 0;             ///< iterations recorded to learn which regime a key follows
  std::uint64_t plans_predicted = 0;    ///< plans made for a larger shape from fitted sizes, unrecorded
  std::uint64_t plans_background = 0;   ///< plans made and installed by the planner thread
  std::uint64_t plan_wait_us_total = 0; ///< their time from the recording's end to the install, summed (us)
  std::uint64_t plan_wait_us_max = 0;   ///< the longest of those times (us)
  std::uint64_t plans_improved = 0;     ///< smaller plans the planner thread's search swapped in (not in `plans`)
  std::uint64_t plan_search_us_total = 0; ///< time the planner thread spent searching for them (us)
  std::uint64_t iterations_awaiting_plan = 0;  ///< iterations passed through while their plan was being made
  std::uint64_t regimes = 0;            ///< structures planned now, over all keys (Note [Regimes])
  std::uint64_t slab_bytes = 0;         ///< sum of the current plans' slab sizes
  std::uint64_t lower_bound_bytes = 0;  ///< sum of the current plans' lower bounds
  std::uint64_t mapped_bytes = 0;       ///< slab memory committed now (all slabs)
  std::uint64_t mapped_bytes_peak = 0;  ///< the most slab memory committed at once (since the start or reset_stats())
  std::uint64_t backend_bytes = 0;      ///< bytes the fallback allocator (jemalloc, or the C library's) has handed out and not had back, now
  std::uint64_t backend_bytes_peak = 0; ///< the most of those seen when statistics were taken or a slab was made (since the start or reset_stats())
  std::uint64_t keys = 0;
  // Where the process's resident memory is (Note [Resident memory by owner], runtime/stats.cc).
  std::uint64_t resident_bytes = 0;          ///< the process's resident set now (/proc/self/statm)
  std::uint64_t resident_bytes_peak = 0;     ///< its most since the process started (the kernel's; not reset)
  std::uint64_t slab_resident_bytes = 0;     ///< of it, host slab pages (mincore)
  std::uint64_t backend_resident_bytes = 0;  ///< of it, the fallback allocator's (jemalloc's stats.resident)
  // The fallback's front cache (Note [The fallback's front cache]): lists of free blocks
  // of 4-64 KiB moved between threads; all 0 while it is off.
  std::uint64_t front_lists_handed = 0;    ///< lists a thread handed to the depot (its list full, or the thread exiting)
  std::uint64_t front_lists_taken = 0;     ///< lists a thread took from the depot (its own empty)
  std::uint64_t front_lists_released = 0;  ///< lists given back to their runs or jemalloc (the depot's budget full)
  std::uint64_t front_lists_idle = 0;      ///< lists given back unused for a second (Note [Idle lists given back])
  std::uint64_t front_threads_closed = 0;  ///< exited threads whose lists went to the depot
  // What it holds now, in bytes (current values, not reset).
  std::uint64_t front_depot_bytes = 0;    ///< free blocks in the depot's lists
  std::uint64_t front_run_bytes = 0;      ///< runs of medium blocks (Note [Runs for medium blocks]), kept empty ones included
  std::uint64_t front_stashed_bytes = 0;  ///< of those, empty runs kept in stashes (Note [Empty runs kept])
  // The boot heap (Note [A short process's first requests]): a process's first requests,
  // served before jemalloc is booted (current values, not reset).
  std::uint64_t boot_requests = 0;  ///< requests it served
  std::uint64_t boot_bytes = 0;     ///< of its MiB, bytes used (headers included)
};

Stats stats();

/// Sets every counter to zero and every peak to its current value (as
/// torch.cuda.reset_peak_memory_stats and jemalloc's stats reset); the current values
/// (slab_bytes, mapped_bytes, backend_bytes, regimes, keys) are left as they are.
void reset_stats();

}  // namespace replayalloc
