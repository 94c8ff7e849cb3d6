// replayalloc/runtime/key_policy.h: what a key does next, decided apart from how.
//
// Layer: runtime. The per-key decisions of the state machine (runtime/engine.h): at an
// iteration's beginning, whether it records, replays which regime, waits for a plan on
// the way or passes through; after a recording, which regime it joins and what to
// plan; after a replay, whether it deviated, was another regime's, grows or predicts
// the plan, and whether the plan is retired; when a key is set aside.
//
// Note [Key policy]
// ~~~~~~~~~~~~~~~~~
// Each decision is a function of the key's policy state (runtime/key_policy_state.h:
// plain data, its regimes, predictor, probes and failures: Note [Regimes], Note
// [Setting aside]) and of one observation (the iteration's first size, a finished
// recording, a replay's summary), returning what the engine is to do. They take no lock
// (each REQUIRES the key's mutex, key_entry::mu, which the engine holds), make no slab,
// plan nothing and retire nothing: the engine applies the decision (claims a slab,
// queues a plan, retires a version) and counts what the decision says to count. What
// the engine needs of the state after it lets the mutex go, the decision carries: the
// key's probation (Note [Probation slabs]) for the recording it begins (call-stack
// tags), for the plan it queues (which planner, pre-faulting, improvement) and for the
// iteration's end (auto mode's verdict). So the state is read and written under the
// mutex only, and every transition can be walked by a test with a key_policy_state of
// its own and no engine (tests/unit/key_policy_test.cc), as TFLite's arena planner is
// tested.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/key_policy_state.h"
#include "support/options.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// The settings the decisions read (REPLAYALLOC_*: options.h).
struct policy_settings {
  bool replays = true;  // the mode makes plans (replay, auto)
  std::uint32_t record_iterations = 2;
  std::uint32_t record_limit = 8;
  std::uint32_t deviation_percent = 10;
  std::uint32_t replan_after = 3;
  bool set_aside = true;
  static policy_settings from(const options& o);
};

// What the engine adds to its statistics after a decision.
struct policy_counts {
  std::uint32_t probes = 0;
  std::uint32_t set_asides = 0;
  std::uint32_t keys_given_up = 0;
};

// What an iteration does, decided at its beginning.
struct begin_decision {
  enum action : std::uint8_t {
    pass,       // through to the backend: the key failed, or another thread records it
    set_aside,  // through to the backend, counted: the key is set aside (Note [Setting aside])
    awaiting,   // through to the backend, counted: its plan is on the way (Note [Background planning])
    record,     // records (the key's `recording` is now set)
    replay,     // replays regime's plan (the engine claims a slab of it)
  };
  action what = pass;
  int regime = -1;    // record: the regime predicted (-1: none); replay: the regime replayed
  bool probing = false;
  bool growing = false;
  bool sizing = false;
  std::int8_t marked[2] = {-1, -1};  // the marked context a probe records for
  // pass, set_aside, awaiting: why the iteration passes through (Note [The iteration
  // log] says it; a string literal).
  const char* why = "";
  // The key is on probation (Note [Probation slabs]): its recording takes no call-stack
  // tags, and auto mode's verdict at the iteration's end reads it.
  bool probation = false;
};
// `first_size`: the iteration's first request when known (auto mode), else 0.
// `can_replay`: slabs can be made for the key's domain. REQUIRES: the key's mutex held.
begin_decision decide_begin(key_policy_state& e, std::uint64_t first_size, bool can_replay, const policy_settings& s);

// What a recording was made for (begin_decision's fields, kept by the thread).
struct recording_intent {
  int regime = -1;
  bool probing = false;
  bool growing = false;
  bool sizing = false;
  std::int8_t marked[2] = {-1, -1};
};

// After a recording: the plan to make (its regime's `planning` names it from now on)
// and a version taken from its regime, which the engine retires.
struct recording_decision {
  std::shared_ptr<const envelope> to_plan;
  std::uint64_t replace_id = 0;  // plan_version::id of the plan to_plan replaces; 0: none
  plan_version* dropped = nullptr;
  const char* dropped_why = "";
  bool probation = false;  // to_plan is planned as a key on probation's (Note [Probation slabs])
};
// REQUIRES: the key's mutex held.
recording_decision decide_after_recording(key_policy_state& e, const std::shared_ptr<const trace>& recorded,
                                          const recording_intent& in, const policy_settings& s, policy_counts& n);

// What a replay did (the engine reads it off the cursor when the replay ends).
struct replay_summary {
  const plan_version* version = nullptr;  // compared only: it may be gone
  std::uint64_t version_id = 0;
  bool from_file = false;
  int regime = -1;
  std::uint32_t planned = 0;  // slots the plan places
  std::uint32_t handed = 0;   // blocks the slab handed out
  std::uint64_t misses = 0;   // requests the plan had no slot for
  std::uint32_t grown = 0;    // slots whose request outgrew them
  std::uint32_t first_miss_at = 0;  // slot + 1 of the first miss; 0: none
  std::uint64_t first_miss_size = 0;
  std::uint32_t first_too_large_at = 0;
  std::uint64_t first_too_large_size = 0;
  std::uint64_t first_size = 0;  // the iteration's first request, when known
  // Note [Periodic iterations]: the plan's tail_from and period (0: no period).
  std::uint32_t tail_from = 0;
  std::uint32_t period = 0;
  // What the iteration's client expected it to make (auto mode: its period, or between
  // quiet points what it made; Note [One verdict for auto mode]); 0: not known.
  std::uint64_t expected = 0;
};

// What a replay's figures say of it, before the key is asked: a pure function of the
// summary and REPLAYALLOC_DEVIATION_PERCENT.
struct replay_reading {
  bool overran = false;   // a periodic plan's request had more steps than the plan
  bool grew = false;      // a larger shape (two slots or more outgrown)
  bool deviated = false;  // more misses or missing slots than REPLAYALLOC_DEVIATION_PERCENT
  // Fewer blocks handed out than (100 - REPLAYALLOC_DEVIATION_PERCENT)% of what it could:
  // the plan's slots, or the fewer its client expected; never for a periodic plan's
  // prefix, which its client did not bound (Note [One verdict for auto mode]).
  bool fell_short = false;
};
replay_reading read_replay(const replay_summary& rs, const policy_settings& s);

// After a replay.
struct replay_verdict {
  bool grew = false;        // a larger shape (two slots or more outgrown)
  bool deviated = false;    // more misses or missing slots than REPLAYALLOC_DEVIATION_PERCENT
  bool fell_short = false;  // replay_reading's: what auto mode counts (Note [One verdict for auto mode])
  bool explained = false;   // another regime's iteration, or one a plan on the way serves
  bool grow_wanted = false; // the plan grows: predicted now, or the next iteration records
  bool counted = false;     // counts towards retiring the plan
  bool overran = false;     // a periodic plan's request had more steps than the plan
  bool retire = false;      // the plan is to be retired (streak_retires, below)
  std::shared_ptr<const envelope> predicted;  // plan it now, replacing version_id
  bool probation = false;   // predicted is planned as a key on probation's (Note [Probation slabs])
};
struct deviation_streak;
// `streak`: the replaying thread's deviations in a row (null: retire is not decided).
// REQUIRES: the key's mutex held.
replay_verdict decide_after_replay(key_policy_state& e, const replay_summary& rs, const policy_settings& s,
                                   deviation_streak* streak = nullptr);

// Note [Probation slabs] (plans.cc): a key whose plans failed before (set aside, given
// up, a plan made only because its recordings never agreed) has not shown that it
// repeats: its plans are cheap ones, its host slabs neither pre-fault nor purge, and its
// recordings take no call-stack tags. The decisions read it (REQUIRES: the key's mutex
// held) and carry it to the engine (Note [Key policy]).
inline bool on_probation(const key_policy_state& e) { return e.failures != 0; }

// A plan made (or loaded from a file) for a trace, to install as version v.
struct plan_to_install {
  plan_version* version = nullptr;
  std::uint64_t shape = 0;       // the trace's regime signature (its period's, if periodic)
  std::uint64_t replace_id = 0;  // the version it replaces (0: none); installed only if still so
  bool from_file = false;
  std::uint64_t slab_bytes = 0;
  std::uint64_t lower_bound_bytes = 0;
  // from_file: the envelope of the regime the plan starts, where none has its shape.
  const trace* tr = nullptr;
  const trace_period* period = nullptr;
  const std::vector<std::uint64_t>* least = nullptr;
};
// Where it went: its regime (its version now), and the version it replaced, for the
// engine to retire once the key's mutex is released; or nowhere (installed false: the engine
// retires v): another plan arrived meanwhile (a recording finished first; the version
// to replace was retired or replaced already), or the regime's slot went to another
// structure, and what is there is kept. REQUIRES: the key's mutex held.
struct install_decision {
  bool installed = false;
  int regime = -1;
  plan_version* old = nullptr;
};
install_decision decide_install(key_policy_state& e, const plan_to_install& in);

// Note [Background planning]: the plan of envelope env made (or not: its regime records
// again when its plan is wanted next); the regime that waited for it no longer does.
// REQUIRES: the key's mutex held.
void on_plan_done(key_policy_state& e, const envelope* env);
// Planning the key failed: its iterations pass through from now on. REQUIRES: the key's mutex held.
void on_plan_failed(key_policy_state& e);
// A recording begun by decide_begin that will not reach decide_after_recording (no
// memory for it or for its plan; its thread is not in a fork's child): another thread's
// next iteration may record the key. REQUIRES: the key's mutex held (in a fork's child,
// held by the fork).
void abandon_recording(key_policy_state& e);
// Auto mode found a period whose iterations are this key's (Note [Auto mode]): between
// quiet points or a long piece's rests (`at_quiet`: each begins at a fixed request of
// its piece, Note [Regimes by first size]), or one of structure whose sizes vary
// (`by_shape`: Note [Anchored iterations]), which the decisions read. REQUIRES: the
// key's mutex held.
void on_auto_period(key_policy_state& e, bool at_quiet, bool by_shape);

// A thread's deviating replays in a row, of one key (domain_state keeps it).
struct deviation_streak {
  const key_policy_state* entry = nullptr;
  std::uint32_t in_a_row = 0;
};
// Counts a replay's verdict; true when the plan is to be retired (REPLAYALLOC_REPLAN_AFTER
// counted deviations in a row; a plan from a file, the first).
bool streak_retires(deviation_streak& st, const key_policy_state* e, bool counted, bool from_file, const policy_settings& s);

// Note [Setting aside]: one more failure of the key's plans. REQUIRES: the key's mutex held.
void set_aside(key_policy_state& e, const policy_settings& s, policy_counts& n, const char* why);
// Takes regime r's plan away (it records again) and sets the key aside; the version,
// for the engine to retire once the key's mutex is released. REQUIRES: the key's mutex held.
plan_version* drop_plan(key_policy_state& e, int r, const policy_settings& s, policy_counts& n, const char* why);

}  // namespace replayalloc::detail
