// replayalloc/support/hash.h: stable hashes for file checksums and trace signatures.
//
// Layer: support. absl::Hash is deliberately unstable across processes, so it cannot
// name a trace or check a file; these two are stable, byte-for-byte specified
// functions: CRC-32C (Castagnoli, the checksum of iSCSI, ext4 and LevelDB) for file
// integrity, FNV-1a 64 for signatures of allocation sequences.
#pragma once

#include <cstddef>
#include <cstdint>

namespace replayalloc::detail {

// CRC-32C of [data, data+n), continuing from `crc` (0 to start).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t n);

inline constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ull;

inline std::uint64_t fnv1a(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace replayalloc::detail
