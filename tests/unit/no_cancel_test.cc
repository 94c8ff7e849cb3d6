// Note [No cancellation point inside] (support/no_cancel.h): replayalloc's I/O on a
// program's thread is not a cancellation point. A thread whose cancellation is pending
// writes a plan file whole and a message, takes the statistics, and is cancelled at its
// next cancellation point outside, as glibc's malloc leaves it.
#include <gtest/gtest.h>
#include <pthread.h>
#include <semaphore.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "replayalloc/replayalloc.h"
#include "support/file_io.h"
#include "support/log.h"

namespace replayalloc::detail {
namespace {

struct run {
  std::string path;
  std::string bytes;
  sem_t cancelled;  // posted once the thread's cancellation is pending
  bool wrote = false;
  bool status_ok = false;
  bool logged = false;
  bool stats_taken = false;
  bool past_testcancel = false;
};

// Not instrumented by AddressSanitizer: the cancellation unwinds this frame without
// returning, which would leave its red zones poisoned on the thread's stack.
__attribute__((no_sanitize_address)) void* cancelled_thread(void* p) {
  auto* r = static_cast<run*>(p);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  while (sem_wait(&r->cancelled) != 0) {
  }
  // Deferred cancellation, now pending: acted on at the next cancellation point.
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
  r->status_ok = write_file_atomic(r->path, r->bytes).ok();  // open, write, fsync, close
  r->wrote = true;
  REPLAYALLOC_LOG(warning, "a message written by a thread whose cancellation is pending");  // write
  r->logged = true;
  char stats[8192];
  r->stats_taken = replayalloc_stats_json(stats, sizeof stats) > 0;  // reads /proc/self/statm
  pthread_testcancel();
  r->past_testcancel = true;
  return nullptr;
}

TEST(NoCancel, APendingCancellationWaitsForTheThreadsNextCancellationPointOutside) {
  char dir[] = "/tmp/replayalloc-no-cancel-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  run r;
  r.path = std::string(dir) + "/plan";
  r.bytes.assign(1 << 20, 'p');
  ASSERT_EQ(sem_init(&r.cancelled, 0, 0), 0);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, &cancelled_thread, &r), 0);
  ASSERT_EQ(pthread_cancel(t), 0);
  ASSERT_EQ(sem_post(&r.cancelled), 0);
  void* result = nullptr;
  ASSERT_EQ(pthread_join(t, &result), 0);
  EXPECT_EQ(result, PTHREAD_CANCELED) << "the thread was cancelled, at pthread_testcancel";
  EXPECT_TRUE(r.wrote) << "cancelled inside write_file_atomic";
  EXPECT_TRUE(r.status_ok);
  EXPECT_TRUE(r.logged) << "cancelled inside the message's write";
  EXPECT_TRUE(r.stats_taken) << "cancelled inside the statistics' read of /proc";
  EXPECT_FALSE(r.past_testcancel);
  const absl::StatusOr<std::string> back = read_file(r.path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->size(), r.bytes.size()) << "the plan file written whole";
  std::remove(r.path.c_str());
  ::rmdir(dir);
  sem_destroy(&r.cancelled);
}

}  // namespace
}  // namespace replayalloc::detail
