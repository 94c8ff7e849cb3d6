// Threads and fork (runtime/engine.h): a thread's domains registered with the engine
// and unregistered when it exits (its open iteration ended, its recorder freed), and
// every lock held across fork() (Note [Fork]).
#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "backend/slab_range.h"
#include "runtime/check.h"
#include "runtime/stats.h"
#include "replay/cursor_ops.h"
#include "replay/slab_pool.h"
#include "runtime/auto_mode.h"
#include "runtime/engine.h"
#include "support/config.h"
#include "support/one_thread.h"
#include "support/reentry.h"
#include "trace/recorder.h"

namespace replayalloc::detail {

namespace {

pthread_key_t g_exit_key;

void thread_exit_hook(void* arg) {
  auto* t = static_cast<thread_state*>(arg);
  engine::get().on_thread_exit(*t);
}

void free_recorder(domain_state& d) {
  if (d.recorder == nullptr) return;
  d.recorder->~trace_recorder();
  backend::fallback_free(d.recorder);
  d.recorder = nullptr;
}

// The engine whose lifecycle started (the one), for the child's handler: engine::get()
// lies in another window of code (Note [A forked child's code together]).
engine* g_lifecycle_engine = nullptr;

REPLAYALLOC_FORK_CHILD_CODE void child_after_fork() {
  engine& e = *g_lifecycle_engine;
  if (e.opts().stats_path[0] != '\0') note_process_start();
  e.postfork_child();
}

}  // namespace

// The thread-exit key and the fork handlers, once, from the engine's constructor.
// The process's start (or fork) is noted only where statistics are written at exit, the
// one place that reads it (stats.cc): a clock read is three page faults of a forked
// child's (libc's code, the vDSO's data, the page the time is written to).
void engine::start_lifecycle() {
  pthread_key_create(&g_exit_key, thread_exit_hook);
  if (opts_.stats_path[0] != '\0') note_process_start();
  g_lifecycle_engine = this;
  pthread_atfork([] { engine::get().prefork(); }, [] { engine::get().postfork_parent(); }, child_after_fork);
}

// Note [Fork]
// ~~~~~~~~~~~
// The child has one thread, the one that forked, and a copy of every lock as it was at
// fork(). Holding all of them across fork() makes the copies consistent: prefork takes
// the engine's mutex, then each key's (in the keys' order, always the same), then the
// planner thread's (Note [Background planning]: the child has no planner thread; it
// makes one again when it needs it), then the version registry's and the pool mutex of
// every plan version alive, current or retired and still draining (slab_pool.h), then
// the slab range's and check mode's; the handlers after fork release them in reverse.
// Nothing here allocates.
//
// Note [Fork in a process of one thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where the process has only ever had one thread (glibc's __libc_single_threaded, which
// pthread_create clears for good, the planner thread's too), no other thread can hold
// one of those locks or be half-way through what it guards, and the forking thread is
// not inside replayalloc: fork() takes none of them (nor the front cache's). Each lock
// taken was a write before fork() and another after it, in the parent and in the child,
// to pages fork() had just made copy-on-write: a page fault each. A shell forks for
// every command it runs: a fork and wait under the library took 271 us, 239 without
// these locks, 172 with the private jemalloc's left alone too (glibc's 111, jemalloc's
// own library 188; bench/RESULTS.md, "Fork in a process of one thread", "The private
// jemalloc's fork handlers"). The child still abandons the forking thread's
// open iteration and the recordings other threads had under way, and counts its own
// thread's cache alone (forked_child). The private jemalloc's own handlers do the same
// (Note [The private jemalloc's fork handlers], backend/private_fork.cc). Where this is
// wrong: a thread made by a raw clone() (support/one_thread.h).
//
// Note [Pages a fork leaves shared]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// After fork() parent and child share every written page copy-on-write: the first write
// to one, in either process, copies it (a page fault), and a child faults in again every
// page of the library's code and constants it touches (fork does not copy the page
// tables of a file's mapping). A shell forks for every command, and its commands fork
// from it again and again. So the fork handlers write a flag or a count only where its
// value changes (prefork's and the private jemalloc's flags, forked_child's counts: the
// same at every fork of a process of one thread; the window before only lowered), and
// the child skips the key table where it is empty (its iteration reads a page of
// Abseil's constants) and reads no clock unless statistics are written at exit (libc's
// code, the vDSO's data and the page written: three faults). A fork and wait under the
// library: bench/RESULTS.md, "Pages a fork leaves shared", "A smaller LD_PRELOAD library".
namespace {
// This fork's locks were taken (prefork), read after it. Threads that fork at once all
// write true (a process of one thread has no other to fork beside it).
std::atomic<bool> g_fork_locked{false};
}  // namespace

void engine::prefork() {
  const bool locked = !process_has_one_thread();
  // Written only when it changes: a page written before fork() is copied at the next
  // write after it, in the parent, at every fork (Note [Pages a fork leaves shared]).
  if (g_fork_locked.load(std::memory_order_relaxed) != locked) g_fork_locked.store(locked, std::memory_order_relaxed);
  if (!locked) return;  // Note [Fork in a process of one thread]
  mu_.lock();
  for (auto& [k, e] : keys_) e->mu.lock();
  planner_.prefork();  // Note [Background planning]
  lock_versions_for_fork();  // current and retired ones alike
  backend::lock_for_fork();
  check::lock_for_fork();
  backend::front_cache_prefork();  // Note [The fallback's front cache]: its depot
}

void engine::postfork_parent() {
  if (!g_fork_locked.load(std::memory_order_relaxed)) return;
  backend::front_cache_postfork(false);
  check::unlock_after_fork();
  backend::unlock_after_fork();
  unlock_versions_after_fork();
  planner_.postfork_parent();
  for (auto& [k, e] : keys_) e->mu.unlock();
  mu_.unlock();
}

REPLAYALLOC_FORK_CHILD_CODE void engine::postfork_child() {
  const bool locked = g_fork_locked.load(std::memory_order_relaxed);
  backend::front_cache_postfork(true, locked);
  backend::fallback_start_postfork_child();  // Note [The fallback made when first needed]
  if (locked) {  // else no lock was taken, and no planner thread ever ran
    check::unlock_after_fork();
    backend::unlock_after_fork();
    unlock_versions_after_fork();
    planner_.postfork_child();
  }
  if (!keys_.empty()) {  // an empty table's iteration reads a page of Abseil's constants
    for (auto& [k, e] : keys_) {
      replayalloc::detail::abandon_recording(*e);  // whoever was recording is not in the child
      if (locked) e->mu.unlock();
    }
  }
  if (locked) mu_.unlock();
  // The forking thread's open iteration is abandoned: its blocks stay valid, its slab
  // never returns to the pool (its refcount never reaches zero), later calls pass
  // through until the thread begins a new iteration.
  thread_state& t = tls_state;
  if (t.depth > 0) {
    abandon_replay(t.host.cursor);  // replay/cursor_ops.h
    t.host.masked = false;
    set_phase(t.host, phase::none);
    t.host.entry = nullptr;
    t.host.version = nullptr;
    t.depth = 0;
    t.entry = nullptr;
    auto_mode::forget_iteration(t);
  }
}

void engine::register_thread(thread_state& t) {
  if (t.registered || t.exited) return;
  reentry_guard guard;
  t.registered = true;
  // Note [The plain-free gate] (thread_state.h): ready when the backend has a plain
  // free and check mode is off (both fixed before any thread registers).
  if (backend::g_plain_free.load(std::memory_order_relaxed) != nullptr && !check::enabled()) {
    set_free_gate(t, t.free_gate & ~gate_unready);
  }
  t.host.kind = domain_kind::host;
  pthread_setspecific(g_exit_key, &t);
  {
    std::lock_guard<std::mutex> lock(mu_);
    t.thread_no = next_thread_no_++;
  }
  register_domain(t.host);
}

void engine::register_domain(domain_state& d) {
  if (d.registered) return;
  reentry_guard guard;
  d.cursor.resync_window = opts_.resync_window;
  // Note [Below the minimum size] (replay/fast_path.h): the threshold's one copy.
  d.cursor.bypass_below = std::max<std::uint64_t>(opts_.min_size, 1);
  std::lock_guard<std::mutex> lock(mu_);
  d.registered = true;
  d.prev = nullptr;
  d.next = domains_;
  if (domains_ != nullptr) domains_->prev = &d;
  domains_ = &d;
}

void engine::unregister_domain(domain_state& d) {
  if (!d.registered) return;
  reentry_guard guard;
  free_recorder(d);
  std::lock_guard<std::mutex> lock(mu_);
  add_domain(retired_[static_cast<int>(d.kind)], d);
  if (d.prev != nullptr) d.prev->next = d.next; else domains_ = d.next;
  if (d.next != nullptr) d.next->prev = d.prev;
  d.registered = false;
}

void engine::add_domain_hooks(const domain_hooks& h) {
  std::lock_guard<std::mutex> lock(mu_);
  const int n = n_hooks_.load(std::memory_order_relaxed);
  if (n < static_cast<int>(std::size(hooks_))) {
    hooks_[n] = h;
    n_hooks_.store(n + 1, std::memory_order_release);
  }
}

void engine::on_thread_exit(thread_state& t) {
  // First: the recorder and the watcher go below, and free_backend_filtered reads
  // them while the gate holds only their bits.
  set_free_gate(t, t.free_gate | gate_unready);
  if (t.depth > 0) {
    t.depth = 1;
    end(t);
  }
  const int n = n_hooks_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (hooks_[i].on_exit != nullptr) hooks_[i].on_exit(t);
  }
  unregister_domain(t.host);
  auto_mode::on_thread_exit(t);
  t.registered = false;
  t.exited = true;
  refresh_watched_gate(t);
}

}  // namespace replayalloc::detail
