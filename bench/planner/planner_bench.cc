// planner_bench: every planner on recorded and synthetic traces; quality and speed.
//
//   planner_bench [--runs N] [--no-synthetic] [--no-scaling] TRACE.csv...
//
// For each trace (recorded ones named by their file's stem, then the synthetic ones
// of synthetic.h) and each planner of planner_names(): the slab, slab / lower bound
// and the median plan time (this thread's CPU time) over N runs (default 5). Every plan is checked with
// validate(); an invalid plan is an error (exit 1), not a row. Then "best" on
// synthetic inference-like and random-overlap traces of 10k and 100k allocations
// (median of N). Prints Markdown tables (what bench/planner/run.sh puts into
// bench/RESULTS.md) and, last, a summary line per planner over the recorded traces.
// Not a test: it asserts nothing about speed.
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "synthetic.h"
#include "trace/trace_io.h"

namespace replayalloc {
namespace {

struct result {
  placement p;
  double median_ms = 0;
  double min_ms = 0;
};

// This thread's CPU time: the build machine is shared, and wall time there measures
// the neighbours as much as the planner.
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Plans t with `algo` `runs` times; exits on an error or an invalid plan.
result measure(const trace& t, const std::string& algo, int runs) {
  result r;
  std::vector<double> ms;
  for (int k = 0; k < runs; ++k) {
    const double t0 = cpu_ms();
    absl::StatusOr<placement> p = make_plan(t, algo);
    const double t1 = cpu_ms();
    if (!p.ok()) {
      std::fprintf(stderr, "planner_bench: %s on %s: %s\n", algo.c_str(), t.key.c_str(),
                   std::string(p.status().message()).c_str());
      std::exit(1);
    }
    ms.push_back(t1 - t0);
    if (k == 0) {
      const absl::Status v = validate(t, *p);
      if (!v.ok()) {
        std::fprintf(stderr, "planner_bench: %s on %s made an INVALID plan: %s\n", algo.c_str(),
                     t.key.c_str(), std::string(v.message()).c_str());
        std::exit(1);
      }
      r.p = *std::move(p);
    }
  }
  r.median_ms = median(ms);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  return r;
}

std::size_t plannable(const trace& t) {
  return std::count_if(t.allocations.begin(), t.allocations.end(),
                       [](const trace_allocation& a) { return !a.outlives(); });
}

std::string stem(const std::string& path) {
  std::string s = path.substr(path.find_last_of('/') + 1);
  const auto dot = s.find_last_of('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

int run(int argc, char** argv) {
  int runs = 5;
  bool synthetic = true, scaling = true;
  std::vector<std::pair<std::string, trace>> traces;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--no-synthetic")) {
      synthetic = false;
    } else if (!std::strcmp(argv[i], "--no-scaling")) {
      scaling = false;
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: planner_bench [--runs N] [--no-synthetic] [--no-scaling] TRACE...\n");
      return 2;
    } else {
      absl::StatusOr<trace> t = read_trace_file(argv[i]);
      if (!t.ok()) {
        std::fprintf(stderr, "planner_bench: %s: %s\n", argv[i], std::string(t.status().message()).c_str());
        return 1;
      }
      traces.emplace_back(stem(argv[i]), *std::move(t));
    }
  }
  const std::size_t recorded = traces.size();
  if (synthetic) {
    traces.emplace_back("synthetic inference_like 2k", bench::inference_like(2000, 1));
    traces.emplace_back("synthetic random_overlap 200", bench::random_overlap(200, 2));
    traces.emplace_back("synthetic random_overlap 1k", bench::random_overlap(1000, 3));
    traces.emplace_back("synthetic staircase 1k", bench::staircase(1000, 4));
  }

  const std::vector<std::string>& algos = planner_names();
  std::printf("| trace | allocations | lower bound (MiB) |");
  for (const std::string& a : algos) std::printf(" %s |", a.c_str());
  std::printf("\n|---|---:|---:|");
  for (std::size_t k = 0; k < algos.size(); ++k) std::printf("---:|");
  std::printf("\n");
  std::map<std::string, std::vector<double>> ratios;   // recorded traces only
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> winners;
  for (std::size_t ti = 0; ti < traces.size(); ++ti) {
    const auto& [name, t] = traces[ti];
    const std::uint64_t lb = lower_bound(t);
    std::printf("| %s | %zu | %.2f |", name.c_str(), plannable(t), lb / 1048576.0);
    for (const std::string& a : algos) {
      const result r = measure(t, a, runs);
      const double ratio = lb == 0 ? 1.0 : static_cast<double>(r.p.slab_bytes) / lb;
      std::printf(" %.4f (%.2f ms) |", ratio, r.median_ms);
      if (ti < recorded) {
        ratios[a].push_back(ratio);
        times[a].push_back(r.median_ms);
      }
      if (a == "best") winners.push_back(name + ": " + r.p.algorithm);
    }
    std::printf("\n");
  }
  std::printf("\nCells: slab / lower bound (median plan CPU time over %d runs).\n", runs);
  std::printf("\"best\" chose: ");
  for (std::size_t k = 0; k < winners.size(); ++k) std::printf("%s%s", k ? "; " : "", winners[k].c_str());
  std::printf(".\n");

  if (recorded > 0) {
    std::printf("\nOver the %zu recorded traces:\n\n| planner | median slab/LB | worst slab/LB | at LB | median ms | worst ms |\n|---|---:|---:|---:|---:|---:|\n", recorded);
    for (const std::string& a : algos) {
      std::vector<double> r = ratios[a];
      const std::size_t at_lb = std::count_if(r.begin(), r.end(), [](double x) { return x <= 1.0; });
      std::printf("| %s | %.4f | %.4f | %zu/%zu | %.3f | %.3f |\n", a.c_str(), median(r),
                  *std::max_element(r.begin(), r.end()), at_lb, r.size(), median(times[a]),
                  *std::max_element(times[a].begin(), times[a].end()));
    }
  }

  if (scaling) {
    std::printf("\n\"best\" on large synthetic traces (%d runs; best runs its five orderings and first fit on every trace, Note [Best of orderings, then improve] in best.cc):\n\n| trace | allocations | slab/LB | chose | median ms | fastest ms |\n|---|---:|---:|---|---:|---:|\n", runs);
    for (const std::size_t n : {std::size_t{10'000}, std::size_t{100'000}}) {
      for (int kind = 0; kind < 2; ++kind) {
        const trace t = kind == 0 ? bench::inference_like(n, 10 + n) : bench::random_overlap(n, 20 + n);
        const result r = measure(t, "best", runs);
        std::printf("| %s %zuk | %zu | %.4f | %s | %.2f | %.2f |\n", kind == 0 ? "inference_like" : "random_overlap",
                    n / 1000, plannable(t), static_cast<double>(r.p.slab_bytes) / lower_bound(t),
                    r.p.algorithm.c_str(), r.median_ms, r.min_ms);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace replayalloc

int main(int argc, char** argv) { return replayalloc::run(argc, argv); }
