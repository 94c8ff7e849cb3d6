// replayalloc/runtime/planner_thread.h: plans made off the request path.
//
// Layer: runtime. One thread per process, made on the first plan to make, serves a
// queue of planning jobs; the engine hands it what a finished recording asks to be
// planned and goes on at once.
//
// Note [Background planning]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Recording is cheap and happens inside the request; planning is not (the `best`
// planner takes 0.8 s on 18,692 allocations and 16.6 s on 62,185), and the thread that
// ends a recording is a request's thread (in auto mode it is inside a malloc). So the
// recording's end only queues a job (the envelope to plan, the version it replaces)
// and returns; the regime is marked as having a plan on the way (regime::planning),
// and its later iterations pass through to the backend (counted in
// `iterations_awaiting_plan`) until the plan is installed, or, for a grown or
// predicted plan, go on replaying the plan it will replace. The planner thread makes,
// validates, saves and compiles the plan and installs it under the key's mutex: a
// thread sees it at its next iteration's beginning, the only place a plan is read,
// so a plan changes only at an iteration boundary. The job holds the key (one of
// key_entry::users) so that it is not forgotten meanwhile (Note [Bounds]), and names
// the version it replaces by id, never by pointer (that version may be retired and
// its memory reused before the job runs).
//
// The thread, in the manner of jemalloc's background threads:
//   - made lazily, by the first job, at a point where the engine holds none of its
//     locks (after the key's mutex is released), with every signal blocked (a
//     program's signals go to its own threads);
//   - runs its whole life inside the reentry guard: its allocations go to the
//     backend, never to a slab, a recording or auto mode's watcher (invariant 5);
//   - fork: its mutex is held across fork() (Note [Fork]); the child has no planner
//     thread, so the job it was running goes back to the queue's front, and the
//     thread is made again in the child when a job waits and an iteration of a key
//     with a plan on the way begins (kick());
//   - exit: it is detached and its state lives in static storage that is never
//     destroyed, so a process may exit while it plans: nothing waits for it, and
//     nothing it touches is torn down under it;
//   - a process that cannot make threads (pthread_create fails: a sandbox, a thread
//     limit), or REPLAYALLOC_BACKGROUND_PLANNING=0, plans synchronously, on the thread
//     that ends the recording, as before this note (said once).
// replayalloc_wait_plans() blocks until the queue is empty and no job runs: a service
// that warms up before taking traffic, a benchmark, a test.
//
// Small plans are not sent to the thread (Note [Plans that arrive in time]).
//
// Note [Plans that arrive in time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A plan sent to the planner thread arrives when that thread next runs: on a loaded
// machine, after the program's next iterations, or after its end. A short program then
// replays by chance (the README's eight-iteration C program got 0 slab hits in 9 of 10
// runs at a load of 6), and an unmodified ResNet-50 loop recorded one more iteration
// because its 2.7 ms plan missed the next one. A plan of few allocations takes
// microseconds to make (`best`: ~0.2 ms at 1,000 inference-shaped allocations,
// bench/RESULTS.md "The fast tier"): less than the recording that precedes it. So a job
// whose envelope has at most REPLAYALLOC_INLINE_PLAN_MAX allocations (default 256) is
// made on the thread that ends the recording, at the recording's end, and the next
// iteration replays on every run; only larger plans go to the planner thread, and
// improving a plan made here (Note [Improved plans]) still goes there. 0 sends every plan
// to the thread (the background tests, which hold a plan on the way by a test hook).
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/backend.h"
#include "trace/trace.h"

namespace replayalloc::detail {

struct key_entry;

struct plan_job {
  key_entry* entry = nullptr;           // held (key_entry::users) until the job is done
  std::shared_ptr<const envelope> env;  // what to plan; regime::planning names it
  std::uint64_t replace_id = 0;         // plan_version::id of the plan it replaces; 0: none
  bool predicted = false;               // Note [Predicted plans]: sizes fitted, not recorded
  bool probation = false;               // the decision's: Note [Probation slabs]
  std::uint64_t queued_ns = 0;          // steady clock when the recording ended
  bool on_planner_thread = false;       // run by the planner thread (else where it was queued)
  // Note [Improved plans]: a search for a smaller slab than the installed version
  // `replace_id`'s (`slab_bytes`), queued after the plan was installed; it waits behind
  // every plan still to be made and yields to one queued while it runs.
  bool improve = false;
  std::uint64_t slab_bytes = 0;
};

// For tests: called on the planner thread before each job it runs (null: nothing), so
// that a test can hold a plan on the way for as long as it needs (a fork, a thread's
// exit, the iterations that pass through meanwhile).
inline std::atomic<void (*)()> g_plan_job_hook{nullptr};

class planner_thread {
 public:
  // `run` makes and installs one job's plan (the engine's); it never throws.
  using run_fn = void (*)(const plan_job& job);
  planner_thread(run_fn run, bool enabled) : run_(run), enabled_(enabled) {}
  planner_thread(const planner_thread&) = delete;
  planner_thread& operator=(const planner_thread&) = delete;

  // Queues the job, making the thread when none serves the queue. False (the job
  // untouched): no thread may or can plan; the caller plans it itself.
  // pre: none of the engine's locks held.
  bool submit(plan_job&& job);
  // Makes the thread again where jobs wait and none serves them (a forked child).
  // One relaxed load when nothing waits.
  void kick();
  // Blocks until no job is queued or running. Returns at once where no thread runs.
  void wait_idle();
  // The same, for at most `ms` milliseconds; false when jobs still wait then.
  bool wait_idle_for(std::uint32_t ms);
  // Jobs queued or running.
  std::uint32_t pending() const { return pending_.load(std::memory_order_acquire); }
  // Set while an improvement job runs and a plan to be made was queued behind it: the
  // search stops at its next check (Note [Improved plans]).
  const std::atomic<bool>* yield_flag() const { return &yield_; }
  bool enabled() const { return enabled_; }

  void prefork();
  void postfork_parent();
  void postfork_child();

 private:
  static void* thread_main(void* self);
  void serve();
  // REQUIRES: mu_ held.
  bool start_locked();
  bool busy_locked() const { return head_ != nullptr || current_.entry != nullptr; }
  // The queue's front job, taken off it. REQUIRES: mu_ held, head_ non-null.
  plan_job pop_locked();
  // No thread serves the queue: makes one, or, where none can be made, runs what
  // waits on the calling thread. REQUIRES: mu_ held (through `lock`).
  void start_or_drain(std::unique_lock<std::mutex>& lock);

  const run_fn run_;
  bool enabled_;  // under mu_ once the engine is made: false after a failed start
  std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued
  std::condition_variable idle_cv_;  // the queue ran dry
  // The queue: jobs in the order queued, each in a node of the backend's memory (the
  // queue allocates only when a job is queued, never when the engine is made).
  struct node {
    plan_job job;
    node* next = nullptr;
  };
  node* head_ = nullptr;
  node* tail_ = nullptr;
  plan_job current_;          // the job being planned (entry null: none); in a forked
                              // child, the parent's unfinished one
  bool running_ = false;      // a thread serves the queue
  std::atomic<std::uint32_t> pending_{0};
  std::atomic<bool> yield_{false};
};

}  // namespace replayalloc::detail
