// Note [The iteration log] (runtime/iteration_log.h).
#include "runtime/iteration_log.h"

#include <time.h>

#include <cstdio>

#include "runtime/key_policy.h"
#include "support/log.h"

namespace replayalloc::detail {

void log_begin(iteration_log& log, const begin_decision& b) noexcept {
  if (b.what == begin_decision::pass || b.what == begin_decision::set_aside || b.what == begin_decision::awaiting) {
    log.passed = b.why;
  }
}

void log_after_recording(iteration_log& log, const recording_decision& d) noexcept {
  log.submitted = d.to_plan != nullptr;
}

void log_replay(iteration_log& log, const char* key, const replay_summary& rs, const replay_verdict& v) noexcept {
  log.handed = rs.handed;
  log.planned = rs.planned;
  log.misses = rs.misses;
  if (!v.deviated && !v.grew) return;
  log.verdict = v.explained     ? "deviated: another regime's"
                : v.grow_wanted ? "outgrew its slots: the plan grows"
                : v.counted     ? "deviated: counted against the plan"
                                : "deviated: not counted";
  // What a deviation looked like: where it left the plan, and what was made of it.
  REPLAYALLOC_LOG(debug, "'%s' regime %d: replay %s (planned %u, handed %u, misses %llu, outgrown %u; first miss "
                  "at slot %u, %llu bytes; first request %llu bytes): %s",
                  key, rs.regime, v.grew ? "outgrew its slots" : "deviated", rs.planned, rs.handed,
                  static_cast<unsigned long long>(rs.misses), rs.grown, rs.first_miss_at,
                  static_cast<unsigned long long>(rs.first_miss_size), static_cast<unsigned long long>(rs.first_size),
                  v.explained ? "another regime's" : v.grow_wanted ? "the plan grows"
                                                   : v.counted     ? "counted" : "not counted");
}

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
