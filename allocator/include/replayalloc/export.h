/* replayalloc/export.h: REPLAYALLOC_EXPORT, the one mark of what a replayalloc library
 * exports.
 *
 * The libraries are compiled with -fvisibility=hidden; a function marked
 * REPLAYALLOC_EXPORT (the C API, the hooks of the LD_PRELOAD library, the C functions
 * of the integrations) is the only kind that leaves them. For replayalloc's own
 * sources: a program using the API has no need of it.
 */
#ifndef REPLAYALLOC_EXPORT_H_
#define REPLAYALLOC_EXPORT_H_

#if defined(__GNUC__)
#define REPLAYALLOC_EXPORT __attribute__((visibility("default")))
#else
#define REPLAYALLOC_EXPORT
#endif

#endif /* REPLAYALLOC_EXPORT_H_ */
