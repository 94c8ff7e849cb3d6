/* A correct program that check mode (REPLAYALLOC_CHECK=1) must never stop: issue 33's
 * program, rounds of 80 blocks of 8-32 KiB, each freed two allocations after it was
 * made (tests/preload/run_check_mode.sh runs it in every mode).
 *   check_program            the program as it was filed
 *   check_program mark       each round is an iteration it marks itself (explicit mode;
 *                            replayalloc_iteration_begin/end found with dlsym, so the
 *                            program also runs without the library)
 *   check_program ... shift  from round 15 on the sizes change: the plan of the first
 *                            rounds deviates, is retired and its slabs are released by
 *                            the program's own frees */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int mark = 0, shift = 0;
  for (int a = 1; a < argc; ++a) {
    if (!strcmp(argv[a], "mark")) mark = 1;
    else if (!strcmp(argv[a], "shift")) shift = 1;
  }
  int (*begin)(const char *) = NULL;
  int (*end)(void) = NULL;
  if (mark) {
    begin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "replayalloc_iteration_begin");
    end = (int (*)(void))dlsym(RTLD_DEFAULT, "replayalloc_iteration_end");
  }
  unsigned long sum = 0;
  for (int r = 0; r < 30; ++r) {
    if (begin != NULL) begin("check/round");
    const size_t cycle = shift && r >= 15 ? 5 : 7;
    char *blocks[80];
    for (int i = 0; i < 80; ++i) {
      size_t sz = 8192 + (size_t)(i % cycle) * 4096;
      blocks[i] = malloc(sz);
      memset(blocks[i], i, sz);
      if (i >= 2) { sum += (unsigned char)blocks[i-2][5]; free(blocks[i-2]); blocks[i-2] = 0; }
    }
    free(blocks[78]); free(blocks[79]);
    if (end != NULL) end();
  }
  printf("sum=%lu\n", sum);
  return 0;
}
