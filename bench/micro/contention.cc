// bench/micro/contention.cc: the allocator alone under many threads (issue 15), with
// no compute: each of THREADS threads runs ITERATIONS "inferences" of one fixed,
// inference-shaped stream, under whatever allocator serves `malloc` (one process per
// allocator, LD_PRELOAD; bench/run_contention.sh runs them side by side).
//
//   contention THREADS ITERATIONS [explicit]
//
// Each thread first runs 10 untimed inferences (replayalloc's warm-up: auto mode finds
// the period and both modes record and plan); then all start the timed ones together.
// An inference: 24 layers, each making an activation (64 KiB-4 MiB), a workspace
// (256 KiB-16 MiB) freed within the layer and two small temporaries (64 KiB), the
// previous layer's activation freed once the next exists; sizes drawn once from a
// fixed seed, so every thread and every allocator sees the same stream. One cache line
// in each 4 KiB page of every block is written (the first touch of a page shows as a
// fault; nothing else is computed). With `explicit` (and replayalloc preloaded) every
// inference is an iteration of one key shared by all threads, marked through the C API
// found with dlsym; without it, auto mode watches each thread. Prints the inferences per second over the run (wall time,
// all threads), the process's CPU microseconds and minor faults per inference, and
// replayalloc's statistics when it is loaded.
#include <dlfcn.h>
#include <sys/resource.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

struct layer {
  std::size_t activation, workspace, temporary;
};

using begin_fn = int (*)(const char*);
using end_fn = int (*)();

std::vector<layer> make_stream() {
  std::mt19937_64 rng(15);
  std::vector<layer> s(24);
  for (layer& l : s) {
    l.activation = (64u << 10) + rng() % (4u << 20);
    l.workspace = (256u << 10) + rng() % (16u << 20);
    l.temporary = 64u << 10;
  }
  return s;
}

unsigned char* make(std::size_t n, unsigned char v) {
  auto* p = static_cast<unsigned char*>(std::malloc(n));
  if (p == nullptr) std::abort();
  for (std::size_t i = 0; i < n; i += 4096) p[i] = v;
  return p;
}

unsigned long long inference(const std::vector<layer>& stream) {
  unsigned long long sum = 0;
  unsigned char* x = make(stream.front().activation, 1);
  for (const layer& l : stream) {
    unsigned char* t0 = make(l.temporary, 2);
    unsigned char* ws = make(l.workspace, 3);
    unsigned char* t1 = make(l.temporary, 4);
    unsigned char* y = make(l.activation, 5);
    sum += ws[0] + t0[0] + t1[0] + x[0];
    std::free(t1);
    std::free(ws);
    std::free(t0);
    std::free(x);
    x = y;
  }
  sum += x[0];
  std::free(x);
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: contention THREADS ITERATIONS [explicit]\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int iterations = std::atoi(argv[2]);
  if (threads < 1 || iterations < 1) {
    std::fprintf(stderr, "contention: THREADS and ITERATIONS must be at least 1\n");
    return 2;
  }
  const bool marked = argc > 3 && std::strcmp(argv[3], "explicit") == 0;
  auto begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  const std::vector<layer> stream = make_stream();
  constexpr int warmup = 10;
  // `ready`: every thread has warmed up; `go`: the clock and the counters are read.
  std::barrier ready(threads + 1), go(threads + 1);
  std::vector<unsigned long long> sums(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      unsigned long long s = 0;
      for (int i = 0; i < warmup + iterations; ++i) {
        if (i == warmup) {
          ready.arrive_and_wait();
          go.arrive_and_wait();
        }
        if (marked && begin != nullptr) begin("contention");
        s += inference(stream);
        if (marked && end != nullptr) end();
      }
      sums[static_cast<std::size_t>(t)] = s;
    });
  }
  rusage r0{}, r1{};
  ready.arrive_and_wait();
  getrusage(RUSAGE_SELF, &r0);
  const auto t0 = std::chrono::steady_clock::now();
  go.arrive_and_wait();
  for (std::thread& th : pool) th.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &r1);
  auto us = [](const timeval& v) { return static_cast<double>(v.tv_sec) * 1e6 + static_cast<double>(v.tv_usec); };
  const double n = static_cast<double>(threads) * iterations;
  const double cpu = (us(r1.ru_utime) - us(r0.ru_utime)) + (us(r1.ru_stime) - us(r0.ru_stime));
  unsigned long long sum = 0;
  for (unsigned long long s : sums) sum += s;
  std::printf("inferences_per_s %.2f\ncpu_us_per_inference %.2f\nfaults_per_inference %.2f\nchecksum %llu\n",
              n / wall, cpu / n, static_cast<double>(r1.ru_minflt - r0.ru_minflt) / n, sum);
  if (stats != nullptr) {
    char buf[4096];
    stats(buf, sizeof buf);
    std::printf("stats %s\n", buf);
  }
  return 0;
}
