// Plans made and installed (runtime/engine.h): a key's plan made from an envelope,
// validated, saved, compiled and installed for its regime, on the planner thread or
// synchronously (Note [Background planning], runtime/planner_thread.h); plans taken
// away when they fail retired (retire_dropped: the decision, and setting the key aside,
// are runtime/key_policy.cc's, Note [Setting aside]).
#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "planner/planner.h"
#include "planner/search.h"
#include "replay/compiled_plan.h"
#include "runtime/engine.h"
#include "support/log.h"
#include "support/reentry.h"
#include "trace/period.h"

namespace replayalloc::detail {

namespace {

// Note [Improved plans]: the search runs only `best` above this many allocations.
constexpr std::size_t max_improved_allocations = 16384;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

void engine::submit_plan(key_entry& e, std::shared_ptr<const envelope> env, std::uint64_t replace_id, bool predicted,
                         bool probation) {
  plan_job job;
  job.entry = &e;
  job.env = std::move(env);
  job.replace_id = replace_id;
  job.predicted = predicted;
  job.probation = probation;
  job.queued_ns = now_ns();
  // The job holds the key until it is done (Note [Bounds]: a held key is not forgotten).
  e.users.fetch_add(1, std::memory_order_relaxed);
  // Note [Plans that arrive in time]: a small plan is made here, now.
  if (job.env->tr.allocations.size() > opts_.inline_plan_max && planner_.submit(std::move(job))) return;
  // No planner thread: planned here, on the thread that ended the recording. `job`
  // is untouched when submit() refuses it.
  run_plan_job(job);
}

void engine::run_plan_job(const plan_job& job) {
  engine& self = get();
  key_entry& e = *job.entry;
  const bool background = job.on_planner_thread;
  if (job.improve) {
    try {
      self.improve_plan(job);
    } catch (const std::bad_alloc&) {
      REPLAYALLOC_LOG(info, "'%s': out of memory searching for a smaller plan; the plan stays", e.key.c_str());
    }
    e.users.fetch_sub(1, std::memory_order_release);
    return;
  }
  std::uint64_t improvable = 0, slab = 0;
  try {
    // Note [The first slab with the plan]: only where the plan is made on the thread
    // that ended the recording, and not for a prediction.
    improvable = self.make_plan(e, *job.env, job.replace_id, job.probation, &slab, !background && !job.predicted);
    if (job.predicted) self.plans_predicted_.fetch_add(1, std::memory_order_relaxed);
  } catch (const std::bad_alloc&) {
    // No memory to plan: the regime records again when its plan is wanted next.
    REPLAYALLOC_LOG(warning, "'%s': out of memory making a plan; its iterations pass through", e.key.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(e.mu);
    on_plan_done(e, job.env.get());
  }
  const std::uint64_t us = (now_ns() - job.queued_ns) / 1000;
  if (background) {
    self.plans_background_.fetch_add(1, std::memory_order_relaxed);
    self.plan_wait_us_total_.fetch_add(us, std::memory_order_relaxed);
    std::uint64_t max = self.plan_wait_us_max_.load(std::memory_order_relaxed);
    while (us > max && !self.plan_wait_us_max_.compare_exchange_weak(max, us, std::memory_order_relaxed)) {
    }
  }
  REPLAYALLOC_LOG(info, "'%s': %s plan of %zu allocations made %s in %llu us", e.key.c_str(),
                  job.predicted ? "predicted" : job.replace_id != 0 ? "grown" : "new",
                  job.env->tr.allocations.size(), background ? "in the background" : "synchronously",
                  static_cast<unsigned long long>(us));
  // Note [Improved plans]: the search, queued behind every plan still to be made.
  // A small plan made on the recording's thread (Note [Plans that arrive in time]) is
  // improved on the planner thread too; submit() refuses where there is none.
  if (improvable != 0 && !job.predicted && self.opts_.plan_search_ms != 0 &&
      job.env->tr.allocations.size() <= max_improved_allocations) {
    plan_job next;
    next.entry = &e;
    next.env = job.env;
    next.replace_id = improvable;
    next.improve = true;
    next.slab_bytes = slab;
    next.queued_ns = now_ns();
    e.users.fetch_add(1, std::memory_order_relaxed);  // held by the next job
    if (!self.planner_.submit(std::move(next))) e.users.fetch_sub(1, std::memory_order_release);
  }
  e.users.fetch_sub(1, std::memory_order_release);
}

// Note [Improved plans]
// ~~~~~~~~~~~~~~~~~~~~~
// `best` (planner/best.cc) plans inference traces at their lower bound, but envelopes
// of changing shapes, generation requests and training steps often land 5-35% above it
// (bench/RESULTS.md, "Planner"), and the search (planner/search.h) closes much of that
// given tenths of a second to seconds: too long for the plan a request waits on, not
// for the planner thread once the plan is in. So planning is tiered: the planner thread
// makes and installs `best`'s plan as before (Note [Background planning]); when that
// plan is above its lower bound, it queues an improvement job for the same envelope,
// which runs the search for at most REPLAYALLOC_PLAN_SEARCH_MS (250 ms by default; 0:
// never) and, when it finds a smaller slab, validates, saves and installs it in place
// of the version it was asked to improve, as a grown plan is installed (threads replay
// the old version to the end of their iterations, its slabs drain; the new one is taken
// at an iteration's beginning). If that version is gone meanwhile (grown, retired,
// re-recorded), the improvement is dropped. Improvements never delay a plan: one queued
// waits behind every plan still to be made, and a running search stops (keeping what
// it found) as soon as one is queued (planner_thread::yield_flag). Only plans made on
// the planner thread, by `best` (not a key on probation: Note [Probation slabs]), of at
// most max_improved_allocations allocations (the search itself runs only `best` above
// that) are improved. Counted: plans_improved (not in `plans`), plan_search_us_total.

void engine::wait_plans() {
  reentry_guard guard;
  planner_.wait_idle();
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

std::uint64_t engine::make_plan(key_entry& e, const envelope& env, std::uint64_t replace_id, bool probation,
                                std::uint64_t* slab, bool ahead) {
  const trace& tr = env.tr;
  const std::vector<std::uint64_t> least = least_served(env);
  planner_options po;
  po.slot_align = opts_.slot_align;
  // Note [Probation slabs]: a key that has not shown that it repeats gets a cheap plan.
  absl::StatusOr<placement> p = replayalloc::make_plan(tr, probation ? "greedy_by_size" : "best", po);
  const absl::Status ok = p.ok() ? validate(tr, *p, po) : p.status();
  if (!ok.ok()) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()), ok.message().data());
    std::lock_guard<std::mutex> lock(e.mu);
    on_plan_failed(e);
    return 0;
  }
  save_plan(e, tr, *p, least);  // plan_store.cc
  const bool improvable = !probation && p->slab_bytes > p->lower_bound_bytes;
  if (slab != nullptr) *slab = p->slab_bytes;
  std::uint64_t installed = 0;
  if (!install_plan(e, tr, *std::move(p), false, replace_id, &least, false, probation, &installed, ahead)) {
    std::lock_guard<std::mutex> lock(e.mu);
    on_plan_failed(e);
    return 0;
  }
  return improvable ? installed : 0;
}

void engine::improve_plan(const plan_job& job) {
  key_entry& e = *job.entry;
  const trace& tr = job.env->tr;
  planner_options po;
  po.slot_align = opts_.slot_align;
  search_options so;
  so.time_limit_s = opts_.plan_search_ms / 1000.0;
  so.stop = planner_.yield_flag();
  const std::uint64_t t0 = now_ns();
  absl::StatusOr<search_result> r = search_plan(tr, po, so);
  plan_search_us_total_.fetch_add((now_ns() - t0) / 1000, std::memory_order_relaxed);
  if (!r.ok() || r->plan.slab_bytes >= job.slab_bytes || !validate(tr, r->plan, po).ok()) {
    REPLAYALLOC_LOG(debug, "'%s': no smaller plan found in %.0f ms", e.key.c_str(),
                    r.ok() ? r->seconds * 1000 : 0.0);
    return;
  }
  const std::vector<std::uint64_t> least = least_served(*job.env);
  const std::uint64_t from = job.slab_bytes, to = r->plan.slab_bytes;
  const bool optimal = r->proven_optimal;
  std::uint64_t installed = 0;
  save_plan(e, tr, r->plan, least);
  // Only a plan made off probation is improved (make_plan): so is its improvement.
  install_plan(e, tr, std::move(r->plan), false, job.replace_id, &least, true, false, &installed, false);
  if (installed == 0) return;  // the version to improve is gone: dropped
  plans_improved_.fetch_add(1, std::memory_order_relaxed);
  REPLAYALLOC_LOG(info, "'%s': the search found a smaller plan: slab %llu -> %llu bytes (%s)", e.key.c_str(),
                  static_cast<unsigned long long>(from), static_cast<unsigned long long>(to),
                  optimal ? "proven optimal" : "the best found in its time");
}

namespace {

// The key's placement_adjuster (runtime/domain.h: a device domain moving allocations out
// of a slab that would not fit its memory budget) applied to plan p: `managed` says which
// allocations it took out of the slab; the plan validated again.
absl::Status adjust_plan(key_entry& e, const trace& tr, placement& p, const planner_options& po,
                         std::vector<bool>& managed) {
  const std::vector<std::uint64_t> before = p.offsets;
  if (const char* note = e.adjust(tr, p, e.adjust_arg)) {
    REPLAYALLOC_LOG(warning, "'%s': %s", e.key.c_str(), note);
  }
  managed.resize(before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    managed[i] = before[i] != not_in_slab && p.offsets[i] == not_in_slab;
  }
  return validate(tr, p, po);
}

}  // namespace

namespace {

// Note [The first slab with the plan]: makes the claimed slab, and says so.
void stock_first_slab(const std::string& key, plan_version* v, plan_version::slab_claim c) {
  const std::uint64_t bytes = v->plan.slab_bytes, t0 = now_ns();
  if (v->stock(c)) {  // `v` may be gone from here: read nothing of it
    REPLAYALLOC_LOG(info, "'%s': its first slab (%.2f MiB) made with the plan in %.3f ms", key.c_str(),
                    static_cast<double>(bytes) / (1 << 20), static_cast<double>(now_ns() - t0) / 1e6);
  } else {
    REPLAYALLOC_LOG(info, "'%s': no memory for its first slab now; the first iteration to replay makes it",
                    key.c_str());
  }
}

}  // namespace

// Note [The first slab with the plan]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A plan's first slab was made by the first iteration to replay it: the backend's
// purge, the mapping and the pages faulted in (REPLAYALLOC_PREFAULT), 7.6 ms for a
// TorchScript ResNet-50's 10.6 MiB slab, on the request that iteration served (in one
// run its first replayed inference took 198.6 ms of CPU, the next 183.7), though
// callgrind counted the same user-space instructions in both (1,067.5 M against
// 1,066.8 M): the slab was all of the difference (bench/RESULTS.md, "The first replayed
// inference": 2,749 page faults in it before, 7 after). Where the plan is made on the thread
// that ended the recording (Note [Plans that arrive in time]; all plans with
// REPLAYALLOC_BACKGROUND_PLANNING=0), that thread now makes the version's first slab
// too, at the recording's end, and puts it in the pool: the next iteration takes it as
// an idle slab, and the first replayed iteration costs what the next ones do. The
// recording's end pays instead (issue 45: a recording may cost up to 3x the iteration
// it records; the first replay no more than the next). The slab is claimed in the same
// hold of the key's mutex that published the version (claim_first), so no iteration
// claimed one before it; one that begins while it is being made makes its own, as two
// iterations at once need two slabs. It is made after a grown plan's predecessor is
// retired, so that their idle slabs are never mapped together. Not on the planner
// thread: its plans arrive while iterations pass through to the backend, and a slab
// made then would be resident beside their blocks, where the first iteration to replay
// purges the backend's free pages before its slab is mapped (host_slab_source::map).
// Not for probation slabs (neither purged for nor pre-faulted) nor device slabs (made
// on the iteration's stream), nor for a plan loaded from a file (made where its key is
// first used, which replays at once), an improved one (on the planner thread) or a
// predicted one (Note [Predicted plans]: a guess at shapes that may not come). Nor for
// auto mode's keys: their iterations begin inside a request (at its period's first
// size), so the slab made at the recording's end lands in the request the first
// replayed iteration begins in, as before (2,759 and 2,764 page faults in ResNet-50's
// sixth inference, before and after), while a plan auto mode makes and never replays
// cost its slab for nothing: a short run (ResNet-50, 8 threads, 5 inferences each)
// peaked 11-23 MiB higher with 300-400 more page faults per timed inference.

// Note [Probation slabs]
// ~~~~~~~~~~~~~~~~~~~~~~
// A key whose plans failed before (set aside, given up, a plan made only because its
// recordings never agreed) has not shown that it repeats. Its next plan's host slabs
// are not pre-faulted and do not purge the backend first: if the plan fails again
// (the likely case for a stream that never repeats) it cost only the pages its
// iterations touched, not a whole slab of faults and the backend's pages faulted back
// in; if it holds, its first replayed iteration faults in the pages it uses, once. A
// key that replays clears its failures, and its later plans pre-fault as usual
// (REPLAYALLOC_PREFAULT). Such a key is also planned with one greedy ordering instead
// of `best` (make_plan, below), and its recordings take no call-stack tags
// (record_alloc): on a stream that never repeats these two were most of what
// replayalloc cost over jemalloc (callgrind of bench/micro/never_repeats.cc, 1,000
// requests: 40M instructions in 3 plans and 21M unwinding stacks, against jemalloc's
// 204M for the whole run). A plan that holds is re-planned with `best` when it next
// grows or records again.

bool engine::install_plan(key_entry& e, const trace& tr, placement p, bool from_file, std::uint64_t replace_id,
                          const std::vector<std::uint64_t>* least, bool improved, bool probation,
                          std::uint64_t* installed, bool ahead) {
  planner_options po;
  po.slot_align = opts_.slot_align;
  std::vector<bool> managed;
  const absl::Status ok = e.adjust != nullptr ? adjust_plan(e, tr, p, po, managed) : absl::OkStatus();
  void* mem = ok.ok() ? backend::fallback_alloc(sizeof(plan_version), alignof(plan_version)) : nullptr;
  if (!ok.ok() || mem == nullptr) {
    REPLAYALLOC_LOG(error, "planning '%s' failed (%.*s); its iterations pass through to the backend",
                    e.key.c_str(), static_cast<int>(ok.message().size()),
                    ok.ok() ? "out of memory" : ok.message().data());
    return false;
  }
  auto* v = new (mem) plan_version;
  v->source = probation && e.kind == domain_kind::host ? &host_probation_slabs() : e.source;  // Note [Probation slabs]
  v->plan = compile_plan(tr, p, po, managed.empty() ? nullptr : &managed, least, opts_.min_size);
  v->key = e.key;
  v->from_file = from_file;
  // Note [Periodic iterations]: the regime of a plan whose iterations repeat a step is
  // its periodic signature, as the recordings' (key_policy.cc).
  const trace_period per = find_period(tr);
  v->tail_from = per.found() ? per.tail_from() : 0;
  v->period = per.period;
  if (!improved) plans_.fetch_add(1, std::memory_order_relaxed);
  v->id = version_ids_.fetch_add(1, std::memory_order_relaxed) + 1;
  REPLAYALLOC_LOG(info, "planned '%s': %zu allocations, slab %llu bytes, lower bound %llu bytes (%s)",
                  e.key.c_str(), tr.allocations.size(),
                  static_cast<unsigned long long>(p.slab_bytes),
                  static_cast<unsigned long long>(p.lower_bound_bytes), p.algorithm.c_str());
  plan_to_install in;
  in.version = v;
  in.shape = per.found() ? per.signature : tr.shape_signature();
  in.replace_id = replace_id;
  in.from_file = from_file;
  in.slab_bytes = p.slab_bytes;
  in.lower_bound_bytes = p.lower_bound_bytes;
  in.tr = &tr;
  in.period = &per;
  in.least = least;
  install_decision d;
  plan_version::slab_claim first;
  bool stock = false;
  const std::uint64_t id = v->id;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    d = decide_install(e, in);
    // Note [The first slab with the plan]: claimed where the version was published.
    stock = d.installed && ahead && !e.automatic && v->source->makes_ahead() && v->claim_first(&first);
  }
  if (!d.installed) {
    v->retire();
    return true;
  }
  if (installed != nullptr) *installed = id;  // not v->id: once published, `v` may be retired and gone
  plan_version* const old = d.old;
  if (old != nullptr && improved) {
    old->retire();  // as a grown plan's predecessor: threads on it finish their iterations
  } else if (old != nullptr) {
    // Threads replaying the old version finish their iterations on it; its slabs are
    // unmapped as they drain (slab_pool.h).
    plans_grown_.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "'%s': plan grown to the envelope of its shapes", e.key.c_str());
    old->retire();
  }
  // After the old version's idle slabs went back: the two are never mapped at once.
  if (stock) stock_first_slab(e.key, v, first);
  return true;
}


}  // namespace replayalloc::detail
