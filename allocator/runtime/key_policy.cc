// The decisions of Note [Key policy] (runtime/key_policy.h) but those after a replay
// (replay_verdict.cc).
#include "runtime/key_policy.h"

#include <algorithm>
#include <memory>

#include "replay/slab_pool.h"
#include "support/log.h"
#include "trace/period.h"
#include "trace/size_model.h"

namespace replayalloc::detail {

policy_settings policy_settings::from(const options& o) {
  policy_settings s;
  s.replays = o.mode == run_mode::replay || o.mode == run_mode::automatic;
  s.record_iterations = o.record_iterations;
  s.record_limit = o.record_limit;
  s.deviation_percent = o.deviation_percent;
  s.replan_after = o.replan_after;
  s.set_aside = o.set_aside;
  return s;
}

namespace {

void finish_probe(key_policy_state& e, const recording_intent& in, policy_counts& n, int r) {
  ++n.probes;
  const bool repeats = r >= 0 && (e.regimes[r].version != nullptr || e.regimes[r].recordings >= 2);
  const bool first_seen = r >= 0 && !repeats && !e.probe_found_new;
  if (r != e.probe_from && repeats) e.probe_found_other = true;
  e.probe_found_new = first_seen;
  if (in.marked[1] >= 0 && !first_seen) {
    std::int8_t& next = in.marked[0] >= 0 ? e.after2[in.marked[0]][in.marked[1]] : e.after1[in.marked[1]];
    if (next == record_marker) next = static_cast<std::int8_t>(repeats ? r : e.probe_from);
  }
  if (e.probe_left == 0 && !first_seen) e.probe_result(e.probe_found_other);
}

}  // namespace

namespace {

begin_decision begin_action(key_policy_state& e, std::uint64_t first_size, bool can_replay, const policy_settings& s) {
  begin_decision out;
  if (e.failed) {
    out.why = "planning the key failed";
    return out;
  }
  if (++e.uses < e.resume_at) {  // Note [Setting aside]
    out.what = begin_decision::set_aside;
    out.why = "the key is set aside";
    return out;
  }
  // Note [Regimes]: the regime this iteration is predicted to follow.
  int predicted = e.predict_regime();
  // Note [Regimes by first size] (keys.cc): a first size no regime is known to
  // serve records, unless such recordings found nothing lately (probe back-off).
  bool size_unknown = false;
  if (first_size != 0 && predicted != record_marker) {
    const key_policy_state::first_size_pick by_size = e.regime_for_first_size(first_size, predicted);
    if (by_size.regime >= 0) predicted = by_size.regime;
    size_unknown = by_size.unknown && e.uses >= e.probe_quiet_until;
  }
  // A marked context records; while another thread records, the regime last
  // replayed there is served.
  if (predicted == record_marker && e.recording) predicted = e.probe_from;
  const bool marked = predicted == record_marker;
  const int r = marked ? -1 : predicted;
  regime* g = r >= 0 ? &e.regimes[r] : nullptr;
  const bool planned = g != nullptr && g->version != nullptr && s.replays;
  if (!planned && g != nullptr && g->planning != nullptr) {
    // Note [Background planning]: its plan is on the way.
    out.what = begin_decision::awaiting;
    out.regime = r;
    out.why = "its plan is being made";
    return out;
  }
  if (!planned || (!e.recording && (e.probe_left > 0 || g->grow_wanted || size_unknown))) {
    // No plan for it yet; or a probe after a deviation; or a request outgrew the
    // plan (its recording grows the envelope, Note [Envelope]): this iteration
    // records (its requests go to the backend). One thread records a key at a time;
    // while one does, the others pass through.
    if (e.recording) {
      out.why = "another thread records the key";
      return out;
    }
    e.recording = true;
    out.what = begin_decision::record;
    out.regime = r;
    out.growing = planned && g->grow_wanted;
    out.sizing = size_unknown && !out.growing;
    out.probing = !out.growing && !out.sizing && (marked || e.probe_left > 0);
    if (out.probing && !marked) --e.probe_left;
    out.marked[0] = marked ? e.history[0] : -1;
    out.marked[1] = marked ? e.history[1] : -1;
    return out;
  }
  if (!can_replay) {
    out.why = "no slab can be made (the slab range was not reserved)";
    return out;
  }
  g->last_seen = e.uses;
  out.what = begin_decision::replay;
  out.regime = r;
  return out;
}

}  // namespace

begin_decision decide_begin(key_policy_state& e, std::uint64_t first_size, bool can_replay, const policy_settings& s) {
  begin_decision out = begin_action(e, first_size, can_replay, s);
  out.probation = on_probation(e);
  return out;
}

namespace {

// Note [Regimes]: the regime a recording of structure `shape` joins (its envelope merged
// with the recording's sizes: `grew` when a capacity rose) or starts; -1 when it starts
// none (the key cycles through more structures than it keeps). A regime started in the
// place of a planned one hands that plan to out.dropped. REQUIRES: the key's mutex held.
int join_regime(key_policy_state& e, const std::shared_ptr<const trace>& recorded, const trace_period& period,
                std::uint64_t shape, bool& grew, recording_decision& out, bool equal_to_last) {
  int r = e.find_regime(shape);
  if (r >= 0 && equal_to_last && r == e.last_trace_regime) {
    // Note [A recording equal to the last]: its envelope is already what the merge
    // would make.
    grew = false;
  } else if (r >= 0) {
    // Note [Envelope]: the same allocations, made and freed in the same order, at
    // other sizes: each allocation's capacity is the largest size recorded.
    auto merged = std::make_shared<envelope>(*e.regimes[r].env);
    grew = merge_envelope(*merged, *recorded, &period);
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
        out.dropped = e.regimes[r].version;
        out.dropped_why = "a newer structure took its regime's place";
      }
    }
    if (r >= 0) {
      e.forget_regime(r);
      regime& g = e.regimes[r];
      g = regime{};
      g.env = std::make_shared<const envelope>(make_envelope(*recorded, &period));
      g.shape = shape;
    }
  }
  return r;
}

// What a recording that joined regime g plans (Note [Background planning]: the
// regime's iterations wait for it from now on, not record). REQUIRES: the key's mutex held.
void plan_after_recording(key_policy_state& e, regime& g, bool grew, const policy_settings& s, policy_counts& n,
                          recording_decision& out) {
  if (g.version != nullptr) {
    // Recorded because a request outgrew the plan, or as a probe: a grown envelope
    // replaces the plan.
    g.grow_wanted = false;
    if (grew && s.replays && !e.failed && g.planning == nullptr) {
      auto roomy = std::make_shared<envelope>(*g.env);
      add_growth_headroom(*roomy);  // Note [Growth headroom]
      g.env = std::move(roomy);
      out.to_plan = g.env;
      out.replace_id = g.version->id;
    }
  } else if (s.replays && !e.failed && g.planning == nullptr) {
    // Auto mode saw the period repeat three times before its first iteration: one
    // recording is enough for its first regime (a later structure has not been seen
    // to repeat: Note [Regimes]).
    const std::uint32_t needed = e.automatic && !e.any_plan() ? 1 : s.record_iterations;
    if (g.recordings >= needed) {
      out.to_plan = g.env;
    } else if (e.recordings >= s.record_limit && !e.any_plan()) {
      out.to_plan = g.env;
      set_aside(e, s, n, "its recordings never agreed");
    }
  }
  if (out.to_plan != nullptr) g.planning = out.to_plan.get();
}

// Note [A recording equal to the last]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A key is recorded twice before it is planned (REPLAYALLOC_RECORD_ITERATIONS), and a
// program that repeats itself makes the second recording equal to the first: the same
// sizes, alignments and times. Merging it into the regime's envelope (Note [Envelope])
// would copy the envelope and fold each allocation into it (~100 instructions an
// allocation, and the copy's pages, at the end of the recorded iteration) to make the
// same envelope again: every step of a merge is a maximum, a minimum or a union
// (fold_slot, merge_lines, raise_to_lines), so merging what was merged changes
// nothing, growth headroom included. So a recording equal to the last one, when the
// last one went into the same regime since it was last made, is not merged
// (last_trace_regime, forgotten with its regime).

// Whether a and b have the same allocations' sizes (same_times having said the rest).
bool same_sizes(const trace& a, const trace& b) {
  for (std::size_t i = 0; i < a.allocations.size(); ++i) {
    if (a.allocations[i].size != b.allocations[i].size) return false;
  }
  return true;
}

// Whether a and b have the same allocations' alignments and times (all that
// find_period reads).
bool same_times(const trace& a, const trace& b) {
  if (a.allocations.size() != b.allocations.size() || a.events != b.events) return false;
  for (std::size_t i = 0; i < a.allocations.size(); ++i) {
    const trace_allocation& x = a.allocations[i];
    const trace_allocation& y = b.allocations[i];
    if (x.alloc_at != y.alloc_at || x.free_at != y.free_at || x.align != y.align) return false;
  }
  return true;
}

}  // namespace

recording_decision decide_after_recording(key_policy_state& e, const std::shared_ptr<const trace>& recorded,
                                          const recording_intent& in, const policy_settings& s, policy_counts& n) {
  recording_decision out;
  // Note [Periodic iterations]: a recording that repeats a step joins the regime of its
  // structure whatever its number of steps. A recording of the last one's shape has its
  // period (find_period reads only the allocations' alignments and times: ~140
  // instructions an allocation, at the end of the recorded iteration; the comparison
  // ~10).
  const bool last_times = e.last_trace != nullptr && same_times(*recorded, *e.last_trace);
  if (!last_times) e.last_period = find_period(*recorded);
  const bool equal_to_last = last_times && same_sizes(*recorded, *e.last_trace);
  const trace_period period = e.last_period;
  const std::uint64_t shape = period.found() ? period.signature : recorded->shape_signature();
  e.recording = false;
  ++e.recordings;
  e.last_trace = recorded;
  // Note [Regimes]: the recording joins the regime of its structure, or starts one.
  bool grew = false;
  const int r = join_regime(e, recorded, period, shape, grew, out, equal_to_last);
  e.last_trace_regime = r;
  if (r < 0) {
    e.learn_regime(-1);
    if (in.probing) finish_probe(e, in, n, -1);
    if (in.sizing) e.probe_result(false);  // no regime to join: the size stays unknown
    return out;
  }
  regime& g = e.regimes[r];
  ++g.recordings;
  g.last_seen = e.uses;
  if (!recorded->allocations.empty()) g.saw_first(recorded->allocations.front().size);
  // Note [Predicted plans]: sizes fitted to a shape need recordings of one length; a
  // periodic regime's follow their steps' lines instead (Note [Periodic iterations]).
  if (!period.found() && recorded->allocations.size() <= max_sampled_allocations) {
    size_sample sizes(recorded->allocations.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) sizes[i] = recorded->allocations[i].size;
    add_size_sample(g.samples, sizes);
  }
  // A recording for growth that found no larger shape of its regime (an iteration of
  // another regime outgrew the slots it was replayed on) backs off like a probe.
  if (in.growing) e.probe_result(r == in.regime && grew);
  // Note [Regimes by first size]: the size is now in the range of the regime the
  // recording joined or started.
  if (in.sizing) e.probe_result(true);
  if (in.growing && r != in.regime && e.regimes[in.regime].grow_wanted) {
    // Recorded because a request outgrew the plan of regime in.regime, but this
    // iteration had another structure. A plan from a file that never replayed
    // without deviating does not match this program: retired. Otherwise the
    // program went on to another regime; the grown one grows when it next outgrows.
    regime& grown = e.regimes[in.regime];
    grown.grow_wanted = false;
    if (grown.version != nullptr && grown.version->from_file && !grown.confirmed) {
      out.dropped = drop_plan(e, in.regime, s, n, "its allocation sequence changed");
      out.dropped_why = "its allocation sequence changed";
    }
  }
  e.learn_regime(r);
  if (in.probing) finish_probe(e, in, n, r);
  plan_after_recording(e, g, grew, s, n, out);
  out.probation = on_probation(e);
  return out;
}

install_decision decide_install(key_policy_state& e, const plan_to_install& in) {
  install_decision out;
  int r = e.find_regime(in.shape);
  if (r < 0 && in.from_file) {
    // Note [Regimes]: a loaded plan starts its regime (1 where the sizes varied).
    r = e.slot_for_new_regime();
    if (e.regimes[r].version != nullptr) return out;
    e.forget_regime(r);
    envelope env = make_envelope(*in.tr, in.period);
    if (in.least != nullptr) env.least = *in.least;
    e.regimes[r] = regime{};
    e.regimes[r].env = std::make_shared<const envelope>(std::move(env));
    e.regimes[r].shape = in.shape;
    e.regimes[r].last_seen = e.uses;
  }
  if (r < 0 || (e.regimes[r].version != nullptr ? e.regimes[r].version->id : 0) != in.replace_id) return out;
  regime& g = e.regimes[r];
  out.installed = true;
  out.regime = r;
  out.old = g.version;
  g.version = in.version;
  g.recordings = 0;
  g.slab_bytes = in.slab_bytes;
  g.lower_bound_bytes = in.lower_bound_bytes;
  e.recordings = 0;
  return out;
}

void on_plan_done(key_policy_state& e, const envelope* env) {
  for (regime& g : e.regimes) {
    if (g.planning == env) g.planning = nullptr;
  }
}

void on_plan_failed(key_policy_state& e) { e.failed = true; }

void abandon_recording(key_policy_state& e) { e.recording = false; }

void on_auto_period(key_policy_state& e, bool at_quiet, bool by_shape) {
  e.automatic = true;
  e.at_quiet = at_quiet;
  e.by_shape = by_shape;
}

bool streak_retires(deviation_streak& st, const key_policy_state* e, bool counted, bool from_file, const policy_settings& s) {
  if (st.entry != e) {
    st.entry = e;
    st.in_a_row = 0;
  }
  st.in_a_row = counted ? st.in_a_row + 1 : 0;
  // A plan from a file the program does not follow goes at once (Note [Plan files]).
  const std::uint32_t replan_after = from_file ? 1 : s.replan_after;
  if (!counted || replan_after == 0 || st.in_a_row < replan_after) return false;
  st.in_a_row = 0;
  return true;
}

// Note [Setting aside]
// ~~~~~~~~~~~~~~~~~~~~
// A key whose iterations do not repeat (ever-new shapes, a different sequence each
// time) would otherwise cost a recording, a plan and a new slab (mapped and
// pre-faulted) every few iterations, and serve nothing from them: worse than the
// backend alone (invariant 8, allocator/DESIGN.md). Each failure in a row (a plan
// retired for deviating, a plan made only because REPLAYALLOC_RECORD_LIMIT recordings
// never agreed, a larger request whose recording has another structure) sets the key
// aside for longer: after the 1st nothing, then 8, 32 and 128 of its iterations pass
// straight through to the backend (no recording, no slab; one counter per iteration),
// and from the 5th failure on the key is given up for 4,096 iterations before it is
// tried again. An iteration replayed without deviating clears the count. A plan loaded
// from a file that does not fit counts too.
void set_aside(key_policy_state& e, const policy_settings& s, policy_counts& n, const char* why) {
  const std::uint32_t failures = ++e.failures;
  std::uint64_t wait = 0;
  switch (failures) {
    case 1: wait = 0; break;
    case 2: wait = 8; break;
    case 3: wait = 32; break;
    case 4: wait = 128; break;
    default: wait = 4096; break;
  }
  if (wait == 0 || !s.set_aside) return;
  e.resume_at = e.uses + wait;
  if (failures >= 5) {
    ++n.keys_given_up;
    REPLAYALLOC_LOG(info, "'%s' does not repeat (%s; %u failures in a row): given up for %llu "
                    "iterations, which pass through to the backend", e.key.c_str(), why, failures,
                    static_cast<unsigned long long>(wait));
  } else {
    ++n.set_asides;
    REPLAYALLOC_LOG(info, "'%s' set aside for %llu iterations (%s)", e.key.c_str(),
                    static_cast<unsigned long long>(wait), why);
  }
}

plan_version* drop_plan(key_policy_state& e, int r, const policy_settings& s, policy_counts& n, const char* why) {
  regime& g = e.regimes[r];
  plan_version* v = g.version;
  g.version = nullptr;
  g.recordings = 0;
  g.slab_bytes = 0;
  g.lower_bound_bytes = 0;
  g.grow_wanted = false;
  e.recordings = 0;
  set_aside(e, s, n, why);
  return v;
}

}  // namespace replayalloc::detail
