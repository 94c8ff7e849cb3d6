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
// system refuses. Returns false (and logs why) when nothing could be reserved. With
// `below`, first tries to reserve that many bytes more (rounded up to whole chunks),
// directly below the range, in the same mapping, for take_range_below (Note [The
// gate's range]).
bool reserve_slab_range(std::size_t bytes, std::size_t below = 0);

// The bytes reserved below the range (PROT_NONE), once, to the caller who asks for
// exactly that many; null when none were reserved, or they were taken.
void* take_range_below(std::size_t bytes) noexcept;

// Note [The gate's range]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The addresses whose free the inline entry point must look at closer while the
// thread's plain-free gate is 0 (Note [The plain-free gate], runtime/thread_state.h):
// the slab range, and the front cache's range when it lies directly below it (Note
// [The front cache's arena]). Then a free outside it is a block the front cache never
// serves, so it goes straight to jemalloc's own free (g_outside_free, backend.h), and
// the front cache's own range test (5 instructions on every small block's free) is
// asked only of the blocks the gate lets in. That is why the engine reserves the slab
// range with the front cache's range below it, in one mapping (the kernel places each
// new mapping below the last, so two mappings are adjacent only by chance; the slab
// table, mapped right after, would take the place below). Where that reservation is
// refused, each range is reserved alone and the gate's range is the slab range's;
// where no slab range is reserved (REPLAYALLOC_MODE=off), it is the front cache's
// alone. The inline free asks the slab's part first and the front cache's part only of
// the blocks outside it (runtime/entry.h: entry_free), so a small block's free goes to
// its list without the predicted free's test, and the replayed free asks nothing more
// than before (bench/RESULTS.md, "Small path").
// Written under the range's mutex before any thread's gate is opened; read by
// set_free_gate() (runtime/thread_state.h) and by every small sized delete
// (runtime/entry.h: entry_free_sized).
struct gate_range_state {
  std::uintptr_t from = 0;
  std::size_t span = 0;
  std::size_t front = 0;  // the front cache's bytes at its start (0: not joined)
};
inline gate_range_state g_gate_range;
// Where the slab range and the front cache's range begin: on a multiple of this (a
// multiple of chunk_bytes), so the page map's bytes lie where Note [The page map's bytes
// off their pages' starts] (front_inline.h) places them, whatever mmap returned.
inline constexpr std::size_t range_align = std::size_t{16} << 20;

// Extends the gate's range down to [base, base + bytes) when that lies directly below
// the slab range (the front cache's, from take_range_below), or makes it that range
// alone where no slab range was reserved; true when it did.
bool join_gate_range(std::uintptr_t base, std::size_t bytes) noexcept;

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
