// The private jemalloc's fork handlers (Note [Private jemalloc], allocator/CMakeLists.txt).
//
// Note [The private jemalloc's fork handlers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc registers three handlers with pthread_atfork when it starts: before fork()
// it takes every mutex of every arena it has made (each arena's bins, extent caches,
// decay and large lists: ~60 mutexes), after it releases them in the parent and makes
// them anew in the child. Each is a write to a page fork() has made copy-on-write, a
// page fault each, in the parent and in the child: under the LD_PRELOAD library, whose
// copy has two arenas (jemalloc's first and the front cache's), a fork and wait took
// ~240 us against glibc's ~110, 61 of the child's faults against 18. Where the process
// has only ever had one thread (support/one_thread.h), no mutex of jemalloc's can be
// held at fork() (the forking thread is not inside jemalloc) and every structure they
// guard is whole: taking them changes nothing, and the child's handler, which also
// leaves the forking thread alone in jemalloc's lists of threads and tcaches, finds
// them as it would leave them. So the copy's reference to pthread_atfork is renamed to
// replayalloc_je_pthread_atfork (backend/private_jemalloc.cmake), which keeps jemalloc's
// handlers and registers in their place, at the same moment (the order of the process's
// handlers unchanged), three that call them unless the process has one thread. As
// Note [Fork in a process of one thread] (runtime/lifecycle.cc) for replayalloc's own.
// Measured side by side in bench/RESULTS.md ("The private jemalloc's fork handlers").
#include <pthread.h>

#include <atomic>

#include "support/one_thread.h"

namespace replayalloc::detail::backend {
namespace {

using fork_fn = void (*)();
fork_fn g_prepare = nullptr;
fork_fn g_parent = nullptr;
fork_fn g_child = nullptr;
// This fork's handlers of jemalloc's were called before it. Threads that fork at once
// all write true (a process of one thread has no other to fork beside it).
std::atomic<bool> g_taken{false};

void prepare() {
  const bool take = !process_has_one_thread();
  if (g_taken.load(std::memory_order_relaxed) != take) g_taken.store(take, std::memory_order_relaxed);  // as prefork's
  if (take && g_prepare != nullptr) g_prepare();
}
void parent() {
  if (g_taken.load(std::memory_order_relaxed) && g_parent != nullptr) g_parent();
}
void child() {
  if (g_taken.load(std::memory_order_relaxed) && g_child != nullptr) g_child();
}

}  // namespace
}  // namespace replayalloc::detail::backend

// What the private jemalloc calls for pthread_atfork (once, at its start).
extern "C" __attribute__((visibility("hidden"))) int replayalloc_je_pthread_atfork(void (*prepare)(), void (*parent)(),
                                                                                  void (*child)()) {
  namespace be = replayalloc::detail::backend;
  be::g_prepare = prepare;
  be::g_parent = parent;
  be::g_child = child;
  return pthread_atfork(&be::prepare, &be::parent, &be::child);
}
