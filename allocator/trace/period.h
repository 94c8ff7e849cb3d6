// replayalloc/trace/period.h: the step that repeats inside one iteration (Note
// [Periodic iterations]), and envelopes of iterations that repeat it a different
// number of times.
//
// Layer: trace. Used by the runtime's key policy (which regime a recording joins, how a
// plan grows by steps) and by the engine (what a replayed plan's steps are).
//
// Note [Periodic iterations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An LLM request is a prefill followed by decode steps, as many as the request
// generates: one iteration per request repeats one step's allocations a number of
// times nobody knows in advance, each step's key/value caches one token larger than
// the last. Recordings of such requests have different structures (shape_signature()),
// so each would be a regime of its own and none would ever replay.
//
// find_period() finds the step: the shortest period q such that allocation i and
// allocation i + q are made and freed alike (the same alignment, the same events since
// the allocation before, the same lifetime; blocks freed after the iteration's last
// allocation, such as the generated tokens a request holds to its end, count as "held
// to the end", whenever among the end's frees) over the longest run.
// The iteration is then a prefix (p allocations), `steps` full steps of q
// allocations, and a tail (the last step, whose caches live to the end, and what
// follows it). Two iterations whose prefix, one step and tail are alike are the same
// program run for a different number of steps: they share a regime_signature(), and
// their envelope (merge_envelope) takes the structure of the one with more steps.
//
// Sizes follow the position: step s's block of column c (its c-th allocation) lies, in
// each recording, on a line base + slope * s (slope through the first and last step,
// rounded up; the line above every point, by at most 64 bytes or 1/64 of the size:
// allocators round sizes). The envelope keeps, per column, the largest slope and base
// of its recordings, and every step's capacity is at least its line: a request with a
// shorter prompt, a smaller batch or fewer steps than the largest recorded fits every
// slot it reaches, and the lines extend the plan to steps never recorded. A column
// whose recordings disagree (another prompt, another batch) serves any smaller
// request (least 1); one they agree on keeps matching exactly (Note [Envelope]); one
// whose sizes lie on no line (a loop whose body is not a decode step: layers of
// different widths) keeps the capacities recorded at each position, as any envelope.

// Which requests a plan of such an envelope serves (runtime/key_policy.cc):
//  * fewer steps: a prefix of the plan. The iteration ends before the plan's last
//    slots; slots not reached cost nothing, and the replay is not a deviation;
//  * more steps: the plan serves its own steps and tail, the rest goes to the backend,
//    and extend_envelope() makes the envelope of a longer request (steps copied from
//    the last full step, their sizes from the lines) for the planner thread, without
//    recording: the next such request replays.
// Why no slot can be smaller than its request: a capacity is only what a slot is
// planned for. The hit serves a request only up to its slot's capacity (invariant 7)
// and only on bytes whose earlier blocks were freed (invariant 1), whatever the
// envelope predicted; a wrong line or a wrongly synthesized lifetime costs fallbacks,
// never memory.
#pragma once

#include <cstdint>
#include <optional>

#include "trace/trace.h"

namespace replayalloc {

// The most allocations an envelope extended by steps may hold (a request of 1,000
// decode steps of a 24-layer model is about 250,000).
inline constexpr std::uint64_t max_extended_allocations = std::uint64_t{1} << 20;

struct trace_period {
  std::uint32_t prefix = 0;   // allocations before the first step
  std::uint32_t period = 0;   // allocations per step; 0: no period found
  std::uint32_t steps = 0;    // full steps, at least 2 when found
  std::uint32_t tail = 0;     // allocations after the last full step
  std::uint64_t step_events = 0;  // the event counter's advance per step
  std::uint64_t signature = 0;    // the structure without its number of steps
  bool found() const { return period != 0; }
  std::uint32_t tail_from() const { return prefix + steps * period; }
};

// The step that repeats in `t` (Note [Periodic iterations]); period 0 when no step
// repeats at least twice. O(n) per candidate period, a few dozen candidates.
trace_period find_period(const trace& t);

// The regime of a recording: its periodic signature when it has a period, else its
// shape_signature().
std::uint64_t regime_signature(const trace& t);

// The envelope of a longer request: `e` (periodic) with `steps` full steps, the new
// ones copied from its last full step (their events, lifetimes and alignments), their
// capacities from the columns' lines, the tail moved after them. Nullopt when `e` has
// no period, already has as many steps, or the result would not be a valid trace.
std::optional<envelope> extend_envelope(const envelope& e, std::uint32_t steps);

namespace detail {
// For make_envelope and merge_envelope (trace.cc): the lines of a new envelope's one
// recording (nothing when p has no period), and the merge of a recording with period
// p into a periodic envelope of the same regime.
void add_period(envelope& e, const trace_period& p);
bool merge_periodic(envelope& into, const trace& t, const trace_period& p);
// Raises every step's capacity to its column's line (and the tail's first step's, at
// the position after the last step); a column whose recordings disagree serves any
// smaller request (least 1).
bool raise_to_lines(envelope& e);  // true when a capacity rose
// Folds one recorded allocation into slot `at` of `e`: its capacity at least `size`,
// its least size at most `least`. True when the capacity rose (trace.cc).
bool fold_slot(envelope& e, std::size_t at, std::uint64_t size, std::uint64_t least);
}  // namespace detail

}  // namespace replayalloc
