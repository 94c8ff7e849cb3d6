// An unmodified generation loop whose key/value cache a host language holds, as ONNX
// Runtime's under Node.js (bench/run_onnx_generation.sh), for auto mode under
// LD_PRELOAD (Note [Anchored iterations], allocator/runtime/auto_detect.cc). Each
// request is a prefill and 8..64 decode steps; each step is one "run" of a 4-layer
// decoder with plain malloc, calloc and aligned_alloc(64), marking nothing:
//  * a fixed 7,008-byte block at the step's start, freed in the next step (the
//    runtime's own bookkeeping: the step's anchor);
//  * the past cache split per layer, keys and values per layer (sizes grow with the
//    sequence by 1 KiB a token), three 4 KiB scratch blocks per layer, and in the
//    prefill 16 activations per layer of 1 or 3 KiB a prompt token (below 4 KiB at
//    one token: a step never makes them watched) and attention scores that grow with
//    the square of the prompt (its four layers alike: a period of sizes inside one
//    request, as ONNX Runtime's are);
//  * the outputs (logits and each layer's present cache), copied into calloc'd
//    buffers handed to the host and then freed; the host's garbage collector frees
//    the copies on another thread, in batches, at times of its own.
// So the steps' sizes grow token by token, the prefill has another structure (about
// three times a step's requests: Note [Long pieces between anchors]), and
// the blocks held longest die on another thread. Every block is filled with a pattern
// and checked before its free. Prints "corruptions N", the share of allocations of at
// least 4 KiB served from a slab over the second half of the requests, and
// replayalloc's statistics.
// Usage: host_held_generation REQUESTS
#include <dlfcn.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "pattern_blocks.h"

namespace {

using pattern_blocks::block;
using pattern_blocks::field;

std::atomic<int> g_bad{0};
std::uint64_t g_big = 0;
bool g_count = false;

enum class how { plain, zeroed, aligned };

block make(std::size_t n, unsigned char tag, how h = how::aligned) {
  void* m = h == how::plain ? std::malloc(n) : h == how::zeroed ? std::calloc(1, n) : std::aligned_alloc(64, (n + 63) & ~std::size_t{63});
  auto* p = static_cast<unsigned char*>(m);
  if (p == nullptr) std::abort();
  if (h == how::zeroed) {
    for (std::size_t i = 0; i < n; i += 509) {
      if (p[i] != 0) {
        ++g_bad;
        break;
      }
    }
  }
  std::memset(p, tag, n);
  if (g_count && n >= 4096) ++g_big;
  return {p, n, tag};
}

void drop(const block& b) {
  if (!pattern_blocks::intact(b)) ++g_bad;
  std::free(b.p);
}

// The host's collector: frees the copies handed to it on its own thread, a batch at a
// time, whenever 20..400 are waiting (drawn per batch).
struct collector {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<block> held;
  bool done = false;
  std::thread th{[this] { run(); }};
  void hand(const block& b) {
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(b);
    cv.notify_one();
  }
  void run() {
    std::mt19937 rng(7);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      const std::size_t batch = 20 + rng() % 381;
      cv.wait(lock, [&] { return done || held.size() >= batch; });
      std::vector<block> now(held.begin(), held.end());
      held.clear();
      const bool last = done;
      lock.unlock();
      for (const block& b : now) drop(b);
      lock.lock();
      if (last && held.empty()) return;
    }
  }
  ~collector() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      cv.notify_one();
    }
    th.join();
  }
};

constexpr int layers = 4;
constexpr std::size_t token = 1024;  // bytes per token of one layer's keys (or values)

// One run of the decoder over q new tokens after `past` cached ones.
void step(collector& host, std::size_t past, std::size_t q, unsigned char tag, block& anchor) {
  block mine = make(7008, tag, how::plain);
  const std::size_t len = past + q;
  std::vector<block> split;
  for (int l = 0; l < layers && past > 0; ++l) split.push_back(make(past * token, tag + 1));
  if (anchor.p != nullptr) drop(anchor);
  anchor = mine;
  std::vector<block> present;
  for (int l = 0; l < layers; ++l) {
    block k = make(len * token, tag + 2), v = make(len * token, tag + 3);
    for (int s = 0; s < 3; ++s) drop(make(4096 * q, tag + 4));
    // Activations a row of the prompt each: below the minimum in a step (one token),
    // so only the prefill shows them, as ONNX Runtime's does (~3x a step's requests).
    for (int a = 0; a < 2; ++a) drop(make(3 * token * q, tag + 8));
    for (int a = 0; a < 14; ++a) drop(make(token * q, tag + 9));
    if (q * len >= 256) drop(make(16 * q * len, tag + 5));  // scores: the prefill's
    present.push_back(make(2 * len * token, tag + 6));
    drop(k);
    drop(v);
  }
  for (const block& b : split) drop(b);
  block logits = make(32000, tag + 7);
  host.hand(make(32000, 0x5a, how::zeroed));
  for (int l = 0; l < layers; ++l) host.hand(make(2 * len * token, 0x5b, how::zeroed));
  for (const block& b : present) drop(b);
  drop(logits);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: host_held_generation REQUESTS\n");
    return 2;
  }
  const int requests = std::atoi(argv[1]);
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  char before[4096] = "", after[4096] = "";
  std::mt19937_64 rng(11);
  std::vector<block> weights;
  for (int w = 0; w < 8; ++w) weights.push_back(make(256 << 10, static_cast<unsigned char>(200 + w), how::plain));
  block anchor;
  {
    collector host;
    for (int r = 0; r < requests; ++r) {
      if (r == requests / 2 && stats != nullptr) stats(before, sizeof before);
      g_count = r >= requests / 2;
      const std::size_t prompt = 8 + rng() % 57, steps = 8 + rng() % 57;
      const auto tag = static_cast<unsigned char>(r * 8);
      step(host, 0, prompt, tag, anchor);
      for (std::size_t s = 1; s < steps; ++s) step(host, prompt + s - 1, 1, tag, anchor);
    }
    if (anchor.p != nullptr) drop(anchor);
  }
  for (const block& w : weights) drop(w);
  std::printf("corruptions %d\n", g_bad.load());
  if (stats != nullptr) {
    stats(after, sizeof after);
    const std::uint64_t in_slab = field(after, "slab_hits") - field(before, "slab_hits");
    std::printf("slab share %.4f of %llu allocations of at least 4 KiB in the second half\n",
                g_big ? static_cast<double>(in_slab) / static_cast<double>(g_big) : 0.0,
                static_cast<unsigned long long>(g_big));
    std::printf("%s\n", after);
  }
  return g_bad == 0 ? 0 : 1;
}
