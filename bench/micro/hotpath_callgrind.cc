// bench/micro/hotpath_callgrind.cc: instructions per malloc+free pair, counted by
// callgrind, for the replay hit path and for the allocators it is compared with.
//
// A tiny deterministic program: it warms up (records and plans the replayalloc key,
// or lets glibc/jemalloc fill their caches), then runs K iterations of M pairs
//     p = malloc(size); <p escapes>; free(p);
// and turns callgrind's collection on only around the measured part. Run it as
//     valgrind --tool=callgrind --collect-atstart=no ./hotpath_callgrind replay 64
// and divide the `totals:` of the output file by the pair count it prints (K * M).
// bench/run_micro.sh does that for every allocator and size.
//
// Allocators (argv[1]):
//   replay    replayalloc_malloc/free, every pair a slab hit (checked: the program
//             exits with an error unless the statistics count K * M more slab hits)
//   miss      replayalloc_malloc/free in a replaying iteration whose plan recorded a
//             different size: every request falls back to jemalloc (the engine records
//             a few of the iterations as probes: counted, checked as passthroughs)
//   below     replayalloc_malloc/free of a request below REPLAYALLOC_MIN_SIZE (4096
//             unless set; size must be below it): the entry points hand it straight to
//             jemalloc (runtime/entry.h); checked: no request counted (any other
//             path counts each)
//   jemalloc  plain malloc/free (jemalloc owns `malloc` in this binary)
//   glibc     __libc_malloc/__libc_free
//   baseline  the same loop over two empty out-of-line functions: the loop and call
//             overhead included in every other count
// Scope (argv[5]):
//   pairs      collect only around the M pairs of each iteration (default)
//   iteration  collect around whole iterations: for replay and miss this adds
//              replayalloc_iteration_begin/end, amortised over M pairs
#include <valgrind/callgrind.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"

extern "C" {
void* __libc_malloc(std::size_t size);
void __libc_free(void* p);
}

namespace {

// Makes p escape so the compiler keeps the malloc/free pair (as DoNotOptimize).
inline void escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

alignas(64) unsigned char g_dummy[64];
__attribute__((noinline)) void* baseline_alloc(std::size_t) {
  asm volatile("");
  return g_dummy;
}
__attribute__((noinline)) void baseline_free(void*) { asm volatile(""); }

enum class which { replay, miss, below, jemalloc, glibc, baseline };

struct config {
  which w = which::replay;
  std::size_t size = 64;
  int pairs = 256;      // M
  int iterations = 100; // K
  bool whole_iteration = false;
};

const char* kKey = "callgrind/hotpath";

template <which W>
inline constexpr bool through_c_api = W == which::replay || W == which::miss || W == which::below;

// Runs the M pairs of one iteration with allocator W.
template <which W>
inline void pairs(std::size_t size, int m) {
  for (int i = 0; i < m; ++i) {
    void* p;
    if constexpr (through_c_api<W>) p = replayalloc_malloc(size);
    else if constexpr (W == which::jemalloc) p = std::malloc(size);
    else if constexpr (W == which::glibc) p = __libc_malloc(size);
    else p = baseline_alloc(size);
    escape(p);
    if constexpr (through_c_api<W>) replayalloc_free(p);
    else if constexpr (W == which::jemalloc) std::free(p);
    else if constexpr (W == which::glibc) __libc_free(p);
    else baseline_free(p);
  }
}

// One iteration, collected either whole or only around its pairs.
template <which W>
void measured_iteration(const config& c) {
  constexpr bool in_replayalloc = W == which::replay || W == which::miss;
  if (c.whole_iteration) CALLGRIND_TOGGLE_COLLECT;
  if constexpr (in_replayalloc) replayalloc_iteration_begin(kKey);
  if (!c.whole_iteration) CALLGRIND_TOGGLE_COLLECT;
  pairs<W>(c.size, c.pairs);
  if (!c.whole_iteration) CALLGRIND_TOGGLE_COLLECT;
  if constexpr (in_replayalloc) replayalloc_iteration_end();
  if (c.whole_iteration) CALLGRIND_TOGGLE_COLLECT;
}

// Records and plans kKey with `size`; returns false unless a probe iteration is then
// served wholly from the slab.
bool warm_up_plan(std::size_t size, int m) {
  for (int round = 0; round < 20; ++round) {
    int in_slab = 0;
    replayalloc::Iteration it(kKey);
    for (int i = 0; i < m; ++i) {
      void* p = replayalloc_malloc(size);
      escape(p);
      in_slab += replayalloc::detail::backend::in_slab_range(p) ? 1 : 0;
      replayalloc_free(p);
    }
    if (in_slab == m) return true;
    replayalloc_wait_plans();  // Note [Background planning]: the plan is installed by the next one
  }
  return false;
}

template <which W>
int run(const config& c) {
  const auto total = static_cast<unsigned long long>(c.pairs) * c.iterations;
  if constexpr (W == which::replay || W == which::miss) {
    // The miss plan records 16 bytes more than the measured requests ask for.
    const std::size_t recorded = W == which::miss ? c.size + 16 : c.size;
    if (!warm_up_plan(recorded, c.pairs)) {
      std::fprintf(stderr, "hotpath_callgrind: warm-up never reached replay\n");
      return 1;
    }
  } else {
    // Warm the allocator's caches, as the replay warm-up does (below: the thread's
    // first call also registers it with the engine, which sets its minimum size), past
    // the fallback's start (Note [The fallback made when first needed]: 4,096 requests),
    // as a program that allocates much has it.
    for (int done = 0; done < 8192; done += c.pairs) pairs<W>(c.size, c.pairs);
  }
  const replayalloc::Stats before = replayalloc::stats();
  for (int k = 0; k < c.iterations; ++k) measured_iteration<W>(c);
  const replayalloc::Stats after = replayalloc::stats();
  // Prove the measured path is the one named.
  if (W == which::replay && after.slab_hits - before.slab_hits != total) {
    std::fprintf(stderr, "hotpath_callgrind: expected %llu slab hits, got %llu\n", total,
                 static_cast<unsigned long long>(after.slab_hits - before.slab_hits));
    return 1;
  }
  // Every request falls back, except in the few iterations the engine records as
  // probes of a new structure after its replays deviated (Note [Regimes]: 4, 16, ..
  // iterations apart), which pass through to jemalloc; both are in the count.
  if (W == which::miss &&
      (after.fallbacks - before.fallbacks) + (after.passthrough - before.passthrough) != total) {
    std::fprintf(stderr, "hotpath_callgrind: expected %llu fallbacks and probe passthroughs, got %llu + %llu\n",
                 total, static_cast<unsigned long long>(after.fallbacks - before.fallbacks),
                 static_cast<unsigned long long>(after.passthrough - before.passthrough));
    return 1;
  }
  // Below the minimum the entry points count nothing (Note [Below the minimum,
  // inline]); any other path would count each request as a hit, a fallback or a
  // pass-through.
  if (W == which::below && after.allocations != before.allocations) {
    std::fprintf(stderr,
                 "hotpath_callgrind: expected no request counted below the minimum size, got %llu "
                 "(is the size below REPLAYALLOC_MIN_SIZE?)\n",
                 static_cast<unsigned long long>(after.allocations - before.allocations));
    return 1;
  }
  std::printf("pairs=%llu\n", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As in replay_bench: keep the miss plan although every iteration deviates from it.
  setenv("REPLAYALLOC_REPLAN_AFTER", "0", 0);
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s replay|miss|below|jemalloc|glibc|baseline [size=64] [pairs=256] "
                 "[iterations=100] [pairs|iteration]\n",
                 argv[0]);
    return 2;
  }
  config c;
  const std::string w = argv[1];
  if (w == "replay") c.w = which::replay;
  else if (w == "miss") c.w = which::miss;
  else if (w == "below") c.w = which::below;
  else if (w == "jemalloc") c.w = which::jemalloc;
  else if (w == "glibc") c.w = which::glibc;
  else if (w == "baseline") c.w = which::baseline;
  else {
    std::fprintf(stderr, "hotpath_callgrind: unknown allocator '%s'\n", argv[1]);
    return 2;
  }
  if (argc > 2) c.size = std::strtoull(argv[2], nullptr, 10);
  if (argc > 3) c.pairs = std::atoi(argv[3]);
  if (argc > 4) c.iterations = std::atoi(argv[4]);
  if (argc > 5) c.whole_iteration = std::strcmp(argv[5], "iteration") == 0;
  // The LD_PRELOAD library's default minimum; the core library's is 0 (read at the
  // first call, so set before it).
  if (c.w == which::below) setenv("REPLAYALLOC_MIN_SIZE", "4096", 0);
  if (c.size == 0 || c.pairs <= 0 || c.iterations <= 0) {
    std::fprintf(stderr, "hotpath_callgrind: size, pairs and iterations must be positive\n");
    return 2;
  }
  switch (c.w) {
    case which::replay: return run<which::replay>(c);
    case which::miss: return run<which::miss>(c);
    case which::below: return run<which::below>(c);
    case which::jemalloc: return run<which::jemalloc>(c);
    case which::glibc: return run<which::glibc>(c);
    case which::baseline: return run<which::baseline>(c);
  }
  return 2;
}
