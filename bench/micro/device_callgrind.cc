// bench/micro/device_callgrind.cc: instructions per device malloc+free pair through
// the CUDA domain, counted by callgrind over the simulated CUDA runtime
// (tests/cuda_fake), so that the device path's cost is measured, and budgeted
// (tests/perf/instruction_budget.txt, the device_* cases), without a GPU (issue 42,
// item 4).
//
// The same shape as hotpath_callgrind: it warms up, then runs K iterations of M pairs
//     p = replayalloc_cuda_alloc(size, 0, stream); <p escapes>; replayalloc_cuda_free(...)
// with callgrind's collection on only around the pairs. The simulated runtime's own
// instructions (cudaMallocAsync is host malloc and a line of its log there) are not
// replayalloc's: tests/perf/instruction_counts.sh budgets these cases by replayalloc's
// own instructions ("own").
//
// Paths (argv[1]):
//   replay  inside replayalloc_iteration_begin/end, the key planned: every pair a
//           device slab hit (checked: the device domain counts K * M more slab hits)
//   miss    inside iterations whose plan recorded 16 bytes more: every request falls
//           back to the stream-ordered allocator (checked: fallbacks and probes' passes)
//   passed  outside iterations: every request goes to cudaMallocAsync on its stream
//           (checked: K * M more pass-throughs)
//   native  as replay, through the native allocator's core (replayalloc/cuda_native.hpp:
//           allocate, then free_block of its record, as PyTorch's DataPtr would): what
//           the records and per-device statistics add to a slab hit
// Usage: device_callgrind replay|miss|passed|native [size=4096] [pairs=256] [iterations=100]
#include <cuda_runtime_api.h>
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "replayalloc/cuda.h"
#include "replayalloc/cuda_native.hpp"
#include "replayalloc/replayalloc.h"

namespace {

inline void escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

enum class path { replay, miss, passed, native };
const char* kKey = "callgrind/device";

// The device domain's counter `name` (replayalloc_cuda_stats_json).
unsigned long long device_stat(const char* name) {
  char buf[8192];
  replayalloc_cuda_stats_json(buf, sizeof buf);
  const std::string key = std::string("\"") + name + "\":";
  const char* at = std::strstr(buf, key.c_str());
  return at == nullptr ? 0 : std::strtoull(at + key.size(), nullptr, 10);
}

void device_pairs(std::size_t size, int m, cudaStream_t s, bool native = false) {
  if (native) {
    for (int i = 0; i < m; ++i) {
      const replayalloc::cuda::native::allocation a = replayalloc::cuda::native::allocate(size, 0, s);
      escape(a.ptr);
      replayalloc::cuda::native::free_block(a.ctx);
    }
    return;
  }
  for (int i = 0; i < m; ++i) {
    void* p = replayalloc_cuda_alloc(size, 0, s);
    escape(p);
    replayalloc_cuda_free(p, size, 0, s);
  }
}

// Records and plans kKey with `size` until an iteration is served wholly from the slab.
bool warm_up(std::size_t size, int m, cudaStream_t s) {
  for (int round = 0; round < 20; ++round) {
    const unsigned long long hits = device_stat("slab_hits");
    replayalloc_iteration_begin(kKey);
    device_pairs(size, m, s);
    replayalloc_iteration_end();
    if (device_stat("slab_hits") - hits == static_cast<unsigned long long>(m)) return true;
    replayalloc_wait_plans();
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("REPLAYALLOC_REPLAN_AFTER", "0", 0);  // keep the miss plan, as hotpath_callgrind
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s replay|miss|passed|native [size=4096] [pairs=256] [iterations=100]\n", argv[0]);
    return 2;
  }
  const std::string w = argv[1];
  path which{};
  if (w == "replay") which = path::replay;
  else if (w == "miss") which = path::miss;
  else if (w == "passed") which = path::passed;
  else if (w == "native") which = path::native;
  else {
    std::fprintf(stderr, "device_callgrind: unknown path '%s'\n", argv[1]);
    return 2;
  }
  const std::size_t size = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4096;
  const int pairs = argc > 3 ? std::atoi(argv[3]) : 256;
  const int iterations = argc > 4 ? std::atoi(argv[4]) : 100;
  if (size == 0 || pairs <= 0 || iterations <= 0) {
    std::fprintf(stderr, "device_callgrind: size, pairs and iterations must be positive\n");
    return 2;
  }
  fake_cuda::set_device_memory(std::size_t{16} << 30);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  const bool in_iterations = which != path::passed;
  if (in_iterations && !warm_up(which == path::miss ? size + 16 : size, pairs, s)) {
    std::fprintf(stderr, "device_callgrind: the warm-up never reached replay\n");
    return 1;
  }
  if (!in_iterations) device_pairs(size, pairs, s);  // the thread registered, caches warm
  if (which == path::native) device_pairs(size, 1, s, true);  // the thread's first records made
  const unsigned long long hits = device_stat("slab_hits"), falls = device_stat("fallbacks"),
                           passes = device_stat("passthrough");
  for (int k = 0; k < iterations; ++k) {
    if (in_iterations) replayalloc_iteration_begin(kKey);
    CALLGRIND_TOGGLE_COLLECT;
    device_pairs(size, pairs, s, which == path::native);
    CALLGRIND_TOGGLE_COLLECT;
    if (in_iterations) replayalloc_iteration_end();
    fake_cuda::clear_log();  // the simulated runtime's log, not what is measured
  }
  const auto total = static_cast<unsigned long long>(pairs) * iterations;
  const unsigned long long got_hits = device_stat("slab_hits") - hits,
                           got_falls = device_stat("fallbacks") - falls,
                           got_passes = device_stat("passthrough") - passes;
  // Prove the measured path is the one named (probes of a deviating key pass through:
  // counted with the fallbacks, as hotpath_callgrind's miss).
  const bool ok = which == path::replay || which == path::native ? got_hits == total
                  : which == path::miss   ? got_hits == 0 && got_falls + got_passes == total
                                          : got_passes == total;
  if (!ok) {
    std::fprintf(stderr, "device_callgrind %s: %llu pairs gave %llu slab hits, %llu fallbacks, %llu passes\n",
                 argv[1], total, got_hits, got_falls, got_passes);
    return 1;
  }
  cudaStreamDestroy(s);
  std::printf("pairs=%llu\nin_slab=%llu\n", total, got_hits);
  return 0;
}
