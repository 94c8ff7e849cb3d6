// The C++ API's short program (Note [Plans that arrive in time]): six iterations of one
// key (replayalloc::Iteration), each a 1 MiB block; prints replayalloc::stats().slab_hits,
// 4 on every run (the first two iterations are recorded).
#include <cstdio>
#include <cstring>

#include "replayalloc/replayalloc.hpp"

int main() {
  for (int i = 0; i < 6; ++i) {
    replayalloc::Iteration it("short/cpp");
    void* p = replayalloc_malloc(1 << 20);
    if (p == nullptr) return 1;
    std::memset(p, i, 1 << 20);
    replayalloc_free(p);
  }
  std::printf("%llu\n", static_cast<unsigned long long>(replayalloc::stats().slab_hits));
  return 0;
}
