// replayalloc/runtime/auto_mode.h: auto mode, a client of the engine's iterations.
//
// Layer: runtime, beside the C API (runtime/api.cc): both open and close iterations
// through engine::begin and engine::end and nothing else; the engine applies what
// either asks and never asks which of them is driving (Note [Auto mode as a client]).
// The period detector is runtime/auto_detect.h; the thread's side is auto_mode.cc.
//
// Note [Auto mode as a client]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Auto mode (Note [Auto mode]) marks a thread's iterations where the program marks
// none, as a program would through the C API: engine::begin(t, key, first_size) when
// the watcher finds a boundary, engine::end(t) when the period's allocations are made.
// Its state is its own: the watcher (auto_state, runtime/auto_detect.h), whether the
// open iteration is one it began, and how many slow-path allocations that iteration
// saw; the thread's state (thread_state.h) holds only a pointer to it, as it holds
// the recorder's, so that the inline shortcuts (Note [Pass-through], the plain-free
// gate) can ask "does a watcher want this?" without a call. The engine's slow path
// tells it of every allocation at or above the minimum (before_alloc, after_alloc)
// and every free of a backend block (on_free) while it watches threads (one flag,
// g_watches_threads, set once when the engine is made with REPLAYALLOC_MODE=auto).
// The C API tells it when the program marks an iteration of its own on the thread
// (step_aside): auto mode stops there for good, ending an iteration it had open.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/thread_state.h"

namespace replayalloc::detail::auto_mode {

// The engine's slow path, for a request of at least the minimum size, before it is
// served: may end the thread's auto iteration and begin the next (periodic work).
// Never throws: where the watcher's memory runs out it rests (Note [Auto mode rests]).
void before_alloc(thread_state& t, std::size_t size) noexcept;
// The same request, served at `p`: a backend block is watched (`slab`: false); a slot
// handed out by the slow path is counted by the cursor, not again here.
void after_alloc(thread_state& t, const void* p, std::size_t size, bool slab) noexcept;
// A free of a backend block on a thread that has a watcher (t.autod set).
void on_free(thread_state& t, const void* p);

// The C API: the program begins an iteration of its own on this thread. Auto mode
// ends the iteration it had open (if any) and steps aside on the thread for good.
void step_aside(thread_state& t);
// Whether the thread's open iteration is one auto mode began (the program cannot end it).
bool owns_iteration(const thread_state& t);
// fork(): the forking thread's open iteration was abandoned by the engine.
void forget_iteration(thread_state& t);
// The thread exits (after the engine ended its open iteration): the watcher goes.
void on_thread_exit(thread_state& t);

// Statistics: watchers that rested (Note [Auto mode rests]), process-wide.
std::uint64_t rests();
// Note [A process whose threads show no period]: new threads watch at once again, as
// after a period found (tests).
void forget_rests();

}  // namespace replayalloc::detail::auto_mode
