/* jemalloc's non-standard API under libreplayalloc_preload.so (hooks/jemalloc_api.cc;
 * Note [The LD_PRELOAD library's own runtime], hooks/CMakeLists.txt). A C program, as
 * most of those a shell runs are: it finds the API with dlsym, as a program that
 * links libjemalloc.so.2 binds to it, and checks
 *  - that the API it reaches is the preload library's (dladdr), even with
 *    libjemalloc.so.2 loaded too (run_jemalloc_api.sh preloads it after), and that
 *    mallctl and mallocx reach the jemalloc that serves the fallback (the preload
 *    settings, thread.allocated);
 *  - that every block malloc, calloc and realloc gave it (below the minimum, at it,
 *    large: jemalloc's, the front cache's, a slab's once auto mode replays the loop)
 *    keeps its bytes through sallocx, rallocx (plain, aligned, zeroing), xallocx and is
 *    freed by dallocx and sdallocx, and that mallocx's blocks are freed by free;
 *  - that an arena of the program's own, its blocks freed with MALLOCX_TCACHE_NONE, can
 *    be destroyed and nothing after comes from it;
 *  - with EXPECT_OWN_RUNTIME=1, that none of libstdc++, libgcc_s and libjemalloc.so was
 *    loaded; with EXPECT_NO_LIBM=1, nor libm (Note [The LD_PRELOAD library without
 *    libm], hooks/own_math.cc).
 * Prints "jemalloc_api: ok" and exits 0, or says what failed and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZERO 0x40
#define ALIGN64 6 /* MALLOCX_LG_ALIGN(6) */
#define TCACHE_NONE ((-1 + 2) << 8)

typedef void* (*mallocx_fn)(size_t, int);
typedef void* (*rallocx_fn)(void*, size_t, int);
typedef size_t (*xallocx_fn)(void*, size_t, size_t, int);
typedef size_t (*sallocx_fn)(const void*, int);
typedef void (*dallocx_fn)(void*, int);
typedef void (*sdallocx_fn)(void*, size_t, int);
typedef int (*mallctl_fn)(const char*, void*, size_t*, void*, size_t);

static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      fprintf(stderr, "jemalloc_api: FAILED: ");  \
      fprintf(stderr, __VA_ARGS__);               \
      fprintf(stderr, "\n");                      \
      if (++failures > 20) exit(1);               \
    }                                             \
  } while (0)

static void* need(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    fprintf(stderr, "jemalloc_api: FAILED: %s not found\n", name);
    exit(1);
  }
  return f;
}

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(seed * 131u + i * 7u);
}
static int intact(const unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != (unsigned char)(seed * 131u + i * 7u)) return 0;
  return 1;
}
static int zero(const unsigned char* p, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i)
    if (p[i] != 0) return 0;
  return 1;
}

static int loaded(const char* name) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  if (maps == NULL) return -1;
  while (fgets(line, sizeof line, maps) != NULL)
    if (strstr(line, name) != NULL) found = 1;
  fclose(maps);
  return found;
}

int main(void) {
  const mallocx_fn mallocx = (mallocx_fn)need("mallocx");
  const rallocx_fn rallocx = (rallocx_fn)need("rallocx");
  const xallocx_fn xallocx = (xallocx_fn)need("xallocx");
  const sallocx_fn sallocx = (sallocx_fn)need("sallocx");
  const dallocx_fn dallocx = (dallocx_fn)need("dallocx");
  const sdallocx_fn sdallocx = (sdallocx_fn)need("sdallocx");
  const mallctl_fn mallctl = (mallctl_fn)need("mallctl");

  /* The API is the preload library's, whatever else is loaded. */
  const char* lib = getenv("PRELOAD_LIBRARY");
  Dl_info info;
  CHECK(dladdr((void*)mallocx, &info) != 0 && lib != NULL && info.dli_fname != NULL &&
            strstr(info.dli_fname, "libreplayalloc_preload") != NULL,
        "mallocx is %s's, not the preload library's", info.dli_fname ? info.dli_fname : "?");
  if (getenv("EXPECT_OWN_RUNTIME") != NULL && strcmp(getenv("EXPECT_OWN_RUNTIME"), "1") == 0) {
    CHECK(loaded("libstdc++") == 0, "libstdc++ was loaded into a C program");
    CHECK(loaded("libjemalloc") == 0, "libjemalloc.so was loaded");
    CHECK(loaded("libgcc_s") == 0, "libgcc_s was loaded into a C program");
  }
  if (getenv("EXPECT_NO_LIBM") != NULL && strcmp(getenv("EXPECT_NO_LIBM"), "1") == 0) {
    CHECK(loaded("libm.so") == 0, "libm was loaded into a C program that calls none of it");
  }

  /* mallctl reads the jemalloc that serves the fallback: the preload settings. */
  size_t threshold = 1, len = sizeof threshold;
  CHECK(mallctl("opt.oversize_threshold", &threshold, &len, NULL, 0) == 0 && threshold == 0,
        "opt.oversize_threshold is %zu, not the preload library's 0", threshold);
  /* Note [Thread caches left to the front cache] (allocator/backend/jemalloc_backend.cc):
   * jemalloc's thread caches off where the front cache serves, on where it does not
   * (EXPECT_TCACHE, 0 or 1; unset: not checked). */
  const char* expect_tcache = getenv("EXPECT_TCACHE");
  if (expect_tcache != NULL) {
    _Bool tcache = !(expect_tcache[0] == '1');
    len = sizeof tcache;
    CHECK(mallctl("opt.tcache", &tcache, &len, NULL, 0) == 0 && tcache == (expect_tcache[0] == '1'),
          "opt.tcache is %d, not %s", (int)tcache, expect_tcache);
  }
  uint64_t before = 0, after = 0;
  len = sizeof before;
  CHECK(mallctl("thread.allocated", &before, &len, NULL, 0) == 0, "thread.allocated unreadable");
  void* big = mallocx(1 << 20, 0);
  len = sizeof after;
  CHECK(mallctl("thread.allocated", &after, &len, NULL, 0) == 0 && after - before >= (1 << 20),
        "a mallocx of 1 MiB moved thread.allocated by %llu", (unsigned long long)(after - before));
  free(big); /* mallocx's block, freed by free */

  static const size_t sizes[] = {24, 200, 3000, 4096, 5000, 20000, 70000, 300000, 3 << 20};
  const size_t n = sizeof sizes / sizeof sizes[0];
  /* Many rounds of the same requests: auto mode may replay them from a slab. */
  for (unsigned round = 0; round < 1500; ++round) {
    for (size_t i = 0; i < n; ++i) {
      const size_t size = sizes[i];
      const unsigned seed = round * 31u + (unsigned)i;
      unsigned char* p = (i % 2 == 0) ? malloc(size) : calloc(1, size);
      CHECK(p != NULL, "malloc(%zu)", size);
      fill(p, size, seed);
      const size_t usable = sallocx(p, 0);
      CHECK(usable >= size && usable == malloc_usable_size(p), "sallocx %zu, usable %zu, size %zu", usable,
            malloc_usable_size(p), size);
      switch (round % 4) {
        case 0: { /* rallocx, plain: realloc */
          unsigned char* q = rallocx(p, size * 2, 0);
          CHECK(q != NULL && intact(q, size, seed), "rallocx(%zu -> %zu) lost bytes", size, size * 2);
          dallocx(q, 0);
          break;
        }
        case 1: { /* rallocx, aligned and zeroing: moved */
          unsigned char* q = rallocx(p, size * 2, ALIGN64 | ZERO);
          CHECK(q != NULL && ((uintptr_t)q & 63) == 0, "rallocx(ALIGN 64) misaligned");
          CHECK(intact(q, size, seed), "aligned rallocx(%zu) lost bytes", size);
          CHECK(zero(q, usable < size * 2 ? usable : size * 2, size * 2), "rallocx(ZERO) left bytes from %zu",
                usable);
          CHECK(xallocx(q, size * 4, 0, 0) >= size * 2 && intact(q, size, seed), "xallocx(%zu)", size);
          sdallocx(q, size * 2, 0);
          break;
        }
        case 2: { /* shrunk, then freed with its size */
          unsigned char* q = rallocx(p, size / 2 + 1, 0);
          CHECK(q != NULL && intact(q, size / 2 + 1, seed), "rallocx(%zu -> %zu) lost bytes", size, size / 2 + 1);
          sdallocx(q, size / 2 + 1, 0);
          break;
        }
        default: /* freed as it came, by dallocx */
          CHECK(intact(p, size, seed), "block of %zu overwritten", size);
          dallocx(p, TCACHE_NONE);
      }
    }
    /* jemalloc's own blocks, as mallocx makes them, back through free. */
    unsigned char* z = mallocx(100 + round % 50, ZERO);
    CHECK(z != NULL && zero(z, 0, 100), "mallocx(ZERO) not zeroed");
    free(z);
    unsigned char* a = mallocx(5000, 12 /* MALLOCX_LG_ALIGN(12) */);
    CHECK(a != NULL && ((uintptr_t)a & 4095) == 0, "mallocx(ALIGN 4096) misaligned");
    free(a);
  }

  /* An arena of the program's own, its blocks kept out of the thread caches
   * (MALLOCX_TCACHE_NONE), then destroyed: jemalloc's contract is that none of its
   * blocks waits in a cache, so freeing them through the flags must reach jemalloc. A
   * block that did wait in one would come back from malloc below, in a destroyed
   * arena's memory. */
  unsigned arena = 0;
  len = sizeof arena;
  CHECK(mallctl("arenas.create", &arena, &len, NULL, 0) == 0, "arenas.create");
  const int in_arena = (int)((arena + 1) << 20) | TCACHE_NONE;
  for (unsigned i = 0; i < 200; ++i) {
    unsigned char* p = mallocx(4096 + i, in_arena);
    CHECK(p != NULL, "mallocx(arena %u)", arena);
    fill(p, 4096 + i, i);
    unsigned char* q = rallocx(p, 9000 + i, in_arena);
    CHECK(q != NULL && intact(q, 4096 + i, i), "rallocx in arena %u lost bytes", arena);
    CHECK(xallocx(q, 9000 + i, 0, in_arena) >= 9000 + i, "xallocx in arena %u", arena);
    if (i % 2 == 0) dallocx(q, TCACHE_NONE);
    else sdallocx(q, 9000 + i, TCACHE_NONE);
  }
  char destroy[64];
  snprintf(destroy, sizeof destroy, "arena.%u.destroy", arena);
  CHECK(mallctl(destroy, NULL, NULL, NULL, 0) == 0, "%s", destroy);
  unsigned char* after_destroy[400];
  for (unsigned i = 0; i < 400; ++i) {
    const size_t size = 4096 + (i % 200);
    after_destroy[i] = malloc(i % 2 == 0 ? size : size + 4904);
    CHECK(after_destroy[i] != NULL, "malloc after destroy");
    fill(after_destroy[i], size, i);
  }
  for (unsigned i = 0; i < 400; ++i) {
    CHECK(intact(after_destroy[i], 4096 + (i % 200), i), "block %u after the arena's destroy overwritten", i);
    free(after_destroy[i]);
  }

  if (failures != 0) return 1;
  printf("jemalloc_api: ok\n");
  return 0;
}
