// replayalloc/support/no_cancel.h: a scope in which the calling thread cannot be
// cancelled.
//
// Layer: support. Used wherever replayalloc's code waits or does I/O on a thread of
// the program's: plan files and traces (file_io.cc), messages (log.cc), statistics
// (runtime/stats.cc: /proc read, and written at exit), waiting for the planner
// (runtime/planner_thread.cc), naming call stacks (hooks/stack_ops.cc: the symbolizer).
//
// Note [No cancellation point inside]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// glibc's malloc family contains no cancellation point: a thread that pthread_cancel
// asked to stop is not stopped inside malloc. replayalloc's slow paths and C API read
// plan files, write messages and wait for the planner on the program's threads, and
// open, read, write, fsync, close and pthread_cond_wait are cancellation points: a
// cancellation acted on there unwound (glibc's forced unwinding, through libgcc_s)
// out of the allocator in the middle of its work, through frames declared noexcept
// (std::terminate) or through the landing pads of the LD_PRELOAD library, whose
// unwinder is its own copy (Note [The LD_PRELOAD library's own runtime],
// hooks/CMakeLists.txt). So each of them runs with cancellation disabled
// (pthread_setcancelstate: a flag of the thread's, no system call); a cancellation
// asked for meanwhile stays pending and is acted on at the thread's next cancellation
// point outside (tests/unit/no_cancel_test.cc). This holds for deferred cancellation,
// the default: a thread that enabled asynchronous cancellation may be stopped anywhere,
// and POSIX allows no call to malloc then.
#pragma once

#include <pthread.h>

namespace replayalloc::detail {

class no_cancel {
 public:
  no_cancel() noexcept { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_); }
  ~no_cancel() { pthread_setcancelstate(old_, nullptr); }
  no_cancel(const no_cancel&) = delete;
  no_cancel& operator=(const no_cancel&) = delete;

 private:
  int old_ = PTHREAD_CANCEL_ENABLE;
};

}  // namespace replayalloc::detail
