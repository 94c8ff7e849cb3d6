// bench/micro/never_repeats.cc: a request stream that never repeats, under whatever
// allocator serves `malloc` (one process per allocator, LD_PRELOAD), so that
// replayalloc's cost where nothing can be replayed is measured against the allocator
// it falls back to (invariant 8 of allocator/DESIGN.md; Note [Setting aside] in
// runtime/engine.cc).
//
//   never_repeats REQUESTS [explicit]
//
// Each request makes 20-60 blocks of 4 KiB-1 MiB with random sizes and lifetimes
// (a fixed seed, so every allocator sees the same stream), writes one byte in each
// 4 KiB of each block, and frees them. With `explicit` (and replayalloc preloaded)
// every request is an iteration of one key, marked through the C API found with
// dlsym; without it, auto mode watches the stream. Prints the CPU time per request in
// microseconds, the minor page faults per request, the peak resident set, and
// replayalloc's statistics when it is loaded.
#include <dlfcn.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: never_repeats REQUESTS [explicit]\n");
    return 2;
  }
  const int requests = std::atoi(argv[1]);
  const bool marked = argc > 2 && std::strcmp(argv[2], "explicit") == 0;
  using begin_fn = int (*)(const char*);
  using end_fn = int (*)();
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  std::mt19937_64 rng(2026);
  std::vector<unsigned char*> live;
  live.reserve(64);
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  unsigned long long sum = 0;
  for (int q = 0; q < requests; ++q) {
    if (marked && begin != nullptr) begin("never-repeats");
    const int n = 20 + static_cast<int>(rng() % 41);
    for (int k = 0; k < n; ++k) {
      const std::size_t size = 4096 + rng() % (1u << 20);
      auto* p = static_cast<unsigned char*>(std::malloc(size));
      if (p == nullptr) return 1;
      for (std::size_t i = 0; i < size; i += 4096) p[i] = static_cast<unsigned char>(k);
      live.push_back(p);
      if (rng() % 2 == 0) {
        const std::size_t j = rng() % live.size();
        sum += live[j][0];
        std::free(live[j]);
        live[j] = live.back();
        live.pop_back();
      }
    }
    for (unsigned char* p : live) {
      sum += p[0];
      std::free(p);
    }
    live.clear();
    if (marked && end != nullptr) end();
  }
  getrusage(RUSAGE_SELF, &r1);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  const double cpu = (us(r1.ru_utime) - us(r0.ru_utime)) + (us(r1.ru_stime) - us(r0.ru_stime));
  std::printf("cpu_us_per_request %.2f\nfaults_per_request %.2f\nchecksum %llu\npeak_rss_kib %ld\n", cpu / requests,
              static_cast<double>(r1.ru_minflt - r0.ru_minflt) / requests, sum, r1.ru_maxrss);
  if (stats != nullptr) {
    char buf[4096];
    stats(buf, sizeof buf);
    std::printf("stats %s\n", buf);
  }
  return 0;
}
