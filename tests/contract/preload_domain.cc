// The replay contract (replay_contract.h) over the LD_PRELOAD library's entry points:
// hooks/preload.cc and the core built as libreplayalloc_preload.so is (its variant,
// replayalloc_core_preload: auto mode, 4 KiB minimum) are linked into this test, so
// malloc and free are the library's for the whole process, gtest included, exactly as
// under LD_PRELOAD; the program marks its iterations with the C API the library
// exports. Run in-process, the test can also ask the slab range who owns a block.
#include <cstdlib>

#include "backend/slab_range.h"
#include "contract/replay_contract.h"
#include "replayalloc/replayalloc.h"

namespace replayalloc::contract {
namespace {

class preload_domain final : public domain {
 public:
  void begin(const std::string& key) override { replayalloc_iteration_begin(key.c_str()); }
  void end() override { replayalloc_iteration_end(); }
  void* alloc(std::size_t size) override { return std::malloc(size); }  // the hook
  void free(void* p, std::size_t) override { std::free(p); }
  bool in_slab(const void* p) const override { return detail::backend::in_slab_range(p); }
  Stats stats() const override { return replayalloc::stats(); }
  std::uint64_t slab_memory() const override { return replayalloc::stats().mapped_bytes; }
  std::size_t alignment() const override { return 16; }
};

domain& preload() {
  static auto* d = new preload_domain;
  return *d;
}

INSTANTIATE_TEST_SUITE_P(preload, ReplayContract, ::testing::Values(domain_param{"malloc", preload}),
                         domain_param_name);

}  // namespace
}  // namespace replayalloc::contract
