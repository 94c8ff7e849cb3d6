// replayalloc/runtime/check.h: REPLAYALLOC_CHECK, the shadow record of live blocks.
//
// Layer: runtime.
//
// Note [Check mode]
// ~~~~~~~~~~~~~~~~~
// With REPLAYALLOC_CHECK=1 every block the host domain hands out (slab or backend) is
// entered in a shadow map of live ranges, and every free is looked up there first.
// Three things are reported, each with both blocks' sizes, ops and threads, and then
// the process aborts (the data a program would lose next is worth more than the
// process):
//   * a hand-out that overlaps a block still live (the allocator's own bug: the one
//     thing invariant 1 forbids);
//   * a double free (the block at that address was freed already);
//   * a free of a pointer never handed out.
// Free when off: the fast paths are untouched. When on, the engine masks the replay
// cursor's counts (thread_state.h: domain_state::masked) so that every hit and every
// predicted free takes the slow path, which unmasks, serves, and consults the map.
// Engine memory (made under the reentry guard, so never entered) is freed under it
// too, also where a program's free sets it off (the last free of a retired plan's slab
// releases the plan): the map must hold exactly what the program was handed.
// The map sits under one mutex: check mode is for finding bugs, not for speed.
// Never allocates through the interposed allocator (invariant 5: internal allocator).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace replayalloc::detail::check {

// Set once, before any block is handed out (the engine's constructor). False, with an
// error said, when there is no memory for the record: check mode stays off.
bool enable(const char* (*op_name)(std::uint32_t op));
// Inline: read on every slow-path request (one relaxed load).
extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// A block of `size` bytes at p was handed out for `op` on thread `thread`. Aborts when
// it overlaps a live block.
void on_alloc(const void* p, std::size_t size, std::uint32_t op, std::uint32_t thread,
              bool in_slab);
// p is about to be freed. Aborts when p is no live block (never handed out, or freed
// already); otherwise forgets it.
void on_free(const void* p, std::uint32_t thread);

// fork(): the map's mutex is held across it (Note [Fork]).
void lock_for_fork();
void unlock_after_fork();

}  // namespace replayalloc::detail::check
