// replayalloc/support/live_filter.h: which blocks a table of live blocks may hold, in
// one load.
//
// Layer: support. Used by the two tables the free path must otherwise look up on
// every free of a backend block: a recording's live blocks (trace/recorder.h) and
// auto mode's watched ones (runtime/auto_detect.h). Both hold only blocks of at least
// REPLAYALLOC_MIN_SIZE, while most frees in those phases are of smaller blocks.
//
// Note [Live filters]
// ~~~~~~~~~~~~~~~~~~~
// A counting filter over the page of a block's first byte. A free whose bucket is 0
// was certainly not in the table, so it skips the lookup (~75 instructions, on a path
// jemalloc serves in ~35: runtime/shortcuts.h, free_backend_filtered). Requests below
// the minimum (>= 4 KiB by default in the preload library) come from jemalloc slabs
// of their own size classes, so their pages are never a tabled block's first page;
// only hash collisions send them to the lookup. Exact in one direction only: add()
// once per block newly in the table, remove() once per block that left it, clear()
// with the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace replayalloc::detail {

class live_filter {
 public:
  // True when p may be a live block of the table.
  bool maybe_live(const void* p) const { return counts_[bucket(p)] != 0; }
  void add(const void* p) { ++counts_[bucket(p)]; }     // pre: p newly in the table
  void remove(const void* p) { --counts_[bucket(p)]; }  // pre: p just left the table
  void clear() { std::memset(counts_, 0, sizeof counts_); }

 private:
  static constexpr std::size_t buckets = 8192;
  static std::size_t bucket(const void* p) {
    const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(p) >> 12;
    return (page ^ (page >> 13) ^ (page >> 26)) & (buckets - 1);
  }
  // 32-bit counts: a bucket never overflows (live blocks < 2^32).
  std::uint32_t counts_[buckets] = {};
};

}  // namespace replayalloc::detail
