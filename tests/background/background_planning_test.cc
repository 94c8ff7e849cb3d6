// Note [Background planning]: plans are made by the planner thread, off the request
// path. The iteration that ends a recording returns without waiting for its plan; the
// key's iterations pass through (or replay the plan being replaced) until the plan is
// installed at an iteration boundary; fork, a thread's exit and the process's exit
// while a plan is on the way neither hang nor lose a plan nor hand out live memory.
//
// The planner thread is held with the test hook g_plan_job_hook (runtime/
// planner_thread.h), so that "the plan is still on the way" is a fact of the test, not
// a race. Default options (the planner thread on), C API, replay mode. Each test uses
// keys of its own; statistics are process-wide, so tests compare deltas.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/planner_thread.h"

namespace {

using replayalloc::detail::backend::in_slab_range;

// The planner thread's hook: while `g_hold` is set, a job waits before it is planned.
std::atomic<bool> g_hold{false};
std::atomic<int> g_held{0};  // jobs that reached the hook

void hold_hook() {
  g_held.fetch_add(1);
  while (g_hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

class BackgroundPlanning : public ::testing::Test {
 protected:
  void SetUp() override {
    g_held.store(0);
    g_hold.store(false);
    replayalloc::detail::g_plan_job_hook.store(&hold_hook);
  }
  void TearDown() override {
    g_hold.store(false);
    replayalloc_wait_plans();
    replayalloc::detail::g_plan_job_hook.store(nullptr);
  }
  // Holds the next jobs at the hook until release().
  static void hold() { g_hold.store(true); }
  static void release() { g_hold.store(false); }
  // Waits (bounded) until `n` jobs reached the hook.
  static bool held(int n) {
    for (int i = 0; i < 10000 && g_held.load() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return g_held.load() >= n;
  }
};

// Waits up to `ms` for the child; kills it (false) when it has not exited by then.
bool wait_child(pid_t pid, int ms, int* status) {
  for (int i = 0; i < ms; ++i) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

// An iteration of `n` blocks of `size + i % 7 * 256` bytes, each freed two
// allocations later (the last two at the end), every byte checked before its free.
// Returns how many came from a slab.
int iteration(const char* key, int n, std::size_t size = 8192) {
  replayalloc_iteration_begin(key);
  std::vector<unsigned char*> blocks(n, nullptr);
  int in_slab = 0;
  auto release_block = [&](int j) {
    const std::size_t sz = size + static_cast<std::size_t>(j % 7) * 256;
    for (std::size_t k = 0; k < sz; k += 512) EXPECT_EQ(blocks[j][k], static_cast<unsigned char>(j)) << key;
    replayalloc_free(blocks[j]);
  };
  for (int i = 0; i < n; ++i) {
    const std::size_t sz = size + static_cast<std::size_t>(i % 7) * 256;
    blocks[i] = static_cast<unsigned char*>(replayalloc_malloc(sz));
    EXPECT_NE(blocks[i], nullptr);
    std::memset(blocks[i], i & 0xff, sz);
    in_slab += in_slab_range(blocks[i]) ? 1 : 0;
    if (i >= 2) release_block(i - 2);
  }
  for (int j = n - 2; j < n; ++j) {
    if (j >= 0) release_block(j);
  }
  replayalloc_iteration_end();
  return in_slab;
}

TEST_F(BackgroundPlanning, TheRecordingsEndDoesNotWaitAndItsKeyPassesThroughUntilThePlanIsInstalled) {
  const replayalloc::Stats before = replayalloc::stats();
  hold();
  EXPECT_EQ(iteration("bg/pass", 64), 0);
  EXPECT_EQ(iteration("bg/pass", 64), 0);  // the second recording ends: a plan is queued
  ASSERT_TRUE(held(1)) << "the recording's end queued no plan";
  // The plan is on the way (held): end() returned without it, and the key's next
  // iterations pass through to the backend, counted, without recording again.
  const replayalloc::Stats queued = replayalloc::stats();
  EXPECT_EQ(queued.plans, before.plans);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(iteration("bg/pass", 64), 0) << i;
  const replayalloc::Stats waiting = replayalloc::stats();
  EXPECT_EQ(waiting.iterations_awaiting_plan - queued.iterations_awaiting_plan, 3u);
  EXPECT_EQ(waiting.recordings, queued.recordings) << "iterations waiting for a plan recorded";
  EXPECT_EQ(waiting.plans, before.plans);
  release();
  replayalloc_wait_plans();
  const replayalloc::Stats installed = replayalloc::stats();
  EXPECT_EQ(installed.plans - before.plans, 1u);
  EXPECT_EQ(installed.plans_background - before.plans_background, 1u);
  EXPECT_GE(installed.plan_wait_us_max, 1u);
  EXPECT_GE(installed.plan_wait_us_total - before.plan_wait_us_total, installed.plan_wait_us_max > 0 ? 1u : 0u);
  // Installed at the next iteration's beginning: every block from the slab.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(iteration("bg/pass", 64), 64) << i;
}

// A large recording: the iteration that ends it takes about as long as a recorded one,
// and the plan, made meanwhile on the planner thread, serves the iterations after it.
TEST_F(BackgroundPlanning, ALargeRecordingIsPlannedOnThePlannerThread) {
  const replayalloc::Stats before = replayalloc::stats();
  EXPECT_EQ(iteration("bg/large", 20000, 4096), 0);
  EXPECT_EQ(iteration("bg/large", 20000, 4096), 0);
  replayalloc_wait_plans();
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_EQ(after.plans_background - before.plans_background, 1u);
  EXPECT_EQ(iteration("bg/large", 20000, 4096), 20000);
}

// A grown plan on the way: the plan it replaces goes on serving what fits it, and the
// iterations that outgrow it meanwhile are not deviations (no recording, no retire).
TEST_F(BackgroundPlanning, APlanBeingGrownKeepsServingThePlanItReplaces) {
  const replayalloc::Stats before = replayalloc::stats();
  iteration("bg/grow", 32, 8192);
  iteration("bg/grow", 32, 8192);
  replayalloc_wait_plans();
  ASSERT_EQ(iteration("bg/grow", 32, 8192), 32);
  hold();
  // A larger shape: outgrows the plan (served by the backend where it does not fit),
  // the next iteration records it and queues the grown plan.
  iteration("bg/grow", 32, 16384);
  iteration("bg/grow", 32, 16384);
  ASSERT_TRUE(held(1));
  const replayalloc::Stats queued = replayalloc::stats();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(iteration("bg/grow", 32, 8192), 32) << "the smaller shape, on the plan being replaced";
    iteration("bg/grow", 32, 16384);
  }
  const replayalloc::Stats waiting = replayalloc::stats();
  EXPECT_EQ(waiting.recordings, queued.recordings);
  EXPECT_EQ(waiting.rerecords, before.rerecords);
  release();
  replayalloc_wait_plans();
  EXPECT_EQ(iteration("bg/grow", 32, 16384), 32) << "the grown plan serves the larger shape";
  EXPECT_EQ(iteration("bg/grow", 32, 8192), 32) << "and the smaller one";
  EXPECT_GE(replayalloc::stats().plans_grown - before.plans_grown, 1u);
}

// The recording thread exits while its plan is on the way: the plan is made and
// installed all the same, and serves the key's iterations on other threads.
TEST_F(BackgroundPlanning, ARecordingThreadThatExitsMidPlanLosesNothing) {
  hold();
  std::thread([] {
    iteration("bg/exit", 48);
    iteration("bg/exit", 48);
  }).join();
  ASSERT_TRUE(held(1));
  EXPECT_EQ(iteration("bg/exit", 48), 0);  // still on the way
  release();
  replayalloc_wait_plans();
  EXPECT_EQ(iteration("bg/exit", 48), 48);
}

// fork() while the planner thread holds a job: the child has no planner thread; it
// makes one when it needs it, and the job it was running in the parent is planned
// there (the child's copy). Both processes then replay, neither hangs.
TEST_F(BackgroundPlanning, ForkWhileAPlanIsMadeHangsNeitherProcess) {
  hold();
  iteration("bg/fork", 40);
  iteration("bg/fork", 40);
  ASSERT_TRUE(held(1));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: release its copy of the hold, wait (this makes its planner thread),
    // then the plan must serve. Exit codes say what failed.
    g_hold.store(false);
    replayalloc_wait_plans();
    int hits = 0;
    for (int i = 0; i < 3; ++i) hits = iteration("bg/fork", 40);
    _exit(hits == 40 ? 0 : 10 + hits % 100);
  }
  release();
  replayalloc_wait_plans();
  EXPECT_EQ(iteration("bg/fork", 40), 40);
  int status = 0;
  ASSERT_TRUE(wait_child(pid, 30000, &status)) << "the child hung waiting for its plan";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's iteration after its plan: exit code - 10 slab blocks of 40";
}

// A child forked while nothing is on the way, whose key is recorded there: its own
// planner thread is made on demand and plans it.
TEST_F(BackgroundPlanning, AChildMakesItsOwnPlannerThread) {
  iteration("bg/child0", 16);
  iteration("bg/child0", 16);
  replayalloc_wait_plans();  // the parent's planner thread exists
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    iteration("bg/child", 24);
    iteration("bg/child", 24);
    replayalloc_wait_plans();
    _exit(iteration("bg/child", 24) == 24 ? 0 : 1);
  }
  int status = 0;
  ASSERT_TRUE(wait_child(pid, 30000, &status)) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The process exits while the planner thread plans: exit() neither waits for it nor
// crashes under it (its state is never destroyed).
TEST_F(BackgroundPlanning, ExitWhileAPlanIsMadeNeitherHangsNorCrashes) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    replayalloc::detail::g_plan_job_hook.store(nullptr);
    iteration("bg/atexit", 30000, 4096);
    iteration("bg/atexit", 30000, 4096);  // its plan takes a while: exit meanwhile
    std::exit(0);
  }
  int status = 0;
  ASSERT_TRUE(wait_child(pid, 60000, &status)) << "exit() hung while a plan was made";
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
