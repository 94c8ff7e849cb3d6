/* The LD_PRELOAD library's own unwinder (Note [The LD_PRELOAD library's own runtime],
 * hooks/CMakeLists.txt): in a C program, where nothing loads libgcc_s, the engine
 * throws std::bad_alloc inside itself when its tables cannot grow and catches it there.
 * Run with REPLAYALLOC_MODE=record under the library: one iteration records 300,000
 * blocks while the address space is limited to what the process has plus 64 MiB. The
 * blocks come from ranges the library reserved at its start, the recording's tables
 * need new mappings: their growth fails, the engine catches the bad_alloc ("out of
 * memory while recording"), the iteration passes through, and every block stays the
 * program's. Checks that libgcc_s was never loaded, that the message came (the
 * exception was thrown and caught by the copy), that every block kept its bytes, and
 * that the process allocates again once the limit is lifted.
 * Prints "own_unwinder: ok" and exits 0, or says what failed and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define CHECK(cond, ...)                      \
  do {                                        \
    if (!(cond)) {                            \
      fprintf(stderr, "own_unwinder: ");      \
      fprintf(stderr, __VA_ARGS__);           \
      fprintf(stderr, "\n");                  \
      exit(1);                                \
    }                                         \
  } while (0)

static long status_kb(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
  }
  if (f != NULL) fclose(f);
  return kb;
}

static int loaded(const char* name) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) found |= strstr(line, name) != NULL;
  if (f != NULL) fclose(f);
  return found;
}

enum { blocks = 300000 };
static unsigned char* block[blocks];

int main(void) {
  int (*begin)(const char*) = (int (*)(const char*))dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin");
  int (*end)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "replayalloc_iteration_end");
  CHECK(begin != NULL && end != NULL, "not run under the LD_PRELOAD library");
  CHECK(!loaded("libgcc_s"), "libgcc_s was loaded into a C program");

  /* The engine's messages, to read back. */
  char log_path[] = "/tmp/replayalloc-own-unwinder-XXXXXX";
  const int log_fd = mkstemp(log_path);
  CHECK(log_fd >= 0, "no temporary file");
  unlink(log_path);
  const int saved_stderr = dup(2);
  dup2(log_fd, 2);

  CHECK(begin("own-unwinder") == 0, "replayalloc_iteration_begin failed");
  struct rlimit limit = {(rlim_t)(status_kb("VmSize:") + 64 * 1024) * 1024, RLIM_INFINITY};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0, "setrlimit");
  int made = 0;
  for (; made < blocks; ++made) {
    const size_t size = 4096 + 16 * (size_t)(made % 64);
    block[made] = malloc(size);
    if (block[made] == NULL) break;
    memset(block[made], made & 0xff, 64);
  }
  int kept = 1;
  for (int i = 0; i < made; ++i) {
    for (int j = 0; j < 64; ++j) kept &= block[i][j] == (unsigned char)(i & 0xff);
    free(block[i]);
  }
  end();
  limit.rlim_cur = RLIM_INFINITY;
  setrlimit(RLIMIT_AS, &limit);
  dup2(saved_stderr, 2);

  char log[65536];
  const ssize_t n = pread(log_fd, log, sizeof log - 1, 0);
  log[n > 0 ? n : 0] = '\0';
  CHECK(strstr(log, "out of memory while recording 'own-unwinder'") != NULL,
        "the recording's tables never failed to grow (%d blocks made); the engine said:\n%s", made, log);
  CHECK(kept, "a block lost its bytes");
  CHECK(made > 1000, "only %d blocks made", made);
  CHECK(!loaded("libgcc_s"), "libgcc_s was loaded to unwind");
  void* p = malloc(1 << 20);
  CHECK(p != NULL, "no allocation after the limit was lifted");
  free(p);
  printf("own_unwinder: ok (%d blocks; the engine's bad_alloc caught inside it)\n", made);
  return 0;
}
