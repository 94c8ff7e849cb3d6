// bench/programs/spawn.c: the cost of a process's start and exit under a preloaded
// allocator (bench/run_startup.sh). Spawns PROGRAM (default /bin/true) N times, one after
// another, with LD_PRELOAD=LIB in its environment ("none": no LD_PRELOAD), each waited
// for; prints the mean wall time of one, in microseconds, its mean minor page faults and
// its mean CPU time (user + system), in microseconds (wait4's rusage: the CPU a process
// took, which other work on a shared host moves less than the wall time). The child's
// environment is LD_PRELOAD, PATH and this process's
// REPLAYALLOC_* and MALLOC_CONF settings.
// Usage: spawn LIB N [PROGRAM [ARGS...]]
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spawn LIB|none N [PROGRAM [ARGS...]]\n");
    return 2;
  }
  const char* lib = argv[1];
  const int n = atoi(argv[2]);
  char* prog = argc > 3 ? argv[3] : "/bin/true";
  char preload[4096];
  snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
  extern char** environ;
  char* with[64] = {preload, "PATH=/usr/bin:/bin"};
  char* without[64] = {"PATH=/usr/bin:/bin"};
  int nw = 2, nwo = 1;
  for (char** e = environ; *e != NULL && nw < 63; ++e) {
    if (strncmp(*e, "REPLAYALLOC_", 12) == 0 || strncmp(*e, "MALLOC_CONF=", 12) == 0) {
      with[nw++] = *e;
      without[nwo++] = *e;
    }
  }
  char* args[64] = {prog, NULL};
  for (int i = 4; i < argc && i - 3 < 63; ++i) args[i - 3] = argv[i];
  posix_spawn_file_actions_t out;
  posix_spawn_file_actions_init(&out);
  posix_spawn_file_actions_addopen(&out, 1, "/dev/null", O_WRONLY, 0);
  struct timespec a, b;
  long faults = 0;
  double cpu_us = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawn(&pid, prog, &out, NULL, args, strcmp(lib, "none") != 0 ? with : without) != 0) {
      perror("posix_spawn");
      return 1;
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "spawn: %s exited abnormally under %s\n", prog, lib);
      return 1;
    }
    faults += ru.ru_minflt;
    cpu_us += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.1f %.1f %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1e3, (double)faults / n,
         cpu_us / n);
  return 0;
}
