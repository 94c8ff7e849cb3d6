// tests/support/block_ledger.h: the live blocks one test thread owns, checked.
//
// A ledger holds every block a thread has been handed and not yet freed (or given to
// another thread), keyed by address. Admitting a block checks what an allocator owes
// its caller: not null, aligned as asked, and sharing no byte with any block the
// ledger already holds; the block is then filled with its tag's pattern (pattern.h).
// Every block's pattern is checked before it leaves the ledger and on demand
// (check_all, at iteration boundaries). Failures are counted, with a message for the
// first few, never thrown: a corruption must not leak the blocks that would show the
// next one.
//
// Not thread-safe: one ledger per thread. Blocks move between threads by value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>

#include "support/pattern.h"

namespace replayalloc::testing {

// pattern.h's fill() and intact(), the same bytes, a 64-byte run at a time (the
// pattern's byte i is its run's first byte XOR (i & 63)), so that the compiler
// vectorizes them: millions of blocks are checked per test.
inline void fill_fast(void* p, std::size_t n, std::uint64_t tag) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t run = 0; run < n; run += 64) {
    const std::uint8_t x = pattern_byte(tag, run);
    const std::size_t m = n - run < 64 ? n - run : 64;
    for (std::size_t i = 0; i < m; ++i) b[run + i] = static_cast<std::uint8_t>(x ^ i);
  }
}

inline bool intact_fast(const void* p, std::size_t n, std::uint64_t tag) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  std::uint8_t diff = 0;
  for (std::size_t run = 0; run < n; run += 64) {
    const std::uint8_t x = pattern_byte(tag, run);
    const std::size_t m = n - run < 64 ? n - run : 64;
    for (std::size_t i = 0; i < m; ++i) diff |= static_cast<std::uint8_t>(b[run + i] ^ x ^ i);
  }
  return diff == 0;
}

struct checked_block {
  void* p = nullptr;
  std::size_t size = 0;  // bytes asked for (all of them carry the pattern)
  std::uint64_t tag = 0;
};

class block_ledger {
 public:
  // Admits a fresh block and fills it. False (and counted) when the block is null,
  // misaligned or overlaps a block the ledger holds; a null block is not admitted.
  bool admit(const checked_block& b, std::size_t align) {
    if (b.p == nullptr) return fail(b, "allocation returned null");
    bool ok = true;
    if (reinterpret_cast<std::uintptr_t>(b.p) % align != 0) ok = fail(b, "misaligned");
    const auto addr = reinterpret_cast<std::uintptr_t>(b.p);
    auto next = live_.lower_bound(addr);
    if (next != live_.end() && next->first == addr) {
      ok = fail(b, "the same address as a live block");
      next = live_.erase(next);  // keep the new one; the old one is lost
    }
    if (next != live_.end() && next->first < addr + b.size) ok = fail(b, "overlaps the live block after it");
    if (next != live_.begin()) {
      const checked_block& prev = std::prev(next)->second;
      if (reinterpret_cast<std::uintptr_t>(prev.p) + prev.size > addr) {
        ok = fail(b, "overlaps the live block before it");
      }
    }
    fill_fast(b.p, b.size, b.tag);
    live_[addr] = b;
    return ok;
  }

  // Checks the block's pattern and takes it out of the ledger (the caller frees it or
  // hands it on). False (and counted) when a byte changed.
  bool take(const checked_block& b) {
    live_.erase(reinterpret_cast<std::uintptr_t>(b.p));
    return check(b);
  }

  bool check(const checked_block& b) {
    if (intact_fast(b.p, b.size, b.tag)) return true;
    return fail(b, "overwritten while live");
  }

  // Checks every block the ledger holds. Returns the number of corrupted blocks.
  std::uint64_t check_all() {
    std::uint64_t bad = 0;
    for (const auto& [addr, b] : live_) bad += !check(b);
    return bad;
  }

  std::size_t size() const { return live_.size(); }
  std::uint64_t failures() const { return failures_; }
  const std::map<std::uintptr_t, checked_block>& blocks() const { return live_; }

 private:
  bool fail(const checked_block& b, const char* what) {
    if (++failures_ <= 10) {
      std::fprintf(stderr, "block %p (%zu bytes, tag %llu): %s\n", b.p, b.size,
                   static_cast<unsigned long long>(b.tag), what);
    }
    return false;
  }

  std::map<std::uintptr_t, checked_block> live_;
  std::uint64_t failures_ = 0;
};

}  // namespace replayalloc::testing
