// bench/micro/preload_callgrind.cc: instructions per malloc+free pair as an unmodified
// program sees them, counted by callgrind, for whichever allocator LD_PRELOAD puts in
// front of glibc. Links no allocator: plain malloc/free through the dynamic linker, as
// in a real service. hotpath_callgrind counts the C API's paths; this one counts what
// the LD_PRELOAD library adds (its hooks, the iteration marks it exports) and, below
// REPLAYALLOC_MIN_SIZE, the path to jemalloc's thread cache.
//
//   valgrind --tool=callgrind --collect-atstart=no env LD_PRELOAD=libreplayalloc_preload.so
//     ./preload_callgrind SIZE [PAIRS] [ITERATIONS] [new|malloc|calloc|memalign|realloc] [unmarked]
//
// K iterations of M pairs `p = malloc(size); <p escapes>; free(p);` (with `new`:
// `p = operator new(size); ...; operator delete(p, size);`, C++'s sized delete; with
// `calloc`: `p = calloc(1, size); ...; free(p);`; with `memalign`: `posix_memalign(&p,
// 64, size); ...; free(p);`, as libtorch makes every tensor; with `realloc`: `p =
// malloc(size); p = realloc(p, 2 * size); ...; free(p);`, a string that grows); when
// the preloaded library exports replayalloc_iteration_begin/end (found with dlsym),
// each iteration is marked with them (outside the collected part), so pairs of at
// least the minimum size replay from the slab after the warm-up. Prints pairs=K*M and, under replayalloc,
// in_slab=the measured pairs whose block came from a slab (checked by run_micro.sh).
// `unmarked`: no iteration is marked, as in a program that knows nothing of replayalloc
// (auto mode then watches the thread: it allocates and frees one 64 KiB buffer first,
// as programs do at start-up, so that the thread has a watcher).
#include <dlfcn.h>
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using begin_fn = int (*)(const char*);
using end_fn = int (*)();
using stats_fn = std::size_t (*)(char*, std::size_t);

inline void escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

// The slab hits counted so far, from the statistics JSON ("slab_hits":N).
unsigned long long slab_hits(stats_fn stats) {
  if (stats == nullptr) return 0;
  char buf[4096];
  stats(buf, sizeof buf);
  const char* k = std::strstr(buf, "\"slab_hits\":");
  return k == nullptr ? 0 : std::strtoull(k + 12, nullptr, 10);
}

// The calloc pairs, out of line: the malloc and new loops compile as they did before
// this case was added (their instructions per pair are in the budget).
[[gnu::noinline]] void calloc_pairs(std::size_t size, int m) {
  for (int i = 0; i < m; ++i) {
    void* p = std::calloc(1, size);
    escape(p);
    std::free(p);
  }
}

// The posix_memalign(64) pairs, out of line as the calloc pairs are.
[[gnu::noinline]] void memalign_pairs(std::size_t size, int m) {
  for (int i = 0; i < m; ++i) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, size) != 0) std::abort();
    escape(p);
    std::free(p);
  }
}

// The growing pairs (a malloc, a realloc to twice the size, a free), out of line.
[[gnu::noinline]] void realloc_pairs(std::size_t size, int m) {
  for (int i = 0; i < m; ++i) {
    void* p = std::malloc(size);
    escape(p);
    p = std::realloc(p, 2 * size);
    if (p == nullptr) std::abort();
    escape(p);
    std::free(p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SIZE [PAIRS=256] [ITERATIONS=100] [new|malloc|calloc|memalign|realloc] [unmarked]\n", argv[0]);
    return 2;
  }
  const std::size_t size = std::strtoull(argv[1], nullptr, 10);
  const int m = argc > 2 ? std::atoi(argv[2]) : 256;
  const int k = argc > 3 ? std::atoi(argv[3]) : 100;
  const bool cxx = argc > 4 && std::strcmp(argv[4], "new") == 0;
  const bool zeroed = argc > 4 && std::strcmp(argv[4], "calloc") == 0;
  const bool aligned = argc > 4 && std::strcmp(argv[4], "memalign") == 0;
  const bool grown = argc > 4 && std::strcmp(argv[4], "realloc") == 0;
  const bool unmarked = argc > 5 && std::strcmp(argv[5], "unmarked") == 0;
  if (size == 0 || m <= 0 || k <= 0) {
    std::fprintf(stderr, "preload_callgrind: size, pairs and iterations must be positive\n");
    return 2;
  }
  auto begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  if (begin == nullptr || end == nullptr || unmarked) begin = nullptr, end = nullptr;
  if (unmarked) {
    void* buffer = std::malloc(64 << 10);
    escape(buffer);
    std::free(buffer);
  }
  // Inlined into main, as it was before the calloc case: its loops keep their captures
  // in registers (out of line, two loads a pair more).
  auto iteration = [&](bool collect) __attribute__((always_inline)) {
    if (begin != nullptr) begin("preload_callgrind");
    if (collect) CALLGRIND_TOGGLE_COLLECT;
    if (cxx) {
      for (int i = 0; i < m; ++i) {
        void* p = ::operator new(size);
        escape(p);
        ::operator delete(p, size);
      }
    } else if (zeroed) {
      calloc_pairs(size, m);
    } else if (aligned) {
      memalign_pairs(size, m);
    } else if (grown) {
      realloc_pairs(size, m);
    } else {
      for (int i = 0; i < m; ++i) {
        void* p = std::malloc(size);
        escape(p);
        std::free(p);
      }
    }
    if (collect) CALLGRIND_TOGGLE_COLLECT;
    if (end != nullptr) end();
  };
  // Record, plan (replayalloc_wait_plans: the planner thread's plan installed before
  // the next iteration, Note [Background planning]); warm every cache; and past the
  // fallback's start (the LD_PRELOAD library's first 4,096 requests: Note [The fallback
  // made when first needed]), at least 8,192 requests, so that what is counted is the
  // pairs' own path, not the boot heap's and the start's.
  auto wait_plans = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "replayalloc_wait_plans"));
  for (int w = 0; w < 8 || static_cast<long>(w) * m < 8192; ++w) {
    iteration(false);
    if (wait_plans != nullptr) wait_plans();
  }
  const unsigned long long hits_before = slab_hits(stats);
  for (int i = 0; i < k; ++i) iteration(true);
  std::printf("pairs=%llu\n", static_cast<unsigned long long>(m) * k);
  if (stats != nullptr) std::printf("in_slab=%llu\n", slab_hits(stats) - hits_before);
  return 0;
}
