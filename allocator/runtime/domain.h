// replayalloc/runtime/domain.h: what a domain an integration brings may ask of the
// engine. The contract between the engine and, today, the CUDA device domain
// (integrations/cuda).
//
// Layer: runtime. A domain's sources include this header and the public ones
// (allocator/include, their integration's include/), nothing else of allocator/:
// every engine call they make is one of the functions below (domain.cc forwards them
// to runtime/engine.h), and what they use of the lower layers comes through the
// headers this one includes, named in the list below.
//
// A domain is a per-thread domain_state (runtime/thread_state.h) with its own plan
// keys (the host key with a suffix, "resnet50@cuda:0"), replayed by the same state
// machine as the host domain (runtime/engine.h). The integration supplies:
//  * a slab source (replay/slab_pool.h, slab_source): where its slabs come from, and
//    the owner table its frees find their slab in (invariant 3);
//  * its backend: replay_malloc's fallback (replay/fast_path.h) for misses, and what
//    it serves outside an iteration;
//  * optionally a placement adjuster, run on each plan of its keys before it is
//    compiled (large-model support moves allocations out of the slab).
//
// The life of a domain on one thread:
//   domain_add_hooks(on_end, on_exit)    once per process: hear of host iterations
//                                        ending and threads exiting
//   domain_register(t, d, kind)          once per thread, before its first iteration
//   domain_open(d, key, source, ...)     at the thread's first request of the domain
//                                        inside a host iteration (tls_state.depth > 0)
//     in phase::replay:  replay_malloc / replay_free on d.cursor (the hot path)
//     in phase::record:  the backend, then domain_record_alloc / domain_record_free
//     otherwise:         the backend, counted in d's counters (bump)
//   domain_close(d)                      from the on_end hook: the host iteration ended
//   domain_unregister(d)                 from the on_exit hook: the thread exits
//
// What a domain may use besides these functions:
//   tls_state, thread_state, domain_state, phase, domain_kind, bump (the counters
//     reach stats()); replay_malloc, replay_free, below_min_size, backend_kind; slab,
//     slab_source;
//   trace, placement, not_in_slab (an adjuster's arguments), plan_greedy_by_size and
//   planner_options (an adjuster planning again); process_options();
//   REPLAYALLOC_LOG; reentry_guard and in_engine() (invariant 5: a domain's own
//   allocations inside its slow paths go to the backend); chunk_bytes, chunk_shift,
//   REPLAYALLOC_TLS_IE (support/config.h) and REPLAYALLOC_EXPORT (replayalloc/export.h).
//
// Threads: domain_add_hooks, domain_stats and domain_stats_json may be called from any
// thread; every other function acts on the calling thread's domain (d is one of its
// thread_locals). None may be called from the hot path, nor with a lock of the domain
// held that a slab source callback takes. Each that enters the engine takes the
// reentry guard itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "planner/planner.h"
#include "replay/fast_path.h"
#include "replay/slab_pool.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/thread_state.h"
#include "support/config.h"
#include "support/log.h"
#include "support/options.h"
#include "support/reentry.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// Adjusts a placement of `t` before it is compiled; returns a message to log, or
// null. pre/post: validate(t, p) holds. (runtime/engine.h uses this one.)
using placement_adjuster = const char* (*)(const trace& t, placement& p, void* arg);

// What a domain hears of its thread. on_end: the thread's outermost host iteration
// ends (before the host domain's own end); on_exit: the thread exits (its
// thread_locals are still there). Both run inside the engine (reentry guard held).
using domain_thread_hook = void (*)(thread_state& t);

// Adds a domain's hooks (at most a few per process; call once, e.g. under
// std::call_once). Either may be null.
void domain_add_hooks(domain_thread_hook on_end, domain_thread_hook on_exit);

// Makes `t` and its domain `d` known to the engine: d's counters reach stats() and
// t's exit reaches on_exit before its thread_locals go away. Sets d.kind and
// d.registered; idempotent. Leaves d unregistered when t is exiting (a late call from
// a thread's exit: its requests then pass through, counted nowhere).
void domain_register(thread_state& t, domain_state& d, domain_kind kind);
// Folds d's counters into what exited threads left and forgets d. Idempotent.
void domain_unregister(domain_state& d);

// The host key of t's open iteration, which a domain's key extends; "unnamed" when the
// thread has none (an iteration that began without a key entry).
// pre: t's iteration is open (t.depth > 0); the view lives as long as it.
std::string_view domain_host_key(const thread_state& t);

// Opens d's iteration of `key`: finds or makes the key's entry (on first use of d.kind,
// with `source` for its slabs, `adjust` and `adjust_arg` for its plans) and begins, as the
// host domain begins its own: d.ph says what the iteration does (replay on a slab of
// the key's plan, record, or pass through). `context` reaches source->on_acquire when
// the iteration takes a slab. pre: d registered, its iteration closed.
void domain_open(domain_state& d, std::string_view key, slab_source* source,
                 placement_adjuster adjust, void* adjust_arg, void* context);
// Closes d's iteration: a recording may be planned, a replay's slab drains back to its
// pool, a deviation counted. pre: domain_open was called for it.
void domain_close(domain_state& d);

// While d records (d.ph == phase::record): a request served by the domain's backend,
// and a free of one. record_free of a block the recording never saw does nothing.
void domain_record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align);
void domain_record_free(domain_state& d, const void* p);

// Process-wide statistics of every domain of `kind`, and the same as the stats JSON
// object (snprintf-style: returns the length needed; cap 0 writes nothing). Any thread.
Stats domain_stats(domain_kind kind);
std::size_t domain_stats_json(domain_kind kind, char* buf, std::size_t cap);

}  // namespace replayalloc::detail
