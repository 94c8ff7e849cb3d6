// replayalloc/trace/trace.h: what one iteration allocated, and when.
//
// Layer: trace (above support and backend). A trace is the input of every planner and
// the unit of the trace files. Glossary, used the same way everywhere:
//   event counter  one counter per iteration, advanced by every allocation and every
//                  free; alloc_at and free_at are positions on it.
//   lifetime       [alloc_at, free_at): two allocations conflict when their lifetimes
//                  intersect. A free at position p and an allocation at p never conflict.
//   outliving      freed after the iteration ended (free_at == never_freed): outputs,
//                  caches. Never placed in a slab (invariant 4).
//   op             the source op that asked for the memory (an ATen op, a call site).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace replayalloc {

inline constexpr std::uint64_t never_freed = UINT64_MAX;

struct trace_allocation {
  std::uint64_t id = 0;        // unique within the trace
  std::uint64_t size = 0;      // bytes requested, > 0
  std::uint32_t align = 16;    // alignment requested, a power of two
  std::uint32_t op = 0;        // index into trace::ops
  std::uint64_t alloc_at = 0;  // position on the event counter
  std::uint64_t free_at = never_freed;
  std::uint32_t thread = 0;    // recording thread (a small per-process number)

  bool outlives() const { return free_at == never_freed; }
  friend bool operator==(const trace_allocation&, const trace_allocation&) = default;
};

struct trace {
  std::string key;                            // the plan key it was recorded under
  std::vector<trace_allocation> allocations;  // sorted by alloc_at
  std::vector<std::string> ops;               // op names; never empty ("unknown" first)
  std::uint64_t events = 0;                   // event counter at the iteration's end

  // A stable hash of the allocation sequence (sizes and alignments in order): two
  // recordings with the same signature asked for the same memory in the same order.
  std::uint64_t signature() const;
  // A stable hash of the iteration's structure without its sizes: how many
  // allocations, their alignments, and when each was made and freed. Two recordings
  // with the same shape signature are the same program at different shapes (a
  // sequence length, a batch size): one envelope plan serves both (merge_envelope()).
  std::uint64_t shape_signature() const;

  friend bool operator==(const trace&, const trace&) = default;
};

// Note [Envelope]
// ~~~~~~~~~~~~~~~
// Recordings of one key with the same shape signature are one program at several
// shapes. Their envelope is a trace with each allocation at the largest size recorded
// (its capacity), and the smallest size recorded beside it. Since allocation i of every
// such recording has the same lifetime, a plan of the envelope gives allocation i a
// slot as large as it ever asked for, with the same neighbours in time. At replay
// (replay/fast_path.h) a slot serves a request of at most its capacity, never a larger
// one (invariant 7, allocator/DESIGN.md), and at least:
//  * its capacity, when every recording asked for the same size (a weight buffer, a
//    fixed workspace): such slots keep matching exactly, which is what tells an extra
//    or missing allocation from the expected one (Note [Replay mismatch]);
//  * 1 byte, when the recordings asked for different sizes: the allocation scales with
//    the shape, so any smaller shape (also one never recorded) fits it.
// Safety never depends on which request takes which slot: a slot is handed out only
// when the request fits its capacity and its bytes are free (the overlap lists).
//
// Recordings of an iteration that repeats a step (an LLM request: Note [Periodic
// iterations], trace/period.h) join one envelope whatever their number of steps: its
// structure is the recording with the most steps, and `lines` says where its steps are
// and how each step's sizes follow the position.
struct step_lines {
  std::uint32_t prefix = 0;  // allocations before the first step
  std::uint32_t period = 0;  // allocations per step; 0: the envelope has no period
  std::uint32_t steps = 0;   // full steps
  std::uint32_t tail = 0;    // allocations after them
  std::uint64_t step_events = 0;
  // Per column (a step's c-th allocation): fixed, one size (base) in every step of
  // every recording; linear, size at step s <= base + slope * s in every recording;
  // irregular, neither: its slots keep the capacities recorded at their positions.
  enum : std::uint8_t { fixed, linear, irregular };
  std::vector<std::uint64_t> slope;
  std::vector<std::uint64_t> base;
  std::vector<std::uint8_t> kind;
  // Per column: the recordings disagree on its sizes (another prompt, another batch):
  // its slots serve any smaller request. A column every recording agrees on keeps
  // matching exactly, as in any envelope (Note [Envelope]).
  std::vector<std::uint8_t> varies;
  bool periodic() const { return period != 0; }
  std::uint32_t tail_from() const { return prefix + steps * period; }
};
struct envelope {
  trace tr;                          // sizes: capacities
  std::vector<std::uint64_t> least;  // per allocation: the smallest size recorded
  step_lines lines;                  // Note [Periodic iterations]
};
struct trace_period;
// `period`, when given, is find_period(t) (trace/period.h), already computed.
envelope make_envelope(const trace& t, const trace_period* period = nullptr);
// Adds `t` to `into`. pre: regime_signature(t) == regime_signature(into.tr)
// (trace/period.h): the same structure, or the same step repeated a different number
// of times. Returns true when a capacity or the number of steps grew (the envelope
// needs a new plan).
bool merge_envelope(envelope& into, const trace& t, const trace_period* period = nullptr);
// Per allocation, the least request its slot serves (see above).
std::vector<std::uint64_t> least_served(const envelope& e);
// Note [Growth headroom]
// ~~~~~~~~~~~~~~~~~~~~~~
// A key whose shapes outgrow its plan is likely to keep growing (a decode loop's
// sequence gets one token longer per step; a server's batches fill up). Planning each
// new largest shape exactly would make a plan, a slab and a recording per new length.
// So when an envelope grows past a plan, the capacity of every slot whose size varied
// is raised by a quarter (rounded up to 64 bytes, never above the request limit):
// lengths growing from L to 4L re-plan about 6 times, not 3L times, for at most a
// quarter more slab on the slots that scale. Slots of one fixed size keep it (they
// match exactly). Safety is unchanged: a capacity is what the slot is planned for, and
// a request is served only up to it.
void add_growth_headroom(envelope& e);

// Checks a trace from outside (a file, a test): ids unique, sizes in (0, 2^47],
// alignments powers of two no larger than 2 MiB, alloc_at < free_at, allocations in
// alloc_at order, op indices in range. The message names the first offending id.
absl::Status check_trace(const trace& t);

}  // namespace replayalloc
