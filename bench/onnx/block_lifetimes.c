/* bench/onnx/block_lifetimes.c: how long the blocks of a program's loop live, counted in
 * its steps, under glibc (a diagnosis for issue 41, item 2: which of ONNX Runtime's
 * requests could a slab serve). An LD_PRELOAD library over glibc's own allocator that
 * logs every request of at least 4 KiB (REPLAYALLOC_MIN_SIZE in the LD_PRELOAD library):
 * malloc, calloc, realloc's result, posix_memalign and aligned_alloc, and the free (or
 * realloc) of each logged block, with the thread's id, in order under one lock; written
 * at exit to $LIFETIMES_OUT, one line per event: OP ADDRESS SIZE TID (OP: A malloc,
 * C calloc, R realloc, M aligned, F free). block_lifetimes.py reads it.
 *   cc -O2 -shared -fPIC -o block_lifetimes.so bench/onnx/block_lifetimes.c -lpthread
 *   LIFETIMES_OUT=events.txt LD_PRELOAD=$PWD/block_lifetimes.so node bench/onnx/generate.js ...
 *   python3 bench/onnx/block_lifetimes.py events.txt 7008
 * Keeps at most 8 M events and 4 M live blocks (a fixed table; beyond them it stops
 * logging, and says so at exit). Not a test, not for production. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

#define MAX_EVENTS (1u << 23)
#define TABLE (1u << 22)
#define EMPTY 0
#define GONE 1

struct event {
  uintptr_t p;
  uint64_t size;
  int tid;
  char op;
};

static struct event* events;
static uint64_t n_events, dropped;
static uintptr_t* live;  /* open addressing: the logged blocks not freed yet */
static uint64_t n_live;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside;

static uint64_t slot_of(uintptr_t p) { return ((p >> 4) * 0x9E3779B97F4A7C15ull) >> 42; }

static int ready(void) {
  if (events != NULL) return 1;
  void* e = mmap(NULL, (size_t)MAX_EVENTS * sizeof(struct event), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* t = mmap(NULL, (size_t)TABLE * sizeof(uintptr_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (e == MAP_FAILED || t == MAP_FAILED) return 0;
  live = t;
  events = e;
  return 1;
}

static int forget(uintptr_t p) {  /* 1 where p was a logged live block */
  for (uint64_t i = slot_of(p);; i = (i + 1) & (TABLE - 1)) {
    if (live[i] == EMPTY) return 0;
    if (live[i] == p) {
      live[i] = GONE;
      --n_live;
      return 1;
    }
  }
}

static int remember(uintptr_t p) {
  if (n_live + 1 >= TABLE / 2) return 0;
  for (uint64_t i = slot_of(p);; i = (i + 1) & (TABLE - 1)) {
    if (live[i] == EMPTY || live[i] == GONE) {
      live[i] = p;
      ++n_live;
      return 1;
    }
  }
}

static void log_event(char op, void* p, size_t size) {
  if (inside || p == NULL) return;
  inside = 1;
  pthread_mutex_lock(&lock);
  if (ready()) {
    const int known = op == 'F' ? forget((uintptr_t)p) : remember((uintptr_t)p);
    if (known && n_events < MAX_EVENTS) {
      events[n_events++] = (struct event){(uintptr_t)p, size, (int)syscall(SYS_gettid), op};
    } else if (op != 'F' || known) {
      ++dropped;
    }
  }
  pthread_mutex_unlock(&lock);
  inside = 0;
}

void* malloc(size_t size) {
  void* p = __libc_malloc(size);
  if (size >= 4096) log_event('A', p, size);
  return p;
}

void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  if (n != 0 && size <= SIZE_MAX / n && n * size >= 4096) log_event('C', p, n * size);
  return p;
}

void* realloc(void* old, size_t size) {
  log_event('F', old, 0);
  void* p = __libc_realloc(old, size);
  if (size >= 4096) log_event('R', p, size);
  return p;
}

int posix_memalign(void** out, size_t align, size_t size) {
  void* p = __libc_memalign(align, size);
  if (p == NULL) return 12; /* ENOMEM */
  *out = p;
  if (size >= 4096) log_event('M', p, size);
  return 0;
}

void* aligned_alloc(size_t align, size_t size) {
  void* p = __libc_memalign(align, size);
  if (size >= 4096) log_event('M', p, size);
  return p;
}

void free(void* p) {
  log_event('F', p, 0);
  __libc_free(p);
}

__attribute__((destructor)) static void write_events(void) {
  inside = 1;
  const char* path = getenv("LIFETIMES_OUT");
  if (path == NULL || events == NULL) return;
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  for (uint64_t i = 0; i < n_events; ++i) {
    fprintf(f, "%c %lx %llu %d\n", events[i].op, (unsigned long)events[i].p, (unsigned long long)events[i].size,
            events[i].tid);
  }
  fclose(f);
  if (dropped != 0) fprintf(stderr, "block_lifetimes: %llu events not logged (tables full)\n", (unsigned long long)dropped);
}
