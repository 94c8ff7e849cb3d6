// Blocks filled with a pattern and checked before their free, and the statistics JSON's
// fields: shared by the preload tests' programs (varlen_service.cc,
// host_held_generation.cc).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pattern_blocks {

struct block {
  unsigned char* p = nullptr;
  std::size_t n = 0;
  unsigned char tag = 0;
};

// Whether every 61st byte still holds the block's tag.
inline bool intact(const block& b) {
  for (std::size_t i = 0; i < b.n; i += 61) {
    if (b.p[i] != b.tag) return false;
  }
  return true;
}

// A field of the statistics JSON, 0 when absent.
inline std::uint64_t field(const char* json, const char* name) {
  char key[64];
  std::snprintf(key, sizeof key, "\"%s\":", name);
  const char* at = std::strstr(json, key);
  return at != nullptr ? std::strtoull(at + std::strlen(key), nullptr, 10) : 0;
}

}  // namespace pattern_blocks
