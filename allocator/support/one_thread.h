// replayalloc/support/one_thread.h: whether the process has only ever had one thread.
//
// Layer: support. Note [Fork in a process of one thread] (runtime/lifecycle.cc).
#pragma once

#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define REPLAYALLOC_HAVE_SINGLE_THREADED 1
#endif

namespace replayalloc::detail {

// glibc's __libc_single_threaded (2.32 and later), which pthread_create clears for good
// (it stays clear after the other threads exit); false where the C library has no such
// flag. A thread made by a raw clone() is not counted, as glibc's stdio, which skips its
// locks on the same flag, does not count it.
inline bool process_has_one_thread() noexcept {
#if defined(REPLAYALLOC_HAVE_SINGLE_THREADED)
  return __libc_single_threaded != 0;
#else
  return false;
#endif
}

}  // namespace replayalloc::detail
