// The preload library's stress program, in two builds of one source:
//  * preloaded (default): plain malloc/free/calloc/realloc/posix_memalign/new/delete,
//    iterations marked through dlsym'd C API names, run with
//    LD_PRELOAD=libreplayalloc_preload.so;
//  * linked (STRESS_LINKED): the same calls made on the C API of the core, so that
//    ThreadSanitizer, which owns malloc itself, sees every atomic and lock of the
//    replay path.
// Waves of threads start and end (some with an iteration open); each runs iterations
// of a few keys with planned sizes and unplanned extras, hands blocks to other threads
// to free, and one thread forks mid-iteration (the child checks and frees its blocks).
// Every byte of every block carries a pattern checked before its free. Prints the
// totals and exits 1 on any corruption. Not a benchmark.
// Usage: stress_program [WAVES=6] [THREADS=6] [ITERATIONS=30]
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef STRESS_LINKED
#include "replayalloc/replayalloc.h"
#define RA_MALLOC replayalloc_malloc
#define RA_CALLOC replayalloc_calloc
#define RA_REALLOC replayalloc_realloc
#define RA_FREE replayalloc_free
#define RA_MEMALIGN replayalloc_posix_memalign
#else
#define RA_MALLOC std::malloc
#define RA_CALLOC std::calloc
#define RA_REALLOC std::realloc
#define RA_FREE std::free
#define RA_MEMALIGN posix_memalign
#endif

namespace {

using begin_fn = int (*)(const char*);
using end_fn = int (*)();
using stats_fn = std::size_t (*)(char*, std::size_t);
begin_fn g_begin;
end_fn g_end;
stats_fn g_stats;

std::atomic<std::uint64_t> g_corrupt{0}, g_blocks{0}, g_iterations{0}, g_remote{0};

std::uint8_t byte_of(std::uint64_t tag, std::size_t i) {
  return static_cast<std::uint8_t>((tag * 0x9e3779b97f4a7c15ull >> 56) ^ (i * 31));
}

struct block {
  std::uint8_t* p = nullptr;
  std::size_t n = 0;
  std::uint64_t tag = 0;
  bool is_new = false;  // made with new[]: freed with delete[]
};

block make(void* p, std::size_t n, std::uint64_t tag) {
  if (p == nullptr) std::abort();
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = byte_of(tag, i);
  g_blocks.fetch_add(1, std::memory_order_relaxed);
  return {b, n, tag};
}

void check(const block& b) {
  for (std::size_t i = 0; i < b.n; ++i) {
    if (b.p[i] != byte_of(b.tag, i)) {
      g_corrupt.fetch_add(1);
      std::fprintf(stderr, "stress: block of %zu bytes (tag %llu) corrupted at byte %zu\n", b.n,
                   static_cast<unsigned long long>(b.tag), i);
      return;
    }
  }
}

void drop(const block& b) {
  check(b);
  if (b.is_new) {
#ifdef STRESS_LINKED
    RA_FREE(b.p);
#else
    delete[] b.p;
#endif
  } else {
    RA_FREE(b.p);
  }
}

// Blocks handed from one thread to another.
std::mutex g_mu;
std::vector<block> g_handed;

void hand_over(const block& b) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_handed.push_back(b);
}

void take_handed() {
  std::vector<block> mine;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    mine.swap(g_handed);
  }
  for (const block& b : mine) {
    drop(b);
    g_remote.fetch_add(1, std::memory_order_relaxed);
  }
}

void fork_and_check(const std::vector<block>& live) {
  const pid_t pid = fork();
  if (pid == 0) {
    // The child: the parent's open iteration was abandoned; its blocks are intact and
    // its own allocations work.
    for (const block& b : live) drop(b);
    block x = make(RA_MALLOC(70000), 70000, 999);
    drop(x);
    _exit(g_corrupt.load() == 0 ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "stress: the forked child failed\n");
    g_corrupt.fetch_add(1);
  }
}

// One iteration of `key`: planned sizes (the key decides them), unplanned extras, a
// block held past the iteration, one handed to another thread.
void iteration(const std::string& key, std::mt19937_64& rng, std::uint64_t* tag, bool fork_inside) {
  g_begin(key.c_str());
  std::mt19937_64 sizes(std::hash<std::string>()(key));
  std::vector<block> live;
  const std::size_t n0 = 8192 + sizes() % 100000;
  drop(make(RA_MALLOC(n0), n0, ++*tag));
  block act = make(RA_MALLOC(64 * 1024), 64 * 1024, ++*tag);
  for (int layer = 0; layer < 10; ++layer) {
    const std::size_t wn = 4096 + sizes() % 40000;
    block work = make(RA_CALLOC(1, wn), wn, ++*tag);
    if (rng() % 6 == 0) {  // unplanned: a size never recorded
      const std::size_t n = 1 + rng() % 50000;
      live.push_back(make(RA_MALLOC(n), n, ++*tag));
    }
    if (layer == 3) {
      void* a = nullptr;
      if (RA_MEMALIGN(&a, 4096, 12288) != 0) std::abort();
      live.push_back(make(a, 12288, ++*tag));
      live.back().p = static_cast<std::uint8_t*>(RA_REALLOC(live.back().p, 20000));
      live.back().n = 12288;  // realloc keeps the first 12288 bytes
    }
    if (layer == 5) {
#ifdef STRESS_LINKED
      block b = make(RA_MALLOC(30000), 30000, ++*tag);
#else
      block b = make(new std::uint8_t[30000], 30000, ++*tag);
      b.is_new = true;
#endif
      hand_over(b);
    }
    if (layer == 6 && fork_inside) fork_and_check(live);
    const std::size_t nn = 16384 + sizes() % 60000;
    block next = make(RA_MALLOC(nn), nn, ++*tag);
    drop(work);
    drop(act);
    act = next;
  }
  drop(act);
  // Some blocks outlive the iteration (outputs, caches): freed in the next one.
  const std::size_t keep = live.empty() ? 0 : rng() % live.size();
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i == keep) hand_over(live[i]); else drop(live[i]);
  }
  g_end();
  g_iterations.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

int main(int argc, char** argv) {
  const int waves = argc > 1 ? std::atoi(argv[1]) : 6;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 6;
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 30;
#ifdef STRESS_LINKED
  g_begin = replayalloc_iteration_begin;
  g_end = replayalloc_iteration_end;
  g_stats = replayalloc_stats_json;
#else
  g_begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  g_end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  g_stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  if (g_begin == nullptr || g_end == nullptr || g_stats == nullptr) {
    std::fprintf(stderr, "stress: not run under libreplayalloc_preload.so\n");
    return 2;
  }
#endif
  for (int w = 0; w < waves; ++w) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([=] {
        std::mt19937_64 rng(1000 * w + t);
        std::uint64_t tag = (std::uint64_t(w) << 48) | (std::uint64_t(t) << 40);
        const std::string key = "stress/" + std::to_string(t % 3);
        for (int i = 0; i < iterations; ++i) {
          iteration(key, rng, &tag, w == 1 && t == 0 && i == iterations / 2);
          if (i % 4 == 3) take_handed();
        }
        if (t % 3 == 1) {  // ends with an iteration open
          g_begin(key.c_str());
          block b = make(RA_MALLOC(64 * 1024), 64 * 1024, ++tag);
          hand_over(b);
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  take_handed();
  char buf[2048];
  g_stats(buf, sizeof buf);
  std::printf("stress: %llu iterations, %llu blocks, %llu freed on another thread, corruptions %llu\n%s\n",
              static_cast<unsigned long long>(g_iterations.load()),
              static_cast<unsigned long long>(g_blocks.load()),
              static_cast<unsigned long long>(g_remote.load()),
              static_cast<unsigned long long>(g_corrupt.load()), buf);
  const bool hits = std::strstr(buf, "\"slab_hits\":0,") == nullptr;
  if (!hits) std::fprintf(stderr, "stress: nothing was served from a slab\n");
  return g_corrupt.load() == 0 && hits ? 0 : 1;
}
