// An unmodified "service" whose requests come at a random sequence length (16..256),
// for auto mode under LD_PRELOAD (Note [Periods whose sizes change]): each request runs
// a transformer-encoder-shaped pass (per layer: activations that scale with the length,
// attention scores with its square, a fixed workspace) with plain malloc and free, and
// marks nothing. Every block is filled with a pattern and checked before its free.
// Prints "corruptions N", the share of allocations of at least 4 KiB served from a
// slab over the second half of the requests, and replayalloc's statistics.
//
// With "shifting", the requests look like PyTorch's (tests/preload/auto_varlen.py):
// weights live throughout, the last output lives until the next request's is made,
// every block comes from posix_memalign(64) as c10's CPU allocator asks, a few
// bytes-long blocks among them, and the structure changes with the length (a kernel
// that takes one more 512 KiB workspace past lengths 64 and 128), so neither the sizes
// nor the structure repeat: auto mode must find iterations between quiet points and
// choose their regime by their first request (Note [Regimes by first size]).
// Usage: varlen_service REQUESTS [shifting]
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "pattern_blocks.h"

namespace {

using pattern_blocks::block;
using pattern_blocks::field;

int g_bad = 0;
std::uint64_t g_big = 0, g_in_slab = 0;
bool g_count = false;

bool g_aligned = false;  // posix_memalign(64), as c10's CPU allocator

block make(std::size_t n, unsigned char tag) {
  void* m = nullptr;
  if (g_aligned) {
    if (posix_memalign(&m, 64, n) != 0) m = nullptr;
  } else {
    m = std::malloc(n);
  }
  auto* p = static_cast<unsigned char*>(m);
  if (p == nullptr) std::abort();
  std::memset(p, tag, n);
  if (g_count && n >= 4096) ++g_big;
  return {p, n, tag};
}

void drop(const block& b) {
  if (!pattern_blocks::intact(b)) ++g_bad;
  std::free(b.p);
}

}  // namespace

int main(int argc, char** argv) {
  const bool shifting = argc == 3 && std::strcmp(argv[2], "shifting") == 0;
  if (argc != 2 && !shifting) {
    std::fprintf(stderr, "usage: varlen_service REQUESTS [shifting]\n");
    return 2;
  }
  const int requests = std::atoi(argv[1]);
  g_aligned = shifting;
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  char before[4096] = "", after[4096] = "";
  std::mt19937_64 rng(99);
  const std::size_t hidden = 1024;
  block weights[8], out{};
  if (shifting) {
    for (int w = 0; w < 8; ++w) weights[w] = make(256 << 10, static_cast<unsigned char>(200 + w));
  }
  for (int r = 0; r < requests; ++r) {
    if (r == requests / 2 && stats != nullptr) stats(before, sizeof before);
    g_count = r >= requests / 2;
    const std::size_t seq = 16 + rng() % 241;
    const auto tag = static_cast<unsigned char>(r);
    if (shifting) {
      block x = make(seq * hidden, tag);
      for (int l = 0; l < 4; ++l) {
        // A few bytes where the plan expects a block that scales: never its slot (Note
        // [Below the minimum size]; a slot that scales serves any size up to its own).
        drop(make(248, tag + 7));
        block qkv = make(3 * seq * hidden, tag + 1);
        for (std::size_t w = 0; w < 1 + (seq > 64) + (seq > 128); ++w) drop(make(512 << 10, tag + 3));
        block scores = make(16 * seq * seq, tag + 2), ctx = make(seq * hidden, tag + 4);
        drop(scores);
        drop(qkv);
        block h = make(4 * seq * hidden, tag + 5), y = make(seq * hidden, tag + 6);
        drop(h);
        drop(ctx);
        drop(x);
        x = y;
      }
      if (out.p != nullptr) drop(out);
      out = x;
      continue;
    }
    block x = make(seq * hidden, tag);
    for (int l = 0; l < 4; ++l) {
      block qkv = make(3 * seq * hidden, tag + 1), scores = make(16 * seq * seq, tag + 2);
      block ws = make(65536, tag + 3);
      drop(ws);
      block ctx = make(seq * hidden, tag + 4);
      drop(scores);
      drop(qkv);
      block h = make(4 * seq * hidden, tag + 5), y = make(seq * hidden, tag + 6);
      drop(h);
      drop(ctx);
      drop(x);
      x = y;
    }
    drop(x);
  }
  if (out.p != nullptr) drop(out);
  if (shifting) {
    for (const block& w : weights) drop(w);
  }
  std::printf("corruptions %d\n", g_bad);
  if (stats != nullptr) {
    stats(after, sizeof after);
    g_in_slab = field(after, "slab_hits") - field(before, "slab_hits");
    std::printf("slab share %.4f of %llu allocations of at least 4 KiB in the second half\n",
                g_big ? static_cast<double>(g_in_slab) / static_cast<double>(g_big) : 0.0,
                static_cast<unsigned long long>(g_big));
    std::printf("%s\n", after);
  }
  return g_bad == 0 ? 0 : 1;
}
