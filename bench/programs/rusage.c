/* bench/programs/rusage.c: runs a program and writes what it used, as measure.py reads it.
 *   rusage OUT PROGRAM [ARGS...]
 * Forks, execs PROGRAM (stdin, stdout and stderr inherited, the environment too), waits
 * for it and writes to OUT one line: peak RSS in KiB, minor page faults, user and system
 * CPU seconds, of PROGRAM and the processes it waited for (wait4). Its exit status is
 * PROGRAM's (128 + the signal where one ended it; 127 where it could not be run).
 * Why not measure.py's own wait4: a process's peak RSS counts the pages it had before its
 * exec, and a child forked from measure.py starts with all of the Python process's (~17
 * MiB, ~66 MiB once sort's 45 MB output had passed through it): every program's peak
 * RSS read at least that much. Forked from this program, whose own pages are few, a
 * program's peak RSS is its own. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: rusage OUT PROGRAM [ARGS...]\n");
    return 126;
  }
  const pid_t pid = fork();
  if (pid < 0) return 126;
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) return 126;
  FILE* f = fopen(argv[1], "w");
  if (f == NULL) return 126;
  fprintf(f, "%ld %ld %ld.%06ld %ld.%06ld\n", ru.ru_maxrss, ru.ru_minflt, (long)ru.ru_utime.tv_sec,
          (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
  if (fclose(f) != 0) return 126;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
