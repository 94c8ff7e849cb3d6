// replayalloc/runtime/stats.h: the one list of the statistics' fields.
//
// Layer: runtime. Stats (replayalloc.hpp) is the public struct, documented field by
// field; REPLAYALLOC_STATS_FIELDS is the same fields in the same order, with how each
// is gathered and its JSON name, and everything that walks the fields is made from it:
// summing what exited threads left (add_stats), the JSON object (format_stats_json,
// replayalloc_stats_json(), REPLAYALLOC_STATS). The static_asserts in stats.cc fail
// the build when the struct and the list disagree (a field added to one only).
//
// X(field, how, "json name", group): how is
//   domain   counted per domain (thread or device stream), summed over live domains
//            and over what exited ones left (add_domain, add_stats);
//   engine   kept by the engine (keys, plans, files, mapped slab memory);
//   derived  computed from the others when stats() is taken;
// group 1 fields are written inside "fallbacks_by_reason", group 0 at the top level.
#pragma once

#include <cstddef>
#include <cstdint>

#include "replayalloc/replayalloc.hpp"

#define REPLAYALLOC_STATS_FIELDS(X)                                 \
  X(allocations, derived, "allocations", 0)                         \
  X(slab_hits, domain, "slab_hits", 0)                              \
  X(fallbacks, derived, "fallbacks", 0)                             \
  X(fallback_size_mismatch, domain, "size_mismatch", 1)             \
  X(fallback_beyond_plan, domain, "beyond_plan", 1)                 \
  X(fallback_overlap_live, domain, "overlap_live", 1)               \
  X(fallback_alignment, domain, "alignment", 1)                     \
  X(fallback_no_slab, domain, "no_slab", 1)                         \
  X(fallback_too_large, domain, "too_large", 1)                     \
  X(backend_planned, domain, "backend_planned", 0)                  \
  X(passthrough, domain, "passthrough", 0)                          \
  X(below_min_size, domain, "below_min_size", 0)                    \
  X(frees, domain, "frees", 0)                                      \
  X(remote_frees, domain, "remote_frees", 0)                        \
  X(invalid_frees, domain, "invalid_frees", 0)                      \
  X(double_frees, domain, "double_frees", 0)                        \
  X(bytes_from_slab, domain, "bytes_from_slab", 0)                  \
  X(bytes_from_backend, domain, "bytes_from_backend", 0)            \
  X(iterations, domain, "iterations", 0)                            \
  X(recordings, engine, "recordings", 0)                            \
  X(plans, engine, "plans", 0)                                      \
  X(rerecords, engine, "rerecords", 0)                              \
  X(plans_loaded, engine, "plans_loaded", 0)                        \
  X(plan_files_ignored, engine, "plan_files_ignored", 0)            \
  X(plans_evicted, engine, "plans_evicted", 0)                      \
  X(plans_grown, engine, "plans_grown", 0)                          \
  X(set_asides, engine, "set_asides", 0)                            \
  X(keys_given_up, engine, "keys_given_up", 0)                      \
  X(iterations_set_aside, domain, "iterations_set_aside", 0)        \
  X(auto_rests, engine, "auto_rests", 0)                            \
  X(probes, engine, "probes", 0)                                    \
  X(plans_predicted, engine, "plans_predicted", 0)                  \
  X(plans_background, engine, "plans_background", 0)                \
  X(plan_wait_us_total, engine, "plan_wait_us_total", 0)            \
  X(plan_wait_us_max, engine, "plan_wait_us_max", 0)                \
  X(plans_improved, engine, "plans_improved", 0)                    \
  X(plan_search_us_total, engine, "plan_search_us_total", 0)        \
  X(iterations_awaiting_plan, domain, "iterations_awaiting_plan", 0) \
  X(regimes, engine, "regimes", 0)                                  \
  X(slab_bytes, engine, "slab_bytes", 0)                            \
  X(lower_bound_bytes, engine, "lower_bound_bytes", 0)              \
  X(mapped_bytes, engine, "mapped_bytes", 0)                        \
  X(mapped_bytes_peak, engine, "mapped_bytes_peak", 0)              \
  X(backend_bytes, engine, "backend_bytes", 0)                      \
  X(backend_bytes_peak, engine, "backend_bytes_peak", 0)            \
  X(keys, engine, "keys", 0)                                        \
  X(resident_bytes, engine, "resident_bytes", 0)                    \
  X(resident_bytes_peak, engine, "resident_bytes_peak", 0)          \
  X(slab_resident_bytes, engine, "slab_resident_bytes", 0)          \
  X(backend_resident_bytes, engine, "backend_resident_bytes", 0)    \
  X(front_lists_handed, engine, "front_lists_handed", 0)            \
  X(front_lists_taken, engine, "front_lists_taken", 0)              \
  X(front_lists_released, engine, "front_lists_released", 0)        \
  X(front_lists_idle, engine, "front_lists_idle", 0)                \
  X(front_threads_closed, engine, "front_threads_closed", 0)        \
  X(front_depot_bytes, engine, "front_depot_bytes", 0)              \
  X(front_run_bytes, engine, "front_run_bytes", 0)                  \
  X(front_stashed_bytes, engine, "front_stashed_bytes", 0)          \
  X(boot_requests, engine, "boot_requests", 0)                      \
  X(boot_bytes, engine, "boot_bytes", 0)

namespace replayalloc::detail {

struct domain_state;

// Adds a domain's counters to `s` (the fields gathered `domain`): a live domain when
// stats() is taken, an exiting one into what exited threads left.
void add_domain(Stats& s, const domain_state& d);

// Writes `s` as the stats JSON object. Returns the length needed (snprintf-style:
// the text is cut to cap - 1 characters and always terminated when cap > 0).
std::size_t format_stats_json(const Stats& s, char* buf, std::size_t cap);

// Writes `s` as a readable table (REPLAYALLOC_STATS_FORMAT=text), snprintf-style.
std::size_t format_stats_text(const Stats& s, char* buf, std::size_t cap);

// Subtracts what reset_stats_baseline() saved from the counters of `s` (the statistics
// of domain kind `only`, or -1: all) and keeps the current values: Note [Statistics reset].
void apply_stats_reset(Stats& s, int only);

// A value of backend_bytes seen: raises backend_bytes_peak when larger.
void note_backend_bytes(std::uint64_t bytes);

// replayalloc_reset_stats(): saves the baseline apply_stats_reset() subtracts.
void reset_stats_baseline();

// REPLAYALLOC_STATS at exit (Note [Statistics at exit]); registered with atexit.
void write_stats_at_exit();

// This process started now (the engine's constructor; a forked child).
void note_process_start();

}  // namespace replayalloc::detail
