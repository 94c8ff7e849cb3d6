// A "service" restarted with REPLAYALLOC_PLAN_DIR: run with
// LD_PRELOAD=libreplayalloc_preload.so, it marks ITERATIONS iterations of key "request"
// through dlsym'd C API names; each allocates an inference-shaped pattern (sizes scaled
// by SCALE), fills every block with a pattern and checks it before the free. Prints the
// statistics JSON on its last line and exits 1 when any byte was corrupted. With
// RESTART_OTHER=1 each layer makes one more workspace: another program under the key.
// With RESTART_KEYS=K iterations take turns over K keys: "request", "request1", ...
// Usage: restart ITERATIONS SCALE
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct block {
  unsigned char* p;
  std::size_t n;
  unsigned char tag;
};

int g_bad = 0;

block make(std::size_t n, unsigned char tag) {
  auto* p = static_cast<unsigned char*>(std::malloc(n));
  if (p == nullptr) std::abort();
  std::memset(p, tag, n);
  return {p, n, tag};
}

void drop(const block& b) {
  for (std::size_t i = 0; i < b.n; ++i) {
    if (b.p[i] != b.tag) {
      ++g_bad;
      break;
    }
  }
  std::free(b.p);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: restart ITERATIONS SCALE\n");
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  const std::size_t scale = std::strtoul(argv[2], nullptr, 10);
  using begin_fn = int (*)(const char*);
  using end_fn = int (*)();
  using stats_fn = std::size_t (*)(char*, std::size_t);
  auto begin = reinterpret_cast<begin_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<end_fn>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "replayalloc_stats_json"));
  if (begin == nullptr || end == nullptr || stats == nullptr) {
    std::fprintf(stderr, "restart: not run under libreplayalloc_preload.so\n");
    return 2;
  }
  const bool other = std::getenv("RESTART_OTHER") != nullptr;
  const int keys = std::getenv("RESTART_KEYS") != nullptr ? std::atoi(std::getenv("RESTART_KEYS")) : 1;
  if (keys < 1 || keys > 64) {
    std::fprintf(stderr, "restart: RESTART_KEYS must be 1..64\n");
    return 2;
  }
  char names[64][16];
  for (int k = 0; k < keys; ++k) {
    if (k == 0) std::snprintf(names[k], sizeof names[k], "request");
    else std::snprintf(names[k], sizeof names[k], "request%d", k);
  }
  std::vector<block> outputs;
  outputs.reserve(static_cast<std::size_t>(iterations));  // no allocation inside an iteration
  for (int it = 0; it < iterations; ++it) {
    begin(names[it % keys]);
    // Layers: an activation lives across the next layer; a workspace within one.
    block act = make(64 * 1024 * scale, static_cast<unsigned char>(it));
    for (int layer = 0; layer < 24; ++layer) {
      block work = make((4096 + 512 * layer) * scale, static_cast<unsigned char>(layer + 1));
      block next = make((32 * 1024 + 1024 * (layer % 5)) * scale, static_cast<unsigned char>(layer + 7));
      drop(work);
      if (other) drop(make(8192 * scale, static_cast<unsigned char>(layer + 3)));
      drop(act);
      act = next;
    }
    outputs.push_back(act);  // the output outlives the iteration
    end();
  }
  for (const block& b : outputs) drop(b);
  char buf[4096];
  stats(buf, sizeof buf);
  std::printf("corruptions %d\n%s\n", g_bad, buf);
  return g_bad == 0 ? 0 : 1;
}
