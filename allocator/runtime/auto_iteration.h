// replayalloc/runtime/auto_iteration.h: where an iteration auto mode began ends:
// decided apart from the watcher that applies it. Whether it repeated its period is the
// key policy's reading of the replay (Note [One verdict for auto mode], auto_mode.cc).
//
// Layer: runtime. Pure functions of what the watcher (runtime/auto_mode.cc) knows when
// a request of at least the minimum size arrives in an iteration it began: the period
// found (runtime/auto_detect.h), the requests the iteration made (slow-path ones and
// slab hand-outs) and, in replay, the cursor's position. Tested
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
  // Note [Long pieces between anchors] (auto_iteration.h): replay: the iteration's misses
  // so far; the open iteration is a long piece's rest, and whether the step's iteration
  // already asked whether it is one.
  std::uint32_t misses = 0;
  bool long_piece = false;
  bool long_checked = false;
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

// Note [Long pieces between anchors]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Anchored iterations (Note [Anchored iterations]) are a loop's steps, each begun at
// the anchor's request. A piece between two anchors that is no step replayed the step's
// plan for its first requests and missed the rest: ONNX Runtime's prefill under
// Node.js, the step's run over the whole prompt, whose activations (a row of the prompt
// each, below the minimum at one token) make ~120 watched requests against a step's 35.
// Four in five of them went to the fallback, ~7% of the loop's allocations. So a
// replayed step that missed the slab on an eighth of its first period of requests (a
// step misses none; it asks at the first slow-path request past them, once) ends there,
// and the rest of the piece, to the next anchor, is an iteration of a key of its own
// (the step's, "/long" added): recorded, planned and replayed like any, its structures
// (one per range of prompt lengths: kernels that allocate more past some lengths)
// regimes picked by their first request, which a prefill's rest makes at the same
// position (Note [Regimes by first size]). The step cut there is the key policy's
// replay like any (it deviated) and the watcher's poor iteration; the long piece's
// replay is the key policy's only, the period being the step's. The rest ends at the
// next anchor, or after max_long_periods periods (the anchor lost). Measured
// (bench/onnx, 20 + 60 requests, side by side): 74.6-75.7% of the allocations of at
// least 4 KiB from a slab at one session, 79.9-80.0% with long pieces; 77.5% and 81.9%
// at two. Asked as half of them missing (f8d8734), a prefill whose first period the
// step's plan, grown larger, served more than half of stayed on the step: at two
// sessions one run in three to five fell to 78.7-79.7% (its steps' replays 9,611 misses
// against 3,380). tests/preload/host_held_generation.cc models it (fallbacks 7,826 ->
// 2,184). Where it is wrong: a step that outgrew its slots (a longer sequence) and made
// other requests before the anchor hands them to the long piece as a structure that
// does not repeat: recorded once, never planned.

// What the watcher does before a request of `size` bytes in an anchored iteration:
// nothing, end it and begin the next step (auto_iteration_ends), or end it and begin
// the long piece's rest.
enum class auto_cut : std::uint8_t { none, next, long_piece };
// A long piece's rest ends at the anchor, or past this many periods (the anchor lost).
inline constexpr std::uint32_t max_long_periods = 8;
inline auto_cut auto_iteration_cut(const auto_iteration& it, std::uint64_t size) {
  const std::uint64_t made = std::uint64_t{it.handed} + it.count;
  const std::uint64_t period = it.period;
  if (it.anchor != 0 && it.long_piece) {
    return size == it.anchor || made >= max_long_periods * period ? auto_cut::next : auto_cut::none;
  }
  // A replayed step whose first period of requests missed the slab at least an eighth
  // of the time is a piece of another structure: its rest is the long piece's.
  if (it.anchor != 0 && it.replaying && !it.long_checked && made >= period && size != it.anchor &&
      8 * std::uint64_t{it.misses} >= period) {
    return auto_cut::long_piece;
  }
  return auto_iteration_ends(it, size) ? auto_cut::next : auto_cut::none;
}

}  // namespace replayalloc::detail
