#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "replayalloc/replayalloc.hpp"

TEST(Smoke, ReplaysAfterWarmup) {
  std::vector<void*> first;
  for (int it = 0; it < 5; ++it) {
    replayalloc::Iteration scope("smoke");
    void* a = replayalloc_malloc(1000);
    void* b = replayalloc_malloc(2000);
    std::memset(a, 1, 1000);
    replayalloc_free(a);
    void* c = replayalloc_malloc(500);
    std::memset(c, 2, 500);
    std::memset(b, 3, 2000);
    replayalloc_free(b);
    replayalloc_free(c);
    if (it == 3) first = {a, b, c};
    if (it == 4) EXPECT_EQ(first, (std::vector<void*>{a, b, c}));
  }
  const replayalloc::Stats s = replayalloc::stats();
  EXPECT_EQ(s.plans, 1u);
  EXPECT_EQ(s.slab_hits, 9u);
}
