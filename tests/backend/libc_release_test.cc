// The C library's fallback (backend/libc_backend.cc: the builds loaded with dlopen,
// libreplayalloc_torch.so and the CUDA pluggable allocator): when a host slab is made,
// the free pages glibc holds are given back, since glibc, unlike jemalloc, never
// returns them by time (backend::release_free_memory).
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "replayalloc/replayalloc.hpp"

namespace {

// Pages of [begin, end) resident now (mincore), rounded out to pages.
std::size_t resident_pages(const void* begin, const void* end) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t b = reinterpret_cast<std::uintptr_t>(begin) & ~(page - 1);
  const std::uintptr_t e = (reinterpret_cast<std::uintptr_t>(end) + page - 1) & ~(page - 1);
  std::vector<unsigned char> in((e - b) / page);
  if (::mincore(reinterpret_cast<void*>(b), e - b, in.data()) != 0) return 0;
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(LibcBackend, AHostSlabGivesBackTheFreePagesGlibcHolds) {
  // 64 MiB of the program's in 64 KiB blocks (below glibc's mmap threshold: from its
  // heap), freed, with a block after them so that they are not the heap's top (which
  // glibc trims by itself): one free chunk glibc keeps resident.
  constexpr std::size_t kBlock = 64 * 1024;
  constexpr int kBlocks = 1024;
  ASSERT_EQ(::mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);  // fixed, not glibc's sliding one
  std::vector<char*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    auto* p = static_cast<char*>(std::malloc(kBlock));
    ASSERT_NE(p, nullptr);
    std::memset(p, i, kBlock);
    blocks.push_back(p);
  }
  auto* guard = static_cast<char*>(std::malloc(kBlock));  // from the top: after them
  char* lo = blocks.front();
  char* hi = blocks.back() + kBlock;
  ASSERT_LT(lo, hi) << "glibc did not lay the blocks out in address order";
  ASSERT_GT(guard, blocks.back()) << "the guard block is not after the freed ones";
  for (char* p : blocks) std::free(p);
  const std::size_t kept = resident_pages(lo, hi);
  ASSERT_GE(kept, (std::size_t{48} << 20) / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)))
      << "glibc did not keep the freed pages";
  auto iteration = [] {
    replayalloc::Iteration it("libc/slab");
    std::vector<void*> live;
    for (int i = 0; i < 4; ++i) {
      void* p = replayalloc_malloc(64 * 1024);
      std::memset(p, i, 64 * 1024);
      live.push_back(p);
    }
    for (void* p : live) replayalloc_free(p);
  };
  iteration();  // recorded
  iteration();  // recorded again: planned at its end, its 256 KiB slab made with the plan
  const std::uint64_t hits = replayalloc::stats().slab_hits;
  iteration();  // replayed
  ASSERT_EQ(replayalloc::stats().slab_hits, hits + 4) << "the third iteration was not replayed";
  EXPECT_LT(resident_pages(lo, hi), kept / 8)
      << "glibc's free pages stayed resident beside the slab (" << kept << " pages before)";
  std::free(guard);
}

}  // namespace
