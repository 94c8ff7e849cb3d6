/* A C program built with `cc traces.c $(pkg-config --cflags --libs replayalloc)`:
 * iterations through the C API, then a recording saved as CSV and as a binary trace
 * (argv[1], argv[2]); run_install_test.sh reads both back with the installed
 * `replayalloc report`. Last, what any C++ code in the process does (libstdc++,
 * Abseil, a plugin): operator new, then the unsized operator delete, found as the
 * dynamic linker binds them. Linking libreplayalloc.so must leave both to the C++
 * runtime: when the library brought jemalloc into the process's symbol scope, new was
 * jemalloc's and its delete called glibc's free on the block ("free(): invalid pointer",
 * or "double free or corruption (out)" inside replayalloc_save_trace; issue 33). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <replayalloc/replayalloc.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: traces TRACE.csv TRACE.ratrace\n");
    return 2;
  }
  static const size_t sizes[] = {4096, 65536, 1000, 300000, 128, 20000};
  const unsigned ops[2] = {replayalloc_op_id("c::load"), replayalloc_op_id("c::compute, \"quoted\"")};
  for (int it = 0; it < 5; ++it) {
    if (replayalloc_iteration_begin("c/demo") != 0) return 1;
    void *blocks[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
      replayalloc_set_op(ops[i % 2]);
      blocks[i] = replayalloc_malloc(sizes[i]);
      if (blocks[i] == NULL) return 1;
      memset(blocks[i], it, sizes[i]);
    }
    replayalloc_set_op(0);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) replayalloc_free(blocks[i]);
    if (replayalloc_iteration_end() != 0) return 1;
  }
  for (int f = 1; f <= 2; ++f) {
    if (replayalloc_save_trace("c/demo", argv[f]) != 0) {
      fprintf(stderr, "traces: replayalloc_save_trace(\"c/demo\", \"%s\") failed\n", argv[f]);
      return 1;
    }
  }
  void *(*op_new)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
  void (*op_delete)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
  if (op_new == NULL || op_delete == NULL) {
    fprintf(stderr, "traces: operator new/delete not found: %s\n", dlerror());
    return 1;
  }
  Dl_info from_new, from_delete;
  if (!dladdr((void *)op_new, &from_new) || !dladdr((void *)op_delete, &from_delete)) return 1;
  printf("traces: operator new from %s, operator delete from %s\n", from_new.dli_fname,
         from_delete.dli_fname);
  fflush(stdout);
  for (int i = 0; i < 1000; ++i) op_delete(op_new(64 + (size_t)i * 40));
  printf("replayalloc traces: saved %s and %s\n", argv[1], argv[2]);
  return 0;
}
