// The state machine of runtime/engine.h: a key's iterations recorded, planned,
// replayed, deviating, set aside. What the engine owns besides is in files of their
// own: the key table and its bounds (keys.cc), plan files (plan_store.cc), statistics
// (stats.cc), the thread's side of auto mode (auto_thread.cc), threads and fork
// (lifecycle.cc).
#include "runtime/engine.h"

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
#include "runtime/auto_detect.h"
#include "runtime/check.h"
#include "support/log.h"
#include "support/reentry.h"
#include "trace/recorder.h"

namespace replayalloc::detail {

constinit thread_local thread_state tls_state REPLAYALLOC_TLS_IE;

namespace {

std::uint64_t total_misses(const replay_cursor& c) {
  std::uint64_t n = 0;
  for (const auto& m : c.misses) n += m.load(std::memory_order_relaxed);
  return n;
}

// Check mode: hides a replaying host cursor's counts so the hot path always misses
// (Note [Check mode]); the slow path unmasks around its own work.
void mask(domain_state& d) {
  if (!check::enabled() || d.masked || d.ph != phase::replay || d.kind != domain_kind::host) return;
  hide_plan(d.cursor);
  d.masked = true;
}

void unmask(domain_state& d) {
  if (!d.masked) return;
  show_plan(d.cursor);
  d.masked = false;
}

// Note [Predicted plans] (trace/size_model.h): regime g's envelope raised to the sizes
// fitted at the shape the request that outgrew slot at - 1 (`size` bytes) asks for, plus
// a quarter; null when the regime has no model, the slot cannot say, or nothing grew.
// Only slots whose size varied are raised (those of one fixed size keep matching
// exactly). REQUIRES: the key's mutex held.
std::shared_ptr<const envelope> predicted_envelope(const regime& g, std::uint32_t at, std::uint64_t size) {
  if (at == 0 || g.samples.size() < 2 || g.env == nullptr) return nullptr;
  const std::optional<size_model> m = fit_size_model(g.samples);
  if (!m || at - 1 >= m->coef.size() || m->coef.size() != g.env->tr.allocations.size()) return nullptr;
  const std::optional<double> x = m->solve(at - 1, size);
  if (!x) return nullptr;
  auto env = std::make_shared<envelope>(*g.env);
  const double target = *x * 1.25;
  bool raised = false;
  for (std::size_t i = 0; i < env->tr.allocations.size() && i < env->least.size(); ++i) {
    std::uint64_t& cap = env->tr.allocations[i].size;
    if (env->least[i] >= cap) continue;  // one fixed size: kept exact
    const std::uint64_t want = std::min<std::uint64_t>(m->size_at(i, target), max_request_bytes);
    if (want > cap) {
      cap = want;
      raised = true;
    }
  }
  return raised ? env : nullptr;
}

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

engine::engine() : opts_(process_options()) {
  reentry_guard guard;
  backend::use_fast_entry_points();
  backend::keep_huge_pages();
  if (opts_.mode != run_mode::off) slabs_ok_ = backend::reserve_slab_range(opts_.reserve_bytes);
  set_host_slab_limit(opts_.max_slab_memory);
  start_lifecycle();  // lifecycle.cc: thread exit and fork
  if (opts_.stats_path[0] != '\0') std::atexit(write_stats_at_exit);  // stats.cc
  if (opts_.check && opts_.mode != run_mode::off) {
    check::enable(op_name_for_check);
    REPLAYALLOC_LOG(info, "REPLAYALLOC_CHECK: every host block is checked against a shadow record");
  }
  // Note [Below the minimum, inline] (thread_state.h): last, once the backend's entry
  // points and check mode are known.
  const bool plain = backend::g_plain_malloc.load(std::memory_order_relaxed) != nullptr &&
                     backend::g_plain_free.load(std::memory_order_relaxed) != nullptr;
  set_small_span(plain && !check::enabled() && opts_.min_size > malloc_align ? opts_.min_size - malloc_align : 0);
}

namespace {
const char* op_name_for_check(std::uint32_t op) { return engine::get().op_name_locked(op); }
}  // namespace

const char* engine::op_name_locked(std::uint32_t op) {
  // Called while reporting, possibly with the engine's mutex held by this thread.
  if (!mu_.try_lock()) return "?";
  reentry_guard guard;
  const char* n = op < op_names_.size() ? op_name_of_locked(op).c_str() : "unknown";
  mu_.unlock();
  return n;
}

const std::string& engine::op_name_of_locked(std::uint32_t op) {
  auto it = op_pending_.find(op);
  if (it == op_pending_.end()) return op_names_[op];
  char name[768];
  name[0] = '\0';
  if (deferred_op_namer f = g_deferred_op_namer.load(std::memory_order_acquire)) f(it->second, name, sizeof name);
  name[sizeof name - 1] = '\0';
  std::string& n = op_names_[op];
  n = name[0] != '\0' ? name : "unknown";
  op_pending_.erase(it);
  // Two stacks may share a name (frames beyond the depth differ); the first id keeps
  // the name's entry, as op_id() would have given it.
  op_ids_.emplace(n, op);
  return n;
}

std::uint32_t engine::op_id_deferred(std::uint64_t token) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = op_tokens_.find(token); it != op_tokens_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(op_names_.size());
  op_names_.push_back(absl::StrCat("\x01", id));
  op_pending_.emplace(id, token);
  op_tokens_.emplace(token, id);
  return id;
}

trace engine::with_op_names(const trace& t) {
  reentry_guard guard;
  trace out = t;
  std::lock_guard<std::mutex> lock(mu_);
  for (std::string& name : out.ops) {
    std::uint32_t id = 0;
    if (name.size() < 2 || name[0] != '\x01' || !absl::SimpleAtoi(absl::string_view(name).substr(1), &id) ||
        id >= op_names_.size()) {
      continue;
    }
    name = op_name_of_locked(id);
  }
  return out;
}

void engine::abandon_recording(domain_state& d, const char* what) {
  REPLAYALLOC_LOG(warning, "out of memory while %s '%s'; this iteration passes through",
                  what, d.entry != nullptr ? d.entry->key.c_str() : "?");
  set_phase(d, phase::none);
  if (d.entry != nullptr) {
    std::lock_guard<std::mutex> lock(d.entry->mu);
    d.entry->recording = false;
  }
}

std::uint32_t engine::op_id(std::string_view name) {
  reentry_guard guard;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = op_ids_.find(absl::string_view(name.data(), name.size()));
  if (it != op_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(op_names_.size());
  op_names_.emplace_back(name);
  op_ids_.emplace(op_names_.back(), id);
  return id;
}

int engine::begin(thread_state& t, const char* key) {
  if (key == nullptr || key[0] == '\0') {
    errno = EINVAL;
    return -1;
  }
  // The program marks its own iterations here: auto mode steps aside on this thread.
  if (t.auto_iteration) {
    end_impl(t);
    t.auto_iteration = false;
  }
  t.marks_own = true;
  refresh_watched_gate(t);
  return begin_impl(t, key);
}

int engine::end(thread_state& t) {
  if (t.auto_iteration) {  // nothing the program opened
    errno = EINVAL;
    return -1;
  }
  return end_impl(t);
}

int engine::begin_impl(thread_state& t, const char* key, std::size_t first_size) {
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
  d.first_size = first_size;
  bump(d.iterations);
  if (e == nullptr || opts_.mode == run_mode::off) return;
  // The version is claimed from under the key's mutex: once that is released another
  // thread may retire it, and a retired version deletes itself with its last slab.
  // The claim counts as a slab (slab_pool.h), so `v` outlives it.
  plan_version* v = nullptr;
  plan_version::slab_claim claim;
  const char* why = "";
  bool claimed = false;
  std::size_t slab_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->failed) return;
    if (++e->uses < e->resume_at) {  // set aside (Note [Setting aside])
      bump(d.set_aside);
      return;
    }
    // Note [Regimes]: the regime this iteration is predicted to follow.
    int predicted = e->predict_regime();
    // Note [Regimes by first size] (keys.cc): a first size no regime is known to
    // serve records, unless such recordings found nothing lately (probe back-off).
    bool size_unknown = false;
    if (first_size != 0 && predicted != record_marker) {
      const key_entry::first_size_pick by_size = e->regime_for_first_size(first_size, predicted);
      if (by_size.regime >= 0) predicted = by_size.regime;
      size_unknown = by_size.unknown && e->uses >= e->probe_quiet_until;
    }
    // A marked context records; while another thread records, the regime last
    // replayed there is served.
    if (predicted == record_marker && e->recording) predicted = e->probe_from;
    const bool marked = predicted == record_marker;
    const int r = marked ? -1 : predicted;
    regime* g = r >= 0 ? &e->regimes[r] : nullptr;
    const bool planned = g != nullptr && g->version != nullptr && replays();
    d.probing = false;
    if (!planned || (!e->recording && (e->probe_left > 0 || g->grow_wanted || size_unknown))) {
      // No plan for it yet; or a probe after a deviation; or a request outgrew the
      // plan (its recording grows the envelope, Note [Envelope]): this iteration
      // records (its requests go to the backend). One thread records a key at a time;
      // while one does, the others pass through.
      if (e->recording) return;
      e->recording = true;
      d.regime = r;
      d.growing = planned && g->grow_wanted;
      d.sizing = size_unknown && !d.growing;
      d.probing = !d.growing && !d.sizing && (marked || e->probe_left > 0);
      if (d.probing && !marked) --e->probe_left;
      d.marked[0] = marked ? e->history[0] : -1;
      d.marked[1] = marked ? e->history[1] : -1;
    } else if (slabs_ok_ || e->kind != domain_kind::host) {
      v = g->version;
      d.regime = r;
      g->last_seen = e->uses;
      slab_bytes = v->plan.slab_bytes;
      claimed = v->claim(opts_.max_slabs, &claim, &why);
    } else {
      return;
    }
  }
  if (v == nullptr) {
    if (d.recorder == nullptr) {
      void* mem = backend::fallback_alloc(sizeof(trace_recorder), alignof(trace_recorder));
      if (mem == nullptr) {
        std::lock_guard<std::mutex> lock(e->mu);
        e->recording = false;
        return;
      }
      d.recorder = new (mem) trace_recorder;
    }
    d.recorder->begin(tls_state.thread_no);
    set_phase(d, phase::record);
    return;
  }
  slab* s = claimed ? v->finish(claim, context, &why) : nullptr;
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
    REPLAYALLOC_LOG(info, "iteration of '%s' passes through: %s", e->key.c_str(), why);
    return;
  }
  replay_cursor& c = d.cursor;
  const compiled_plan& p = v->plan;
  c.slots = p.slots.data();
  c.overlaps = p.overlaps.data();
  c.recs = s->recs;
  c.first_frees = s->first_frees();
  c.second_frees = s->second_frees();
  c.base = s->base;
  c.next = 0;
  c.count = static_cast<std::uint32_t>(p.slots.size());
  c.free_count = s->free_count;
  c.dead_prefix = 0;
  c.pending = 0;
  c.mismatched = false;
  c.handed = 0;
  c.freed_here = 0;
  c.hit_bytes = 0;
  c.current = s;
  c.free_cur = c.free_published = c.first_frees;
  c.serving = true;
  open_cursor(c);
  d.version = v;
  d.misses_at_begin = total_misses(c);
  c.grown = 0;
  c.too_large_at = 0;
  c.first_miss_at = 0;
  c.first_too_large_at = 0;
  set_phase(d, phase::replay);
  mask(d);
}

int engine::end_impl(thread_state& t) {
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
  unmask(d);
  if (d.ph == phase::record) end_record(d);
  if (d.ph == phase::replay) end_replay(d);
  set_phase(d, phase::none);
  if (d.entry != nullptr) d.entry->users.fetch_sub(1, std::memory_order_release);
  d.entry = nullptr;
  d.version = nullptr;
  d.no_slab = false;
}

void engine::record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align) {
  reentry_guard guard;
  std::uint32_t op = tls_state.op;
  // Call-stack tags cost an unwind per allocation; a key on probation (Note [Probation
  // slabs]) records without them.
  if (op == 0 && (d.entry == nullptr || d.entry->failures.load(std::memory_order_relaxed) == 0)) {
    if (untagged_op_source f = g_untagged_op_source.load(std::memory_order_acquire)) op = f();
  }
  try {
    d.recorder->record_alloc(p, size, static_cast<std::uint32_t>(align), op);
  } catch (const std::bad_alloc&) {
    // The recording's arrays cannot grow: the block stays the backend's, and the
    // iteration passes through (a later one records again).
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

// Note [Regimes]: a probe is worth its recording when it finds another regime that
// repeats (seen twice, or planned). One that finds a structure never seen before may
// have found a regime at its first recording: the marked context stays marked, once,
// so that the next iteration there is recorded too. Otherwise (the regime that was
// replayed there, or a second new structure in a row: noise) the next probe waits
// four times longer than the last (4, 16, .. 4,096 iterations), and the marked context
// is given back to the regime replayed there. REQUIRES: e.mu held.
void engine::finish_probe(key_entry& e, const domain_state& d, int r) {
  probes_.fetch_add(1, std::memory_order_relaxed);
  const bool repeats = r >= 0 && (e.regimes[r].version != nullptr || e.regimes[r].recordings >= 2);
  const bool first_seen = r >= 0 && !repeats && !e.probe_found_new;
  if (r != e.probe_from && repeats) e.probe_found_other = true;
  e.probe_found_new = first_seen;
  if (d.marked[1] >= 0 && !first_seen) {
    std::int8_t& next = d.marked[0] >= 0 ? e.after2[d.marked[0]][d.marked[1]] : e.after1[d.marked[1]];
    if (next == record_marker) next = static_cast<std::int8_t>(repeats ? r : e.probe_from);
  }
  if (e.probe_left == 0 && !first_seen) e.probe_result(e.probe_found_other);
}

void engine::end_record_impl(domain_state& d) {
  key_entry& e = *d.entry;
  // Deferred ops keep their placeholders here (Note [Deferred op names]).
  trace tr = d.recorder->finish(e.key, [this](std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return id < op_names_.size() ? op_names_[id] : std::string("unknown");
  });
  recordings_.fetch_add(1, std::memory_order_relaxed);
  const std::uint64_t shape = tr.shape_signature();
  auto shared = std::make_shared<const trace>(std::move(tr));
  std::shared_ptr<const envelope> to_plan;
  plan_version* replace = nullptr;
  plan_version* evicted = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.recording = false;
    ++e.recordings;
    e.last_trace = shared;
    // Note [Regimes]: the recording joins the regime of its structure, or starts one.
    int r = e.find_regime(shape);
    bool grew = false;
    if (r >= 0) {
      // Note [Envelope]: the same allocations, made and freed in the same order, at
      // other sizes: each allocation's capacity is the largest size recorded.
      auto merged = std::make_shared<envelope>(*e.regimes[r].env);
      grew = merge_envelope(*merged, *shared);
      e.regimes[r].env = std::move(merged);
    } else {
      r = e.slot_for_new_regime();
      if (e.regimes[r].version != nullptr) {
        // Every slot holds a plan. The least recently seen gives its place, unless
        // places changed hands 4 times in the last 256 iterations: the key cycles
        // through more structures than it keeps, and replacing plans would cost a
        // recording and a plan per cycle. It keeps its plans for the next 4,096
        // iterations, and structures without one are served by the backend.
        if (e.uses - e.evictions_since > 256) {
          e.evictions_since = e.uses;
          e.evictions = 0;
        }
        if (e.uses < e.regimes_kept_until || ++e.evictions >= 4) {
          if (e.uses >= e.regimes_kept_until) {
            e.regimes_kept_until = e.uses + 4096;
            REPLAYALLOC_LOG(info, "'%s' cycles through more than %d structures: it keeps its plans for "
                            "4096 iterations, and the other structures pass through to the backend",
                            e.key.c_str(), max_regimes);
          }
          r = -1;
        } else {
          evicted = e.regimes[r].version;
        }
      }
      if (r >= 0) {
        e.forget_regime(r);
        regime& g = e.regimes[r];
        g = regime{};
        g.env = std::make_shared<const envelope>(make_envelope(*shared));
        g.shape = shape;
      }
    }
    if (r < 0) {
      e.learn_regime(-1);
      if (d.probing) finish_probe(e, d, -1);
      if (d.sizing) e.probe_result(false);  // no regime to join: the size stays unknown
      return;
    }
    regime& g = e.regimes[r];
    ++g.recordings;
    g.last_seen = e.uses;
    if (!shared->allocations.empty()) g.saw_first(shared->allocations.front().size);
    if (shared->allocations.size() <= max_sampled_allocations) {  // Note [Predicted plans]
      size_sample sizes(shared->allocations.size());
      for (std::size_t i = 0; i < sizes.size(); ++i) sizes[i] = shared->allocations[i].size;
      add_size_sample(g.samples, sizes);
    }
    // A recording for growth that found no larger shape of its regime (an iteration of
    // another regime outgrew the slots it was replayed on) backs off like a probe.
    if (d.growing) e.probe_result(r == d.regime && grew);
    // Note [Regimes by first size]: the size is now in the range of the regime the
    // recording joined or started.
    if (d.sizing) e.probe_result(true);
    if (d.growing && r != d.regime && e.regimes[d.regime].grow_wanted) {
      // Recorded because a request outgrew the plan of regime d.regime, but this
      // iteration had another structure. A plan from a file that never replayed
      // without deviating does not match this program: retired. Otherwise the
      // program went on to another regime; the grown one grows when it next outgrows.
      regime& grown = e.regimes[d.regime];
      grown.grow_wanted = false;
      if (grown.version != nullptr && grown.version->from_file && !grown.confirmed) {
        evicted = drop_plan_locked(e, d.regime, "its allocation sequence changed");
      }
    }
    e.learn_regime(r);
    if (d.probing) finish_probe(e, d, r);
    if (g.version != nullptr) {
      // Recorded because a request outgrew the plan, or as a probe: a grown envelope
      // replaces the plan.
      g.grow_wanted = false;
      if (grew && replays() && !e.failed) {
        auto roomy = std::make_shared<envelope>(*g.env);
        add_growth_headroom(*roomy);  // Note [Growth headroom]
        g.env = std::move(roomy);
        to_plan = g.env;
        replace = g.version;
      }
    } else if (replays() && !e.failed) {
      // Auto mode saw the period repeat three times before its first iteration: one
      // recording is enough for its first regime (a later structure has not been seen
      // to repeat: Note [Regimes]).
      const std::uint32_t needed = e.automatic && !e.any_plan() ? 1 : opts_.record_iterations;
      if (g.recordings >= needed) {
        to_plan = g.env;
      } else if (e.recordings >= opts_.record_limit && !e.any_plan()) {
        to_plan = g.env;
        set_aside_locked(e, "its recordings never agreed");
      }
    }
  }
  if (evicted != nullptr) {
    retire_dropped(e, evicted, evicted->from_file,
                   evicted->from_file ? "its allocation sequence changed" : "a newer structure took its regime's place");
  }
  if (to_plan != nullptr) make_plan(e, *to_plan, replace);
}

plan_version* engine::drop_plan_locked(key_entry& e, int r, const char* why) {
  regime& g = e.regimes[r];
  plan_version* v = g.version;
  g.version = nullptr;
  g.recordings = 0;
  g.slab_bytes = 0;
  g.lower_bound_bytes = 0;
  g.grow_wanted = false;
  e.recordings = 0;
  set_aside_locked(e, why);
  return v;
}

void engine::retire_dropped(key_entry& e, plan_version* v, bool from_file, const char* why) {
  rerecords_.fetch_add(1, std::memory_order_relaxed);
  if (from_file) {
    REPLAYALLOC_LOG(warning, "the plan of '%s' loaded from REPLAYALLOC_PLAN_DIR does not match "
                    "this program (%s); recording again", e.key.c_str(), why);
  } else {
    REPLAYALLOC_LOG(info, "'%s': %s; recording again", e.key.c_str(), why);
  }
  v->retire();
}

// Note [Setting aside]: a key whose iterations do not repeat (ever-new shapes, a
// different sequence each time) would otherwise cost a recording, a plan and a new
// slab (mapped and pre-faulted) every few iterations, and serve nothing from them:
// worse than the backend alone (DESIGN invariant 8). Each failure in a row (a plan
// retired for deviating, a plan made only because REPLAYALLOC_RECORD_LIMIT
// recordings never agreed, a larger request whose recording has another structure)
// sets the key aside for longer: after the 1st nothing, then 8, 32 and 128 of its
// iterations pass straight through to the backend (no recording, no slab; one
// counter per iteration), and from the 5th failure on the key is given up for
// 4,096 iterations before it is tried again. An iteration replayed without
// deviating clears the count. A plan loaded from a file that does not fit counts too.
void engine::set_aside_locked(key_entry& e, const char* why) {
  const std::uint32_t failures = e.failures.load(std::memory_order_relaxed) + 1;
  e.failures.store(failures, std::memory_order_relaxed);
  std::uint64_t wait = 0;
  switch (failures) {
    case 1: wait = 0; break;
    case 2: wait = 8; break;
    case 3: wait = 32; break;
    case 4: wait = 128; break;
    default: wait = 4096; break;
  }
  if (wait == 0 || !opts_.set_aside) return;
  e.resume_at = e.uses + wait;
  if (failures >= 5) {
    keys_given_up_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s' does not repeat (%s; %u failures in a row): given up for %llu "
                    "iterations, which pass through to the backend", e.key.c_str(), why, failures,
                    static_cast<unsigned long long>(wait));
  } else {
    set_asides_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s' set aside for %llu iterations (%s)", e.key.c_str(),
                    static_cast<unsigned long long>(wait), why);
  }
}

void engine::make_plan(key_entry& e, const envelope& env, plan_version* replace) {
  const trace& tr = env.tr;
  const std::vector<std::uint64_t> least = least_served(env);
  planner_options po;
  po.slot_align = opts_.slot_align;
  // Note [Probation slabs]: a key that has not shown that it repeats gets a cheap plan.
  const bool probation = e.failures.load(std::memory_order_relaxed) != 0;
  absl::StatusOr<placement> p = replayalloc::make_plan(tr, probation ? "greedy_by_size" : "best", po);
  const absl::Status ok = p.ok() ? validate(tr, *p, po) : p.status();
  if (!ok.ok()) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()), ok.message().data());
    std::lock_guard<std::mutex> lock(e.mu);
    e.failed = true;
    return;
  }
  save_plan(e, tr, *p, least);  // plan_store.cc
  if (!install_plan(e, tr, *std::move(p), false, replace, &least)) {
    std::lock_guard<std::mutex> lock(e.mu);
    e.failed = true;
  }
}

bool engine::install_plan(key_entry& e, const trace& tr, placement p, bool from_file,
                          plan_version* replace, const std::vector<std::uint64_t>* least) {
  planner_options po;
  po.slot_align = opts_.slot_align;
  absl::Status ok = absl::OkStatus();
  std::vector<bool> managed;
  if (e.adjust != nullptr) {
    const std::vector<std::uint64_t> before = p.offsets;
    if (const char* note = e.adjust(tr, p, e.adjust_arg)) {
      REPLAYALLOC_LOG(warning, "'%s': %s", e.key.c_str(), note);
    }
    managed.resize(before.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      managed[i] = before[i] != not_in_slab && p.offsets[i] == not_in_slab;
    }
    ok = validate(tr, p, po);
  }
  void* mem = ok.ok() ? backend::fallback_alloc(sizeof(plan_version), alignof(plan_version)) : nullptr;
  if (!ok.ok() || mem == nullptr) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()),
                    ok.ok() ? "out of memory" : ok.message().data());
    return false;
  }
  auto* v = new (mem) plan_version;
  // Note [Probation slabs]: a key whose plans failed before (set aside, given up, a
  // plan made only because its recordings never agreed) has not shown that it repeats.
  // Its next plan's host slabs are not pre-faulted and do not purge the backend first:
  // if the plan fails again (the likely case for a stream that never repeats) it cost
  // only the pages its iterations touched, not a whole slab of faults and the
  // backend's pages faulted back in; if it holds, its first replayed iteration faults
  // in the pages it uses, once. A key that replays clears its failures, and its later
  // plans pre-fault as usual (REPLAYALLOC_PREFAULT). Such a key is also planned with
  // one greedy ordering instead of `best` (make_plan, below), and its recordings take no
  // call-stack tags (record_alloc): on a stream that never repeats these two were most
  // of what replayalloc cost over jemalloc (callgrind of bench/micro/never_repeats.cc,
  // 1,000 requests: 40M instructions in 3 plans and 21M unwinding stacks, against
  // jemalloc's 204M for the whole run). A plan that holds is re-planned with `best`
  // when it next grows or records again.
  const bool probation = e.kind == domain_kind::host && e.failures.load(std::memory_order_relaxed) != 0;
  v->source = probation ? &host_probation_slabs() : e.source;
  v->plan = compile_plan(tr, p, po, managed.empty() ? nullptr : &managed, least, opts_.min_size);
  v->key = e.key;
  v->from_file = from_file;
  v->id = plans_.fetch_add(1, std::memory_order_relaxed) + 1;
  REPLAYALLOC_LOG(info, "planned '%s': %zu allocations, slab %llu bytes, lower bound %llu bytes (%s)",
                  e.key.c_str(), tr.allocations.size(),
                  static_cast<unsigned long long>(p.slab_bytes),
                  static_cast<unsigned long long>(p.lower_bound_bytes), p.algorithm.c_str());
  plan_version* old = nullptr;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    const std::uint64_t shape = tr.shape_signature();
    int r = e.find_regime(shape);
    if (r < 0 && from_file) {
      // Note [Regimes]: a loaded plan starts its regime (1 where the sizes varied).
      r = e.slot_for_new_regime();
      if (e.regimes[r].version != nullptr) {
        v->retire();
        return true;
      }
      e.forget_regime(r);
      envelope env = make_envelope(tr);
      if (least != nullptr) env.least = *least;
      e.regimes[r] = regime{};
      e.regimes[r].env = std::make_shared<const envelope>(std::move(env));
      e.regimes[r].shape = shape;
      e.regimes[r].last_seen = e.uses;
    }
    // Another plan arrived meanwhile (a recording finished first; the version to
    // replace was retired or replaced already), or the regime's slot went to another
    // structure: keep what is there.
    if (r < 0 || e.regimes[r].version != replace) {
      v->retire();
      return true;
    }
    regime& g = e.regimes[r];
    old = g.version;
    g.version = v;
    g.recordings = 0;
    g.slab_bytes = p.slab_bytes;
    g.lower_bound_bytes = p.lower_bound_bytes;
    e.recordings = 0;
  }
  if (old != nullptr) {
    // Threads replaying the old version finish their iterations on it; its slabs are
    // unmapped as they drain (slab_pool.h).
    plans_grown_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s': plan grown to the envelope of its shapes", e.key.c_str());
    old->retire();
  }
  return true;
}

void engine::end_replay(domain_state& d) {
  replay_cursor& c = d.cursor;
  slab* s = c.current;
  plan_version* v = d.version;
  const std::uint32_t planned = v->plan.planned_slots;
  // Read now: once the slab goes back below, a retired version may be deleted; after
  // that `v` is only compared, never read.
  const bool from_file = v->from_file;
  const std::uint64_t misses = total_misses(c) - d.misses_at_begin;
  // A larger shape: at least two slots whose allocation outgrew them (slow_path.cc
  // counts them). One larger block among the same shapes is a deviation; a shape
  // change makes every allocation that scales with it larger.
  const bool grew = c.grown >= 2;
  // Stop replaying before the slab may go back to the pool.
  close_cursor(c);
  sync_frees(c);
  c.serving = false;
  c.free_cur = c.free_published = c.free_saved = &g_closed_free;
  const std::uint32_t handed = c.handed;
  bump(d.slab_hits, handed);
  bump(d.hit_bytes, c.hit_bytes);
  bump(d.frees, c.freed_here);
  const std::int64_t pending = static_cast<std::int64_t>(c.handed) - c.freed_here;
  c.count = 0;
  c.next = 0;
  c.free_count = 0;
  c.current = nullptr;
  c.base = nullptr;
  if (s->refs.fetch_add(pending, std::memory_order_acq_rel) + pending == 0) v->release(s);

  const std::uint64_t pct = opts_.deviation_percent;
  // An iteration whose requests outgrew their slots is a larger shape, not a deviation:
  // it grows the envelope (below); the recording that does so says whether the
  // program's structure changed too.
  const bool deviated = !grew && planned > 0 &&
                        (misses * 100 > pct * planned ||
                         std::uint64_t{planned - std::min(handed, planned)} * 100 > pct * planned);
  d.last_deviated = deviated;
  key_entry& e = *d.entry;
  const int r = d.regime;
  // Note [Regimes]: an iteration that deviated, or whose requests outgrew their slots,
  // may have followed another structure. It followed another planned regime when that
  // one's slots up to the first request this plan could not serve are this plan's, and
  // its slot there fits that request: learned, and nothing else done. Otherwise a
  // larger shape grows the envelope (the next iteration of this regime records, and
  // the plan serves on meanwhile); and when this is the second such iteration in the
  // key's last 8 replays that left the plan at the same slot as the one before (one
  // alone is an odd iteration; noise leaves it anywhere), the context the iteration
  // came in (the regimes of the two before it) is marked: the next iteration in that
  // context records, and says which regime comes there.
  const bool other_structure = grew || deviated;
  const std::uint32_t first_miss_at = c.first_miss_at;
  const std::uint64_t first_miss_size = c.first_miss_size;
  const std::uint32_t first_too_large_at = c.first_too_large_at;
  const std::uint64_t first_too_large_size = c.first_too_large_size;
  bool explained = false;    // by another regime
  bool grow_wanted = false;  // the plan grows: planned below, or the next iteration records
  std::shared_ptr<const envelope> predicted;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    e.structure_deviations = (e.structure_deviations << 1) | (other_structure ? 1u : 0u);
    if (e.regimes[r].version == v) {  // `v` is installed, so alive: its plan may be read
      if (grew) ++e.regimes[r].grown_in_a_row;
      if (!other_structure) {
        if (!deviated) {
          e.failures.store(0, std::memory_order_relaxed);
          e.regimes[r].confirmed = true;
          e.regimes[r].grown_in_a_row = 0;
        }
        e.learn_regime(r);
        e.regimes[r].saw_first(d.first_size);
      } else if (const int other = e.consistent_regime(r, first_miss_at, first_miss_size); other >= 0) {
        // Learned for the prediction; not for the other regime's first sizes: an
        // explanation is a guess (Note [Regimes by first size] takes ranges only from
        // recordings and clean replays).
        e.learn_regime(other);
        explained = true;
      } else if (grew && replays() && !e.failed && e.regimes[r].grown_in_a_row == 1 &&
                 first_too_large_at == first_miss_at &&
                 (predicted = predicted_envelope(e.regimes[r], first_too_large_at, first_too_large_size)) != nullptr) {
        // Note [Predicted plans]: the larger shape, planned from the fitted sizes at
        // once (below), without recording it. Only when the request that outgrew its
        // slot was the iteration's first miss: the cursor was on the plan up to it, so
        // the slot is that request's own.
        e.regimes[r].env = predicted;
        e.regimes[r].grow_wanted = false;
        grow_wanted = true;
        e.learn_regime(r);
      } else {
        // A predicted plan that was outgrown at once is followed by a recording. A
        // plan outgrown 4 times in a row without replaying an iteration cleanly in
        // between does not settle (the sizes follow no shape it can learn): from then
        // on an outgrown iteration is a deviation like any other, and those in a row
        // retire the plan and set the key aside (Note [Setting aside]).
        grow_wanted = grew && e.uses >= e.probe_quiet_until && e.regimes[r].grown_in_a_row < 4;
        if (grow_wanted) e.regimes[r].grow_wanted = true;
        // Alike: the iteration left the plan at the same slot as the last one that did.
        const bool alike = first_miss_at == e.last_first_miss;
        e.last_first_miss = first_miss_at;
        if (alike && std::popcount(e.structure_deviations & 0xffu) >= 2 && e.uses >= e.probe_quiet_until &&
            replays()) {
          e.probe_from = r;
          e.probe_found_other = false;
          if (!e.mark_context()) e.probe_left = std::max(e.probe_left, 2u);
        } else {
          e.learn_regime(-1);
        }
      }
    }
  }
  if (predicted != nullptr) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      make_plan(e, *predicted, v);
      plans_predicted_.fetch_add(1, std::memory_order_relaxed);
      REPLAYALLOC_LOG(info, "'%s': plan predicted for a larger shape from fitted sizes in %lld us (Note [Predicted plans])",
                      e.key.c_str(),
                      static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - t0).count()));
    } catch (const std::bad_alloc&) {
      // No memory to plan the larger shape: it records when it comes, as without a
      // prediction.
      REPLAYALLOC_LOG(warning, "'%s': out of memory predicting a plan; the larger shape will be recorded",
                      e.key.c_str());
    }
  }
  // Deviation is counted per thread: a thread whose every iteration deviates has a
  // program that changed; threads that deviate now and then, interleaved, do not. An
  // iteration of another planned regime is a wrong prediction, not a deviation; one
  // that outgrew its slots is one only when it does not grow the plan.
  const bool counted = (deviated || (grew && !grow_wanted)) && !explained;
  if (deviated || grew) {
    // What a deviation looked like (REPLAYALLOC_VERBOSE=3): where it left the plan, and
    // what was made of it.
    REPLAYALLOC_LOG(debug, "'%s' regime %d: replay %s (planned %u, handed %u, misses %llu; first miss at slot %u, "
                    "%llu bytes; first request %llu bytes): %s",
                    e.key.c_str(), r, grew ? "outgrew its slots" : "deviated", planned, handed,
                    static_cast<unsigned long long>(misses), first_miss_at,
                    static_cast<unsigned long long>(first_miss_size), static_cast<unsigned long long>(d.first_size),
                    explained ? "another regime's" : grow_wanted ? "the plan grows" : counted ? "counted" : "not counted");
  }
  if (d.deviation_entry != d.entry) {
    d.deviation_entry = d.entry;
    d.deviating_in_a_row = 0;
  }
  d.deviating_in_a_row = counted ? d.deviating_in_a_row + 1 : 0;
  // A plan from a file the program does not follow goes at once (Note [Plan files]).
  const std::uint32_t replan_after = from_file ? 1 : opts_.replan_after;
  if (!counted || replan_after == 0 || d.deviating_in_a_row < replan_after) return;
  d.deviating_in_a_row = 0;
  const char* why = from_file ? "its replayed iteration deviated"
                              : "its replayed iterations deviated REPLAYALLOC_REPLAN_AFTER times in a row";
  bool retire = false;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    // Not replaced meanwhile.
    if (e.regimes[r].version == v) retire = drop_plan_locked(e, r, why) != nullptr;
  }
  // `v` is still alive: a version leaves the key here, and only retire() may free it.
  if (retire) retire_dropped(e, v, from_file, why);
}

void* engine::alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) noexcept {
  try {
    if (!check::enabled() || in_engine()) return alloc_slow_unchecked(t, size, align, zero);
    unmask(t.host);
    void* p = alloc_slow_unchecked(t, size, align, zero);
    mask(t.host);  // the phase may have changed (auto mode begins and ends iterations)
    if (p != nullptr) check::on_alloc(p, size, t.op, t.thread_no, backend::in_slab_range(p));
    return p;
  } catch (const std::bad_alloc&) {
    // The last resort: the engine's own memory ran out where nothing nearer caught it
    // (the recording, the watcher and planning do). The allocation interface never
    // throws, so the backend serves the request, as the engine would have.
    mask(t.host);  // check mode: hidden again if it was shown (a no-op otherwise)
    reentry_guard guard;
    void* p = zero && align <= malloc_align ? backend::fallback_calloc(size) : backend::fallback_alloc(size, align);
    if (p == nullptr) {
      errno = ENOMEM;
    } else if (zero && align > malloc_align) {
      std::memset(p, 0, size);
    }
    return p;
  }
}

void engine::free_checked(thread_state& t, void* p) {
  register_thread(t);
  check::on_free(p, t.thread_no);
  if (backend::in_slab_range(p)) {
    // The last free of a retired plan's slab releases the slab and the plan (slab_pool.cc:
    // plan_version::release): engine memory, made under the guard, so freed under it
    // too, to the backend unchecked, as it was made (Note [Check mode]).
    reentry_guard guard;
    unmask(t.host);
    replay_free(t.host.cursor, p, [](void* q) { return static_cast<slab*>(backend::chunk_owner(q)); });
    mask(t.host);
    return;
  }
  free_backend(t, p);
}

void* engine::alloc_slow_unchecked(thread_state& t, std::size_t size, std::size_t align, bool zero) {
  if (size > max_request_bytes) [[unlikely]] {
    errno = ENOMEM;
    return nullptr;
  }
  if (in_engine()) return zero ? backend::fallback_calloc(size) : backend::fallback_alloc(size, align);
  register_thread(t);
  // Below the minimum: never recorded, planned or watched (api.cc takes this path
  // before calling here when it can).
  if (below_min_size(t.host.cursor, size)) return alloc_below_min(size, align, zero);
  const bool watched = opts_.mode == run_mode::automatic;
  if (watched) auto_before_alloc_safe(t, size);
  domain_state& d = t.host;
  if (d.ph == phase::replay) {
    void* p = replay_malloc(d.cursor, size, align, [](std::size_t n, std::size_t a, backend_kind) {
      return backend::fallback_alloc(n, a);
    });
    if (p == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    if (zero) std::memset(p, 0, size);
    // Note [Iterations between quiet points] (runtime/auto_detect.h): an auto
    // iteration that ends where few blocks are live counts its backend blocks.
    if (watched && !backend::in_slab_range(p)) {
      auto_track_safe(t, p, size);
    } else if (t.auto_iteration && t.auto_count > 0) {
      // A slot handed out here is counted by the cursor (cursor_handed()), not again
      // among the slow path's allocations: auto mode ends its iteration at handed +
      // auto_count, and in check mode every slot is handed out here.
      --t.auto_count;
    }
    return p;
  }
  void* p = zero && align <= malloc_align ? backend::fallback_calloc(size)
                                          : backend::fallback_alloc(size, align);
  if (p == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (zero && align > malloc_align) std::memset(p, 0, size);
  bump(d.backend_bytes, size);
  if (d.no_slab) {
    bump(d.no_slab_fallbacks);
  } else {
    bump(d.passthrough);
  }
  if (d.ph == phase::record) record_alloc(d, p, size, align);
  if (watched) auto_track_safe(t, p, size);
  return p;
}

void engine::free_backend(thread_state& t, void* p) {
  if (!t.registered) [[unlikely]] register_thread(t);
  if (t.host.ph == phase::record && !in_engine()) record_free(t.host, p);
  if (t.autod != nullptr && !in_engine()) auto_untrack(t, p);
  backend::fallback_free(p);
}

}  // namespace replayalloc::detail
