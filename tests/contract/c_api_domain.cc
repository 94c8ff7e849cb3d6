// The replay contract (replay_contract.h) over the C API: replayalloc_iteration_begin/
// end, replayalloc_malloc/free, in a program that links replayalloc (the core with the
// jemalloc fallback, default options: replay mode, no minimum size).
#include "backend/slab_range.h"
#include "contract/replay_contract.h"
#include "replayalloc/replayalloc.h"

namespace replayalloc::contract {
namespace {

class c_api_domain final : public domain {
 public:
  void begin(const std::string& key) override { replayalloc_iteration_begin(key.c_str()); }
  void end() override { replayalloc_iteration_end(); }
  void* alloc(std::size_t size) override { return replayalloc_malloc(size); }
  void free(void* p, std::size_t) override { replayalloc_free(p); }
  bool in_slab(const void* p) const override { return detail::backend::in_slab_range(p); }
  Stats stats() const override { return replayalloc::stats(); }
  std::uint64_t slab_memory() const override { return replayalloc::stats().mapped_bytes; }
  std::size_t alignment() const override { return 16; }
};

domain& c_api() {
  static auto* d = new c_api_domain;
  return *d;
}

INSTANTIATE_TEST_SUITE_P(c_api, ReplayContract,
                         ::testing::Values(domain_param{"replayalloc_malloc", c_api}),
                         domain_param_name);

}  // namespace
}  // namespace replayalloc::contract
