// tests/support/pattern.h: fill patterns that prove no block was overwritten.
//
// Every live block in the replay and stress tests carries a pattern derived from
// its own tag; the pattern is checked in full just before the block is freed. Two
// blocks handed out over the same bytes while both live would overwrite each other's
// pattern, and the check would fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace replayalloc::testing {

inline std::uint8_t pattern_byte(std::uint64_t tag, std::size_t i) {
  std::uint64_t x = tag * 0x9e3779b97f4a7c15ull + i / 64;
  x ^= x >> 29;
  return static_cast<std::uint8_t>(x ^ (i & 63));
}

inline void fill(void* p, std::size_t n, std::uint64_t tag) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = pattern_byte(tag, i);
}

// True when every byte still holds the pattern.
inline bool intact(const void* p, std::size_t n, std::uint64_t tag) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != pattern_byte(tag, i)) return false;
  }
  return true;
}

}  // namespace replayalloc::testing
