// The state machine of runtime/engine.h: a key's iterations recorded, planned,
// replayed, deviating, set aside, as the decisions of runtime/key_policy.h say
// (Note [Key policy]); this file applies them. What the engine owns besides is in
// files of their own: plans made and installed (plans.cc; the planner thread,
// planner_thread.cc), the key table and its bounds (keys.cc), plan files
// (plan_store.cc), op names (op_names.cc), the host slow path (host_slow_path.cc),
// statistics (stats.cc), auto mode, a client of begin/end (auto_mode.cc), threads and
// fork (lifecycle.cc).
#include "runtime/engine.h"
#include "runtime/iteration_log.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "backend/slab_range.h"
#include "planner/planner.h"
#include "replay/compiled_plan.h"
#include "replay/cursor_ops.h"
#include "runtime/auto_detect.h"
#include "runtime/check.h"
#include "support/log.h"
#include "support/reentry.h"
#include "trace/recorder.h"

namespace replayalloc::detail {

constinit thread_local thread_state tls_state REPLAYALLOC_TLS_IE;

namespace {

const char* op_name_for_check(std::uint32_t op);

}  // namespace

engine& engine::get() {
  alignas(engine) static unsigned char storage[sizeof(engine)];
  static engine* instance = [] {
    reentry_guard guard;
    return new (storage) engine();
  }();
  return *instance;
}

void engine::register_at_exit() {
  if (opts_.stats_path[0] != '\0') std::atexit(write_stats_at_exit);  // stats.cc
  // Note [Background planning]: plans saved to a directory are what a short warm-up
  // process is run for (Note [Plan files]); at exit, the plans on the way are finished
  // and saved, for up to 10 s, rather than lost with the planner thread.
  if (opts_.background_planning && (opts_.plan_dir[0] != '\0' || opts_.plan_cache[0] != '\0') &&
      opts_.mode != run_mode::off) {
    std::atexit([] {
      reentry_guard guard;
      if (!get().planner_.wait_idle_for(10000)) {
        REPLAYALLOC_LOG(warning, "exit: plans still being made after 10 s are not saved");
      }
    });
  }
}

engine::engine()
    : opts_(process_options()), policy_(policy_settings::from(opts_)), planner_(&engine::run_plan_job, opts_.background_planning) {
  reentry_guard guard;
  backend::use_fast_entry_points();
  // Note [The fallback's front cache] (after the slab range, which comes first where
  // address space is limited; its range below the slab range's: Note [The gate's
  // range]); check mode shadows every host block itself.
  const bool front = opts_.front_cache && !opts_.check;
  if (opts_.mode != run_mode::off) {
    slabs_ok_ = backend::reserve_slab_range(opts_.reserve_bytes, front ? backend::front_range_wanted() : 0);
  }
  set_host_slab_limit(opts_.max_slab_memory);
  // Note [Auto mode as a client]: its watcher hears of the slow path's requests.
  g_watches_threads = opts_.mode == run_mode::automatic;  // runtime/shortcuts.h
  start_lifecycle();  // lifecycle.cc: thread exit and fork
#if !defined(REPLAYALLOC_PRELOAD_DEFAULTS)
  register_at_exit();  // the LD_PRELOAD library's constructor does (Note [The engine made at load])
#endif
  if (opts_.check && opts_.mode != run_mode::off && check::enable(op_name_for_check)) {
    REPLAYALLOC_LOG(info, "REPLAYALLOC_CHECK: every host block is checked against a shadow record");
  }
  // Note [Below the minimum, inline] (thread_state.h): last, once the backend's entry
  // points and check mode are known.
  const bool plain = backend::g_plain_malloc.load(std::memory_order_relaxed) != nullptr &&
                     backend::g_plain_free.load(std::memory_order_relaxed) != nullptr;
  const std::uint64_t small_limit = plain && !check::enabled() ? opts_.min_size : 0;
  // Note [The fallback made when first needed]: the front cache, jemalloc's settings and
  // Note [Below the minimum, narrowed], now or after the fallback's first requests.
  backend::start_fallback(front, small_limit, opts_.fallback_after);
  set_small_limit(small_limit);
  op_names_.emplace_back("unknown");
  op_ids_.emplace("unknown", 0);
}

namespace {
const char* op_name_for_check(std::uint32_t op) { return engine::get().op_name_locked(op); }
}  // namespace

void engine::count(const policy_counts& n) {
  if (n.probes != 0) probes_.fetch_add(n.probes, std::memory_order_relaxed);
  if (n.set_asides != 0) set_asides_.fetch_add(n.set_asides, std::memory_order_relaxed);
  if (n.keys_given_up != 0) keys_given_up_.fetch_add(n.keys_given_up, std::memory_order_relaxed);
}

void engine::abandon_recording(domain_state& d, const char* what) {
  REPLAYALLOC_LOG(warning, "out of memory while %s '%s'; this iteration passes through",
                  what, d.entry != nullptr ? d.entry->key.c_str() : "?");
  set_phase(d, phase::none);
  if (d.entry != nullptr) {
    std::lock_guard<std::mutex> lock(d.entry->mu);
    replayalloc::detail::abandon_recording(*d.entry);
  }
}

int engine::begin(thread_state& t, const char* key, std::size_t first_size) {
  if (t.depth > 0) {
    ++t.depth;
    return REPLAYALLOC_NESTED;
  }
  register_thread(t);
  reentry_guard guard;
  t.depth = 1;
  t.entry = nullptr;
  if (opts_.mode == run_mode::off) {
    bump(t.host.iterations);
    return 0;
  }
  t.entry = entry_for(key, domain_kind::host, &host_slabs(opts_.prefault));
  domain_begin(t.host, t.entry, nullptr, first_size);
  return 0;
}

void engine::domain_begin(domain_state& d, key_entry* e, void* context, std::size_t first_size) {
  reentry_guard guard;
  set_phase(d, phase::none);
  d.no_slab = false;
  d.entry = e;
  d.regime = -1;
  d.probing = false;
  d.growing = false;
  d.sizing = false;
  d.marked[0] = d.marked[1] = -1;
  d.probation = false;
  d.aside = false;
  d.first_size = first_size;
  bump(d.iterations);
  open_iteration_log(d.log);
  if (e == nullptr || opts_.mode == run_mode::off) {
    log_passed(d.log, "REPLAYALLOC_MODE=off");
    return;
  }
  // The version is claimed from under the key's mutex: once that is released another
  // thread may retire it, and a retired version deletes itself with its last slab.
  // The claim counts as a slab (slab_pool.h), so `v` outlives it.
  plan_version* v = nullptr;
  plan_version::slab_claim claim;
  const char* why = "";
  bool claimed = false;
  bool awaiting = false;
  std::size_t slab_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    const begin_decision b = decide_begin(*e, first_size, slabs_ok_ || e->kind != domain_kind::host, policy_);
    d.probation = b.probation;
    log_begin(d.log, b);  // Note [The iteration log]: a pass-through's reason is the decision's own
    switch (b.what) {
      case begin_decision::pass:
        return;
      case begin_decision::set_aside:
        d.aside = true;
        bump(d.set_aside);
        return;
      case begin_decision::awaiting:
        bump(d.awaiting_plan);
        awaiting = true;
        break;
      case begin_decision::record:
        d.regime = b.regime;
        d.growing = b.growing;
        d.sizing = b.sizing;
        d.probing = b.probing;
        d.marked[0] = b.marked[0];
        d.marked[1] = b.marked[1];
        break;
      case begin_decision::replay:
        v = e->regimes[b.regime].version;
        d.regime = b.regime;
        slab_bytes = v->plan.slab_bytes;
        claimed = v->claim(opts_.max_slabs, &claim, &why);
        break;
    }
  }
  if (awaiting) {
    planner_.kick();  // a forked child makes its planner thread again here
    return;
  }
  if (v == nullptr) {
    begin_recording(d, e);
    return;
  }
  begin_replay(d, e, v, claimed, claim, why, context, slab_bytes);
}

void engine::begin_recording(domain_state& d, key_entry* e) {
  if (d.recorder == nullptr) {
    void* mem = backend::fallback_alloc(sizeof(trace_recorder), alignof(trace_recorder));
    if (mem == nullptr) {
      std::lock_guard<std::mutex> lock(e->mu);
      replayalloc::detail::abandon_recording(*e);
      log_passed(d.log, "no memory for a recording");
      return;
    }
    d.recorder = new (mem) trace_recorder;
  }
  d.recorder->begin(tls_state.thread_no, reinterpret_cast<std::uintptr_t>(e));
  set_phase(d, phase::record);
}

void engine::begin_replay(domain_state& d, key_entry* e, plan_version* v, bool claimed, plan_version::slab_claim claim,
                          const char* why, void* context, std::size_t slab_bytes) {
  // A new slab (no idle one of this version): its time is the iteration's (Note [The
  // iteration log]).
  const std::uint64_t slab_from = claimed && claim.s == nullptr && d.log.began_ns != 0 ? monotonic_ns() : 0;
  slab* s = claimed ? v->finish(claim, context, &why) : nullptr;
  if (slab_from != 0 && s != nullptr) log_slab(d.log, monotonic_ns() - slab_from, slab_bytes);
  // Over REPLAYALLOC_MAX_SLAB_MEMORY: unmap idle slabs of other keys and try once
  // more, with the key's version read again (the failed claim was dropped, and `v`
  // may be gone).
  if (s == nullptr && why == slab_limit_reason && trim_idle_slabs(e, slab_bytes) >= slab_bytes) {
    claimed = false;
    {
      std::lock_guard<std::mutex> lock(e->mu);
      v = e->regimes[d.regime].version;
      if (v != nullptr) claimed = v->claim(opts_.max_slabs, &claim, &why);
    }
    if (v == nullptr) why = "plan retired";
    if (claimed) s = v->finish(claim, context, &why);
  }
  if (s == nullptr) {
    d.no_slab = true;
    log_passed(d.log, why);
    REPLAYALLOC_LOG(info, "iteration of '%s' passes through: %s", e->key.c_str(), why);
    return;
  }
  d.misses_at_begin = start_replay(d.cursor, v->plan, s);  // replay/cursor_ops.h
  d.version = v;
  set_phase(d, phase::replay);
  mask_plan(d);
}

int engine::end(thread_state& t) {
  if (t.depth == 0) {
    errno = EINVAL;
    return -1;
  }
  if (--t.depth > 0) return REPLAYALLOC_NESTED;
  reentry_guard guard;
  const int n = n_hooks_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (hooks_[i].on_end != nullptr) hooks_[i].on_end(t);
  }
  domain_end(t.host);
  t.entry = nullptr;
  return 0;
}

void engine::domain_end(domain_state& d) {
  reentry_guard guard;
  unmask_plan(d);
  const std::uint64_t ended = d.log.began_ns != 0 ? monotonic_ns() : 0;
  const bool recorded = d.ph == phase::record, replayed = d.ph == phase::replay;
  if (recorded) {
    log_recorded(d.log, d.recorder->size());
    end_record(d);
  }
  d.fell_short = false;
  d.deviated = false;
  if (replayed) end_replay(d);
  d.expected = 0;
  if (ended != 0) {
    say_iteration(d.log, d.entry != nullptr ? d.entry->key.c_str() : "?", d.regime, tls_state.thread_no, recorded,
                  replayed, ended);
  }
  set_phase(d, phase::none);
  if (d.entry != nullptr) d.entry->users.fetch_sub(1, std::memory_order_release);
  d.entry = nullptr;
  d.version = nullptr;
  d.no_slab = false;
}

void engine::record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align) {
  reentry_guard guard;
  std::uint32_t op = tls_state.op;
  // Call-stack tags cost an unwind per allocation: taken from the key's last recording
  // where it made the same size at the same position (Note [Op tags from the last
  // recording], trace/recorder.h); a key on probation (Note [Probation slabs]) records
  // without them.
  if (op == 0 && !d.probation) {
    if (untagged_op_source f = g_untagged_op_source.load(std::memory_order_acquire)) {
      op = d.recorder->hint(size);
      if (op == 0) op = f();
    }
  }
  try {
    d.recorder->record_alloc(p, size, static_cast<std::uint32_t>(align), op);
  } catch (const std::bad_alloc&) {
    // The recording's arrays cannot grow: the block stays the backend's, and the
    // iteration passes through (a later one records again). Its table of live blocks
    // grows before it inserts (Note [Tables that grow before they insert]), so the
    // recorder is whole and the next recording clears it.
    abandon_recording(d, "recording");
  }
}

void engine::record_free(domain_state& d, const void* p) {
  reentry_guard guard;
  d.recorder->record_free(p);  // erases only: never allocates
}

void engine::end_record(domain_state& d) {
  try {
    end_record_impl(d);
  } catch (const std::bad_alloc&) {
    // Planning needs memory the system does not have: keep serving from the backend
    // and try again with a later recording.
    abandon_recording(d, "planning");
  }
}

void engine::end_record_impl(domain_state& d) {
  key_entry& e = *d.entry;
  // Deferred ops keep their placeholders here (Note [Deferred op names]).
  trace tr = d.recorder->finish(e.key, [this](std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return id < op_names_.size() ? op_names_[id] : std::string("unknown");
  });
  recordings_.fetch_add(1, std::memory_order_relaxed);
  auto shared = std::make_shared<const trace>(std::move(tr));
  recording_decision dec;
  policy_counts n;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    const recording_intent in{d.regime, d.probing, d.growing, d.sizing, {d.marked[0], d.marked[1]}};
    dec = decide_after_recording(e, shared, in, policy_, n);
  }
  count(n);
  if (plan_version* old = dec.dropped) {
    retire_dropped(e, old, old->from_file,
                   old->from_file ? "its allocation sequence changed" : dec.dropped_why);
  }
  log_after_recording(d.log, dec);
  if (dec.to_plan != nullptr) {
    submit_plan(e, std::move(dec.to_plan), dec.replace_id, false, dec.probation);
  }
}

void engine::end_replay(domain_state& d) {
  plan_version* v = d.version;
  const std::uint32_t planned = v->plan.planned_slots;
  // Read now: once the slab goes back below, a retired version may be deleted; after
  // that `v` is only compared, never read.
  const bool from_file = v->from_file;
  const std::uint64_t version_id = v->id;
  const std::uint32_t tail_from = v->tail_from;
  const std::uint32_t period = v->period;
  // Stop replaying before the slab may go back to the pool (replay/cursor_ops.h).
  const replay_outcome o = finish_replay(d.cursor, d.misses_at_begin);
  const std::uint32_t handed = o.handed;
  const std::uint64_t misses = o.misses;
  bump(d.slab_hits, handed);
  bump(d.hit_bytes, o.hit_bytes);
  bump(d.frees, o.freed_here);
  if (o.s->refs.fetch_add(o.outstanding, std::memory_order_acq_rel) + o.outstanding == 0) v->release(o.s);

  key_entry& e = *d.entry;
  replay_summary rs;
  rs.version = v;
  rs.version_id = version_id;
  rs.from_file = from_file;
  rs.regime = d.regime;
  rs.planned = planned;
  rs.handed = handed;
  rs.misses = misses;
  rs.grown = o.grown;
  rs.first_miss_at = o.first_miss_at;
  rs.first_miss_size = o.first_miss_size;
  rs.first_too_large_at = o.first_too_large_at;
  rs.first_too_large_size = o.first_too_large_size;
  rs.first_size = d.first_size;
  rs.tail_from = tail_from;
  rs.period = period;
  rs.expected = d.expected;
  replay_verdict verdict;
  deviation_streak streak{d.deviation_entry, d.deviating_in_a_row};
  {
    std::lock_guard<std::mutex> lock(e.mu);
    verdict = decide_after_replay(e, rs, policy_, &streak);
  }
  d.fell_short = verdict.fell_short;
  d.deviated = verdict.deviated;
  d.deviation_entry = streak.entry;
  d.deviating_in_a_row = streak.in_a_row;
  // Note [Predicted plans]: planned like a recording's envelope (Note [Background
  // planning]); the plan it replaces serves meanwhile.
  if (verdict.predicted != nullptr) submit_plan(e, std::move(verdict.predicted), version_id, true, verdict.probation);
  log_replay(d.log, e.key.c_str(), rs, verdict);  // Note [The iteration log]
  if (verdict.retire) retire_deviating(e, v, rs.regime, from_file);
}

void engine::retire_deviating(key_entry& e, plan_version* v, int regime, bool from_file) {
  const char* why = from_file ? "its replayed iteration deviated"
                              : "its replayed iterations deviated REPLAYALLOC_REPLAN_AFTER times in a row";
  bool dropped = false;
  policy_counts n;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    // Not replaced meanwhile.
    if (e.regimes[regime].version == v) dropped = drop_plan(e, regime, policy_, n, why) != nullptr;
  }
  count(n);
  // `v` is still alive: a version leaves the key here, and only retire() may free it.
  if (dropped) retire_dropped(e, v, from_file, why);
}

}  // namespace replayalloc::detail
