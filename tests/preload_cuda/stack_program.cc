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
#include <vector>

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

// Through calloc: another entry point, hence another chain of the library's own frames
// between the hook and the tagger (Note [Cached unwind steps]: the walk remembers the
// last chain), between the two mallocs.
__attribute__((noinline)) void* stack_test_make_scratch(std::size_t n) {
  void* p = std::calloc(1, n);
  static_cast<char*>(p)[0] = 3;
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
  // Three of each: the first walk of a call site is the DWARF unwinder's, the next
  // ones use the frame sizes it taught (Note [Cached unwind steps]): all must name the
  // same frames.
  void* w[3];
  void* a[3];
  void* s[3];
  for (int i = 0; i < 3; ++i) {
    w[i] = stack_test_make_weights(64 << 10);
    s[i] = stack_test_make_scratch(96 << 10);
    a[i] = stack_test_make_activations(128 << 10);
  }
  for (int i = 0; i < 3; ++i) {
    std::free(a[i]);
    std::free(s[i]);
    std::free(w[i]);
  }
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
  const std::string w_row = row_of("65536"), a_row = row_of("131072"), s_row = row_of("98304");
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
  const char* s_want = tagged ? "explicit/op" : "stack_test_make_scratch";
  if (s_row.find(s_want) == std::string::npos) {
    std::fprintf(stderr, "stack_program: the 96 KiB row does not name %s: '%s'\n", s_want, s_row.c_str());
    ++failed;
  }
  // Every row of a size names the same frames (its last column, the op).
  auto ops_of = [&](const char* size) {
    std::vector<std::string> ops;
    const std::string key = std::string(",") + size + ",";
    for (std::size_t at = csv.find(key); at != std::string::npos; at = csv.find(key, at + 1)) {
      const std::size_t eol = csv.find('\n', at);
      const std::string row = csv.substr(at, eol - at);
      ops.push_back(row.substr(row.find(',', row.find(',', row.find(',', row.find(',', 1) + 1) + 1) + 1) + 1));
    }
    return ops;
  };
  for (const char* size : {"65536", "98304", "131072"}) {
    const std::vector<std::string> ops = ops_of(size);
    if (ops.size() != 3) {
      std::fprintf(stderr, "stack_program: %zu rows of %s B, not 3\n", ops.size(), size);
      ++failed;
    }
    for (const std::string& op : ops) {
      if (op != ops[0]) {
        std::fprintf(stderr, "stack_program: rows of %s B name other frames: '%s' and '%s'\n", size, ops[0].c_str(),
                     op.c_str());
        ++failed;
      }
    }
  }
  // The caller's frame follows: "f <- main".
  if (!tagged && w_row.find(" <- main") == std::string::npos) {
    std::fprintf(stderr, "stack_program: no caller frame in '%s'\n", w_row.c_str());
    ++failed;
  }
  return failed == 0 ? 0 : 1;
}
