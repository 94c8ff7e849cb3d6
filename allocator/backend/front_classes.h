// replayalloc/backend/front_classes.h: the front cache's size classes, numbered once as
// it is enabled (Note [The fallback's front cache], front_cache.cc; front_classes.cc).
//
// Layer: backend, private to the front cache.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/front_depot.h"

namespace replayalloc::detail::backend::front {

inline constexpr std::size_t front_limit = 64 * 1024;
inline constexpr std::size_t front_least = 16;
// Classes below it are filled list_max / 2 blocks at once (Note [Small blocks in the
// front cache]); those at or above it one block at a time.
inline constexpr std::size_t fill_below = 4096;
// Note [Large blocks in the front cache]: the classes above front_limit, up to
// large_limit, are multiples of 16 KiB (jemalloc's: four per doubling).
inline constexpr std::size_t large_limit = 2048 * 1024;
inline constexpr unsigned large_shift = 14;
inline constexpr std::size_t list_bytes = 64 * 1024;
// A small class's list: 16 KiB of blocks (Note [Small blocks in the front cache]).
inline constexpr std::size_t small_list_bytes = 16 * 1024;
inline constexpr std::uint32_t list_min = 4;
inline constexpr std::uint32_t list_max = 64;

// The classes the cache serves, 1..n (0: a size it does not serve).
struct front_classes {
  unsigned first_large = max_classes;  // the first class above front_limit
  std::size_t largest = 0;             // the largest class up to front_limit
  std::size_t large_largest = 0;       // the largest request served at all
  std::uint8_t class_of[front_limit / 16 + 1] = {};                // (size + 15) / 16 -> class
  std::uint8_t large_class_of[(large_limit >> large_shift) + 1] = {};  // size / 16 KiB -> class
  std::uint32_t class_size[max_classes] = {};
  std::uint32_t list_max_of[max_classes] = {};  // 0 for the classes counted in bytes
};

// Note [A class for a page and a header] (front_classes.cc): P + P/8 for the powers of
// two P from header_least to header_most (4.5 and 9 KiB), beside jemalloc's classes.
inline constexpr std::size_t header_least = 4096;
inline constexpr std::size_t header_most = 8192;
// The cache's class of a request of n bytes (16 <= n <= front_limit): P + P/8 where n is
// above a power of two P of those by at most P/8, else jemalloc's (size_class).
std::size_t class_for(std::size_t n, std::size_t (*size_class)(std::size_t) noexcept) noexcept;

// The classes (class_for) from 16 B to 64 KiB, then jemalloc's above up to 2 MiB, into
// *out; false when none, or more than max_classes.
bool number_classes(std::size_t (*size_class)(std::size_t) noexcept, front_classes* out) noexcept;

// Note [Classes a stream has left] (front_classes.cc): which of a thread's classes above
// 64 KiB its requests have moved away from. Counted in the thread's requests of those
// classes (every one of them takes the cache's slow path); plain data, one per thread.
inline constexpr std::uint32_t left_after = 16;    // requests of other classes
inline constexpr std::uint8_t patience_most = 3;   // left after 16 << 3 at most
struct class_recency {
  std::uint32_t asked = 0;                   // the thread's requests so far
  std::uint32_t asked_at[max_classes] = {};  // `asked` at class k's last request (0: none)
  std::uint32_t left_at[max_classes] = {};   // `asked` when its blocks were given back as left (0: not)
  std::uint8_t patience[max_classes] = {};   // left after left_after << patience[k] requests

  // A request of class k. (`asked` wraps after 2^32 requests; a class asked at 0 is
  // taken for never asked until its next request, and one given back at 0 for not given
  // back: either only keeps its blocks a little longer.)
  void ask(unsigned k) noexcept { asked_at[k] = ++asked; }
  // A request of class k that the thread's list could not serve (ask first): where its
  // blocks had gone back as left, its patience adapts.
  void missed(unsigned k) noexcept {
    if (left_at[k] != 0) came_back(k);
  }
  void came_back(unsigned k) noexcept;
  // Whether the thread asked for class k once and not in its last left_after <<
  // patience[k] requests.
  [[nodiscard]] bool left(unsigned k) const noexcept {
    return asked_at[k] != 0 && asked - asked_at[k] > (left_after << patience[k]);
  }
  // Class k's blocks were given back as left.
  void gave_back(unsigned k) noexcept { left_at[k] = asked; }
};

}  // namespace replayalloc::detail::backend::front
