/* The LD_PRELOAD library's own unwinder (Note [The LD_PRELOAD library's own runtime],
 * hooks/CMakeLists.txt): in a C program, where nothing loads libgcc_s, the engine
 * throws std::bad_alloc inside itself when its tables cannot grow and catches it there.
 * Run with REPLAYALLOC_MODE=record under the library. A ring of 1,024 blocks is made
 * first; then one iteration frees and makes them again, the same sizes, up to 8 million
 * times, while the address space is limited to what the process has plus 64 MiB. The
 * blocks reuse the pages of the ones freed (no new mapping, wherever the allocator put
 * them), but the recording's tables grow by one entry a request and need new mappings:
 * their growth fails, the engine catches the bad_alloc ("out of memory while recording"),
 * the iteration passes through, and every block stays the program's. Checks that
 * libgcc_s was never loaded, that the message came (the exception was thrown and caught
 * by the copy), that every block kept its bytes to its free, and that the process
 * allocates again once the limit is lifted.
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

enum { ring = 1024, most_requests = 8000000, look_every = 65536 };
static unsigned char* block[ring];
static size_t block_size(long request) { return 4096 + 16 * (size_t)(request % 64); }

/* Whether the engine's messages, read back from fd, say the recording ran out. */
static int said_out_of_memory(int fd, char* log, size_t capacity) {
  const ssize_t n = pread(fd, log, capacity - 1, 0);
  log[n > 0 ? n : 0] = '\0';
  return strstr(log, "out of memory while recording 'own-unwinder'") != NULL;
}

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

  /* Request r's block is ring slot r % ring, of block_size(r) bytes, stamped r & 0xff. */
  for (long r = 0; r < ring; ++r) {
    block[r] = malloc(block_size(r));
    CHECK(block[r] != NULL, "no memory for the ring");
    memset(block[r], (int)(r & 0xff), 64);
  }
  CHECK(begin("own-unwinder") == 0, "replayalloc_iteration_begin failed");
  struct rlimit limit = {(rlim_t)(status_kb("VmSize:") + 64 * 1024) * 1024, RLIM_INFINITY};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0, "setrlimit");
  static char log[65536];
  int kept = 1;
  long request = ring;
  long failed_at = -1;
  for (; request < most_requests; ++request) {
    unsigned char* old = block[request % ring];
    for (int j = 0; j < 64; ++j) kept &= old[j] == (unsigned char)((request - ring) & 0xff);
    free(old);
    unsigned char* p = malloc(block_size(request));
    if (p == NULL) {
      failed_at = request;
      break;
    }
    memset(p, (int)(request & 0xff), 64);
    block[request % ring] = p;
    /* Once the recording gave up, a ring's worth more passes through. */
    if (request % look_every == 0 && said_out_of_memory(log_fd, log, sizeof log)) {
      const long last = request + ring;
      for (++request; request <= last; ++request) {
        unsigned char* q = block[request % ring];
        for (int j = 0; j < 64; ++j) kept &= q[j] == (unsigned char)((request - ring) & 0xff);
        free(q);
        block[request % ring] = malloc(block_size(request));
        CHECK(block[request % ring] != NULL, "no block after the recording gave up (request %ld)", request);
        memset(block[request % ring], (int)(request & 0xff), 64);
      }
      break;
    }
  }
  end();
  limit.rlim_cur = RLIM_INFINITY;
  setrlimit(RLIMIT_AS, &limit);
  dup2(saved_stderr, 2);

  CHECK(failed_at < 0, "request %ld found no memory: the blocks, not the recording's tables, met the limit", failed_at);
  CHECK(said_out_of_memory(log_fd, log, sizeof log),
        "the recording's tables never failed to grow (%ld requests); the engine said:\n%s", request, log);
  for (long r = request; r < request + ring; ++r) {
    unsigned char* q = block[r % ring];
    for (int j = 0; j < 64; ++j) kept &= q[j] == (unsigned char)((r - ring) & 0xff);
    free(q);
  }
  CHECK(kept, "a block lost its bytes");
  CHECK(!loaded("libgcc_s"), "libgcc_s was loaded to unwind");
  void* p = malloc(1 << 20);
  CHECK(p != NULL, "no allocation after the limit was lifted");
  free(p);
  printf("own_unwinder: ok (%ld requests; the engine's bad_alloc caught inside it)\n", request);
  return 0;
}
