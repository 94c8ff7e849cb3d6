// replayalloc/support/log.h: warnings and errors that never allocate.
//
// Layer: support. Messages are formatted into a stack buffer and written with one
// write(2) to stderr, so they are safe inside the allocator, before libc is ready
// and inside a fork child. Warnings are capped (REPLAYALLOC_MAX_WARNINGS) so a
// program that deviates on every call cannot flood its log.
#pragma once

#include <atomic>
#include <cstdarg>

namespace replayalloc::detail {

enum class log_level : int { error = 0, warning = 1, info = 2, debug = 3 };

// Current verbosity (REPLAYALLOC_VERBOSE); errors are always printed, warnings
// while fewer than the cap have been printed.
inline std::atomic<int> g_log_verbosity{1};
void set_log_verbosity(int level);
void set_log_max_warnings(long cap);
inline int log_verbosity() { return g_log_verbosity.load(std::memory_order_relaxed); }

void log_message(log_level level, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace replayalloc::detail

#define REPLAYALLOC_LOG(level, ...) \
  ::replayalloc::detail::log_message(::replayalloc::detail::log_level::level, __VA_ARGS__)
