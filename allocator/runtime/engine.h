// replayalloc/runtime/engine.h: the state machine per plan key.
//
// Layer: runtime (above replay, trace, planner). For each key:
//   no plan --begin--> record (one thread at a time; the others pass through)
//   record  --end----> compare with the previous recording; after
//                      REPLAYALLOC_RECORD_ITERATIONS identical ones (or
//                      REPLAYALLOC_RECORD_LIMIT recordings) plan, validate, compile
//   planned --begin--> replay on a slab of the plan's pool
//   replay  --end----> if the thread's iterations deviated (fallbacks or missing slots
//                      above REPLAYALLOC_DEVIATION_PERCENT) REPLAYALLOC_REPLAN_AFTER
//                      times in a row: retire the plan (its slabs drain), record again
//
// The same machine serves every domain (thread_state.h): the host domain is driven
// by the C API here; a device domain by its integration (integrations/cuda), through
// the small interface of runtime/domain.h (which forwards here).
//
// The engine is a process-wide singleton, made on first use and never destroyed
// (threads may still free into slabs while the process exits).
//
// Thread-safety: keys, op names and the domain registry sit under the engine's
// mutex; each key's state under its own. Neither is taken on the hot path. Every
// slow path runs under the reentry guard (invariant 5).
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "planner/planner.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/auto_detect.h"
#include "runtime/check.h"
#include "runtime/domain.h"
#include "runtime/planner_thread.h"
#include "runtime/shortcuts.h"
#include "runtime/stats.h"
#include "runtime/thread_state.h"
#include "support/options.h"
#include "trace/size_model.h"
#include "trace/recorder.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// Check mode (Note [Check mode]): hides a replaying host cursor's counts so that the
// hot path always misses; the slow path unmasks around its own work.
inline void mask_plan(domain_state& d) {
  if (!check::enabled() || d.masked || d.ph != phase::replay || d.kind != domain_kind::host) return;
  hide_plan(d.cursor);
  d.masked = true;
}

inline void unmask_plan(domain_state& d) {
  if (!d.masked) return;
  show_plan(d.cursor);
  d.masked = false;
}

// placement_adjuster (runtime/domain.h): how a device domain moves allocations out of
// a slab that would not fit its memory budget (large-model support).

// Note [Regimes]: one key may repeat more than one structure. A training loop whose
// zero_grad(set_to_none=...) alternates makes two step structures; a model run at
// shapes where a kernel changes its workspaces makes one per shape class; an evaluation
// step now and then interleaves with training steps. Each structure (the trace's
// shape_signature(): the same allocations, made and freed in the same order, at any
// sizes) is a regime of the key, with its own envelope and plan; a key keeps up to
// max_regimes of them, each planned after REPLAYALLOC_RECORD_ITERATIONS recordings of
// its structure.
//
// Which regime an iteration follows is not known when it begins, so it is predicted:
// what followed the key's last two regimes the last time they were seen, else what
// followed the last one, else the last one itself. Steady (A A A), alternating
// (A B A B) and periodic (A A B A A B) sequences are predicted exactly once seen. An
// iteration's regime is learned from its recording, from its replay when that did not
// deviate, and, when it deviated, from the other planned regimes: one whose slots up
// to where this iteration left the plan could have served what it asked, and whose
// slot there fits the request that missed, is the regime it followed. A structure seen
// once is not learned (it may be noise).
//
// A deviation no planned regime explains may be a regime not yet known. When two of
// the key's last 8 replays deviated that way, leaving the plan at the same slot (noise
// leaves it anywhere), the context the deviation came in (the two regimes before it)
// is marked: the next iteration in that context records (a probe, counted in
// `probes`). A probe that finds a structure seen before gives the context to it; one
// that finds a new structure keeps the mark once more, so the next iteration there is
// recorded as well (a regime needs its recordings); one that finds the regime replayed
// there, or a second new structure in a row, gives the context back and makes the
// next probe wait four times longer (4, 16, .. 4,096 iterations). Recordings to grow
// an envelope that find no larger shape back off the same way. A wrong prediction
// costs what any deviation costs (invariant 1 holds on every slot: what the slab
// cannot serve goes to the backend); a wrong prediction explained by another regime
// does not count as the plan deviating (Note [Setting aside]).
//
// A new structure when every regime holds a plan takes the place of the one least
// recently seen (its plan retired); after 4 such replacements in 256 iterations the key
// cycles through more structures than it keeps, and keeps its plans for 4,096
// iterations while the others pass through to the backend.
inline constexpr int max_regimes = 4;
inline constexpr int record_marker = -2;  // in after1/after2: record what comes here

struct regime {
  plan_version* version = nullptr;  // its plan; null until planned
  // Note [Envelope]: this regime's recordings, each allocation at the largest size
  // recorded; what its plan is made from. Null: the regime slot is unused.
  std::shared_ptr<const envelope> env;
  std::uint64_t shape = 0;          // env's trace's shape_signature()
  std::uint32_t recordings = 0;     // recordings of this structure since its last plan
  std::uint64_t last_seen = 0;      // key_entry::uses when last recorded or replayed
  std::uint64_t slab_bytes = 0;
  std::uint64_t lower_bound_bytes = 0;
  bool grow_wanted = false;         // a request outgrew the plan: record once more, merge
  // Note [Background planning]: the envelope whose plan is being made off the request
  // path (null: none). While set, no iteration of this regime records: without a plan
  // they pass through, with one they replay it until the new one is installed.
  const envelope* planning = nullptr;
  bool confirmed = false;           // an iteration replayed its plan without deviating
  std::uint32_t grown_in_a_row = 0; // replays that outgrew it since the last clean one
  // Note [Predicted plans] (trace/size_model.h): the sizes of its recent recordings.
  std::vector<size_sample> samples;
  // The least and largest first request of the iterations known to follow it (0: none
  // known): a key's structures often split its shapes into ranges (Note [Regimes]).
  std::uint64_t first_lo = 0;
  std::uint64_t first_hi = 0;
  // Whether its plan's first slot serves a first request of `size` bytes.
  bool first_slot_fits(std::uint64_t size) const;
  void saw_first(std::uint64_t size) {
    if (size == 0) return;
    first_lo = first_lo == 0 ? size : std::min(first_lo, size);
    first_hi = std::max(first_hi, size);
  }
};

struct key_entry {
  std::string key;
  std::mutex mu;
  domain_kind kind = domain_kind::host;
  slab_source* source = nullptr;        // where this key's slabs come from
  placement_adjuster adjust = nullptr;  // optional, with its argument
  void* adjust_arg = nullptr;
  // Note [Regimes]: the structures this key repeats, and what predicts the next.
  regime regimes[max_regimes];
  std::int8_t history[2] = {-1, -1};  // regimes of the last two iterations, newest last
  std::int8_t after1[max_regimes];    // what followed each regime (-1: not seen; record_marker)
  std::int8_t after2[max_regimes][max_regimes];  // what followed each pair
  std::uint32_t probe_left = 0;       // iterations still to record after a deviation
  std::uint32_t structure_deviations = 0;  // one bit per replay, newest lowest
  std::uint32_t last_first_miss = 0;       // where the last of them left the plan
  std::uint64_t probe_quiet_until = 0;  // no probe before this iteration
  std::uint64_t probe_backoff = 0;      // the last wait after a probe that found nothing
  std::uint32_t evictions = 0;          // regimes replaced since evictions_since
  std::uint64_t evictions_since = 0;
  std::uint64_t regimes_kept_until = 0; // no regime replaced before this iteration
  bool recording = false;           // a thread is recording this key
  bool failed = false;              // planning failed: pass through from now on
  bool automatic = false;           // auto mode's key: its period was already seen thrice
  bool at_quiet = false;            // auto mode's key whose iterations begin at quiet points
  std::uint32_t recordings = 0;     // since the key's last plan, of any structure
  int probe_from = -1;              // the regime whose replay deviated
  bool probe_found_other = false;   // a probe recording found another regime
  bool probe_found_new = false;     // the last probe found a structure seen once
  std::shared_ptr<const trace> last_trace;
  // Note [Setting aside]: iterations begun (domain_begin), plans that failed in a row,
  // and the iteration before which the key passes through.
  std::uint64_t uses = 0;
  std::atomic<std::uint32_t> failures{0};  // written under mu; read without it
  std::uint64_t resume_at = 0;
  // Under the engine's mutex: when a thread last asked for this key, and how many
  // threads hold it now (from entry_for to domain_end; atomic so domain_end can drop
  // its hold without the mutex). Only an entry nobody holds is evicted.
  std::uint64_t last_used = 0;
  std::atomic<std::uint32_t> users{0};

  key_entry();
  // Note [Regimes]. All REQUIRE mu held.
  int find_regime(std::uint64_t shape) const;
  int predict_regime() const;    // -1: nothing to predict from
  // Note [Regimes by first size]: the regime an iteration whose first request is
  // `size` bytes follows (-1: no regime has first sizes; use the prediction), and
  // whether no regime is known to serve that size (the iteration should record).
  struct first_size_pick {
    int regime = -1;
    bool unknown = false;
  };
  first_size_pick regime_for_first_size(std::uint64_t size, int predicted) const;
  void learn_regime(int r);      // the iteration just ended followed r (-1: unknown)
  void forget_regime(int r);     // its slot is reused: no prediction names it
  // The iteration just ended followed a regime not known: marks the context it came
  // in (record_marker), and forgets the newest history. False: no context to mark.
  bool mark_context();
  // Another planned regime an iteration replayed on regime r may have followed
  // instead: its slots before the first request r had no slot for (slot at - 1; 0:
  // none) could have served what r's served, and its slot there fits `size`. -1: none.
  int consistent_regime(int r, std::uint32_t at, std::uint64_t size) const;
  // Where a new structure goes: a free slot, else the least recently seen regime
  // without a plan, else the least recently seen one.
  int slot_for_new_regime() const;
  // A probe (or a recording for growth) ended: it found what it recorded for, or
  // the next one waits four times longer than the last (4 .. 4,096 iterations).
  void probe_result(bool found);
  bool any_plan() const;
  std::uint64_t slab_bytes() const;
  std::uint64_t lower_bound_bytes() const;
};

// What an integration's domain needs to hear of a thread's iterations.
struct domain_hooks {
  void (*on_end)(thread_state& t) = nullptr;   // the thread's outermost iteration ends
  void (*on_exit)(thread_state& t) = nullptr;  // the thread exits
};

// Names the op of a recorded allocation the program left untagged (op 0): the
// LD_PRELOAD library's call-stack tags (hooks/stack_ops.cc). Called only while
// recording, under the reentry guard; returns an op_id() or 0. Null: none.
using untagged_op_source = std::uint32_t (*)();
inline std::atomic<untagged_op_source> g_untagged_op_source{nullptr};

// Note [Deferred op names]: a call-stack tag costs a symbolization per new stack
// (Abseil's symbolizer over the libraries' symbol tables, ~0.5 ms each in libtorch),
// and the first recording of a model meets hundreds of new stacks: named while
// recording, they made the first recorded inference 2.2x slower (bench/RESULTS.md,
// e2e-steady). So the source interns a stack as a deferred op (op_id_deferred: a
// token the namer understands, e.g. its frames) and the engine names it the first
// time a name is read: a trace or plan file written, a check report. A recorded
// trace holds a deferred op as the placeholder "\x01<op id>" in its op table; every
// trace that leaves the engine passes through with_op_names(). The namer must not
// allocate through the engine (it runs under the reentry guard) and takes no lock
// the engine's callers may hold.
using deferred_op_namer = void (*)(std::uint64_t token, char* out, std::size_t cap);
inline std::atomic<deferred_op_namer> g_deferred_op_namer{nullptr};

class engine {
 public:
  static engine& get();

  // The host domain, driven by the C API.
  int begin(thread_state& t, const char* key);
  int end(thread_state& t);
  // Every host allocation the fast path does not serve. pre: align power of two >= 16.
  void* alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero) noexcept;
  // A host free of a pointer outside the slab range.
  void free_backend(thread_state& t, void* p);
  // Check mode (runtime/check.h): every host free not made by the engine itself.
  void free_checked(thread_state& t, void* p);

  // Domains. An integration registers its per-thread state, finds or makes the entry
  // of its key (with its slab source), and opens and closes the domain's iteration
  // with the thread's; `context` reaches slab_source::on_acquire.
  void register_domain(domain_state& d);
  void unregister_domain(domain_state& d);
  key_entry* entry_for(std::string_view key, domain_kind kind, slab_source* source,
                       placement_adjuster adjust = nullptr, void* adjust_arg = nullptr);
  // `first_size`: the iteration's first request, when known at its beginning (auto
  // mode); it picks the regime (Note [Regimes]). 0: not known.
  void domain_begin(domain_state& d, key_entry* e, void* context, std::size_t first_size = 0);
  void domain_end(domain_state& d);
  void record_alloc(domain_state& d, const void* p, std::size_t size, std::size_t align);
  void record_free(domain_state& d, const void* p);
  void add_domain_hooks(const domain_hooks& h);

  // Makes the thread's counters visible to stats() and its exit known. Idempotent.
  void register_thread(thread_state& t);

  std::uint32_t op_id(std::string_view name);
  // Note [Deferred op names]: an op named later by g_deferred_op_namer(token); the
  // same token gives the same op.
  std::uint32_t op_id_deferred(std::uint64_t token);
  // `t` with each deferred op of its table named. Cold: symbolizes.
  trace with_op_names(const trace& t);
  // An op's name for a report; "?" when the engine's mutex is busy.
  const char* op_name_locked(std::uint32_t op);
  // Process-wide statistics; with `only`, those of one kind of domain.
  Stats stats(const domain_kind* only = nullptr);
  int save_trace(std::string_view key, const std::string& path);
  // Note [Background planning]: blocks until every plan queued is installed (or failed).
  void wait_plans();
  void on_thread_exit(thread_state& t);

  const options& opts() const { return opts_; }
  bool replays() const { return opts_.mode == run_mode::replay || opts_.mode == run_mode::automatic; }

  // fork(): every engine lock is taken before, released after in both processes; the
  // child also abandons the forking thread's open iteration (its slab stays out of the
  // pool, so nothing it handed out is ever reused) and forgets recordings that
  // threads which do not exist in the child had under way. Note [Fork].
  void prefork();
  void postfork_parent();
  void postfork_child();

 private:
  engine();
  int begin_impl(thread_state& t, const char* key, std::size_t first_size = 0);
  int end_impl(thread_state& t);
  void auto_before_alloc(thread_state& t, std::size_t size);
  void auto_track(thread_state& t, const void* p, std::size_t size);
  // The two above, where the watcher's memory may run out: it then rests (Note [Auto
  // mode rests]) with its history dropped, and the allocation is served all the same.
  void auto_before_alloc_safe(thread_state& t, std::size_t size) noexcept;
  void auto_track_safe(thread_state& t, const void* p, std::size_t size) noexcept;
  void auto_out_of_memory(thread_state& t) noexcept;
  void auto_rest(thread_state& t, auto_state& a, std::uint64_t budget) noexcept;
  void auto_untrack(thread_state& t, const void* p);
  void end_record(domain_state& d);
  void end_record_impl(domain_state& d);
  void end_replay(domain_state& d);
  void finish_probe(key_entry& e, const domain_state& d, int r);
  // Plans `env` for its regime of `e`; with `replace`, the plan replaces that version
  // (a grown envelope) instead of waiting for the regime to have none.
  // `replace_id`: plan_version::id of the version replaced; 0: none.
  void make_plan(key_entry& e, const envelope& env, std::uint64_t replace_id = 0);
  // Note [Background planning]: `env` planned for its regime of `e` by the planner
  // thread (or here, synchronously, when there is none); the regime's `planning`
  // names env until it is done. pre: e.mu not held; e held by the caller.
  void submit_plan(key_entry& e, std::shared_ptr<const envelope> env, std::uint64_t replace_id, bool predicted);
  static void run_plan_job(const plan_job& job);
  // A plan of `e` failed (retired for deviating, or recordings that never agreed):
  // sets the key aside for a while (Note [Setting aside]). REQUIRES: e.mu held.
  void set_aside_locked(key_entry& e, const char* why);
  // Takes the plan of regime `r` away (it records again) and sets the key aside;
  // returns the version, for retire_dropped() once e.mu is released. REQUIRES: e.mu held.
  plan_version* drop_plan_locked(key_entry& e, int r, const char* why);
  void retire_dropped(key_entry& e, plan_version* v, bool from_file, const char* why);
  void* alloc_slow_unchecked(thread_state& t, std::size_t size, std::size_t align, bool zero);
  // Compiles `p` for `e` and makes it the key's plan unless one arrived meanwhile.
  // pre: validate(tr, p) holds. Returns false (and logs) when it could not.
  // `least`: least_served() of the envelope `tr` is (null: every slot exact).
  bool install_plan(key_entry& e, const trace& tr, placement p, bool from_file,
                    std::uint64_t replace_id = 0, const std::vector<std::uint64_t>* least = nullptr);
  // lifecycle.cc
  void start_lifecycle();
  // plan_store.cc
  void save_plan(key_entry& e, const trace& tr, const placement& p, const std::vector<std::uint64_t>& least);
  std::string plan_path(const char* dir, const key_entry& e) const;
  void load_saved_plan(key_entry& e);
  bool load_plan_file(key_entry& e, const std::string& path);
  bool plan_dir_trusted(const char* dir);
  const char* plan_save_dir();
  // Note [Bounds]. REQUIRES: mu_ held.
  void evict_idle_keys_locked(const key_entry* keep);
  std::size_t trim_idle_slabs(const key_entry* except, std::size_t want);
  void abandon_recording(domain_state& d, const char* what);

  const options opts_;
  bool slabs_ok_ = false;
  planner_thread planner_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, key_entry*> keys_;
  std::vector<std::string> op_names_{"unknown"};
  absl::flat_hash_map<std::string, std::uint32_t> op_ids_{{"unknown", 0}};
  // Note [Deferred op names]: op id -> token while unnamed; token -> op id.
  absl::flat_hash_map<std::uint32_t, std::uint64_t> op_pending_;
  absl::flat_hash_map<std::uint64_t, std::uint32_t> op_tokens_;
  // Names a deferred op. REQUIRES: mu_ held.
  const std::string& op_name_of_locked(std::uint32_t op);
  domain_state* domains_ = nullptr;
  std::uint32_t next_thread_no_ = 0;
  std::uint64_t use_clock_ = 0;  // under mu_: key_entry::last_used
  Stats retired_[2];  // counters of exited domains, by kind
  domain_hooks hooks_[4];
  std::atomic<int> n_hooks_{0};
  std::atomic<std::uint64_t> plans_{0};
  std::atomic<std::uint64_t> rerecords_{0};
  std::atomic<std::uint64_t> recordings_{0};
  std::atomic<std::uint64_t> plans_loaded_{0};
  std::atomic<std::uint64_t> plan_files_ignored_{0};
  std::atomic<std::uint64_t> plans_evicted_{0};
  std::atomic<std::uint64_t> plans_grown_{0};
  std::atomic<std::uint64_t> set_asides_{0};
  std::atomic<std::uint64_t> keys_given_up_{0};
  std::atomic<std::uint64_t> auto_rests_{0};
  std::atomic<std::uint64_t> probes_{0};
  std::atomic<std::uint64_t> plans_predicted_{0};
  // Note [Background planning]: plans the planner thread installed, and the time from
  // the recording's end to the install (microseconds), summed and the longest.
  std::atomic<std::uint64_t> plans_background_{0};
  std::atomic<std::uint64_t> plan_wait_us_total_{0};
  std::atomic<std::uint64_t> plan_wait_us_max_{0};
};

}  // namespace replayalloc::detail
