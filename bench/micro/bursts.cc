// bench/micro/bursts.cc: bursts of large blocks allocated and then all freed, again and
// again (a batch's tensors, a request's buffers), under whichever allocator is
// preloaded (Note [The fallback's dirty extents], allocator/backend/jemalloc_backend.cc).
// Each round allocates COUNT blocks of SIZE bytes, writes one byte of each (the first
// page), then frees them all. Prints the CPU time per malloc+free pair (user + system,
// the page faults' included) and the page faults per round; peak RSS is the caller's
// to read (/usr/bin/time). Usage: bursts COUNT SIZE ROUNDS
#include <sys/resource.h>

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
  for (long r = 0; r < rounds; ++r) {
    for (long i = 0; i < count; ++i) {
      auto* p = static_cast<unsigned char*>(std::malloc(size));
      if (p == nullptr) return 1;
      p[0] = static_cast<unsigned char>(i);
      blocks[static_cast<std::size_t>(i)] = p;
    }
    for (unsigned char* p : blocks) {
      sum += p[0];
      std::free(p);
    }
  }
  getrusage(RUSAGE_SELF, &r1);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  const double cpu = (us(r1.ru_utime) - us(r0.ru_utime)) + (us(r1.ru_stime) - us(r0.ru_stime));
  std::printf("cpu_us_per_pair %.3f\nfaults_per_round %.1f\nchecksum %llu\n", cpu / (static_cast<double>(count) * rounds),
              static_cast<double>(r1.ru_minflt - r0.ru_minflt) / rounds, sum);
  return 0;
}
