// replayalloc/backend/slab_range.h: the one reserved virtual range slabs live in.
//
// Layer: backend. At start-up the engine reserves one large range of address space
// (PROT_NONE, MAP_NORESERVE: no memory is committed). Slabs are carved from it in
// whole chunks (config.h: chunk_bytes) and committed, pre-faulted, when made. A table
// with one entry per chunk names the slab that owns it, so any pointer finds its
// owner with one subtraction, one compare, one shift and one load (invariant 3),
// whichever thread asks.
//
// Thread-safety: making and returning slabs takes a mutex (slow path only). owner_of
// is lock-free: the table entry is published with release order after the slab is
// fully made, and read with acquire order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "support/config.h"

namespace replayalloc::detail::backend {

struct slab_range_state {
  std::uintptr_t base = 0;  // 0 until reserved
  std::size_t bytes = 0;
  std::atomic<void*>* owners = nullptr;  // one per chunk
};

inline slab_range_state g_slab_range;

// Reserves the range (idempotent). Tries `bytes`, then halves down to 64 MiB when the
// system refuses. Returns false (and logs why) when nothing could be reserved.
bool reserve_slab_range(std::size_t bytes);

// True when p lies inside the reserved range (whether or not a slab owns it).
REPLAYALLOC_ALWAYS_INLINE bool in_slab_range(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) - g_slab_range.base < g_slab_range.bytes;
}

// The owner registered for p's chunk, or null. pre: in_slab_range(p).
REPLAYALLOC_ALWAYS_INLINE void* chunk_owner(const void* p) noexcept {
  const std::uintptr_t d = reinterpret_cast<std::uintptr_t>(p) - g_slab_range.base;
  return g_slab_range.owners[d >> chunk_shift].load(std::memory_order_acquire);
}

// Commits `bytes` (rounded up to whole pages; the slab takes whole chunks of the
// range, the rest of its last chunk left inaccessible) inside the range, pre-faulting
// the first `touch_bytes` when prefault is set. Returns the chunk-aligned start, or
// null when the range is exhausted, the committed (page-rounded) total would pass `limit`
// (*over_limit set), or the system has no memory (the caller falls back).
void* map_slab(std::size_t bytes, std::size_t touch_bytes, bool prefault,
               std::size_t limit = SIZE_MAX, bool* over_limit = nullptr) noexcept;

// Registers `owner` for every chunk of [p, p + bytes) (release order).
void set_chunk_owner(void* p, std::size_t bytes, void* owner) noexcept;

// Returns the memory to the system and the chunks to the range. pre: owners cleared.
void unmap_slab(void* p, std::size_t bytes) noexcept;

// Bytes of the range currently committed to slabs, and the most committed at once
// (since the start or the last reset_mapped_slab_peak(), which sets it to the current).
std::size_t mapped_slab_bytes() noexcept;
std::size_t mapped_slab_bytes_peak() noexcept;
void reset_mapped_slab_peak() noexcept;
// Bytes of the committed slabs' pages that are resident now (mincore over every chunk
// a slab owns): a slab not pre-faulted (Note [Probation slabs]) holds only the pages its
// iterations touched. Slow (a system call per chunk, under the range's mutex): for
// statistics only.
std::size_t resident_slab_bytes() noexcept;

// fork(): the range's mutex is held across it (the engine's atfork handlers).
void lock_for_fork() noexcept;
void unlock_after_fork() noexcept;

}  // namespace replayalloc::detail::backend
