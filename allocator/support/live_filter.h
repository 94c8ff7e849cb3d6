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
//
// Note [Filters of one-byte counts]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The counts were 8,192 of 32 bits: a table of a few thousand live blocks (sqlite3's
// in-memory database, ~2,600 watched blocks live) left a quarter of the buckets
// non-zero (1 - e^(-2600/8192)), and so a quarter of the program's small frees went to
// the slow path's lookup (243,389 of its 970,359 frees, for 94,703 watched
// allocations; bench/programs/insert.sql under callgrind). The same 32 KiB now hold
// 32,768 counts of one byte: ~8% there. A count that reaches 255 stays there (sticky:
// neither add() nor remove() moves it) until clear(): such a bucket says "maybe" for
// good, which costs lookups, never a block missed; 255 live blocks on pages of one
// bucket take millions of live blocks in the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace replayalloc::detail {

inline constexpr std::size_t live_filter_buckets = 32768;
inline std::size_t live_filter_bucket(const void* p) {
  const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(p) >> 12;
  return (page ^ (page >> 15) ^ (page >> 30)) & (live_filter_buckets - 1);
}

// Note [Filters of one-byte counts]: a count of 255 is sticky.
inline void live_filter_add(std::uint8_t& c) { c = static_cast<std::uint8_t>(c + (c != 255)); }
inline void live_filter_remove(std::uint8_t& c) { c = static_cast<std::uint8_t>(c - (c != 255)); }

class live_filter {
 public:
  // True when p may be a live block of the table.
  bool maybe_live(const void* p) const { return counts_[live_filter_bucket(p)] != 0; }
  void add(const void* p) { live_filter_add(counts_[live_filter_bucket(p)]); }        // pre: p newly in the table
  void remove(const void* p) { live_filter_remove(counts_[live_filter_bucket(p)]); }  // pre: p just left the table
  void clear() { std::memset(counts_, 0, sizeof counts_); }

 private:
  std::uint8_t counts_[live_filter_buckets] = {};  // Note [Filters of one-byte counts]
};

// Note [A watcher's filter zeroed by the kernel]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread's watcher (runtime/auto_detect.h, auto_state) is made at the thread's first
// request of the minimum size or more, in most programs its first stdio buffer, and its
// filter's 32 KiB were written at once: 8 pages faulted in and ~8,000 instructions of
// memset in every process and thread (perf, /bin/true: 8 of its 187 page faults; 179
// with this, 7 rounds A/B on this host, its time within the spread), where a short
// program's watcher holds a few blocks. So the watcher's counts are memory jemalloc
// hands out zeroed with the watcher (backend::engine_calloc: one block above the thread
// cache's largest, from the fallback's arenas for large callocs, which do not write
// memory they know is zero, fresh from the kernel, and zero a reused block by memset:
// Note [Zeroing by memset]), and a page of them is faulted in when a bucket on it is
// first counted; the watcher forgets few blocks one by one rather than by clear()
// (auto_mode.cc, forget_live). The same counts as live_filter's, at one more load a
// filtered free.
class zeroed_live_filter {
 public:
  static constexpr std::size_t bytes = live_filter_buckets;
  // pre: `zeroed` holds `bytes` zero bytes, as long as the filter.
  explicit zeroed_live_filter(void* zeroed) : counts_(static_cast<std::uint8_t*>(zeroed)) {}
  bool maybe_live(const void* p) const { return counts_[live_filter_bucket(p)] != 0; }
  void add(const void* p) { live_filter_add(counts_[live_filter_bucket(p)]); }        // pre: p newly in the table
  void remove(const void* p) { live_filter_remove(counts_[live_filter_bucket(p)]); }  // pre: p just left the table
  void clear() { std::memset(counts_, 0, bytes); }

 private:
  std::uint8_t* counts_;  // Note [Filters of one-byte counts]
};

}  // namespace replayalloc::detail
