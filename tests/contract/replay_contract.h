// tests/contract/replay_contract.h: the replay contract, written once, run against every
// way into replayalloc (in the manner of RMM's cpp/tests/mr/mr_ref_test.hpp).
//
// A domain is one entry point with the engine behind it: the C API (c_api_domain.cc),
// the CUDA device domain over the simulated runtime (cuda_domain.cc), the LD_PRELOAD
// library's malloc and free linked into the test itself (preload_domain.cc). Each is a
// small class over the interface below and one INSTANTIATE_TEST_SUITE_P; the tests
// (replay_contract.cc) are compiled into each domain's binary, as the domains cannot
// share one process (the preload one owns the process's malloc).
//
// What every domain owes (invariants 1, 4 and 7 of allocator/DESIGN.md, and the
// recovery that makes deviations cheap):
//   * a repeating iteration replays from the slab, the same blocks every time;
//   * never live bytes: a block held past its recorded free, past the iteration's end
//     or across a thread's exit keeps its bytes, and no other block is placed on them;
//   * a block freed on another thread, mid-iteration, is safe and its slot reused;
//   * an iteration that never ends falls back beyond the plan and ends at thread exit;
//   * deviations (an extra, a missing, a larger or a smaller allocation) fall back
//     while the rest of the iteration still replays; a lasting one is recorded again;
//   * what outlives the recording is served outside the slab.
// Every block the tests hold is in one ledger (live_blocks below): admitting a block
// checks it is not null, is aligned and shares no byte with any other live block; it
// is then filled with its tag's pattern (support/pattern.h), and every byte of it is
// checked at its free and of every live block at every iteration boundary.
//
// Sizes are 4 KiB or more and multiples of 256, so that the LD_PRELOAD library's
// default minimum (4 KiB) plans all of them and device blocks keep their alignment.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "support/block_ledger.h"

namespace replayalloc::contract {

// One way into replayalloc. One instance per process, never destroyed (blocks may be
// freed into it from any thread at any time). Thread-safe as replayalloc is.
class domain {
 public:
  virtual ~domain() = default;
  // Opens (closes) the calling thread's iteration of `key`.
  virtual void begin(const std::string& key) = 0;
  virtual void end() = 0;
  // A block of `size` bytes, or null. Any thread.
  virtual void* alloc(std::size_t size) = 0;
  // pre: p from alloc(size). Any thread.
  virtual void free(void* p, std::size_t size) = 0;
  // True when p lies in one of the domain's slabs.
  virtual bool in_slab(const void* p) const = 0;
  // The domain's statistics (its blocks only, where the domain can say so).
  virtual Stats stats() const = 0;
  // Bytes of slab memory the domain holds now (committed host slabs, device memory).
  virtual std::uint64_t slab_memory() const = 0;
  // The alignment every block has.
  virtual std::size_t alignment() const = 0;
  // Waits until the plans being made in the background are installed (Note
  // [Background planning]): every iteration's end is followed by this, so that the
  // suite says the same with the planner thread on and off (the iterations that pass
  // through while a plan is on the way have tests of their own:
  // tests/background/background_planning_test.cc).
  virtual void settle() { replayalloc_wait_plans(); }
  // Writes tag's pattern over [p, p + n) / true when every byte of it is still there.
  // The host's memory by default; a domain whose memory the host cannot touch (a real
  // GPU) overrides both with copies.
  virtual void fill(void* p, std::size_t n, std::uint64_t tag) { testing::fill_fast(p, n, tag); }
  virtual bool intact(const void* p, std::size_t n, std::uint64_t tag) {
    return testing::intact_fast(p, n, tag);
  }
};

// A test parameter: the domain, and the name its tests carry ("c_api/ReplayContract.
// SteadyStateReplaysFromTheSlab/replayalloc_malloc").
struct domain_param {
  const char* name;
  domain& (*instance)();
};

inline void PrintTo(const domain_param& p, std::ostream* os) { *os << p.name; }

inline std::string domain_param_name(const ::testing::TestParamInfo<domain_param>& info) {
  return info.param.name;
}

// Every block a test holds, by address, checked (see the top of this file). Touched by
// one thread at a time: other threads use it only while the test's thread waits.
class live_blocks {
 public:
  explicit live_blocks(domain& d) : d_(d) {}

  // Admits a fresh block and fills it; false (a test failure) when it is null,
  // misaligned or shares a byte with a live block.
  bool admit(const testing::checked_block& b);
  // Checks every byte of b and takes it out (the caller frees it or hands it on).
  bool take(const testing::checked_block& b);
  // Checks every byte of every live block; false when one changed.
  bool check_all();
  std::size_t size() const { return live_.size(); }
  const std::map<std::uintptr_t, testing::checked_block>& blocks() const { return live_; }

 private:
  domain& d_;
  std::map<std::uintptr_t, testing::checked_block> live_;
};

// One step of an iteration: allocate block `id` of `size` bytes, or free block `id`.
struct step {
  bool alloc;
  int id;
  std::size_t size = 0;
};
inline step A(int id, std::size_t size) { return {true, id, size}; }
inline step F(int id) { return {false, id, 0}; }

class ReplayContract : public ::testing::TestWithParam<domain_param> {
 protected:
  void SetUp() override;
  // Frees every block still held (checking it) and expects the ledger clean.
  void TearDown() override;

  // Runs `steps` on the calling thread (no iteration opened): blocks the steps do not
  // free stay in held_. Appends the pointers to *order in allocation order.
  void run(const std::vector<step>& steps, std::vector<void*>* order = nullptr);
  // One whole iteration of key_ over `steps`; returns its pointers in allocation order.
  // Blocks it does not free stay held (held_), past the iteration's end.
  std::vector<void*> iteration(const std::vector<step>& steps);
  // Two identical recordings: the key is planned (REPLAYALLOC_RECORD_ITERATIONS=2).
  void warm_up(const std::vector<step>& steps);
  // Takes block `id` out of held_, to be kept or freed by the test itself; it stays
  // in the ledger (live) until free_checked.
  testing::checked_block detach(int id);
  // Checks every byte of b, takes it out of the ledger and frees it.
  void free_checked(const testing::checked_block& b);

  domain& d() { return *d_; }
  live_blocks& ledger() { return *ledger_; }

  domain* d_ = nullptr;
  std::string key_;
  std::map<int, testing::checked_block> held_;  // by step id: live, in the ledger
  std::uint64_t next_tag_ = 1;
  std::unique_ptr<live_blocks> ledger_;
};

}  // namespace replayalloc::contract
