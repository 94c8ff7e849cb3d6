/* What the LD_PRELOAD library's own runtime asks of a process at its start (Note [The
 * LD_PRELOAD library's own runtime], hooks/CMakeLists.txt; Note [Standard streams left
 * to the program], allocator/support/stream_init.cc), in a C program that makes no
 * request at or above the minimum size:
 *  - exit handlers: this program defines __cxa_atexit (exported), so the library's
 *    registrations reach it first; it counts those whose function lies in the library
 *    and passes each on to the C library's. At most LIMIT (argv[1]); 63 while every unit
 *    that includes <iostream> registered the streams' emptied destructor, which took
 *    glibc two more lists (callocs) and exit two more walks.
 *  - requests: the library's copy of libstdc++ makes its emergency exception pool
 *    (72,704 bytes) at load; that is the library's own memory, not the program's, so
 *    the statistics count no allocation at or above the minimum before main's first
 *    (1 while the pool was served as the program's: auto mode's watcher started at every
 *    start). Then main makes one of 64 KiB, which is counted: the count is read.
 *  - the handlers run: one of the program's own, registered in main, runs at exit.
 * Prints "own_requests: ok" and exits 0, or says what failed and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) {                          \
      fprintf(stderr, "own_requests: ");    \
      fprintf(stderr, __VA_ARGS__);         \
      fprintf(stderr, "\n");                \
      exit(1);                              \
    }                                       \
  } while (0)

static int g_library_handlers;
static int g_handlers;

int __cxa_atexit(void (*f)(void*), void* arg, void* dso) {
  static int (*next)(void (*)(void*), void*, void*);
  if (next == NULL) next = (int (*)(void (*)(void*), void*, void*))dlsym(RTLD_NEXT, "__cxa_atexit");
  if (next == NULL) abort();
  Dl_info info;
  if (dladdr((void*)f, &info) != 0 && info.dli_fname != NULL && strstr(info.dli_fname, "libreplayalloc") != NULL) {
    ++g_library_handlers;
  }
  ++g_handlers;
  return next(f, arg, dso);
}

/* "allocations" of the library's statistics JSON; -1 where it cannot be read. */
static long allocations(void) {
  size_t (*stats_json)(char*, size_t) = (size_t (*)(char*, size_t))dlsym(RTLD_DEFAULT, "replayalloc_stats_json");
  if (stats_json == NULL) return -1;
  static char buf[16384];
  if (stats_json(buf, sizeof buf) >= sizeof buf) return -1;
  const char* at = strstr(buf, "\"allocations\":");
  return at == NULL ? -1 : atol(at + strlen("\"allocations\":"));
}

static void at_exit(void) {
  static const char ok[] = "own_requests: ok\n";
  if (write(1, ok, sizeof ok - 1) < 0) _exit(1);
}

int main(int argc, char** argv) {
  CHECK(argc == 2, "usage: own_requests LIMIT");
  const int limit = atoi(argv[1]);
  CHECK(dlsym(RTLD_DEFAULT, "replayalloc_stats_json") != NULL, "not run under the library (LD_PRELOAD)");
  CHECK(g_handlers > 0, "no exit handler reached this program's __cxa_atexit (is it exported?)");
  CHECK(g_library_handlers <= limit, "the library registered %d exit handlers at its start, more than %d",
        g_library_handlers, limit);
  const long before = allocations();
  CHECK(before == 0, "%ld allocations at or above the minimum counted before main made one (the library's own?)",
        before);
  void* p = malloc(64 << 10);
  CHECK(p != NULL, "malloc(64 KiB) failed");
  memset(p, 1, 64 << 10);
  const long after = allocations();
  free(p);
  CHECK(after == 1, "%ld allocations counted after main's one of 64 KiB", after);
  printf("own_requests: the library registered %d exit handlers; ", g_library_handlers);
  fflush(stdout);
  CHECK(atexit(at_exit) == 0, "atexit failed");
  return 0;
}
