// Call-stack op tags under LD_PRELOAD=libreplayalloc_preload.so: this program
// allocates from two functions of its own while its iteration records, saves the
// trace as CSV (replayalloc_save_trace, found with dlsym) and checks that the op
// column names the function each allocation came from. argv[1] is the CSV path;
// argv[2] ("tagged", optional) sets an explicit op, which the stack must not replace.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

// Out of line, and using the block after malloc returns, so neither is inlined nor
// a tail call: each keeps its own frame above the hook.
__attribute__((noinline)) void* stack_test_make_weights(std::size_t n) {
  void* p = std::malloc(n);
  std::memset(p, 1, n);
  return p;
}

__attribute__((noinline)) void* stack_test_make_activations(std::size_t n) {
  void* p = std::malloc(n);
  std::memset(p, 2, n);
  return p;
}

int main(int argc, char** argv) {
  auto begin = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin"));
  auto end = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_end"));
  auto recording = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "replayalloc_iteration_recording"));
  auto save = reinterpret_cast<int (*)(const char*, const char*)>(dlsym(RTLD_DEFAULT, "replayalloc_save_trace"));
  auto op_id = reinterpret_cast<unsigned (*)(const char*)>(dlsym(RTLD_DEFAULT, "replayalloc_op_id"));
  auto set_op = reinterpret_cast<void (*)(unsigned)>(dlsym(RTLD_DEFAULT, "replayalloc_set_op"));
  if (begin == nullptr || end == nullptr || recording == nullptr || save == nullptr || op_id == nullptr ||
      set_op == nullptr || argc < 2) {
    std::fprintf(stderr, "usage: LD_PRELOAD=libreplayalloc_preload.so stack_program OUT.csv [tagged]\n");
    return 77;
  }
  const bool tagged = argc > 2 && std::strcmp(argv[2], "tagged") == 0;
  begin("stack-ops");
  if (recording() != 1) {
    std::fprintf(stderr, "stack_program: the first iteration is not recording\n");
    return 1;
  }
  if (tagged) set_op(op_id("explicit/op"));
  void* w = stack_test_make_weights(64 << 10);
  void* a = stack_test_make_activations(128 << 10);
  std::free(a);
  std::free(w);
  set_op(0);
  end();
  if (save("stack-ops", argv[1]) != 0) return 1;

  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string csv = ss.str();
  std::printf("%s", csv.c_str());
  int failed = 0;
  // Each allocation's row (by size) names its function, or the explicit op.
  auto row_of = [&](const char* size) {
    const std::string key = std::string(",") + size + ",";
    const std::size_t at = csv.find(key);
    if (at == std::string::npos) return std::string();
    const std::size_t eol = csv.find('\n', at);
    return csv.substr(at, eol - at);
  };
  const std::string w_row = row_of("65536"), a_row = row_of("131072");
  const char* w_want = tagged ? "explicit/op" : "stack_test_make_weights";
  const char* a_want = tagged ? "explicit/op" : "stack_test_make_activations";
  if (w_row.find(w_want) == std::string::npos) {
    std::fprintf(stderr, "stack_program: the 64 KiB row does not name %s: '%s'\n", w_want, w_row.c_str());
    ++failed;
  }
  if (a_row.find(a_want) == std::string::npos) {
    std::fprintf(stderr, "stack_program: the 128 KiB row does not name %s: '%s'\n", a_want, a_row.c_str());
    ++failed;
  }
  // The caller's frame follows: "f <- main".
  if (!tagged && w_row.find(" <- main") == std::string::npos) {
    std::fprintf(stderr, "stack_program: no caller frame in '%s'\n", w_row.c_str());
    ++failed;
  }
  return failed == 0 ? 0 : 1;
}
