// replayalloc/trace/recorder.h: records one iteration of one thread.
//
// Layer: trace. The engine gives each recording thread a recorder; the recorder sees
// that thread's allocations (already served by the backend) and the frees of them
// made by that thread during the iteration. A block freed by another thread, or after
// the iteration, is never seen freed: it is recorded as outliving the iteration, so
// the planner keeps it out of the slab. Conservative by construction.
//
// Its containers use the internal allocator (invariant 5), but for the recording's own
// array, which is the trace's type (Note [A recording handed over, not copied]); the
// engine calls every one of its functions inside its reentry guard, so that array's
// requests go to the backend too. Not thread-safe: one recorder per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "support/live_filter.h"
#include "support/grow_table.h"
#include "trace/trace.h"

namespace replayalloc::detail {

// Note [Op tags from the last recording]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A call-stack op tag (hooks/stack_ops.cc) costs an unwind of the stack per recorded
// allocation, most of a recorded iteration's cost where tags are on (bench/RESULTS.md,
// "Planning latency"), and a key is recorded at least twice before it is planned
// (REPLAYALLOC_RECORD_ITERATIONS). A repeated recording is, allocation by allocation,
// the previous one again: so the recorder keeps, per allocation of its last recording,
// the size and op it recorded, and the next recording of the same key (`owner`) takes
// the op of its allocation i from there when allocation i has the same size, instead
// of unwinding (hint()). An op is a label (reports, plan files, check mode's
// messages), never an input of a plan or of the comparison of recordings, so where this
// is wrong (another call path making the same size at the same position of a
// recording) a block is named after the call path that made it last time, and nothing
// else changes. The hints cost 16 bytes per allocation of the last recording; a
// recording of another key, or one begun without an owner, drops them.
// Note [A recording handed over, not copied]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A recording's array of allocations (48 bytes each) was the recorder's own, kept from
// one recording to the next, and finish() copied it into the trace: at 10,000
// allocations 480 KB written again at the end of the recorded iteration, onto pages the
// copy faulted in (bench/micro/planning_latency 10000: the first recorded iteration
// 2,760 faults). The array is now of the trace's own type and finish() moves it into the
// trace, renaming its ops in place; the next recording reserves the last one's count and
// an eighth more at its first allocation, so that it does not grow by doubling. The
// first recorded iteration at 10,000 allocations 2,760 -> 2,670 faults and 2.97x ->
// 2.83x jemalloc's time, at 60,000 8,249 -> 7,715 and 2.54x -> 2.41x (12 runs each,
// alternated, medians; bench/RESULTS.md, "Planning latency"); the second as before. The
// trace keeps the array's spare capacity (its pages never touched).
class trace_recorder {
 public:
  // `owner`: whose recording this is (a key), for hint(); 0: nobody's.
  void begin(std::uint32_t thread, std::uintptr_t owner = 0);
  // Note [Op tags from the last recording]: the op the last recording of the same
  // owner gave its allocation at this position if it had `size`, else 0.
  std::uint32_t hint(std::uint64_t size) const {
    const std::size_t i = allocs_.size();
    return i < hints_.size() && hints_[i].size == size ? hints_[i].op : 0;
  }
  void record_alloc(const void* p, std::uint64_t size, std::uint32_t align, std::uint32_t op);
  // True when p was allocated in this recording and was live.
  bool record_free(const void* p);
  std::size_t size() const { return allocs_.size(); }
  // False when record_free(p) would certainly find nothing (Note [Live filters]): the
  // inline free skips it.
  bool maybe_live(const void* p) const { return filter_.maybe_live(p); }

  // Ends the recording. `op_name(id)` names the op ids passed to record_alloc; the
  // trace's op table holds only the ops that appear, "unknown" first.
  template <class OpName>
  trace finish(std::string key, OpName op_name);

 private:
  // Note [A recording handed over, not copied]: the trace's own type, so that finish()
  // moves it into the trace.
  std::vector<trace_allocation> allocs_;
  std::size_t last_size_ = 0;  // allocations of the last recording finished (allocs_'s reserve)
  absl::flat_hash_map<const void*, std::uint32_t, absl::Hash<const void*>,
                      std::equal_to<const void*>,
                      backend::internal_allocator<std::pair<const void* const, std::uint32_t>>>
      live_;
  live_filter filter_;  // of live_
  struct op_hint {
    std::uint64_t size;
    std::uint32_t op;
  };
  std::vector<op_hint, backend::internal_allocator<op_hint>> hints_;  // of owner_'s last recording
  std::uintptr_t owner_ = 0;
  std::uint64_t clock_ = 0;
  std::uint32_t thread_ = 0;
};

template <class OpName>
trace trace_recorder::finish(std::string key, OpName op_name) {
  trace t;
  t.key = std::move(key);
  t.events = clock_;
  t.ops.push_back("unknown");
  // The trace's number of each op id: ids are dense (the engine's table of names), so
  // by index where they are small, by hash above (none_yet: not seen).
  constexpr std::uint32_t none_yet = UINT32_MAX, dense_ids = 1u << 16;
  std::vector<std::uint32_t> dense{0u};
  absl::flat_hash_map<std::uint32_t, std::uint32_t> sparse;
  auto local = [&](std::uint32_t op) {
    std::uint32_t* slot;
    if (op < dense_ids) {
      if (op >= dense.size()) dense.resize(op + 1, none_yet);
      slot = &dense[op];
    } else {
      grow_for_insert(sparse);  // Note [Tables that grow before they insert]
      slot = &sparse.try_emplace(op, none_yet).first->second;
    }
    if (*slot == none_yet) {
      *slot = static_cast<std::uint32_t>(t.ops.size());
      t.ops.emplace_back(op_name(op));
    }
    return *slot;
  };
  t.allocations = std::move(allocs_);
  allocs_ = {};
  last_size_ = t.allocations.size();
  hints_.clear();
  if (owner_ != 0) hints_.reserve(t.allocations.size());
  for (trace_allocation& a : t.allocations) {
    if (owner_ != 0) hints_.push_back({a.size, a.op});
    a.op = local(a.op);
  }
  live_.clear();
  filter_.clear();
  clock_ = 0;
  return t;
}

}  // namespace replayalloc::detail
