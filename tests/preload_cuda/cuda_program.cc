// A CUDA program that knows nothing of replayalloc but its C API names: it calls the
// shared CUDA runtime (here the simulated one, libfake_cudart.so, whose device memory
// is host memory) and, run with LD_PRELOAD=libreplayalloc_preload.so, marks its
// iterations through dlsym. Every device block carries a fill pattern checked before
// its free. One scenario per run (argv[1]); exits 0 when every check held, 1 when one
// failed, 77 when the library is not preloaded.
//
//   sync       cudaMalloc/cudaFree iterations replay from a device slab after warm-up;
//              a slab block's cudaFree still waits for the device, as the runtime's does
//   async      cudaMallocAsync/cudaFreeAsync on one stream: the same, in stream order
//   deviate    after warm-up: a bigger size, extra allocations, a free on another
//              thread, cudaFreeAsync on another stream (an event orders it), another
//              device, another stream: each falls back safely, and replay resumes
//   auto       nothing marked: device allocations join auto mode's host iterations
//   errors     the runtime's contract where replayalloc steps aside: cudaFree(NULL),
//              size 0, out of memory outside and inside an iteration
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "support/pattern.h"

namespace {

using replayalloc::testing::fill;
using replayalloc::testing::intact;

int (*g_begin)(const char*);
int (*g_end)();
size_t (*g_cuda_stats)(char*, size_t);
int g_failed = 0;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fputc('\n', stderr);                                            \
      ++g_failed;                                                          \
    }                                                                      \
  } while (0)

// One counter of the device statistics JSON.
unsigned long long device_stat(const char* name) {
  char buf[4096];
  g_cuda_stats(buf, sizeof buf);
  const std::string key = std::string("\"") + name + "\":";
  const char* at = std::strstr(buf, key.c_str());
  return at != nullptr ? std::strtoull(at + key.size(), nullptr, 10) : ~0ull;
}

int count_in_log(const std::string& prefix) {
  int n = 0;
  for (const std::string& l : fake_cuda::log()) n += l.rfind(prefix, 0) == 0;
  return n;
}

bool log_has(const std::string& needle) {
  for (const std::string& l : fake_cuda::log()) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

struct block {
  void* p;
  std::size_t size;
  std::uint64_t tag;
};

const std::vector<std::size_t> k_sizes = {1 << 20, 256 << 10, 64 << 10, 512 << 10, 8192};

void* dev_alloc(std::size_t n, bool async, cudaStream_t s) {
  void* p = nullptr;
  const cudaError_t e = async ? cudaMallocAsync(&p, n, s) : cudaMalloc(&p, n);
  CHECK(e == cudaSuccess && p != nullptr, "allocating %zu bytes: error %d", n, static_cast<int>(e));
  return p;
}

void dev_free(const block& b, bool async, cudaStream_t s) {
  CHECK(intact(b.p, b.size, b.tag), "block of %zu bytes overwritten", b.size);
  const cudaError_t e = async ? cudaFreeAsync(b.p, s) : cudaFree(b.p);
  CHECK(e == cudaSuccess, "freeing %zu bytes: error %d", b.size, static_cast<int>(e));
}

// One inference-shaped iteration: at most three blocks live, each checked before its
// free. Returns the pointers in order.
std::vector<void*> iteration(const char* key, bool async, cudaStream_t s, std::uint64_t salt,
                             const std::vector<std::size_t>& sizes = k_sizes) {
  std::vector<void*> ptrs;
  g_begin(key);
  std::vector<block> live;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    block b{dev_alloc(sizes[i], async, s), sizes[i], salt * 100 + i};
    fill(b.p, b.size, b.tag);
    ptrs.push_back(b.p);
    live.push_back(b);
    if (live.size() > 2) {
      dev_free(live.front(), async, s);
      live.erase(live.begin());
    }
  }
  for (const block& b : live) dev_free(b, async, s);
  g_end();
  return ptrs;
}

// Warm-up and steady state: after the recordings and the plan, every iteration takes
// the same slab bytes and calls the runtime for no allocation.
void replays(bool async) {
  cudaStream_t s = nullptr;
  if (async) cudaStreamCreate(&s);
  const char* key = async ? "async-model" : "sync-model";
  unsigned long long hits0 = 0;
  std::vector<void*> steady;
  for (int i = 0; i < 8; ++i) {
    if (i == 3) {
      fake_cuda::clear_log();
      hits0 = device_stat("slab_hits");
    }
    std::vector<void*> ptrs = iteration(key, async, s, i);
    if (i == 3) steady = ptrs;
    if (i > 3) CHECK(ptrs == steady, "iteration %d took other bytes than iteration 3", i);
  }
  const unsigned long long hits = device_stat("slab_hits") - hits0;
  std::printf("%s: %llu of %zu device allocations from the slab after warm-up\n", key, hits,
              5 * k_sizes.size());
  CHECK(hits == 5 * k_sizes.size(), "slab hits %llu", hits);
  CHECK(device_stat("fallbacks") == 0, "fallbacks %llu", device_stat("fallbacks"));
  // From iteration 3 on, the runtime allocated nothing (the slab was made before).
  CHECK(count_in_log("malloc") == 0, "%d runtime allocations in steady state", count_in_log("malloc"));
  CHECK(count_in_log("free") == 0, "%d runtime frees in steady state", count_in_log("free"));
  if (!async) {
    // Note [Interposed runtime]: each cudaFree of a slab block waited for the device.
    CHECK(count_in_log("sync_device") == 5 * static_cast<int>(k_sizes.size()), "%d device syncs",
          count_in_log("sync_device"));
  } else {
    CHECK(count_in_log("sync_device") == 0, "stream-ordered frees synchronised the device");
    cudaStreamDestroy(s);
  }
}

void deviations() {
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaStreamCreate(&s1);
  cudaStreamCreate(&s2);
  const char* key = "deviating-model";
  for (int i = 0; i < 4; ++i) iteration(key, true, s1, i);
  const unsigned long long hits0 = device_stat("slab_hits");
  CHECK(hits0 > 0, "no slab hits after warm-up");

  // A bigger size than planned: served by the runtime, the rest from the slab.
  std::vector<std::size_t> bigger = k_sizes;
  bigger[1] = 300 << 10;
  fake_cuda::clear_log();
  iteration(key, true, s1, 10, bigger);
  CHECK(log_has("malloc_async " + fake_cuda::name(s1) + ": " + std::to_string(300 << 10)),
        "the bigger block did not come from cudaMallocAsync");
  CHECK(device_stat("fallbacks") >= 1, "no fallback counted");

  // Extra allocations, one held across the whole iteration and after it.
  g_begin(key);
  block held{dev_alloc(700 << 10, true, s1), 700 << 10, 999};
  fill(held.p, held.size, held.tag);
  std::vector<block> live;
  for (std::size_t i = 0; i < k_sizes.size(); ++i) {
    block b{dev_alloc(k_sizes[i], true, s1), k_sizes[i], 2000 + i};
    fill(b.p, b.size, b.tag);
    block extra{dev_alloc(16384, true, s1), 16384, 3000 + i};
    fill(extra.p, extra.size, extra.tag);
    live.push_back(b);
    live.push_back(extra);
    if (live.size() > 4) {
      dev_free(live[0], true, s1);
      dev_free(live[1], true, s1);
      live.erase(live.begin(), live.begin() + 2);
    }
  }
  for (const block& b : live) dev_free(b, true, s1);
  g_end();
  CHECK(intact(held.p, held.size, held.tag), "a block held past its iteration was overwritten");

  // Freed on another thread, and on another stream, at the planned times: the slab's
  // stream waits for an event recorded on the stream that used the block last.
  fake_cuda::clear_log();
  g_begin(key);
  std::vector<block> window;
  int frees = 0;
  for (std::size_t i = 0; i < k_sizes.size(); ++i) {
    window.push_back({dev_alloc(k_sizes[i], true, s1), k_sizes[i], 4000 + i});
    fill(window.back().p, window.back().size, window.back().tag);
    if (window.size() > 2) {
      const block b = window.front();
      window.erase(window.begin());
      if (frees++ == 0) {
        std::thread([&] { dev_free(b, true, s1); }).join();
      } else if (frees == 2) {
        dev_free(b, true, s2);
      } else {
        dev_free(b, true, s1);
      }
    }
  }
  for (const block& b : window) dev_free(b, true, s1);
  g_end();
  CHECK(log_has("wait " + fake_cuda::name(s1) + " ev") && log_has("from " + fake_cuda::name(s2)),
        "a free on another stream was not ordered by an event");
  CHECK(device_stat("remote_frees") >= 1, "the free on another thread was not seen as remote");
  dev_free(held, true, s2);

  // Another device and another stream inside an iteration: passed to the runtime.
  fake_cuda::clear_log();
  g_begin(key);
  cudaSetDevice(1);
  block other_dev{dev_alloc(65536, true, s1), 65536, 5000};
  cudaSetDevice(0);
  block other_stream{dev_alloc(65536, true, s2), 65536, 5001};
  fill(other_dev.p, other_dev.size, other_dev.tag);
  fill(other_stream.p, other_stream.size, other_stream.tag);
  g_end();
  CHECK(count_in_log("malloc_async") == 2, "%d runtime allocations, expected 2", count_in_log("malloc_async"));
  dev_free(other_dev, true, s1);
  dev_free(other_stream, true, s2);

  // Back to the plan: the next iterations replay again (a deviation or two in a row
  // does not make the key record again).
  const unsigned long long before = device_stat("slab_hits");
  iteration(key, true, s1, 20);
  iteration(key, true, s1, 21);
  CHECK(device_stat("slab_hits") - before == 2 * k_sizes.size(), "replay did not resume: %llu hits",
        device_stat("slab_hits") - before);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// Auto mode (the library's default): the program marks nothing. Its host allocations
// repeat, auto mode finds their period and runs iterations of it; the device
// allocations made inside those iterations join them (the device domain opens with
// the thread's host iteration, whoever began it).
void automatic() {
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  auto step = [&](int i) {
    fake_cuda::clear_log();  // keeps its capacity: the simulated runtime's log stops growing
    void* h1 = std::malloc(256 << 10);
    std::memset(h1, i, 256 << 10);
    asm volatile("" : : "r"(h1) : "memory");
    std::vector<block> live;
    for (std::size_t k = 0; k < k_sizes.size(); ++k) {
      live.push_back({dev_alloc(k_sizes[k], true, s), k_sizes[k], i * 100 + k});
      fill(live.back().p, live.back().size, live.back().tag);
      if (k == 1) {
        void* h2 = std::malloc(128 << 10);
        std::memset(h2, i, 128 << 10);
        asm volatile("" : : "r"(h2) : "memory");  // kept: the compiler may not drop the pair
        std::free(h2);
      }
    }
    for (const block& b : live) dev_free(b, true, s);
    std::free(h1);
  };
  for (int i = 0; i < 60; ++i) step(i);
  const unsigned long long before = device_stat("slab_hits");
  for (int i = 60; i < 70; ++i) step(i);
  const unsigned long long hits = device_stat("slab_hits") - before;
  std::printf("auto: %llu of %zu device allocations of the last 10 steps from a slab\n", hits,
              10 * k_sizes.size());
  CHECK(hits >= 9 * k_sizes.size(), "auto mode served %llu device allocations from a slab", hits);
  cudaStreamDestroy(s);
}

void errors() {
  CHECK(cudaFree(nullptr) == cudaSuccess, "cudaFree(NULL)");
  CHECK(cudaFreeAsync(nullptr, nullptr) == cudaSuccess, "cudaFreeAsync(NULL)");
  fake_cuda::set_device_memory(std::size_t{64} << 20);
  void* p = reinterpret_cast<void*>(1);
  CHECK(cudaMalloc(&p, std::size_t{1} << 30) == cudaErrorMemoryAllocation, "out of memory outside");
  // Inside an iteration whose plan exists: the slab serves what it planned, the rest
  // is the runtime's error.
  for (int i = 0; i < 4; ++i) iteration("oom-model", false, nullptr, i, {1 << 20, 4 << 20});
  g_begin("oom-model");
  void* a = nullptr;
  CHECK(cudaMalloc(&a, 1 << 20) == cudaSuccess, "planned block");
  void* b = nullptr;
  const cudaError_t e = cudaMalloc(&b, std::size_t{1} << 30);
  CHECK(e == cudaErrorMemoryAllocation, "out of memory inside: error %d", static_cast<int>(e));
  cudaFree(a);
  g_end();
}

}  // namespace

int main(int argc, char** argv) {
  g_begin = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  g_end = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  g_cuda_stats = reinterpret_cast<size_t (*)(char*, size_t)>(dlsym(RTLD_DEFAULT, "replayalloc_cuda_stats_json"));
  if (g_begin == nullptr || g_end == nullptr || g_cuda_stats == nullptr) {
    std::fprintf(stderr, "cuda_program: run me with LD_PRELOAD=libreplayalloc_preload.so\n");
    return 77;
  }
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "sync") replays(false);
  else if (what == "async") replays(true);
  else if (what == "deviate") deviations();
  else if (what == "errors") errors();
  else if (what == "auto") automatic();
  else {
    std::fprintf(stderr, "usage: cuda_program sync|async|deviate|errors|auto\n");
    return 2;
  }
  char buf[4096];
  g_cuda_stats(buf, sizeof buf);
  std::printf("device statistics: %s\n", buf);
  return g_failed == 0 ? 0 : 1;
}
