/* A short program (Note [Plans that arrive in time]): six iterations of one key, each a
 * 64 KiB and a 1 MiB block, written and freed, through the C API; prints the slab hits
 * the process made. The first two iterations are recorded, so the other four replay,
 * 8 hits, on every run, whatever the machine's load: the plan (two allocations) is made
 * at the end of the second iteration, not sent to the planner thread. Run linked against
 * libreplayalloc.so, and with the LD_PRELOAD library preloaded (whose C API then serves
 * the same calls). tests/short/run_short_programs.sh runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replayalloc/replayalloc.h"

int main(void) {
  for (int i = 0; i < 6; ++i) {
    replayalloc_iteration_begin("short/c");
    char *a = replayalloc_malloc(64 * 1024);
    char *b = replayalloc_malloc(1024 * 1024);
    if (a == NULL || b == NULL) return 1;
    memset(a, i, 64 * 1024);
    memset(b, i, 1024 * 1024);
    replayalloc_free(b);
    replayalloc_free(a);
    replayalloc_iteration_end();
  }
  char json[16384];
  if (replayalloc_stats_json(json, sizeof json) >= sizeof json) return 1;
  const char *hits = strstr(json, "\"slab_hits\":");
  if (hits == NULL) return 1;
  printf("%lu\n", strtoul(hits + strlen("\"slab_hits\":"), NULL, 10));
  return 0;
}
