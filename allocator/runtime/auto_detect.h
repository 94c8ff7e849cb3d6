// replayalloc/runtime/auto_detect.h: finding the iteration of a program that marks none.
//
// Layer: runtime. Auto mode (REPLAYALLOC_MODE=auto, the LD_PRELOAD default) watches
// each thread's stream of allocations (those of at least REPLAYALLOC_MIN_SIZE) for a
// period: the P whose repetition reaches farthest back (at least three periods alike, 64
// allocations, and at least min_period_bytes per period), the smaller on ties
// (period_detector::detect says why). The
// iteration boundary is then put where the fewest bytes were live over the last
// period (an inference's inputs and outputs, not its activations, are live there),
// and from that point on the thread runs iterations of P allocations, recorded,
// planned and replayed as marked ones are. Note [Auto mode]: sizes only, no call
// sites; a program whose period changes (a new input shape) deviates, is recorded
// again, and, deviating on, goes back to watching.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace replayalloc::detail {

// The least a period must allocate to be taken for an iteration (see detect()).
inline constexpr std::uint64_t min_period_bytes = std::uint64_t{256} << 10;

class period_detector {
 public:
  explicit period_detector(std::uint32_t history = 16384) : history_(history) {}

  // One allocation of `size` bytes, with `live` bytes (of watched allocations) live
  // just before it. Returns true when a period was found by this call.
  bool observe(std::uint64_t size, std::uint64_t live);

  bool found() const { return period_ != 0; }
  std::uint32_t period() const { return period_; }
  // The stream position (count of observed allocations) where the next iteration
  // starts: a boundary at or after count().
  std::uint64_t next_boundary() const;
  std::uint64_t count() const { return count_; }
  // A stable name for the period's sequence of sizes.
  std::uint64_t signature() const { return signature_; }
  void reset();
  // The current period did not hold up (its iterations kept deviating): forget it and
  // never pick it again.
  void reject_current();

 private:
  bool detect();
  bool rejected(std::size_t p) const;
  std::vector<std::uint32_t, backend::internal_allocator<std::uint32_t>> rejected_;
  std::uint32_t history_;
  std::vector<std::uint64_t, backend::internal_allocator<std::uint64_t>> sizes_;
  std::vector<std::uint64_t, backend::internal_allocator<std::uint64_t>> live_;
  std::uint64_t count_ = 0;    // allocations observed (the stream position)
  std::uint64_t base_ = 0;     // stream position of sizes_[0]
  std::uint32_t period_ = 0;
  std::uint64_t boundary_ = 0; // a stream position where an iteration starts
  std::uint64_t signature_ = 0;
};

}  // namespace replayalloc::detail
