// A program that knows nothing of replayalloc but its C API names: run with
// LD_PRELOAD=libreplayalloc_preload.so it marks its iterations through dlsym, uses
// every allocation interface, frees across threads, forks mid-iteration and exits a
// thread with an iteration open; every block carries a pattern checked before its
// free. Prints "slab hits: N" and exits 0 when nothing was corrupted.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using begin_fn = int (*)(const char*);
using end_fn = int (*)();
using stats_fn = size_t (*)(char*, size_t);
begin_fn g_begin;
end_fn g_end;
stats_fn g_stats;
int g_bad = 0;

struct block {
  unsigned char* p;
  size_t n;
  unsigned char tag;
};

block make(void* p, size_t n, unsigned char tag) {
  std::memset(p, tag, n);
  return {static_cast<unsigned char*>(p), n, tag};
}

void check(const block& b, const char* what) {
  for (size_t i = 0; i < b.n; ++i) {
    if (b.p[i] != b.tag) {
      std::fprintf(stderr, "probe: %s overwritten at byte %zu\n", what, i);
      ++g_bad;
      return;
    }
  }
}

// One iteration through every interface; returns the block kept for the caller.
void iteration(const char* key, int salt, bool fork_inside) {
  g_begin(key);
  block a = make(std::malloc(100000), 100000, static_cast<unsigned char>(salt));
  block b = make(std::calloc(64, 1024), 65536, static_cast<unsigned char>(salt + 1));
  void* c_raw = nullptr;
  if (posix_memalign(&c_raw, 4096, 20000) != 0) ++g_bad;
  block c = make(c_raw, 20000, static_cast<unsigned char>(salt + 2));
  auto* v = new std::vector<int>(5000, salt);
  check(a, "malloc block");
  std::free(a.p);
  block d = make(std::realloc(nullptr, 30000), 30000, static_cast<unsigned char>(salt + 3));
  d.p = static_cast<unsigned char*>(std::realloc(d.p, 60000));
  for (size_t i = 0; i < 30000; ++i) {
    if (d.p[i] != d.tag) {
      ++g_bad;
      break;
    }
  }
  d = make(d.p, 60000, d.tag);
  if (fork_inside) {
    const pid_t pid = fork();
    if (pid == 0) {  // the child goes on allocating in the abandoned iteration's place
      for (int i = 0; i < 50; ++i) {
        block x = make(std::malloc(100000), 100000, 0x5a);
        check(b, "child: parent's block");
        check(x, "child block");
        std::free(x.p);
      }
      check(c, "child: aligned block");
      std::_Exit(g_bad == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "probe: the forked child failed\n");
      ++g_bad;
    }
  }
  // Freed on another thread, while the iteration runs.
  std::thread([&] { check(b, "calloc block"); std::free(b.p); }).join();
  check(c, "aligned block");
  std::free(c.p);
  if ((*v)[4999] != salt) ++g_bad;
  delete v;
  check(d, "realloc block");
  std::free(d.p);
  g_end();
}

}  // namespace

int main() {
  g_begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  g_end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  g_stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  if (g_begin == nullptr || g_end == nullptr || g_stats == nullptr) {
    std::fprintf(stderr, "probe: replayalloc is not preloaded\n");
    return 2;
  }
  // Note [The fallback's huge blocks]: the preloaded library's malloc_conf reaches
  // the jemalloc it loaded (its symbol interposes jemalloc's own weak one).
  using mallctl_fn = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<mallctl_fn>(dlsym(RTLD_DEFAULT, "mallctl"));
  size_t threshold = 1, len = sizeof threshold;
  if (std::getenv("MALLOC_CONF") == nullptr &&
      (mallctl == nullptr || mallctl("opt.oversize_threshold", &threshold, &len, nullptr, 0) != 0 ||
       threshold != 0)) {
    std::fprintf(stderr, "probe: jemalloc's opt.oversize_threshold is %zu, not replayalloc's 0\n", threshold);
    ++g_bad;
  }
  for (int i = 0; i < 10; ++i) iteration("probe/main", 10 + i, i == 6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 8; ++i) iteration("probe/threads", 40 + t * 10 + i, false);
      g_begin("probe/threads");  // exits with an iteration open
      void* p = std::malloc(100000);
      std::free(p);
    });
  }
  for (auto& th : threads) th.join();
  char json[2048];
  g_stats(json, sizeof json);
  const char* hits = std::strstr(json, "\"slab_hits\":");
  const long n = hits ? std::atol(hits + 12) : 0L;
  std::printf("probe: %s\nslab hits: %ld\n", json, n);
  if (n == 0) std::fprintf(stderr, "probe: nothing was replayed from a slab\n");
  return g_bad == 0 && n > 0 ? 0 : 1;
}
