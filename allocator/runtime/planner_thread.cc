// The planner thread of Note [Background planning] (runtime/planner_thread.h).
#include "runtime/planner_thread.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "runtime/thread_state.h"
#include "support/log.h"
#include "support/no_cancel.h"

namespace replayalloc::detail {

bool planner_thread::submit(plan_job&& job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!enabled_) return false;
  if (!running_ && !start_locked()) return false;
  void* mem = backend::fallback_alloc(sizeof(node), alignof(node));
  if (mem == nullptr) return false;  // no memory for the queue: planned where it ended
  node* n = new (mem) node{std::move(job), nullptr};
  if (n->job.improve) {
    if (tail_ != nullptr) tail_->next = n; else head_ = n;
    tail_ = n;
  } else {
    // Note [Improved plans]: a plan to be made goes before every improvement waiting,
    // and stops the one running.
    node** at = &head_;
    while (*at != nullptr && !(*at)->job.improve) at = &(*at)->next;
    n->next = *at;
    *at = n;
    if (n->next == nullptr) tail_ = n;
    if (current_.improve) yield_.store(true, std::memory_order_relaxed);
  }
  pending_.fetch_add(1, std::memory_order_release);
  lock.unlock();
  work_cv_.notify_one();
  return true;
}

void planner_thread::kick() {
  if (pending_.load(std::memory_order_acquire) == 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (!running_) start_or_drain(lock);
}

// Note [No cancellation point inside]: a program's thread waits with cancellation disabled.
void planner_thread::wait_idle() {
  const no_cancel no_cancel;
  std::unique_lock<std::mutex> lock(mu_);
  if (!running_) start_or_drain(lock);  // a forked child that has not needed one yet
  idle_cv_.wait(lock, [this] { return !running_ || !busy_locked(); });
}

bool planner_thread::wait_idle_for(std::uint32_t ms) {
  const no_cancel no_cancel;
  std::unique_lock<std::mutex> lock(mu_);
  if (!running_) start_or_drain(lock);
  return idle_cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return !running_ || !busy_locked(); });
}

void planner_thread::start_or_drain(std::unique_lock<std::mutex>& lock) {
  if (!busy_locked() || (enabled_ && start_locked())) return;
  // Jobs wait and no thread can be made for them (a child of a process that may not
  // make threads): they are planned here, on the calling thread, rather than never.
  while (busy_locked()) {
    if (current_.entry == nullptr) current_ = pop_locked();
    plan_job job = std::move(current_);
    current_ = plan_job{};
    lock.unlock();
    run_(job);
    lock.lock();
    pending_.fetch_sub(1, std::memory_order_release);
  }
  idle_cv_.notify_all();
}

plan_job planner_thread::pop_locked() {
  node* n = head_;
  head_ = n->next;
  if (head_ == nullptr) tail_ = nullptr;
  plan_job job = std::move(n->job);
  n->~node();
  backend::fallback_free(n);
  return job;
}

bool planner_thread::start_locked() {
  // Every signal blocked in the new thread: the program's handlers run on its own
  // threads. The attribute's stack is the default; a plan's arrays are on the heap.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  const int rc = pthread_create(&tid, &attr, &planner_thread::thread_main, this);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    enabled_ = false;
    // Jobs already queued (a forked child that may not make threads) are planned by
    // whoever waits next; none is lost: they stay queued and wait_idle() returns.
    REPLAYALLOC_LOG(warning, "no planner thread (pthread_create: %s): plans are made on the thread that ends "
                    "a recording, as with REPLAYALLOC_BACKGROUND_PLANNING=0", std::strerror(rc));
    return false;
  }
  running_ = true;
  return true;
}

void* planner_thread::thread_main(void* self) {
  // Its whole life inside the engine (invariant 5): whatever it allocates is the
  // backend's, and no slab, recording or watcher ever sees it.
  reentry_guard guard;
  static_cast<planner_thread*>(self)->serve();
  return nullptr;
}

void planner_thread::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // current_ is set here only in a forked child: the parent's job, unfinished.
    if (current_.entry == nullptr) {
      work_cv_.wait(lock, [this] { return head_ != nullptr; });
      current_ = pop_locked();
    }
    current_.on_planner_thread = true;
    yield_.store(false, std::memory_order_relaxed);  // plans to be made are ahead of it
    lock.unlock();
    if (void (*hook)() = g_plan_job_hook.load(std::memory_order_acquire)) hook();
    run_(current_);
    lock.lock();
    current_ = plan_job{};
    pending_.fetch_sub(1, std::memory_order_release);
    if (head_ == nullptr) idle_cv_.notify_all();
  }
}

// Note [Fork]: the planner's mutex is taken before fork() after the engine's and every
// key's, before the plan versions' (engine::prefork, runtime/lifecycle.cc); the thread
// holds it only to take a job or put one down, never while planning, so taking it
// waits at most for that.
void planner_thread::prefork() { mu_.lock(); }

void planner_thread::postfork_parent() { mu_.unlock(); }

void planner_thread::postfork_child() {
  // The thread is not in the child. Its job stays in current_, the first one the
  // child's thread will run (the envelope and the key it holds are the child's
  // copies); the condition variables are made anew (the parent's waiters are not the
  // child's), and the thread is made again when the child next needs it.
  running_ = false;
  new (&work_cv_) std::condition_variable;
  new (&idle_cv_) std::condition_variable;
  mu_.unlock();
}

}  // namespace replayalloc::detail
