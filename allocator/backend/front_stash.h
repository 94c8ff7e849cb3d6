// replayalloc/backend/front_stash.h: the front cache's empty runs kept, per arena and run
// size, with their decay (Note [Empty runs kept], front_stash.cc).
//
// Layer: backend, private to the front cache's runs (front_runs.cc and front_stash.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/front_cache.h"

namespace replayalloc::detail::backend::front {

// A monotonic clock in milliseconds: how long a stash's runs went unused.
using run_clock_fn = std::uint64_t (*)() noexcept;
// The clock configure_runs is given in the library: the vDSO's CLOCK_MONOTONIC_COARSE
// (no system call), in milliseconds.
std::uint64_t coarse_clock_ms() noexcept;
// A run of `bytes` at `start` given back to the arena (its page map bytes the caller's).
using run_give_fn = void (*)(std::uintptr_t start, std::size_t bytes) noexcept;

// Once, with the runs (configure_runs): the clock (null: nothing is ever stashed) and
// where the runs the stashes let go of go.
void configure_stash(run_clock_fn now, run_give_fn give) noexcept;

// Whether runs are stashed at all (a clock was given).
bool stashing() noexcept;

// A run of `bytes` from the stash of arena `slot`; 0 when it keeps none.
std::uintptr_t unstash(unsigned slot, std::size_t bytes) noexcept;

// The run at `start`, `bytes` long and no block out of it, into the stash of arena
// `slot` (its first word becomes the stash's link); then, at most once per second, the
// runs that stash held all through the last second go to `give`.
void stash(std::uintptr_t start, unsigned slot, std::size_t bytes) noexcept;

// Every run the stashes of arena `slot` keep, to `give`.
void empty_stashes(unsigned slot) noexcept;

// Before arena `slot` makes a run of `bytes` (none of that size stashed): the stashed
// runs whose pages it could be made of, to `give`: one of the smallest stashed size
// above it, else every run of the smaller sizes (Note [Empty runs kept]).
void stash_room_for(unsigned slot, std::size_t bytes) noexcept;

// Fork: the stashes' locks of the `slots` arenas held (lock_runs / unlock_runs).
void lock_stashes(unsigned slots) noexcept;
void unlock_stashes(unsigned slots) noexcept;

// Runs taken from a stash again, and the stashes' bytes now, into c.
void stash_counts(front_cache_counts* c) noexcept;

}  // namespace replayalloc::detail::backend::front
