// replayalloc/runtime/auto_iteration.h: where an iteration auto mode began ends, and
// whether it repeated its period: decided apart from the watcher that applies it.
//
// Layer: runtime. Pure functions of what the watcher (runtime/auto_mode.cc) knows when
// a request of at least the minimum size arrives in an iteration it began: the period
// found (runtime/auto_detect.h), the requests the iteration made (slow-path ones and
// slab hand-outs) and, in replay, the cursor's position and the plan's slots. Tested
// without an engine (tests/unit/auto_detect_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace replayalloc::detail {

struct auto_iteration {
  // The period (runtime/auto_detect.h).
  std::uint32_t period = 0;       // allocations, or the longest piece between quiet points
  bool quiet = false;             // Note [Iterations between quiet points]
  std::uint32_t quiet_run = 0;    // allocations in a row at the quiet count that end one
  std::uint64_t anchor = 0;       // Note [Anchored iterations]; 0: none
  // The iteration so far.
  bool replaying = false;
  std::uint32_t handed = 0;       // slab hand-outs (replay)
  std::uint32_t count = 0;        // slow-path requests the watcher saw
  std::uint32_t at_quiet = 0;     // of them, in a row at the quiet count
  std::uint32_t cursor_next = 0;  // replay: the plan's next slot, and its slots
  std::uint32_t cursor_count = 0;
  std::uint32_t planned_slots = 0;  // replay: slots with an offset in the slab (0: unknown)
};

// The least an iteration between quiet points makes (runtime/auto_detect.h).
inline constexpr std::uint32_t min_quiet_piece = 16;

// Whether the iteration ends before a request of `size` bytes (which then begins the
// next). Between quiet points: at the quiet count, after min_quiet_piece requests at
// least (past 4 times the longest piece anyway: a block freed by another thread is not
// seen). Anchored (Note [Anchored iterations]): at the anchor's next request after half
// a period at least, or, the anchor lost, after two periods. Otherwise after the
// period's requests, or, in replay, once the plan's slots are walked.
inline bool auto_iteration_ends(const auto_iteration& it, std::uint64_t size) {
  const std::uint64_t made = std::uint64_t{it.handed} + it.count;
  const std::uint64_t period = it.period;
  if (it.quiet) return made >= min_quiet_piece && (it.at_quiet >= it.quiet_run || made >= 4 * period);
  if (it.anchor != 0) return (size == it.anchor && 2 * made >= period) || made >= 2 * period;
  if (it.replaying) return it.cursor_next >= it.cursor_count || made >= period;
  return it.count >= period;
}

// Whether an ended replayed iteration did not repeat its period: it handed out less
// than (100 - deviation_percent)% of what it could (the period, or between quiet points
// what it made; at most the plan's slots, since blocks that outlive the iteration have
// none: they are the backend's).
inline bool auto_iteration_poor(const auto_iteration& it, std::uint32_t deviation_percent) {
  if (!it.replaying) return false;
  const std::uint64_t made = std::uint64_t{it.handed} + it.count;
  std::uint64_t expected = it.quiet ? made : it.period;
  if (!it.quiet && it.planned_slots != 0) expected = std::min<std::uint64_t>(expected, it.planned_slots);
  return std::uint64_t{it.handed} * 100 < expected * (100 - std::min<std::uint32_t>(deviation_percent, 100));
}

}  // namespace replayalloc::detail
