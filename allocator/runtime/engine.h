// replayalloc/runtime/engine.h: the state machine per plan key.
//
// Layer: runtime (above replay, trace, planner). For each key:
//   no plan --begin--> record (one thread at a time; the others pass through)
//   record  --end----> compare with the previous recording; after
//                      REPLAYALLOC_RECORD_ITERATIONS identical ones (or
//                      REPLAYALLOC_RECORD_LIMIT recordings) plan, validate, compile
//   planned --begin--> replay on a slab of the plan's pool
//   replay  --end----> if the iteration deviated (fallbacks or missing slots above
//                      REPLAYALLOC_DEVIATION_PERCENT) REPLAYALLOC_REPLAN_AFTER times in
//                      a row: retire the plan (its slabs drain) and record again
//
// The engine is a process-wide singleton, made on first use and never destroyed
// (threads may still free into slabs while the process exits).
//
// Thread-safety: keys, op names and the thread registry sit under the engine's
// mutex; each key's state under its own. Neither is taken on the hot path. Every
// slow path runs under the reentry guard (invariant 5).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/thread_state.h"
#include "support/options.h"
#include "trace/trace.h"

namespace replayalloc::detail {

struct key_entry {
  std::string key;
  std::mutex mu;
  plan_version* version = nullptr;  // the plan replayed now; null while recording
  bool recording = false;           // a thread is recording this key
  bool failed = false;              // planning failed: pass through from now on
  std::uint32_t recordings = 0;     // since the last plan
  std::uint32_t same_in_a_row = 0;  // identical consecutive recordings
  std::uint64_t last_signature = 0;
  std::shared_ptr<const trace> last_trace;
  std::uint64_t slab_bytes = 0;
  std::uint64_t lower_bound_bytes = 0;
};

class engine {
 public:
  static engine& get();

  int begin(thread_state& t, const char* key);
  int end(thread_state& t);

  // Every allocation the fast path does not serve. pre: align power of two >= 16.
  void* alloc_slow(thread_state& t, std::size_t size, std::size_t align, bool zero);
  // A free of a pointer outside the slab range.
  void free_backend(thread_state& t, void* p);

  std::uint32_t op_id(std::string_view name);
  Stats stats();
  int save_trace(std::string_view key, const std::string& path);
  void on_thread_exit(thread_state& t);

  // Makes the thread's counters visible to stats() and its exit known. Idempotent.
  void register_thread(thread_state& t);

  const options& opts() const { return opts_; }
  bool slabs_available() const { return slabs_ok_; }

 private:
  engine();
  key_entry* entry_for(std::string_view key);
  void end_record(thread_state& t);
  void end_replay(thread_state& t);
  void make_plan(key_entry& e, const trace& tr);

  const options opts_;
  bool slabs_ok_ = false;
  std::mutex mu_;
  absl::flat_hash_map<std::string, key_entry*> keys_;
  std::vector<std::string> op_names_{"unknown"};
  absl::flat_hash_map<std::string, std::uint32_t> op_ids_{{"unknown", 0}};
  thread_state* threads_ = nullptr;
  std::uint32_t next_thread_no_ = 0;
  Stats retired_;  // counters of threads that exited
  std::atomic<std::uint64_t> plans_{0};
  std::atomic<std::uint64_t> rerecords_{0};
  std::atomic<std::uint64_t> recordings_{0};
};

// Writes `s` as the stats JSON object. Returns the length needed (snprintf-style).
std::size_t format_stats_json(const Stats& s, char* buf, std::size_t cap);

}  // namespace replayalloc::detail
