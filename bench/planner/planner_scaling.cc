// planner_scaling: planning time against the number of allocations, for the fast tier.
//
//   planner_scaling [--runs N] [--max N] [TRACE...]
//
// For synthetic traces of 1k, 10k, 100k and 1M allocations (synthetic.h:
// inference_like, random_overlap, staircase; up to --max) and for each TRACE given:
// "best" (above 4096 plannable allocations only its first stage runs: the four greedy
// orderings and first fit, Note [Best of orderings, then improve] in best.cc) and each
// greedy ordering alone, the median of N runs (this thread's CPU time; fewer runs above
// 100k) and slab / lower bound. Every plan is checked with validate() once. Prints a
// Markdown table (bench/run_planner_search.sh puts it into bench/RESULTS.md). Not a
// test: it asserts nothing about speed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "synthetic.h"
#include "trace/trace_io.h"

namespace replayalloc {
namespace {

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void row(const std::string& name, const trace& t, int runs) {
  const std::uint64_t lb = lower_bound(t);
  std::size_t n = 0;
  for (const trace_allocation& a : t.allocations) n += !a.outlives();
  std::printf("| %s | %zu |", name.c_str(), n);
  for (const char* algo : {"best", "greedy_by_size", "greedy_by_size_class", "greedy_by_breadth", "greedy_by_lifetime",
                           "greedy_by_arrival", "first_fit"}) {
    std::vector<double> ms;
    placement p;
    const int k_runs = n > 200'000 ? std::max(1, runs / 2) : runs;
    for (int k = 0; k < k_runs; ++k) {
      const double t0 = cpu_ms();
      absl::StatusOr<placement> r = make_plan(t, algo);
      ms.push_back(cpu_ms() - t0);
      if (!r.ok()) {
        std::fprintf(stderr, "planner_scaling: %s: %s\n", algo, std::string(r.status().message()).c_str());
        std::exit(1);
      }
      if (k == 0) {
        if (absl::Status v = validate(t, *r); !v.ok()) {
          std::fprintf(stderr, "planner_scaling: %s made an INVALID plan: %s\n", algo, std::string(v.message()).c_str());
          std::exit(1);
        }
        p = *std::move(r);
      }
    }
    std::sort(ms.begin(), ms.end());
    std::printf(" %.2f ms (%.4f) |", ms[ms.size() / 2], lb == 0 ? 1.0 : static_cast<double>(p.slab_bytes) / lb);
    std::fflush(stdout);
  }
  std::printf("\n");
}

int run(int argc, char** argv) {
  int runs = 5;
  std::size_t max_n = 1'000'000;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--max") && i + 1 < argc) {
      max_n = std::strtoull(argv[++i], nullptr, 10);
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: planner_scaling [--runs N] [--max N] [TRACE...]\n");
      return 2;
    } else {
      files.push_back(argv[i]);
    }
  }
  std::printf(
      "| trace | allocations | best | greedy_by_size | greedy_by_size_class | greedy_by_breadth | greedy_by_lifetime | "
      "greedy_by_arrival | first_fit |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string& f : files) {
    absl::StatusOr<trace> t = read_trace_file(f);
    if (!t.ok()) {
      std::fprintf(stderr, "planner_scaling: %s: %s\n", f.c_str(), std::string(t.status().message()).c_str());
      return 1;
    }
    row(f.substr(f.find_last_of('/') + 1), *t, runs);
  }
  for (const std::size_t n : {std::size_t{1'000}, std::size_t{10'000}, std::size_t{100'000}, std::size_t{1'000'000}}) {
    if (n > max_n) break;
    const std::string k = n >= 1'000'000 ? "1M" : std::to_string(n / 1000) + "k";
    row("inference_like " + k, bench::inference_like(n, 10 + n), runs);
    row("random_overlap " + k, bench::random_overlap(n, 20 + n), runs);
    row("staircase " + k, bench::staircase(n, 30 + n), runs);
  }
  std::printf("\nCells: median plan CPU time (slab / lower bound).\n");
  return 0;
}

}  // namespace
}  // namespace replayalloc

int main(int argc, char** argv) { return replayalloc::run(argc, argv); }
