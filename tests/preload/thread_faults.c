/* The page faults a new thread takes for its first small requests under the LD_PRELOAD
 * library, once the fallback has started and an earlier thread came and went (Note
 * [Thread caches left to the front cache], allocator/backend/jemalloc_backend.cc). Each
 * of THREADS threads, one after the other, makes and frees 256 blocks of 16-256 B and
 * counts its own minor faults (getrusage RUSAGE_THREAD) from its first instruction to
 * its last; the first thread (a new arena of the front cache, new stacks) is not judged.
 * Every later one reuses an exited thread's stack, TLS and blocks, so its requests need
 * no new page: with jemalloc's thread cache made for each thread (its 32 KiB of stacks,
 * an exited thread's pages zeroed by giving them back) each took 4 faults or more.
 * Every block's bytes are written and checked before its free.
 * Prints "thread_faults: ok" and exits 0 when every later thread took at most LIMIT
 * faults, else says which did and exits 1.
 * Usage: thread_faults LIMIT [THREADS]   (default 6 threads) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long faults_now(void) {
  struct rusage u;
  return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_minflt : -1;
}

struct job {
  long faults;
  int bad;
};

static void* body(void* arg) {
  struct job* j = arg;
  const long before = faults_now();
  unsigned char* p[64];
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 64; ++i) {
      const size_t size = 16 + 16 * (size_t)(i % 16);
      p[i] = malloc(size);
      if (p[i] == NULL) {
        j->bad = 1;
        return NULL;
      }
      memset(p[i], (unsigned char)(round * 64 + i), size);
    }
    for (int i = 0; i < 64; ++i) {
      const size_t size = 16 + 16 * (size_t)(i % 16);
      for (size_t k = 0; k < size; ++k) j->bad |= p[i][k] != (unsigned char)(round * 64 + i);
      free(p[i]);
    }
  }
  const long after = faults_now();
  j->faults = before < 0 || after < 0 ? -1 : after - before;
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: thread_faults LIMIT [THREADS]\n");
    return 2;
  }
  const long limit = atol(argv[1]);
  const int threads = argc > 2 ? atoi(argv[2]) : 6;
  /* More requests than REPLAYALLOC_FALLBACK_AFTER's 4,096: the fallback starts here. */
  static void* warm[6000];
  for (int i = 0; i < 6000; ++i) warm[i] = malloc(100);
  for (int i = 0; i < 6000; ++i) free(warm[i]);
  int failed = 0;
  for (int t = 0; t < threads; ++t) {
    struct job j = {0, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, body, &j) != 0 || pthread_join(th, NULL) != 0) {
      fprintf(stderr, "thread_faults: thread %d could not run\n", t);
      return 1;
    }
    printf("thread %d: %ld faults\n", t, j.faults);
    if (j.bad) {
      fprintf(stderr, "thread_faults: thread %d's blocks lost their bytes or were refused\n", t);
      failed = 1;
    }
    if (t > 0 && (j.faults < 0 || j.faults > limit)) {
      fprintf(stderr, "thread_faults: thread %d took %ld faults for its first requests (at most %ld)\n", t, j.faults,
              limit);
      failed = 1;
    }
  }
  if (failed) return 1;
  printf("thread_faults: ok\n");
  return 0;
}
