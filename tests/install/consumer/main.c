/* Uses an installed replayalloc: a few iterations of one key, then checks that the
 * later ones were served from a slab. Prints one line run_install_test.sh checks. */
#include <replayalloc/replayalloc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  static const size_t sizes[] = {4096, 65536, 1000, 300000, 128};
  for (int it = 0; it < 6; ++it) {
    if (replayalloc_iteration_begin("consumer/k") != 0) {
      fprintf(stderr, "consumer: replayalloc_iteration_begin failed\n");
      return 1;
    }
    void *blocks[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
      blocks[i] = replayalloc_malloc(sizes[i]);
      if (blocks[i] == NULL) {
        fprintf(stderr, "consumer: replayalloc_malloc(%zu) failed\n", sizes[i]);
        return 1;
      }
      memset(blocks[i], it, sizes[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) replayalloc_free(blocks[i]);
    if (replayalloc_iteration_end() != 0) {
      fprintf(stderr, "consumer: replayalloc_iteration_end failed\n");
      return 1;
    }
    /* Warm-up done: the plan, made by the planner thread, is there before the next. */
    if (it == 1) replayalloc_wait_plans();
  }
  size_t need = replayalloc_stats_json(NULL, 0);
  char *json = malloc(need + 1);
  if (json == NULL) return 1;
  replayalloc_stats_json(json, need + 1);
  const char *hits = strstr(json, "\"slab_hits\":");
  unsigned long long n = hits ? strtoull(hits + strlen("\"slab_hits\":"), NULL, 10) : 0;
  free(json);
  if (n == 0) {
    fprintf(stderr, "consumer: no slab hit after 6 iterations\n");
    return 1;
  }
  printf("replayalloc consumer: slab_hits=%llu\n", n);
  return 0;
}
