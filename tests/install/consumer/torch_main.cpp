// Uses the installed replayalloc/torch.hpp against libreplayalloc_torch.so
// (replayalloc::torch): every function the header declares must be defined by an
// installed library. No libtorch header is needed: install() registers the allocator
// with the libtorch the library was built against. Prints one line
// run_install_test.sh checks.
#include <replayalloc/replayalloc.h>
#include <replayalloc/torch.hpp>

#include <cstdio>
#include <cstring>

int main() {
  replayalloc::torch::install();
  if (!replayalloc::torch::installed()) {
    std::fprintf(stderr, "consumer (torch.hpp): install() did not install\n");
    return 1;
  }
  for (int request = 0; request < 6; ++request) {
    if (request == 2) replayalloc_wait_plans();  // warm-up done: its plan is made off the request path
    replayalloc::torch::Iteration it("consumer/torch");
    void* p = replayalloc_malloc(65536);
    if (p == nullptr) return 1;
    std::memset(p, request, 65536);
    replayalloc_free(p);
  }
  replayalloc::torch::uninstall();
  const replayalloc::Stats s = replayalloc::stats();
  if (s.slab_hits == 0) {
    std::fprintf(stderr, "consumer (torch.hpp): no slab hit after 6 iterations\n");
    return 1;
  }
  std::printf("replayalloc consumer: slab_hits=%llu\n", static_cast<unsigned long long>(s.slab_hits));
  return 0;
}
