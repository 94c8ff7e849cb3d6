/* replayalloc/replayalloc.h: the C API.
 *
 * replayalloc records one iteration of a repetitive program (an inference request),
 * plans every allocation of it into one slab, and serves later iterations from that
 * slab without locks, searches or system calls. Anything the plan does not cover is
 * served by jemalloc.
 *
 * Mark an iteration on the thread that runs it:
 *
 *     replayalloc_iteration_begin("resnet50/bs1");
 *     ... run one inference, allocating with replayalloc_malloc/free ...
 *     replayalloc_iteration_end();
 *
 * The first iterations of a key are recorded (served by jemalloc); once two in a row
 * asked for the same memory in the same order, a plan is made and later iterations
 * replay it. Every function is thread-safe; iterations are per thread, and threads
 * replaying the same key each get a slab of their own. Blocks may be freed on any
 * thread, at any time, also after their iteration ended.
 */
#ifndef REPLAYALLOC_REPLAYALLOC_H_
#define REPLAYALLOC_REPLAYALLOC_H_

#include <stddef.h>

#include "replayalloc/version.h" /* REPLAYALLOC_VERSION_MAJOR/MINOR/PATCH/STRING */

#ifdef __cplusplus
extern "C" {
#endif

/* Returned by replayalloc_iteration_begin/end for an iteration inside an iteration:
 * the inner one joins the outer one (the outer key's plan covers both). */
#define REPLAYALLOC_NESTED 1

/* Begins an iteration of `key` (a non-empty string naming what repeats: a model and
 * its input shape) on the calling thread. Returns 0, REPLAYALLOC_NESTED when an
 * iteration is already open on this thread, or -1 with errno EINVAL for a null or
 * empty key. */
int replayalloc_iteration_begin(const char *key);

/* Ends the calling thread's innermost iteration. Returns 0, REPLAYALLOC_NESTED when
 * an outer iteration stays open, or -1 with errno EINVAL when none is open. */
int replayalloc_iteration_end(void);

/* 1 when the calling thread's open iteration is being recorded (its allocations
 * will make the plan), else 0. Integrations use it to pay for op tags only then. */
int replayalloc_iteration_recording(void);

/* The malloc family, with glibc's contract: NULL and errno ENOMEM on failure,
 * EINVAL for an alignment that is not a power of two (posix_memalign returns it). */
void *replayalloc_malloc(size_t size);
void *replayalloc_calloc(size_t count, size_t size);
void *replayalloc_realloc(void *ptr, size_t size);
void *replayalloc_aligned_alloc(size_t alignment, size_t size);
int replayalloc_posix_memalign(void **out, size_t alignment, size_t size);
void replayalloc_free(void *ptr);
/* pre: ptr came from replayalloc_malloc/calloc/realloc(…, size). */
void replayalloc_free_sized(void *ptr, size_t size);
/* Bytes usable at ptr (at least the size asked for); 0 for NULL. */
size_t replayalloc_usable_size(const void *ptr);

/* Op tags: what the recording says asked for each block. Intern a name once (the
 * result is stable for the process), then set it cheaply around the work it names.
 * Id 0 is "unknown". */
unsigned replayalloc_op_id(const char *name);
void replayalloc_set_op(unsigned op_id);
unsigned replayalloc_current_op(void);

/* The library's version, "MAJOR.MINOR.PATCH": the library the program runs with, where
 * REPLAYALLOC_VERSION_STRING is the headers' it was compiled with. */
const char *replayalloc_version(void);

/* Statistics as one JSON object, written to buf (NUL-terminated, truncated to cap).
 * Returns the length the whole object needs, without the NUL. Keys include
 * allocations, slab_hits, fallbacks, plans, rerecords, slab_bytes, lower_bound_bytes. */
size_t replayalloc_stats_json(char *buf, size_t cap);

/* Sets the statistics' counters to zero and their peaks (mapped_bytes_peak,
 * backend_bytes_peak, plan_wait_us_max) to the current values; current values such as
 * slab_bytes and mapped_bytes stay. Thread-safe. */
void replayalloc_reset_stats(void);

/* Blocks until every plan being made in the background is installed (or has
 * failed): plans are made by a planner thread, off the request path, and a key's
 * iterations pass through to jemalloc until its plan is installed at an iteration
 * boundary (REPLAYALLOC_BACKGROUND_PLANNING). For a service that warms up before it
 * takes traffic, a benchmark, a test. Returns 0. Call it outside an iteration. */
int replayalloc_wait_plans(void);

/* Writes the latest recording of `key` to `path` (".csv": the CSV interchange format,
 * else the binary trace format). Returns 0, or -1 (with a message on stderr) when
 * there is no recording or the file cannot be written. */
int replayalloc_save_trace(const char *key, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* REPLAYALLOC_REPLAYALLOC_H_ */
