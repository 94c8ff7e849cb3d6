// replayalloc/runtime/engine.h: the state machine per plan key.
//
// Layer: runtime (above replay, trace, planner). For each key:
//   no plan --begin--> record (one thread at a time; the others pass through)
//   record  --end----> compare with the previous recording; after
//                      REPLAYALLOC_RECORD_ITERATIONS identical ones (or
//                      REPLAYALLOC_RECORD_LIMIT recordings) queue the plan: the
//                      planner thread makes, validates, compiles and installs it
//                      (Note [Background planning])
//   queued  --begin--> pass through (iterations_awaiting_plan) until it is installed
//   planned --begin--> replay on a slab of the plan's pool
//   replay  --end----> if the thread's iterations deviated (fallbacks or missing slots
//                      above REPLAYALLOC_DEVIATION_PERCENT) REPLAYALLOC_REPLAN_AFTER
//                      times in a row: retire the plan (its slabs drain), record again
// Which arrow an iteration takes is decided by runtime/key_policy.h
// (Note [Key policy]); the engine applies the decision.
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
#include "runtime/check.h"
#include "runtime/domain.h"
#include "runtime/key_entry.h"
#include "runtime/key_policy.h"
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

// Note [Deferred op names]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A call-stack tag costs a symbolization per new stack (Abseil's symbolizer over the
// libraries' symbol tables, ~0.5 ms each in libtorch), and the first recording of a
// model meets hundreds of new stacks: named while recording, they made the first
// recorded inference 2.2x slower (bench/RESULTS.md, e2e-steady). So the source interns
// a stack as a deferred op (op_id_deferred: a token the namer understands, e.g. its
// frames) and the engine names it the first time a name is read: a trace or plan file
// written, a check report. A recorded trace holds a deferred op as the placeholder
// "\x01<op id>" in its op table; every trace that leaves the engine passes through
// with_op_names(). The namer must not allocate through the engine (it runs under the
// reentry guard) and takes no lock the engine's callers may hold.
using deferred_op_namer = void (*)(std::uint64_t token, char* out, std::size_t cap);
inline std::atomic<deferred_op_namer> g_deferred_op_namer{nullptr};

class engine {
 public:
  static engine& get();
  // The work at exit (statistics, plans being saved), registered with atexit: by the
  // constructor, or in the LD_PRELOAD library by its own constructor, never from inside
  // an allocation (Note [The engine made at load], hooks/preload.cc).
  void register_at_exit();

  // The host domain's iterations, opened and closed by its clients: the C API
  // (runtime/api.cc) and auto mode (runtime/auto_mode.h, Note [Auto mode as a
  // client]). `first_size`: the iteration's first request, when known at its beginning
  // (auto mode); it picks the regime (Note [Regimes]). 0: not known. pre: key non-empty.
  // Nested: REPLAYALLOC_NESTED; end with none open: -1, errno EINVAL.
  int begin(thread_state& t, const char* key, std::size_t first_size = 0);
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
  bool replays() const { return policy_.replays; }  // the mode makes plans (replay, auto)

  // fork(): every engine lock is taken before, released after in both processes (none
  // in a process of one thread: Note [Fork in a process of one thread]); the child also
  // abandons the forking thread's open iteration (its slab stays out of the
  // pool, so nothing it handed out is ever reused) and forgets recordings that
  // threads which do not exist in the child had under way. Note [Fork].
  void prefork();
  void postfork_parent();
  void postfork_child();

 private:
  engine();
  void end_record(domain_state& d);
  void end_record_impl(domain_state& d);
  void end_replay(domain_state& d);
  // A plan whose replays deviated REPLAYALLOC_REPLAN_AFTER times in a row (a plan file's:
  // once) leaves regime `regime` of `e`, unless another replaced it meanwhile.
  void retire_deviating(key_entry& e, plan_version* v, int regime, bool from_file);
  // domain_begin's two ways: the recording begun (its recorder made on first use), or
  // the replay on a slab of `v` (`claim` made under the key's mutex; `claimed` false
  // when it failed, with `why`; a new slab is made here, idle slabs of other keys
  // trimmed once when over REPLAYALLOC_MAX_SLAB_MEMORY). Either may leave the iteration
  // passing through.
  void begin_recording(domain_state& d, key_entry* e);
  void begin_replay(domain_state& d, key_entry* e, plan_version* v, bool claimed, plan_version::slab_claim claim,
                    const char* why, void* context, std::size_t slab_bytes);
  // Plans `env` for its regime of `e`; with `replace_id` (a plan_version::id; 0: none)
  // the plan replaces that version (a grown envelope) instead of waiting for the
  // regime to have none.
  // Returns the version installed when a search might find a smaller slab (made by
  // `best`, above its lower bound; Note [Improved plans]), else 0; `slab` its slab.
  // `probation`: the job's (Note [Probation slabs]): one greedy ordering, no search.
  // `ahead`: install_plan's.
  std::uint64_t make_plan(key_entry& e, const envelope& env, std::uint64_t replace_id, bool probation,
                          std::uint64_t* slab, bool ahead);
  // Note [Improved plans]: searches job.env for a slab smaller than job.slab_bytes and
  // swaps it in for version job.replace_id. On the planner thread.
  void improve_plan(const plan_job& job);
  // Note [Background planning]: `env` planned for its regime of `e` by the planner
  // thread (or here, synchronously, when there is none); the regime's `planning`
  // names env until it is done. pre: e.mu not held; e held by the caller.
  // `probation`: the decision's (Note [Probation slabs]), carried by the job.
  void submit_plan(key_entry& e, std::shared_ptr<const envelope> env, std::uint64_t replace_id, bool predicted,
                   bool probation);
  static void run_plan_job(const plan_job& job);
  // Adds what a decision (runtime/key_policy.h) says to count to the statistics.
  void count(const policy_counts& n);
  void retire_dropped(key_entry& e, plan_version* v, bool from_file, const char* why);
  void* alloc_slow_unchecked(thread_state& t, std::size_t size, std::size_t align, bool zero);
  // Compiles `p` for `e` and makes it the key's plan unless one arrived meanwhile.
  // pre: validate(tr, p) holds. Returns false (and logs) when it could not.
  // `least`: least_served() of the envelope `tr` is (null: every slot exact).
  // `improved`: the plan replaces version replace_id as a smaller plan of the same
  // envelope (Note [Improved plans]), not a grown one. `installed`: set to the new
  // version's id when it became the regime's plan. `probation`: the plan's job's (Note
  // [Probation slabs]: its host slabs neither pre-fault nor purge). `ahead`: the
  // version's first slab is made now, on this thread (Note [The first slab with the
  // plan]).
  bool install_plan(key_entry& e, const trace& tr, placement p, bool from_file, std::uint64_t replace_id,
                    const std::vector<std::uint64_t>* least, bool improved, bool probation,
                    std::uint64_t* installed, bool ahead);
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
  const policy_settings policy_;  // Note [Key policy]: the settings its decisions read
  bool slabs_ok_ = false;
  planner_thread planner_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, key_entry*> keys_;
  // Op 0, "unknown", entered by the constructor once the fallback can serve it (Note [A
  // short process's first requests]: nothing before may ask jemalloc).
  std::vector<std::string> op_names_;
  absl::flat_hash_map<std::string, std::uint32_t> op_ids_;
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
  std::atomic<std::uint64_t> version_ids_{0};  // plan_version::id, of every version made
  std::atomic<std::uint64_t> rerecords_{0};
  std::atomic<std::uint64_t> recordings_{0};
  std::atomic<std::uint64_t> plans_loaded_{0};
  std::atomic<std::uint64_t> plan_files_ignored_{0};
  std::atomic<std::uint64_t> plans_evicted_{0};
  std::atomic<std::uint64_t> plans_grown_{0};
  std::atomic<std::uint64_t> set_asides_{0};
  std::atomic<std::uint64_t> keys_given_up_{0};
  std::atomic<std::uint64_t> probes_{0};
  std::atomic<std::uint64_t> plans_predicted_{0};
  // Note [Background planning]: plans the planner thread installed, and the time from
  // the recording's end to the install (microseconds), summed and the longest.
  std::atomic<std::uint64_t> plans_background_{0};
  std::atomic<std::uint64_t> plan_wait_us_total_{0};
  std::atomic<std::uint64_t> plan_wait_us_max_{0};
  // Note [Improved plans]: smaller plans the search swapped in, and the time it took.
  std::atomic<std::uint64_t> plans_improved_{0};
  std::atomic<std::uint64_t> plan_search_us_total_{0};
};

}  // namespace replayalloc::detail
