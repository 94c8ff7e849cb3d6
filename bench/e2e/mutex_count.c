/* bench/e2e/mutex_count.c: a counting shim for the counting table (issue 34, part 5).
 *
 * Preloaded first (LD_PRELOAD=libmutex_count.so:ALLOCATOR), it counts the process's calls
 * of pthread_mutex_lock and pthread_mutex_trylock, every thread's, and writes them to the
 * file named by MUTEX_COUNT_OUT when the process exits ("lock N\ntrylock N\n"). Calls the
 * C library makes inside itself (glibc malloc's arena locks) and spin locks of the
 * allocators' own (tcmalloc's, mimalloc's atomics) are not pthread mutexes and are not
 * seen; jemalloc's mutexes and replayalloc's (std::mutex) are, and so are libtorch's own,
 * the same under every allocator. bench/e2e/count_syscalls.py differences two runs.
 * Never allocates: the real functions are found with dlsym once, in the constructor. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int (*real_lock)(pthread_mutex_t*);
static int (*real_trylock)(pthread_mutex_t*);
static atomic_ullong locks, trylocks;

__attribute__((constructor)) static void find_real(void) {
  real_lock = (int (*)(pthread_mutex_t*))dlsym(RTLD_NEXT, "pthread_mutex_lock");
  real_trylock = (int (*)(pthread_mutex_t*))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
}

int pthread_mutex_lock(pthread_mutex_t* m) {
  atomic_fetch_add_explicit(&locks, 1, memory_order_relaxed);
  if (real_lock == NULL) find_real();
  return real_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t* m) {
  atomic_fetch_add_explicit(&trylocks, 1, memory_order_relaxed);
  if (real_trylock == NULL) find_real();
  return real_trylock(m);
}

__attribute__((destructor)) static void report(void) {
  const char* path = getenv("MUTEX_COUNT_OUT");
  if (path == NULL) return;
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char buf[96];
  const int n = snprintf(buf, sizeof buf, "lock %llu\ntrylock %llu\n", (unsigned long long)atomic_load(&locks),
                         (unsigned long long)atomic_load(&trylocks));
  if (n > 0) (void)!write(fd, buf, (size_t)n);
  close(fd);
}
