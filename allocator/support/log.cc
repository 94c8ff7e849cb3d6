#include "support/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "support/no_cancel.h"

namespace replayalloc::detail {
namespace {

std::atomic<long> g_max_warnings{100};
std::atomic<long> g_warnings{0};

const char* level_name(log_level level) {
  switch (level) {
    case log_level::error: return "error";
    case log_level::warning: return "warning";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "?";
}

}  // namespace

void set_log_verbosity(int level) { g_log_verbosity.store(level, std::memory_order_relaxed); }
void set_log_max_warnings(long cap) { g_max_warnings.store(cap, std::memory_order_relaxed); }

void log_message(log_level level, const char* fmt, ...) {
  if (static_cast<int>(level) > g_log_verbosity.load(std::memory_order_relaxed) &&
      level != log_level::error) {
    return;
  }
  if (level == log_level::warning) {
    const long n = g_warnings.fetch_add(1, std::memory_order_relaxed);
    const long cap = g_max_warnings.load(std::memory_order_relaxed);
    if (n > cap) return;
    if (n == cap) fmt = "further warnings suppressed (REPLAYALLOC_MAX_WARNINGS)";
  }
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "replayalloc: %s: ", level_name(level));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  const char* p = buf;
  const no_cancel no_cancel;  // Note [No cancellation point inside]
  while (len > 0) {
    const ssize_t w = ::write(2, p, len);
    if (w <= 0) break;
    p += w;
    len -= static_cast<size_t>(w);
  }
}

}  // namespace replayalloc::detail
