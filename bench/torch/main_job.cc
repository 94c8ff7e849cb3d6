// The main job: a real model recorded, planned and replayed through libtorch's CPU
// allocator, with its report.
//
//   main_job MODEL.pt [--iterations N] [--rounds R] [--key KEY]
//
// A TorchScript ResNet-50 (random weights, scripts/make_models.py) runs R rounds of N
// inferences with libtorch's own CPU allocator and R rounds with replayalloc, the two
// alternated round by round so the machine's noise falls on both; every output of
// the replayed runs is compared bit for bit with the default allocator's. Prints the
// median latency of each, the slab hits after warm-up, the slab against the lower
// bound, minor page faults per inference, the ten ops that allocate the most, and the
// cost of the op-tag callback per op.
#include <sys/resource.h>

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "replayalloc/torch.hpp"
#include "trace/trace_io.h"

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct run_result {
  std::vector<double> ms;
  long faults = 0;
  int inferences = 0;
};

// N inferences; with `key`, each inside a replayalloc iteration.
void run(torch::jit::script::Module& m, const torch::Tensor& x, int n, const char* key,
         const torch::Tensor* reference, run_result& r, int* mismatches) {
  std::vector<torch::jit::IValue> in{x};
  for (int i = 0; i < n; ++i) {
    const long f0 = minor_faults();
    const auto t0 = clock_type::now();
    torch::Tensor y;
    if (key != nullptr) {
      replayalloc::torch::Iteration it(key);
      y = m.forward(in).toTensor();
    } else {
      y = m.forward(in).toTensor();
    }
    const auto t1 = clock_type::now();
    r.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    r.faults += minor_faults() - f0;
    ++r.inferences;
    if (reference != nullptr && !torch::equal(y, *reference)) ++*mismatches;
  }
}

// Nanoseconds per in-place op (no allocation), with or without the op-tag callback.
double ns_per_op(int n) {
  torch::Tensor t = torch::zeros({4});
  for (int i = 0; i < 1000; ++i) t.add_(1);
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) t.add_(1);
  return std::chrono::duration<double, std::nano>(clock_type::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.pt [--iterations N] [--rounds R] [--key KEY]\n", argv[0]);
    return 2;
  }
  const char* path = argv[1];
  int iterations = 20, rounds = 3;
  std::string key = "resnet50/bs1";
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::max(5, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--key")) key = argv[i + 1];
  }
  torch::NoGradGuard no_grad;
  torch::jit::script::Module m;
  try {
    m = torch::jit::load(path);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "main_job: cannot load %s: %s\n", path, e.what_without_backtrace());
    return 1;
  }
  m.eval();
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({1, 3, 224, 224});
  std::vector<torch::jit::IValue> in{x};
  const torch::Tensor reference = m.forward(in).toTensor().clone();

  // The op-tag callback's cost: per in-place op, outside iterations and inside one
  // that is being recorded (the only time the callback runs).
  replayalloc::torch::install();
  const double op_plain = ns_per_op(200000);
  double op_tagged = 0;
  {
    replayalloc::torch::Iteration it("main_job/callback-cost");  // a new key: recorded
    op_tagged = ns_per_op(200000);
  }
  replayalloc::torch::uninstall();

  run_result base, replay;
  int mismatches = 0;
  // Warm-up: libtorch's profiling executor specialises the graph in its first runs;
  // replayalloc records until two iterations agree, then plans.
  run_result warm;
  run(m, x, 3, nullptr, nullptr, warm, &mismatches);
  replayalloc::torch::install();
  const replayalloc::Stats s0 = replayalloc::stats();
  run(m, x, 5, key.c_str(), &reference, warm, &mismatches);
  replayalloc::torch::uninstall();
  const replayalloc::Stats s1 = replayalloc::stats();
  for (int r = 0; r < rounds; ++r) {
    run(m, x, iterations, nullptr, nullptr, base, &mismatches);
    replayalloc::torch::install();
    run(m, x, iterations, key.c_str(), &reference, replay, &mismatches);
    replayalloc::torch::uninstall();
  }
  const replayalloc::Stats s2 = replayalloc::stats();

  const double mb = median(base.ms), mr = median(replay.ms);
  std::printf("replayalloc main job: %s, batch 1, %d rounds x %d inferences per allocator, alternated\n",
              path, rounds, iterations);
  std::printf("  outputs: %s (%d of %d replayed inferences differ from libtorch's allocator)\n",
              mismatches == 0 ? "bit-identical" : "DIFFERENT", mismatches,
              replay.inferences + 5);
  std::printf("\n  %-28s %12s %12s\n", "", "libtorch", "replayalloc");
  std::printf("  %-28s %12.2f %12.2f   (%.3fx)\n", "median latency (ms)", mb, mr, mr / mb);
  std::printf("  %-28s %12.1f %12.1f\n", "minor page faults/inference",
              static_cast<double>(base.faults) / base.inferences,
              static_cast<double>(replay.faults) / replay.inferences);
  const std::uint64_t hits = s2.slab_hits - s1.slab_hits;
  const std::uint64_t planned = hits + (s2.fallbacks - s1.fallbacks);
  std::printf("\n  warm-up: %llu recordings, %llu plan(s) in the first 5 replayalloc iterations\n",
              static_cast<unsigned long long>(s1.recordings - s0.recordings),
              static_cast<unsigned long long>(s1.plans - s0.plans));
  std::printf("  after warm-up: %llu slab hits, %llu fallbacks: %.2f%% of planned allocations from the slab\n",
              static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(s2.fallbacks - s1.fallbacks),
              planned ? 100.0 * static_cast<double>(hits) / static_cast<double>(planned) : 0.0);
  std::printf("  + %llu allocations served by jemalloc as planned (outputs that outlive the iteration)\n",
              static_cast<unsigned long long>(s2.backend_planned - s1.backend_planned));
  std::printf("  slab %.2f MiB, lower bound (peak of live bytes) %.2f MiB: %+.1f%%\n",
              static_cast<double>(s2.slab_bytes) / (1 << 20),
              static_cast<double>(s2.lower_bound_bytes) / (1 << 20),
              s2.lower_bound_bytes
                  ? 100.0 * (static_cast<double>(s2.slab_bytes) / static_cast<double>(s2.lower_bound_bytes) - 1)
                  : 0.0);
  // Where the resident bytes are (Note [Resident memory by owner]): the slabs' pages,
  // jemalloc's (the fallback; this program links libreplayalloc.a and -ljemalloc, so
  // jemalloc is its malloc too: the model's weights, libtorch's own), and the rest
  // (code, stacks, libtorch's own mappings).
  const auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  const std::uint64_t owned = s2.slab_resident_bytes + s2.backend_resident_bytes;
  std::printf("  resident: %.1f MiB now (peak %.1f MiB): slabs %.1f MiB, jemalloc (the fallback, and this "
              "program's malloc: the weights) %.1f MiB, the rest %.1f MiB\n",
              mib(s2.resident_bytes), mib(s2.resident_bytes_peak), mib(s2.slab_resident_bytes),
              mib(s2.backend_resident_bytes), mib(s2.resident_bytes > owned ? s2.resident_bytes - owned : 0));
  std::printf("  op tags: %.0f ns per op outside a recorded iteration, %.0f ns inside one (+%.0f ns "
              "per op while recording; replayed iterations pay nothing)\n",
              op_plain, op_tagged, op_tagged - op_plain);

  // The ten ops that allocate the most, from the latest recording.
  const std::string trace_path = "/tmp/replayalloc_main_job.csv";
  if (replayalloc_save_trace(key.c_str(), trace_path.c_str()) == 0) {
    absl::StatusOr<replayalloc::trace> t = replayalloc::read_trace_file(trace_path);
    if (t.ok()) {
      struct op_use {
        std::uint64_t bytes = 0, count = 0, outliving = 0;
      };
      std::map<std::string, op_use> by_op;
      std::uint64_t total = 0;
      for (const auto& a : t->allocations) {
        op_use& u = by_op[t->ops[a.op]];
        u.bytes += a.size;
        ++u.count;
        if (a.outlives()) u.outliving += a.size;
        total += a.size;
      }
      std::vector<std::pair<std::string, op_use>> top(by_op.begin(), by_op.end());
      std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
      std::printf("\n  one iteration allocates %.1f MiB in %zu allocations; the ten ops that allocate the most:\n",
                  static_cast<double>(total) / (1 << 20), t->allocations.size());
      std::printf("  %-32s %10s %8s %7s %12s\n", "op", "MiB", "allocs", "share", "outliving");
      for (std::size_t i = 0; i < top.size() && i < 10; ++i) {
        std::printf("  %-32s %10.2f %8llu %6.1f%% %10.2f MiB\n", top[i].first.c_str(),
                    static_cast<double>(top[i].second.bytes) / (1 << 20),
                    static_cast<unsigned long long>(top[i].second.count),
                    100.0 * static_cast<double>(top[i].second.bytes) / static_cast<double>(total),
                    static_cast<double>(top[i].second.outliving) / (1 << 20));
      }
    }
  }
  return mismatches == 0 ? 0 : 1;
}
