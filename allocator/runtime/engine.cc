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

engine::engine() : opts_(process_options()), planner_(&engine::run_plan_job, opts_.background_planning) {
  reentry_guard guard;
  backend::use_fast_entry_points();
  backend::keep_huge_pages();
  if (opts_.mode != run_mode::off) slabs_ok_ = backend::reserve_slab_range(opts_.reserve_bytes);
  set_host_slab_limit(opts_.max_slab_memory);
  g_watches_threads = opts_.mode == run_mode::automatic;  // runtime/shortcuts.h
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

void engine::abandon_recording(domain_state& d, const char* what) {
  REPLAYALLOC_LOG(warning, "out of memory while %s '%s'; this iteration passes through",
                  what, d.entry != nullptr ? d.entry->key.c_str() : "?");
  set_phase(d, phase::none);
  if (d.entry != nullptr) {
    std::lock_guard<std::mutex> lock(d.entry->mu);
    d.entry->recording = false;
  }
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
  bool awaiting = false;
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
    awaiting = !planned && g != nullptr && g->planning != nullptr;
    if (awaiting) {
      // Note [Background planning]: its plan is on the way; the iteration passes through.
      bump(d.awaiting_plan);
    } else if (!planned || (!e->recording && (e->probe_left > 0 || g->grow_wanted || size_unknown))) {
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
  if (awaiting) {
    planner_.kick();  // a forked child makes its planner thread again here
    return;
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
  mask_plan(d);
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
  unmask_plan(d);
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
  std::uint64_t replace_id = 0;
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
      if (grew && replays() && !e.failed && g.planning == nullptr) {
        auto roomy = std::make_shared<envelope>(*g.env);
        add_growth_headroom(*roomy);  // Note [Growth headroom]
        g.env = std::move(roomy);
        to_plan = g.env;
        replace_id = g.version->id;
      }
    } else if (replays() && !e.failed && g.planning == nullptr) {
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
    // Note [Background planning]: its iterations wait for this plan, not record.
    if (to_plan != nullptr) g.planning = to_plan.get();
  }
  if (evicted != nullptr) {
    retire_dropped(e, evicted, evicted->from_file,
                   evicted->from_file ? "its allocation sequence changed" : "a newer structure took its regime's place");
  }
  if (to_plan != nullptr) submit_plan(e, std::move(to_plan), replace_id, false);
}

void engine::end_replay(domain_state& d) {
  replay_cursor& c = d.cursor;
  slab* s = c.current;
  plan_version* v = d.version;
  const std::uint32_t planned = v->plan.planned_slots;
  // Read now: once the slab goes back below, a retired version may be deleted; after
  // that `v` is only compared, never read.
  const bool from_file = v->from_file;
  const std::uint64_t version_id = v->id;
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
      } else if (grew && e.regimes[r].planning != nullptr) {
        // Note [Background planning]: a larger plan for this regime is on the way (the
        // envelope already grown, or predicted): the iteration that outgrew the plan
        // it replaces is neither a deviation nor a reason to record or predict again.
        e.learn_regime(r);
        explained = true;
      } else if (grew && replays() && !e.failed && e.regimes[r].grown_in_a_row == 1 &&
                 first_too_large_at == first_miss_at &&
                 (predicted = predicted_envelope(e.regimes[r], first_too_large_at, first_too_large_size)) != nullptr) {
        // Note [Predicted plans]: the larger shape, planned from the fitted sizes at
        // once (below), without recording it. Only when the request that outgrew its
        // slot was the iteration's first miss: the cursor was on the plan up to it, so
        // the slot is that request's own.
        e.regimes[r].env = predicted;
        e.regimes[r].planning = predicted.get();
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
  // Note [Predicted plans]: planned like a recording's envelope (Note [Background
  // planning]); the plan it replaces serves meanwhile.
  if (predicted != nullptr) submit_plan(e, std::move(predicted), version_id, true);
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

}  // namespace replayalloc::detail
