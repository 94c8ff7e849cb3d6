// Uses an installed replayalloc's C++ API (replayalloc.hpp) as the README shows it:
// replayalloc::Iteration (RAII) around each request, then replayalloc::stats(). Built
// against the shared library (replayalloc::replayalloc), where stats() must be exported,
// and against the static one. Prints one line run_install_test.sh checks.
#include <replayalloc/replayalloc.h>
#include <replayalloc/replayalloc.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  static const std::size_t sizes[] = {4096, 65536, 1000, 300000, 128};
  for (int request = 0; request < 6; ++request) {
    if (request == 2) replayalloc_wait_plans();  // warm-up done: its plan is made off the request path
    replayalloc::Iteration it("consumer/cxx");
    if (!it.ok()) {
      std::fprintf(stderr, "consumer (C++): the iteration did not begin\n");
      return 1;
    }
    std::vector<void*> blocks;
    for (std::size_t size : sizes) {
      void* p = replayalloc_malloc(size);
      if (p == nullptr) return 1;
      std::memset(p, request, size);
      blocks.push_back(p);
    }
    for (void* p : blocks) replayalloc_free(p);
  }
  const replayalloc::Stats s = replayalloc::stats();
  if (s.slab_hits == 0 || s.iterations != 6) {
    std::fprintf(stderr, "consumer (C++): slab_hits=%llu iterations=%llu after 6 iterations\n",
                 static_cast<unsigned long long>(s.slab_hits), static_cast<unsigned long long>(s.iterations));
    return 1;
  }
  std::printf("replayalloc consumer: slab_hits=%llu\n", static_cast<unsigned long long>(s.slab_hits));
  return 0;
}
