// replayalloc/backend/boot_heap.h: a short process's first requests, served before
// jemalloc is booted (Note [A short process's first requests], boot_heap.cc).
//
// Layer: backend. Opened by the fallback's start (fallback_start.cc) on the first MiB of
// the front cache's range; its blocks are freed through the front cache's free (their
// pages' bytes in its page map say 0: free_slow asks boot_block first), sized and
// realloc'd by the fallback's own (jemalloc_backend.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace replayalloc::detail::backend {

// The address space it serves from: the first MiB of the front cache's range, which the
// cache's arenas never take (front_arena.cc).
inline constexpr std::size_t boot_range_bytes = std::size_t{1} << 20;
// The largest request it serves.
inline constexpr std::size_t boot_largest = std::size_t{256} << 10;

// Serves from [base, base + boot_range_bytes), readable and writable and never written
// (the front cache's range's first MiB: Note [The front cache's tables in its range]).
// False (nothing changes) where the process has had another thread. Once, from the
// engine's constructor (start_fallback), before any block can be handed out.
bool open_boot_heap(std::uintptr_t base) noexcept;
// No more requests served, for good (the fallback's start, another thread seen); its
// blocks stay valid, and their frees do nothing.
void close_boot_heap() noexcept;

inline constinit std::atomic<bool> g_boot_open{false};
inline bool boot_heap_open() noexcept { return g_boot_open.load(std::memory_order_relaxed); }

// A block of `size` bytes (16-aligned), zeroed for boot_calloc; null where it is closed,
// the process has another thread now (it closes), the size is above boot_largest, or the
// range is spent. Never a system call.
void* boot_malloc(std::size_t size) noexcept;
void* boot_calloc(std::size_t size) noexcept;

// Whether p is (inside) the boot heap's range: then, for a block it handed out, *usable
// is its size.
// Note [A short process's large requests] (boot_heap.cc): a request above boot_largest,
// pages of its own (fresh: zero) while the heap is open; null where it cannot be.
void* boot_big_malloc(std::size_t size) noexcept;

// Note [A short process's aligned requests] (boot_heap.cc): a request aligned to more
// than 16 and at most 4096 bytes while the heap is open; null where it cannot be.
void* boot_memalign(std::size_t size, std::size_t align) noexcept;

bool boot_block(const void* p, std::size_t* usable) noexcept;
// pre: boot_block(p). Kept for the next request of its size while the heap is open;
// nothing once it is closed (the block's bytes are never reused).
void boot_free(void* p) noexcept;
// boot_free where p is the heap's block (a small one or a large one): true; else false,
// nothing done. One call where a free asks boot_block and then boot_free.
bool boot_release(void* p) noexcept;
// pre: boot_block(p). Grows or shrinks p in place to `size` bytes where it is the last
// block the heap made and the range has room; false (nothing changes) otherwise.
bool boot_resize(void* p, std::size_t size) noexcept;

struct boot_counts {
  std::uint64_t requests = 0;  // requests served (blocks made or reused)
  std::size_t bytes = 0;       // of the range, used (headers included)
};
boot_counts boot_heap_counts() noexcept;

}  // namespace replayalloc::detail::backend
