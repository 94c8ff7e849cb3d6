// replayalloc/replay/slab_pool.h: slabs, and the pool of slabs of one plan.
//
// Layer: replay. A slab is one plan's memory: slab_bytes of the reserved range plus
// its replay state: a record per slot (slot_record.h: its address in this slab, its
// state word), the recorded order of frees resolved to this slab (two copies: Note
// [Freed prefix]). A slab serves one iteration at a time; the pool hands
// a free slab to each iteration that begins (making one on first use, up to
// REPLAYALLOC_MAX_SLABS), and takes it back when the iteration has ended and every
// block it handed out has been freed (Note [Slab lifetime]).
//
// Note [Slab lifetime]
// ~~~~~~~~~~~~~~~~~~~~
// `refs` counts blocks not yet known to be freed. It is 0 when an iteration takes the
// slab. Frees on other threads (or after the iteration ended) subtract 1; the
// iteration's own frees are counted privately by its thread, which at iteration end
// adds (handed out - freed by itself). So refs is <= 0 while the iteration runs and
// equals the number of live blocks after it ends: exactly one party, the end or the
// free that brings refs to zero, returns the slab to the pool. A slab whose blocks
// outlive the iteration therefore stays out of the pool until they are freed (invariant
// 4); the next iteration takes another slab.
//
// Thread-safety: claim/release/retire take the pool's mutex (iteration boundaries
// and the last free of a drained slab only). Slot states are atomics: the owning
// thread stores, any thread may free with a compare-and-swap.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "replay/compiled_plan.h"
#include "replay/slot_record.h"

namespace replayalloc::detail {

struct plan_version;

// State word of a slot, reset to slot_unreached for every iteration the slab serves
// (constants, so that the hit stores one and the predicted free compares with one).
inline constexpr std::uint32_t slot_unreached = 0;  // not handed out or passed over yet
inline constexpr std::uint32_t slot_live = 1;
inline constexpr std::uint32_t slot_dead = 2;     // freed, or passed over safely
inline constexpr std::uint32_t slot_blocked = 3;  // passed over while its bytes were busy

struct slab {
  std::uint8_t* base = nullptr;
  std::size_t mapped = 0;
  plan_version* version = nullptr;
  // Device slabs only (integrations/cuda): the stream whose work last used the slab,
  // and an event recorded there when the slab went back to the pool.
  void* stream = nullptr;
  void* ready_event = nullptr;
  // One per slot, then one that serves nothing (where the cursor stops at the end).
  slot_record* recs = nullptr;
  // The order of frees twice, each copy ending in a sentinel: [second | first], so that
  // every address in the second is below every address in the first (Note [Freed
  // prefix]).
  free_entry* frees = nullptr;
  std::uint32_t free_count = 0;  // ranks per copy
  free_entry* first_frees() const { return frees + free_count + 1; }
  free_entry* second_frees() const { return frees; }
  // The record of the block at `offset` if one is live there: the first slot of the
  // offset's row not dead (Note [Finding a freed block]); null when the offset is no
  // slot's (*planned, when given, says which) or all are dead. The caller's
  // compare-and-swap against the live tag says whether it is live. Any thread.
  //
  // Note [Finding a freed block]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A free that is not the predicted one (replay_free_slow, on any thread, also after
  // the iteration ended) and the usable size of a slab block (runtime/api.cc) know the
  // block only by its address; its offset in the slab may be the offset of several
  // slots of the plan, one after another in time. compile_plan groups the slots by
  // offset: offset_rows maps each distinct offset in the slab to a row, and row r's
  // slots are row_slots[row_begin[r], row_begin[r + 1]), in allocation order. Slots of
  // one row share their first byte, so by the argument of Note [Overlap lists] (a slot
  // dead or freed means no earlier slot sharing its bytes is live or can become live
  // again; one passed over while they are busy is marked blocked, not dead) the row's
  // dead slots come first, and a block live at the offset is the row's first slot that
  // is not dead. live_block_at finds the row with one hash lookup (none: no slot's
  // block begins there, and *planned says so) and that slot with a binary search over
  // the slots' state words (std::partition_point on "dead"): O(log n) in the row's
  // length, with no lock. It returns a record, not a verdict: the slot found may be
  // unreached or blocked, or be freed by another thread meanwhile, so the caller's
  // compare-and-swap from slot_live decides (replay_free_slow counts a failed one as a
  // double free).
  slot_record* live_block_at(std::uint64_t offset, bool* planned = nullptr) const;
  std::atomic<std::int64_t> refs{0};
  slab* next_free = nullptr;
};

// Where a plan's slabs come from: host memory in the reserved range (host_slabs()),
// or device memory (integrations/cuda). Called on the slow path only.
class slab_source {
 public:
  virtual ~slab_source() = default;
  // Committed memory for a slab of `bytes`, or null with *why set.
  virtual void* map(std::size_t bytes, const char** why) = 0;
  virtual void unmap(void* p, std::size_t bytes) = 0;
  // Registers `owner` (null: clears) as the owner of [p, p + bytes) for frees.
  virtual void set_owner(void* p, std::size_t bytes, slab* owner) = 0;
  // A new iteration takes the slab; `context` is what the caller passed to finish.
  virtual void on_acquire(slab* s, void* context) {}
  // The slab drained and goes back to the pool (or is about to be destroyed).
  virtual void on_release(slab* s) {}
  // Whether a plan's first slab is made with the plan (Note [The first slab with the
  // plan], runtime/plans.cc): host slabs that pre-fault.
  virtual bool makes_ahead() const { return false; }
};

// Host slabs in the reserved range; `prefault` touches their pages when made.
slab_source& host_slabs(bool prefault);
// Note [Probation slabs] (runtime/plans.cc): host slabs neither pre-faulted nor
// preceded by a purge of the backend, for the plans of a key that failed before.
slab_source& host_probation_slabs();

// Host slabs stop being made once this many bytes are committed
// (REPLAYALLOC_MAX_SLAB_MEMORY); map() then fails with why == slab_limit_reason.
void set_host_slab_limit(std::size_t bytes);
// An array, not a pointer to a literal: one object, so one address in every unit
// (identical literals need not share an address, and under ASan they do not).
inline constexpr char slab_limit_reason[] = "REPLAYALLOC_MAX_SLAB_MEMORY bytes of slabs are committed";

// Every plan version alive, current or retired and draining, is listed so that fork()
// can hold all their pool mutexes (Note [Fork]): a retired version's mutex is still
// taken by a thread freeing the last blocks of its slabs.
void lock_versions_for_fork();
void unlock_versions_after_fork();
// How many versions are alive (current, or retired with slabs still draining).
std::size_t plan_versions_alive();

struct plan_version {
  plan_version();
  ~plan_version();
  plan_version(const plan_version&) = delete;
  plan_version& operator=(const plan_version&) = delete;

  compiled_plan plan;
  std::string key;
  std::uint64_t id = 0;
  bool from_file = false;  // loaded from REPLAYALLOC_PLAN_DIR (Note [Plan files])
  slab_source* source = nullptr;
  // Note [Periodic iterations] (trace/period.h): the slot where the plan's steps end
  // (its tail begins) and the allocations per step; both 0 when it has no period.
  std::uint32_t tail_from = 0;
  std::uint32_t period = 0;

  // A slab for a new iteration, in two halves. claim() runs with the mutex of the key
  // the version was read from held: between that read and the claim another thread
  // may retire the version, and a retired version without slabs deletes itself. A
  // claim (a free slab, or the reserved place of a new one) counts as a slab, so the
  // version outlives it. claim() fails (false, *why set) when the version is retired
  // or the pool is at its limit.
  struct slab_claim {
    slab* s = nullptr;  // a free slab; null: make a new one
  };
  bool claim(std::uint32_t max_slabs, slab_claim* c, const char** why);
  // No lock held: makes the slab of a claim if it is new, and readies it (its slots
  // read "not reached" again). Null with *why set when memory ran out; the claim is
  // then dropped (the version deleted if it was retired meanwhile and this was its last).
  slab* finish(slab_claim c, void* context, const char** why);
  // Note [The first slab with the plan] (runtime/plans.cc): the claim of the version's
  // first slab, only while it has none (made or claimed) and is not retired; under the
  // key's mutex, as claim(). stock() then makes that slab (no lock held) and puts it in
  // the pool for the next iteration to take; false when memory ran out (the claim is
  // dropped, and that iteration makes its slab as before).
  bool claim_first(slab_claim* c);
  bool stock(slab_claim c);

  // Returns a drained slab (refs reached zero).
  void release(slab* s);

  // No further acquires. Free slabs are unmapped now, busy ones when they drain; the
  // version deletes itself with its last slab.
  void retire();

  std::uint32_t slab_count();

  // Unmaps the slabs waiting in the pool (none in use is touched). Returns the bytes
  // given back. A later claim makes slabs again.
  std::size_t trim();

  // fork(): the pool's mutex is held across it (lock_versions_for_fork).
  void lock_for_fork() { mu_.lock(); }
  void unlock_after_fork() { mu_.unlock(); }

  plan_version* registry_next = nullptr;  // under the registry's mutex
  plan_version* registry_prev = nullptr;

 private:
  void destroy(slab* s);  // REQUIRES: mu_ held
  std::mutex mu_;
  slab* free_ = nullptr;
  std::uint32_t slabs_ = 0;
  bool retired_ = false;
};

}  // namespace replayalloc::detail
