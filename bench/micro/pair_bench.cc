// bench/micro/pair_bench.cc: the malloc+free pair under whatever allocator serves
// `malloc` in this process, so one binary measures them all, each in a process of its
// own (allocators that replace malloc cannot share one):
//
//   pair_bench [google benchmark flags]                          glibc
//   LD_PRELOAD=libjemalloc.so.2 pair_bench ...                   jemalloc (tcmalloc, mimalloc alike)
//   LD_PRELOAD=libreplayalloc_preload.so PAIR_BENCH_REPLAY=hit pair_bench ...
//   LD_PRELOAD=libreplayalloc_preload.so PAIR_BENCH_REPLAY=miss pair_bench ...
//
// The binary links neither jemalloc nor replayalloc. Each benchmark iteration runs P
// pairs `p = malloc(size); use(p); free(p)` of one size (P = 256 up to 1 MiB, 16
// above: the big sizes are slow under allocators that map and unmap them); the
// counter `per_pair` is one thread's CPU time per pair.
//
// PAIR_BENCH_REPLAY (needs replayalloc preloaded: the iteration functions are found
// with dlsym(RTLD_DEFAULT)) wraps every benchmark iteration in
// replayalloc_iteration_begin/end, so begin+end are included, amortised over P pairs:
//   hit   warm-up records and plans the key (untimed) until an iteration is served
//         wholly from the slab (checked with replayalloc_stats_json); every timed
//         pair is a slab hit (checked again after the timed loop)
//   miss  the plan is recorded with size + 16 bytes and the timed iterations ask for
//         `size`: every request misses (the resync scan, then the jemalloc fallback)
// Run the replay modes with REPLAYALLOC_MIN_SIZE=0 (the preload library's default 4 KiB
// minimum would send the small sizes straight to jemalloc) and
// REPLAYALLOC_REPLAN_AFTER=0 (else the misses would be re-recorded into hits); this
// program sets both when they are unset.
// Variants: bare (the pointer escapes, nothing else), touch (one byte written in
// each 4 KiB of the block: page faults on freshly mapped memory are paid) and viaptr
// (bare, with malloc and free called through pointers found with dlsym, as a program
// built with -fno-plt calls them: no PLT jump before each call; on an AMD EPYC host the
// PLT's jumps made the same allocator's pair 2.7 or 4.1 ns from one process to the next,
// bench/RESULTS.md "The pair through the PLT and through pointers").
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using begin_fn = int (*)(const char*);
using end_fn = int (*)();
using stats_fn = std::size_t (*)(char*, std::size_t);

begin_fn g_begin = nullptr;
end_fn g_end = nullptr;
stats_fn g_stats = nullptr;
int (*g_wait)() = nullptr;  // replayalloc_wait_plans, when the library has it
enum class replay_mode { none, hit, miss } g_mode = replay_mode::none;

constexpr int kMissDelta = 16;
constexpr int kMaxWarmup = 200;

int pairs_for(std::size_t size) { return size <= (1u << 20) ? 256 : 16; }

// The malloc and free that serve the process (viaptr), set in main().
void* (*g_malloc)(std::size_t) = nullptr;
void (*g_free)(void*) = nullptr;

template <bool Touch, bool Ptr = false>
inline void run_pairs(std::size_t size, int pairs) {
  for (int i = 0; i < pairs; ++i) {
    void* p = Ptr ? g_malloc(size) : std::malloc(size);
    benchmark::DoNotOptimize(p);
    if constexpr (Touch) {
      auto* b = static_cast<volatile char*>(p);
      for (std::size_t off = 0; off < size; off += 4096) b[off] = static_cast<char>(off >> 12);
      benchmark::ClobberMemory();
    }
    if constexpr (Ptr) {
      g_free(p);
    } else {
      std::free(p);
    }
  }
}

// One counter of replayalloc's statistics JSON ("slab_hits", "fallbacks").
std::uint64_t stat(const char* name) {
  char buf[4096];
  const std::size_t n = g_stats(buf, sizeof buf);
  if (n == 0 || n >= sizeof buf) return 0;
  const std::string json(buf, n), needle = std::string("\"") + name + "\":";
  const std::size_t at = json.find(needle);
  return at == std::string::npos ? 0 : std::strtoull(json.c_str() + at + needle.size(), nullptr, 10);
}

struct probe_result {
  std::uint64_t hits, fallbacks, passthrough;
};

// One replayalloc iteration of `pairs` pairs and the change of the process's counters
// over it. With several threads the others' iterations count too: a probe proves this
// thread replays when nothing in the process fell back meanwhile and at least `pairs`
// slab hits happened (passthrough cannot be used: the harness's own threads allocate
// outside iterations); warm-up asks for two such probes in a row.
probe_result probe(const std::string& key, std::size_t size, int pairs) {
  const probe_result a{stat("slab_hits"), stat("fallbacks"), stat("passthrough")};
  g_begin(key.c_str());
  run_pairs<false>(size, pairs);
  g_end();
  if (g_wait != nullptr) g_wait();  // Note [Background planning]: a plan made is installed next
  return {stat("slab_hits") - a.hits, stat("fallbacks") - a.fallbacks, stat("passthrough") - a.passthrough};
}

bool all_hits(const probe_result& r, int pairs) {
  return r.hits >= static_cast<std::uint64_t>(pairs) && r.fallbacks == 0;
}

template <bool Touch, bool Ptr = false>
void bm_pair(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const int pairs = pairs_for(size);
  std::string key;
  if (g_mode != replay_mode::none) {
    key = std::string("pair_bench/") + (g_mode == replay_mode::hit ? "hit/" : "miss/") + std::to_string(size);
    const std::size_t recorded = g_mode == replay_mode::hit ? size : size + kMissDelta;
    bool planned = false;
    for (int i = 0, in_row = 0; i < kMaxWarmup && !planned; ++i) {
      in_row = all_hits(probe(key, recorded, pairs), pairs) ? in_row + 1 : 0;
      planned = in_row == 2;
    }
    if (!planned) {
      state.SkipWithError("warm-up never reached replay");
      for (auto _ : state) {
      }
      return;
    }
    for (auto _ : state) {
      g_begin(key.c_str());
      run_pairs<Touch, Ptr>(size, pairs);
      g_end();
    }
    const probe_result after = probe(key, size, pairs);
    if (g_mode == replay_mode::hit && !all_hits(after, pairs)) state.SkipWithError("left replay during the run");
    if (g_mode == replay_mode::miss && after.hits != 0) state.SkipWithError("a miss request was served from the slab");
  } else {
    run_pairs<Touch, Ptr>(size, pairs);  // warm the allocator's caches
    for (auto _ : state) run_pairs<Touch, Ptr>(size, pairs);
  }
  state.SetItemsProcessed(state.iterations() * pairs);
  state.counters["per_pair"] = benchmark::Counter(
      pairs, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreads |
                 benchmark::Counter::kInvert);
}

// Which shared object serves `malloc` in this process.
std::string malloc_provider() {
  Dl_info info{};
  void* m = dlsym(RTLD_DEFAULT, "malloc");
  if (m == nullptr || dladdr(m, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  return info.dli_fname;
}

constexpr std::int64_t kSizes[] = {8, 64, 256, 1 << 10, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20};

}  // namespace

int main(int argc, char** argv) {
  const char* mode = std::getenv("PAIR_BENCH_REPLAY");
  if (mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "hit") == 0) g_mode = replay_mode::hit;
    else if (std::strcmp(mode, "miss") == 0) g_mode = replay_mode::miss;
    else {
      std::fprintf(stderr, "pair_bench: PAIR_BENCH_REPLAY must be hit or miss, not '%s'\n", mode);
      return 2;
    }
    g_begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
    g_end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
    g_stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
    g_wait = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "replayalloc_wait_plans"));
    if (g_begin == nullptr || g_end == nullptr || g_stats == nullptr) {
      std::fprintf(stderr, "pair_bench: PAIR_BENCH_REPLAY needs libreplayalloc_preload.so preloaded\n");
      return 2;
    }
    // Read by the engine at its first use, which is after this point only if nothing
    // allocated yet through it; the runner sets them in the environment too.
    setenv("REPLAYALLOC_MIN_SIZE", "0", 0);
    setenv("REPLAYALLOC_REPLAN_AFTER", "0", 0);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("malloc_from", malloc_provider());
  benchmark::AddCustomContext("replay_mode", mode != nullptr ? mode : "none");
  g_malloc = reinterpret_cast<void* (*)(std::size_t)>(dlsym(RTLD_DEFAULT, "malloc"));
  g_free = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_DEFAULT, "free"));
  if (g_malloc == nullptr || g_free == nullptr) {
    std::fprintf(stderr, "pair_bench: dlsym found no malloc or free\n");
    return 2;
  }
  for (const char* variant : {"bare", "touch"}) {
    for (const std::int64_t size : kSizes) {
      const std::string name = std::string("pair/") + variant;
      benchmark::RegisterBenchmark(name.c_str(), std::strcmp(variant, "bare") == 0 ? bm_pair<false> : bm_pair<true>)
          ->Arg(size)
          ->Unit(benchmark::kNanosecond)
          ->Threads(1)
          ->Threads(2)
          ->Threads(4);
    }
  }
  // One thread: what the PLT's jumps do is the same at any thread count.
  for (const std::int64_t size : kSizes) {
    benchmark::RegisterBenchmark("pair/viaptr", bm_pair<false, true>)->Arg(size)->Unit(benchmark::kNanosecond)->Threads(1);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
