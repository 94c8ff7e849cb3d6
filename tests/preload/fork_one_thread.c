/* fork() in a process that has only ever had one thread (Note [Fork in a process of one
 * thread], allocator/runtime/lifecycle.cc), as a shell forks: replayalloc takes none of
 * its locks around it. A C program under the LD_PRELOAD library, in auto mode, holds
 * blocks of every kind (small, the front cache's runs, above 2 MiB, a replayed
 * iteration's slab blocks), then forks 40 times, once inside a replayed iteration: each
 * child finds every block its parent held intact, frees half, allocates and checks
 * 3,000 more of every size, runs iterations of its own and exits; the parent's blocks
 * keep their bytes through it all and it goes on replaying. The process must still have
 * had one thread at the end (else that path was not the one tested); then a second
 * thread allocates while the parent forks 10 times more (the locks taken, as before).
 * With EXPECT_PRIVATE_JEMALLOC=1 (the library carries its own jemalloc, whose fork
 * handlers it calls only beside other threads: Note [The private jemalloc's fork
 * handlers], allocator/backend/private_fork.cc), a child forked beside the second
 * thread finds jemalloc's count of threads on its arena back to its own one, which only
 * jemalloc's handler for the child does (the parent counts two).
 * Prints "fork_one_thread: ok" and exits 0, or says what failed and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      fprintf(stderr, "fork_one_thread: ");     \
      fprintf(stderr, __VA_ARGS__);             \
      fprintf(stderr, "\n");                    \
      exit(1);                                  \
    }                                           \
  } while (0)

enum { held_n = 1500 };
static unsigned char* held[held_n];
static size_t held_size[held_n];
static int (*begin)(const char*);
static int (*end)(void);

static size_t size_of(unsigned i) {
  static const size_t sizes[] = {16, 24, 100, 1000, 4096, 5000, 20000, 70000, 300000, 3u << 20};
  return sizes[i % 10] + (i * 7) % 64;
}
static unsigned char mark(unsigned i, unsigned salt) { return (unsigned char)(i * 31 + salt); }
static void fill(unsigned char* p, size_t n, unsigned char v) {
  memset(p, v, n < 256 ? n : 256);
  memset(p + n - (n < 64 ? n : 64), v, n < 64 ? n : 64);
}
static int intact(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t j = 0; j < (n < 256 ? n : 256); ++j) {
    if (p[j] != v) return 0;
  }
  for (size_t j = n - (n < 64 ? n : 64); j < n; ++j) {
    if (p[j] != v) return 0;
  }
  return 1;
}

/* An iteration of its key: 40 blocks of 64 KiB-1 MiB (recorded twice, then replayed
 * from a slab), each checked before it is freed. */
static void iteration(const char* key, int fork_inside, int* children_failed) {
  unsigned char* b[40];
  CHECK(begin(key) == 0, "iteration_begin failed");
  for (unsigned i = 0; i < 40; ++i) {
    const size_t n = 65536 + (size_t)i * 24576;
    b[i] = malloc(n);
    CHECK(b[i] != NULL, "no block of %zu bytes", n);
    fill(b[i], n, mark(i, 7));
  }
  if (fork_inside) {
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
      alarm(20);
      for (unsigned i = 0; i < 40; ++i) {
        if (!intact(b[i], 65536 + (size_t)i * 24576, mark(i, 7))) _exit(3);
        free(b[i]);
      }
      /* The parent's open iteration is not the child's: it begins its own. */
      int failed = 0;
      for (int r = 0; r < 3; ++r) iteration("inside-child", 0, &failed);
      _exit(failed == 0 ? 0 : 4);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    *children_failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  for (unsigned i = 0; i < 40; ++i) {
    CHECK(intact(b[i], 65536 + (size_t)i * 24576, mark(i, 7)), "an iteration's block lost its bytes");
    free(b[i]);
  }
  CHECK(end() == 0, "iteration_end failed");
}

static int child(unsigned round) {
  alarm(20); /* a deadlock ends as a signal, not a hung test */
  for (unsigned i = 0; i < held_n; ++i) {
    if (!intact(held[i], held_size[i], mark(i, 1))) return 2;
  }
  for (unsigned i = 0; i < held_n; i += 2) free(held[i]);
  static unsigned char* mine[3000];
  for (unsigned i = 0; i < 3000; ++i) {
    mine[i] = malloc(size_of(i + round));
    if (mine[i] == NULL) return 3;
    fill(mine[i], size_of(i + round), mark(i, 5));
  }
  for (unsigned i = 0; i < 3000; ++i) {
    if (!intact(mine[i], size_of(i + round), mark(i, 5))) return 4;
    free(mine[i]);
  }
  int failed = 0;
  for (int r = 0; r < 4; ++r) iteration("child", 0, &failed);
  for (unsigned i = 1; i < held_n; i += 2) {
    if (!intact(held[i], held_size[i], mark(i, 1))) return 5;
  }
  return 0;
}

static void forks(int n, int* failed) {
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) _exit(child((unsigned)r));
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_one_thread: child %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      ++*failed;
    }
    /* The parent's blocks after each child: some freed and made again. */
    for (unsigned i = (unsigned)r % 7; i < held_n; i += 7) {
      CHECK(intact(held[i], held_size[i], mark(i, 1)), "block %u lost its bytes in the parent", i);
      free(held[i]);
      held[i] = malloc(held_size[i]);
      CHECK(held[i] != NULL, "no block");
      fill(held[i], held_size[i], mark(i, 1));
    }
  }
}

/* jemalloc's count of the threads that use its arena 0 (mallctl, the library's copy's). */
static unsigned arena_threads(void) {
  typedef int (*mallctl_fn)(const char*, void*, size_t*, void*, size_t);
  const mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
  CHECK(mallctl != NULL, "no mallctl");
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  CHECK(mallctl("epoch", &epoch, &len, &epoch, len) == 0, "mallctl epoch failed");
  unsigned n = 0;
  len = sizeof n;
  CHECK(mallctl("stats.arenas.0.nthreads", &n, &len, NULL, 0) == 0, "mallctl stats.arenas.0.nthreads failed");
  return n;
}

static volatile int stop;
static void* churn(void* arg) {
  (void)arg;
  while (!stop) {
    void* p[64];
    for (unsigned i = 0; i < 64; ++i) p[i] = malloc(size_of(i));
    for (unsigned i = 0; i < 64; ++i) free(p[i]);
  }
  return NULL;
}

int main(void) {
  begin = (int (*)(const char*))dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin");
  end = (int (*)(void))dlsym(RTLD_DEFAULT, "replayalloc_iteration_end");
  CHECK(begin != NULL && end != NULL, "not run under the LD_PRELOAD library");
  CHECK(__libc_single_threaded, "the process had another thread before main");
  for (unsigned i = 0; i < held_n; ++i) {
    held_size[i] = size_of(i);
    held[i] = malloc(held_size[i]);
    CHECK(held[i] != NULL, "no block of %zu bytes", held_size[i]);
    fill(held[i], held_size[i], mark(i, 1));
  }
  int failed = 0;
  for (int r = 0; r < 3; ++r) iteration("parent", 0, &failed); /* the third replays */
  iteration("parent", 1, &failed);                               /* forked inside a replay */
  forks(40, &failed);
  iteration("parent", 0, &failed);
  CHECK(failed == 0, "%d children failed in a process of one thread", failed);
  CHECK(__libc_single_threaded, "the library made a thread: the forks above took its locks");

  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "pthread_create failed");
  forks(10, &failed);
  const char* expect = getenv("EXPECT_PRIVATE_JEMALLOC");
  if (expect != NULL && strcmp(expect, "1") == 0) {
    const unsigned in_parent = arena_threads();
    CHECK(in_parent >= 2, "jemalloc counts %u threads on its arena, not the two", in_parent);
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
      alarm(20);
      _exit(arena_threads() == 1 ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child beside a second thread did not count its own thread alone (jemalloc's fork handler for the "
          "child not run%s)", WIFEXITED(status) ? "" : "; it hung");
  }
  stop = 1;
  pthread_join(t, NULL);
  CHECK(failed == 0, "%d children failed beside a second thread", failed);
  for (unsigned i = 0; i < held_n; ++i) {
    CHECK(intact(held[i], held_size[i], mark(i, 1)), "block %u lost its bytes", i);
    free(held[i]);
  }
  printf("fork_one_thread: ok\n");
  return 0;
}
