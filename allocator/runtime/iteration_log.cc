// Note [The iteration log] (runtime/iteration_log.h).
#include "runtime/iteration_log.h"

#include <time.h>

#include <cstdio>

#include "support/log.h"

namespace replayalloc::detail {

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void say_iteration(const iteration_log& log, const char* key, int regime, std::uint32_t thread_no,
                   bool recorded, bool replayed, std::uint64_t ended_ns) noexcept {
  if (log.began_ns == 0) return;
  const double ms = static_cast<double>(ended_ns - log.began_ns) / 1e6;
  const double end_ms = static_cast<double>(monotonic_ns() - ended_ns) / 1e6;
  char what[160];
  if (replayed) {
    std::snprintf(what, sizeof what, "replayed regime %d: %u of %u slots handed out, %llu misses%s%s", regime,
                  log.handed, log.planned, static_cast<unsigned long long>(log.misses),
                  log.verdict != nullptr ? "; " : "", log.verdict != nullptr ? log.verdict : "");
  } else if (recorded) {
    std::snprintf(what, sizeof what, "recorded (%llu allocations)%s",
                  static_cast<unsigned long long>(log.recorded), log.submitted ? "; a plan asked for" : "");
  } else {
    std::snprintf(what, sizeof what, "passed through: %s", log.passed != nullptr ? log.passed : "not planned");
  }
  char slab[96] = "";
  if (log.slab_bytes != 0) {
    std::snprintf(slab, sizeof slab, "; a new slab of %.2f MiB made in %.3f ms (purge, map, faults)",
                  static_cast<double>(log.slab_bytes) / (1 << 20), static_cast<double>(log.slab_ns) / 1e6);
  }
  REPLAYALLOC_LOG(debug, "iteration of '%s' (thread %u): %.3f ms, %s%s; its end %.3f ms", key, thread_no, ms, what,
                  slab, end_ms);
}

}  // namespace replayalloc::detail
