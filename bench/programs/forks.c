// bench/programs/forks.c: the cost of fork() under the allocator preloaded into this
// process (bench/run_startup.sh): a shell forks for every pipeline stage and command
// substitution, and every page an allocator's fork handlers write is copied, in the
// parent and in the child. First makes WARM small allocations (past replayalloc's
// fallback start, Note [The fallback made when first needed], as a shell that has run a
// while has), then forks N times, one after another, each child exiting at once and
// waited for; prints the mean wall time of one fork and wait, in microseconds, the
// children's mean minor page faults, and the mean CPU time of one fork and exit (the
// parent's over the loop and the children's, user + system), in microseconds.
// Usage: LD_PRELOAD=LIB forks N [WARM]   (default 300 5000)
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_us(const struct rusage* r) {
  return (double)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e6 + (double)(r->ru_utime.tv_usec + r->ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 300;
  const int warm = argc > 2 ? atoi(argv[2]) : 5000;
  void* volatile keep[64] = {0};
  for (int i = 0; i < warm; ++i) {
    void* p = malloc(16 + (size_t)(i % 64) * 24);
    if (i % 97 == 0) {
      free(keep[i % 64]);
      keep[i % 64] = p;
    } else {
      free(p);
    }
  }
  struct timespec a, b;
  struct rusage self0;
  getrusage(RUSAGE_SELF, &self0);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0 || waitpid(pid, NULL, 0) != pid) return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  struct rusage u, self1;
  getrusage(RUSAGE_CHILDREN, &u);
  getrusage(RUSAGE_SELF, &self1);
  const double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3;
  // The CPU of the forks: the parent's over the loop (fork's copy of the page tables is
  // the parent's system time) and the children's (their exits).
  const double cpu = cpu_us(&self1) - cpu_us(&self0) + cpu_us(&u);
  printf("%.1f %.1f %.1f\n", us / n, (double)u.ru_minflt / n, cpu / n);
  return 0;
}
