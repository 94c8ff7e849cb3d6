// replayalloc/runtime/key_policy_state.h: a plan key's policy state, the regimes it
// repeats (Note [Regimes]) and what predicts the next.
//
// Layer: runtime. Plain data: no mutex, no atomics, no domain. The decisions of
// runtime/key_policy.h read and write it; the engine's key_entry (runtime/key_entry.h)
// holds one, with what the engine needs of it as a table entry, and guards it by the
// entry's mutex: every reader and writer holds that mutex (what the engine needs of it
// without the mutex a decision hands over: Note [Key policy]). Tests make their own
// (tests/unit/key_policy_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trace/period.h"
#include "trace/size_model.h"
#include "trace/trace.h"

namespace replayalloc::detail {

struct plan_version;  // replay/slab_pool.h

// Note [Regimes]
// ~~~~~~~~~~~~~~
// One key may repeat more than one structure. A training loop whose
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
  // The first sizes below and above the range whose replay of this regime was not
  // clean (0: none): as far out as those, an iteration records instead.
  std::uint64_t refused_below = 0;
  std::uint64_t refused_above = 0;
  // Whether its plan's first slot serves a first request of `size` bytes.
  bool first_slot_fits(std::uint64_t size) const;
  void saw_first(std::uint64_t size) {
    if (size == 0) return;
    first_lo = first_lo == 0 ? size : std::min(first_lo, size);
    first_hi = std::max(first_hi, size);
    if (refused_below >= first_lo) refused_below = 0;  // the range took it in
    if (refused_above != 0 && refused_above <= first_hi) refused_above = 0;
  }
  // An iteration whose first request was `size` bytes replayed this regime and was not
  // clean (Note [Regimes by first size]).
  void refuse_first(std::uint64_t size) {
    if (size == 0 || first_lo == 0) return;
    if (size < first_lo) refused_below = std::max(refused_below, size);
    if (size > first_hi) refused_above = refused_above == 0 ? size : std::min(refused_above, size);
  }
};

struct key_policy_state {
  std::string key;
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
                                    // or at long pieces' rests (first sizes pick regimes)
  bool by_shape = false;            // auto mode's key whose period is one of structure (sizes vary)
  std::uint32_t recordings = 0;     // since the key's last plan, of any structure
  int probe_from = -1;              // the regime whose replay deviated
  bool probe_found_other = false;   // a probe recording found another regime
  bool probe_found_new = false;     // the last probe found a structure seen once
  std::shared_ptr<const trace> last_trace;
  trace_period last_period;  // last_trace's (Note [Periodic iterations])
  // The regime last_trace's envelope went into (-1: none, or that regime since forgotten):
  // a recording equal to last_trace adds nothing to it (Note [A recording equal to the last]).
  int last_trace_regime = -1;
  // Note [Setting aside]: iterations begun (domain_begin), plans that failed in a row,
  // and the iteration before which the key passes through.
  std::uint64_t uses = 0;
  std::uint32_t failures = 0;
  std::uint64_t resume_at = 0;
  key_policy_state();
  // Note [Regimes].
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

}  // namespace replayalloc::detail
