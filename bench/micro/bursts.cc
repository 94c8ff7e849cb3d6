// bench/micro/bursts.cc: bursts of large blocks allocated and then all freed, again and
// again (a batch's tensors, a request's buffers), under whichever allocator is
// preloaded (Note [The fallback's dirty extents], allocator/backend/jemalloc_backend.cc).
// Each round allocates COUNT blocks of SIZE bytes, writes one byte of each (the first
// page), then frees them all. Prints the CPU time per malloc+free pair (user + system,
// the page faults' included) and the page faults per round; peak RSS is the caller's
// to read (/usr/bin/time). Usage: bursts COUNT SIZE ROUNDS
#include <sys/resource.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bursts COUNT SIZE ROUNDS\n");
    return 2;
  }
  const long count = std::atol(argv[1]);
  const std::size_t size = std::strtoull(argv[2], nullptr, 10);
  const long rounds = std::atol(argv[3]);
  if (count <= 0 || size == 0 || rounds <= 0) {
    std::fprintf(stderr, "bursts: COUNT, SIZE and ROUNDS must be positive\n");
    return 2;
  }
  std::vector<unsigned char*> blocks(static_cast<std::size_t>(count));
  unsigned long long sum = 0;
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  const auto thread_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
  };
  double alloc_ns = 0, free_ns = 0;  // the rounds after the first
  for (long r = 0; r < rounds; ++r) {
    const double t0 = thread_ns();
    for (long i = 0; i < count; ++i) {
      auto* p = static_cast<unsigned char*>(std::malloc(size));
      if (p == nullptr) return 1;
      p[0] = static_cast<unsigned char>(i);
      blocks[static_cast<std::size_t>(i)] = p;
    }
    const double t1 = thread_ns();
    for (unsigned char* p : blocks) {
      sum += p[0];
      std::free(p);
    }
    const double t2 = thread_ns();
    if (r > 0) {
      alloc_ns += t1 - t0;
      free_ns += t2 - t1;
    }
  }
  getrusage(RUSAGE_SELF, &r1);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  const double cpu = (us(r1.ru_utime) - us(r0.ru_utime)) + (us(r1.ru_stime) - us(r0.ru_stime));
  std::printf("cpu_us_per_pair %.3f\nfaults_per_round %.1f\nchecksum %llu\n", cpu / (static_cast<double>(count) * rounds),
              static_cast<double>(r1.ru_minflt - r0.ru_minflt) / rounds, sum);
  if (rounds > 1) {
    const double n = static_cast<double>(count) * static_cast<double>(rounds - 1);
    std::printf("later_rounds_ns_per_malloc %.1f\nlater_rounds_ns_per_free %.1f\n", alloc_ns / n, free_ns / n);
  }
  return 0;
}
