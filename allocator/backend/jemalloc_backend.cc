// The host fallback over jemalloc. mallocx/sdallocx reach jemalloc directly, whoever
// owns the process's `malloc` symbol; but jemalloc 5.3 gives only malloc and free its
// fast path (a thread-cache hit): mallocx+dallocx cost ~200 instructions per pair
// where malloc+free cost ~83 (callgrind, 64 B). So once the engine exists,
// use_fast_entry_points() looks up jemalloc's own `malloc`, `calloc` and `free` in
// jemalloc's shared object (dlsym on its handle: never the interposed ones of the
// LD_PRELOAD library, which come first in the global scope) and ordinary requests
// (alignment <= malloc_align) go through them.
//
// Built with REPLAYALLOC_PRIVATE_JEMALLOC (libreplayalloc.so: Note [Private jemalloc]
// in allocator/CMakeLists.txt), jemalloc is a copy linked into the library whose public
// names carry the prefix replayalloc_je_ and are hidden (jemalloc_names.h maps them),
// and its malloc, calloc and free are taken directly, not looked up.
#include <dlfcn.h>

#include "backend/jemalloc_names.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"
#include "backend/front_inline.h"
#include "backend/slab_range.h"
#include "support/config.h"

// AddressSanitizer does not see jemalloc's blocks (mallocx is not intercepted), but
// code that ran in them may have poisoned parts of them (Abseil's hash tables poison
// their empty slots under ASan): a block jemalloc hands out again must be unpoisoned,
// as ASan's own allocator would (REPLAYALLOC_ASAN: support/config.h).
#if defined(REPLAYALLOC_ASAN)
#include <sanitizer/asan_interface.h>
#endif

// Note [The fallback's huge blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc 5.3 serves blocks of opt.oversize_threshold (8 MiB) and more from an arena of their own that purges
// eagerly: a freed block's pages go back to the kernel at once, so the next block of that size faults every page in
// again. An inference allocates the same large tensors every time: under jemalloc alone a TorchScript ResNet-50
// takes ~9,300 page faults per inference in steady state (tcmalloc ~430), and replayalloc pays them whenever the
// fallback serves (recording, the iterations before auto mode finds the period, whatever a plan does not cover). So
// the LD_PRELOAD library, which owns the process's malloc and keeps jemalloc as its private fallback, keeps them in
// the ordinary arenas, whose dirty pages decay over dirty_decay_ms (10 s) like those of every other size:
// oversize_threshold:0 (ResNet-50 under jemalloc alone: 431 faults per inference, peak RSS 304 -> 301 MiB). jemalloc
// reads this symbol once, at its initialisation, through its GOT: the first definition in the dynamic linker's
// search order wins, weak or not, so the program's own executable keeps its `malloc_conf` but one defined in a
// shared library it loads does not; MALLOC_CONF (read after it) overrides it (MALLOC_CONF=oversize_threshold:8388608
// restores jemalloc's default). Only the preload library defines it: the C API library's copy of jemalloc is private
// (Note [Private jemalloc]) and keeps jemalloc's defaults (MALLOC_CONF=oversize_threshold:0 gives it the same).
// jemalloc before 5.2 has no such option (it would print an error at start-up). One quirk of 5.3: arena 0 is made
// before the option is applied and keeps purging blocks of 8 MiB and more at the free, so keep_huge_pages() sets its
// threshold to that of the other arenas when the option is 0, whoever set it (a 16 MiB block freed and allocated
// again on the main thread: 4,097 faults each time before, 0 after; fallback_start.cc).
// Note [Zeroing by memset]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc 5.3 zeroes a calloc'd block of a large size class (16 KiB and up) that it
// takes from its free dirty pages by purging them (MADV_DONTNEED: ehooks_zero, for an
// arena with jemalloc's default extent hooks), so the program faults every page back in
// as it writes the block. A program that callocs the same large blocks over and over
// pays a page fault per page per call where glibc, whose calloc memsets a reused chunk,
// pays none. ONNX Runtime's generation loop under Node.js is one: every output tensor
// is copied into a zero-filled ArrayBuffer (Node's ArrayBuffer allocator callocs), and
// under jemalloc alone it made ~100 page faults and ~3 ms of system time per token
// against glibc's ~23 and ~0.4 ms, at 0.4x glibc's tokens/s (bench/run_onnx_generation.sh).
// jemalloc zeroes by memset in an arena whose extent hooks are not its own default
// table (it does not know what user hooks' purges cost), and still skips the memset for
// memory it knows is zero (fresh from the kernel, or purged by decay). So large callocs
// go to arenas of the fallback's own, made with `arenas.create` and a copy of the
// default table (the same functions at another address): one per automatic arena, made
// by the first thread of that arena that callocs a large block, so threads keep apart
// as jemalloc keeps them; without the thread cache (MALLOCX_TCACHE_NONE: a block served
// there is zeroed there). Large blocks up to the thread cache's largest (32 KiB: Note
// [The fallback's thread cache]) go back to the freeing thread's cache, where such an
// arena would never find them: they are jemalloc's malloc and a memset (Node.js's
// 32,000-byte logits buffers were still 8-16 faults per token when left to jemalloc's
// calloc, whose thread cache misses often after a garbage collection frees many at
// once); jemalloc's own malloc, not the front cache's (Note [The fallback's front
// cache]): Node.js's copies of the key/value caches grow a row a step and are freed by
// the collector on another thread, and jemalloc serves them again from freed extents of
// any size where the front cache carved runs class after class (ONNX Runtime's loop, one
// session, 30 requests: 10.6 -> 7.4 faults a token, peak RSS 235 -> 211 MiB; RESULTS).
// Those up to 32 KiB are the front cache's since (Note [Callocs of up to 32 KiB from the
// front cache], front_inline.h); where it does not serve, jemalloc's calloc. jemalloc's
// automatic arenas keep their hooks: arena 0 shares its table with jemalloc's own
// metadata (b0), which must never run a hook that is not jemalloc's (a first version
// that gave the automatic arenas the copy hung a Node.js process inside jemalloc, 1 run
// in ~8). A block from these arenas is freed by the ordinary free, which finds its
// arena. Where they cannot be made, calloc stays jemalloc's.

#if defined(REPLAYALLOC_PRIVATE_JEMALLOC)
extern "C" {
void* replayalloc_je_malloc(std::size_t size) noexcept;
void* replayalloc_je_calloc(std::size_t count, std::size_t size) noexcept;
void replayalloc_je_free(void* p) noexcept;
}
#endif

// Note [The fallback's thread cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc 5.3's thread cache holds blocks up to opt.tcache_max, 32 KiB by default, and
// the library keeps that default. It had raised it to 128 KiB (larson and rptest 433 M
// -> 341 M and 396 M -> 284 M instructions; 1 MiB: ResNet-50 at 16 threads peaked ~1.5x
// higher, the cache having no budget of bytes) before the front cache (Note [The
// fallback's front cache]) kept the fallback's blocks of 16 B-2 MiB itself; those
// programs now take the same instructions and RSS with either (RESULTS, the notes after
// "Generation in a second framework"). What still reached jemalloc's cache from 32 to
// 128 KiB was large callocs (Note [Zeroing by memset]) and the engine's own buffers,
// and up to 20 freed blocks of each class waited there for a request of their class:
// ONNX Runtime's loop under Node.js callocs its output copies a row longer each step,
// and took fresh pages for each new class (one session: peak RSS 205-224 -> 172-182
// MiB, 6.0-6.9 -> 5.1-5.6 faults a token; two: 257-274 -> 215-227 MiB, 5.7-7.4 ->
// 3.4-3.5; the models at 1-16 threads within their spread; the same notes). So callocs
// above 32 KiB are the arenas' of Note [Zeroing by memset], freed back to them.
// thread_cache_max() counts the front cache too (auto mode's rule).
// MALLOC_CONF=tcache_max:131072 restores 128 KiB. Where the front cache runs, the LD_PRELOAD
// library's jemalloc keeps no thread cache at all (Note [Thread caches left to the front
// cache]); this default is the C API library's, and the LD_PRELOAD library's without the
// front cache (REPLAYALLOC_FRONT_CACHE=0, check mode).
#define REPLAYALLOC_JE_AT_LEAST(major, minor) \
  (JEMALLOC_VERSION_MAJOR > (major) || (JEMALLOC_VERSION_MAJOR == (major) && JEMALLOC_VERSION_MINOR >= (minor)))
//
// Note [The fallback's shared arena]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc gives each of the first 4 x ncpus threads an arena and purges an arena when
// its last thread exits (tcache_destroy; decay settings do not stop it): threads that
// come and go (larson) faulted their predecessors' pages back in, and each arena kept
// its free pages for its own threads. An arena per CPU (`percpu_arena:percpu`) took
// larson from 2.13 to 0.88 s of CPU; the LD_PRELOAD library's jemalloc now has one
// automatic arena for all threads (`narenas:1`): the main thread stays bound to it, so
// no exit purges it, and one thread's free pages serve every other. Little reaches its
// shared locks: the front cache (Note [The fallback's front cache]) serves 16 B-2 MiB
// from lists and arenas of its own, the thread cache small callocs; what is left is
// blocks above 2 MiB, large callocs (Note [Zeroing by memset]) and reallocs. On 2
// cores (RESULTS, notes after "Generation in a second framework"): peak RSS of ResNet-50
// at 8 and 16 threads 393 and 473 MiB against 426 and 508 with an arena per CPU
// (tcmalloc, the leanest, 399 and 483), the BERT-like encoder 357 and 386 against 363
// and 394 (tcmalloc 353, 383), CPU within the spread; threaded stress and contention
// (64 KiB-16 MiB blocks, 8 and 32 threads) as fast. Not measured: many cores, whose
// threads would share the arena's lock for large blocks (as tcmalloc's page heap's).
// `MALLOC_CONF=percpu_arena:percpu` restores an arena per CPU.
//
// Note [The fallback's dirty extents]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc reuses a freed (dirty) extent for a request only while the extent is at most
// 2^opt.lg_extent_max_active_fit (6: 64) times the request's size. A burst of large
// blocks freed together coalesces into one dirty extent far larger than that, so the
// next burst of the same blocks is carved from fresh address space and faults every
// page in again, while the dirty pages wait for decay: bursts of 10,000 blocks of
// 20,000 bytes, freed and allocated again (the preload library, one byte per block
// touched) took 13.2 us and a page fault per pair and peaked at 847 MiB of resident
// memory for 40 MiB of touched pages (jemalloc alone 19.2 us, 63 MiB; tcmalloc 0.2 us,
// 46 MiB). The fallback allows 2^16 (lg_extent_max_active_fit:16): 0.70 us and 48 MiB
// there; ResNet-50 at 8 and 16 threads 678 -> 290 and 534 -> 243 faults per inference,
// peak RSS 433 -> 419 and 526 -> 515 MiB (bench/RESULTS.md, "The fallback's dirty
// extents"). Both copies of jemalloc get it (the private one from jemalloc 5.3 on).
#define REPLAYALLOC_JE_FIT "lg_extent_max_active_fit:16"
#if REPLAYALLOC_JE_AT_LEAST(5, 3)
#define REPLAYALLOC_JE_SHARED_CONF REPLAYALLOC_JE_FIT
#endif
#define REPLAYALLOC_JE_PRELOAD_CONF "oversize_threshold:0,narenas:1," REPLAYALLOC_JE_FIT
// The settings: a private copy's (its malloc_conf weak in its archive: this wins at link;
// the LD_PRELOAD library's own, hooks/CMakeLists.txt), else the shared one's.
#if defined(REPLAYALLOC_PRELOAD_DEFAULTS) && REPLAYALLOC_JE_AT_LEAST(5, 2)
#define REPLAYALLOC_JE_CONF REPLAYALLOC_JE_PRELOAD_CONF
#elif defined(REPLAYALLOC_PRIVATE_JEMALLOC) && defined(REPLAYALLOC_JE_SHARED_CONF)
#define REPLAYALLOC_JE_CONF REPLAYALLOC_JE_SHARED_CONF
#endif
#if defined(REPLAYALLOC_JE_CONF) && defined(REPLAYALLOC_PRIVATE_JEMALLOC)
extern "C" { __attribute__((visibility("hidden"))) const char* replayalloc_je_malloc_conf = REPLAYALLOC_JE_CONF; }
#if defined(REPLAYALLOC_PRELOAD_DEFAULTS)
// Note [Thread caches left to the front cache]: the settings where the front cache will run.
#define REPLAYALLOC_JE_FRONT_CONF REPLAYALLOC_JE_CONF ",tcache:false"
#endif
#elif defined(REPLAYALLOC_JE_CONF)
extern "C" { __attribute__((weak, visibility("default"))) const char* malloc_conf = REPLAYALLOC_JE_CONF; }
#endif

namespace replayalloc::detail::backend {
namespace {

inline int align_flags(std::size_t align) noexcept {
  return align <= malloc_align ? 0 : MALLOCX_ALIGN(align);
}

// glibc's contract: every block is a multiple of 16 bytes aligned on 64-bit systems,
// whatever its size (jemalloc gives blocks of 8 bytes or less 8-byte alignment). So
// requests below malloc_align are served, and freed with sdallocx, as malloc_align
// bytes; this also serves size 0 (mallocx(0) is undefined in jemalloc's contract).
inline std::size_t at_least_min(std::size_t size) noexcept {
  return size < malloc_align ? malloc_align : size;
}

inline void* fresh(void* p) noexcept {
#if defined(REPLAYALLOC_ASAN)
  if (p != nullptr) ASAN_UNPOISON_MEMORY_REGION(p, fallback_usable_size(p));
#endif
  return p;
}

using malloc_fn = plain_malloc_fn;
using calloc_fn = void* (*)(std::size_t, std::size_t);
using free_fn = plain_free_fn;
// Null until use_fast_entry_points() found them (then mallocx/dallocx serve).
std::atomic<malloc_fn> g_je_malloc{nullptr};
std::atomic<calloc_fn> g_je_calloc{nullptr};
std::atomic<free_fn> g_je_free{nullptr};

// The plain malloc where jemalloc's is it (the front cache off): a request under malloc_align bytes, 0 included
// (Note [Below the minimum, inline], runtime/thread_state.h), rounded up as glibc aligns (jemalloc's 8 B: to 8).
void* plain_malloc_aligned(std::size_t size) noexcept {
  return g_je_malloc.load(std::memory_order_relaxed)(size < malloc_align ? malloc_align : size);
}

#if !defined(REPLAYALLOC_PRIVATE_JEMALLOC)
// `name` as defined by the shared object at `base` (null if it is not defined there).
void* symbol_of(void* handle, const void* base, const char* name) noexcept {
  void* f = dlsym(handle, name);
  Dl_info info;
  if (f == nullptr || dladdr(f, &info) == 0 || info.dli_fbase != base) return nullptr;
  return f;
}
#endif

// Note [Zeroing by memset]: a copy of jemalloc's default extent hooks, which makes
// jemalloc zero reused blocks by memset; the least calloc zeroed here rather than by
// jemalloc's calloc (its first large size class; SIZE_MAX until zero_reused_by_memset());
// the arenas made with the copy, by automatic arena (0: not made yet).
extent_hooks_t g_memset_hooks{};
std::atomic<std::size_t> g_large_min{std::numeric_limits<std::size_t>::max()};
// Up to the thread cache's largest block (0: none), a large calloc is jemalloc's malloc
// and a memset.
std::atomic<std::size_t> g_cached_max{0};
// From jemalloc's opt.oversize_threshold on (Note [The fallback's huge blocks]) blocks
// stay in jemalloc's arena for them, which purges them at the free: fresh zero pages.
std::atomic<std::size_t> g_large_max{std::numeric_limits<std::size_t>::max()};
constexpr unsigned max_calloc_arenas = 256;
REPLAYALLOC_LARGE_ZEROED constinit std::atomic<unsigned> g_calloc_arena[max_calloc_arenas] = {};
// The mallocx flags of this thread's large callocs: -1 not chosen yet, 0 jemalloc's
// calloc (no arena of ours), else MALLOCX_ZERO | its arena | MALLOCX_TCACHE_NONE.
constinit thread_local int t_calloc_flags REPLAYALLOC_TLS_IE = -1;

// The flags of this thread's large callocs, once per thread: the arena of ours that
// stands beside the thread's automatic arena, made by the first thread that needs it.
// pre: g_large_min was set (zero_reused_by_memset()).
[[gnu::noinline]] int choose_calloc_flags() noexcept {
  if (g_large_min.load(std::memory_order_acquire) == std::numeric_limits<std::size_t>::max()) return 0;
  unsigned own = 0;
  std::size_t len = sizeof own;
  if (mallctl("thread.arena", &own, &len, nullptr, 0) != 0) {
    t_calloc_flags = 0;
    return 0;
  }
  std::atomic<unsigned>& slot = g_calloc_arena[own % max_calloc_arenas];
  unsigned arena = slot.load(std::memory_order_acquire);
  if (arena == 0) {
    // Arenas are made one at a time. Another thread making one (or one that was, in
    // the parent of a forked child): jemalloc's calloc this time, the choice again at
    // the next large calloc; never a wait.
    static std::atomic_flag making = ATOMIC_FLAG_INIT;
    if (making.test_and_set(std::memory_order_acquire)) return 0;
    arena = slot.load(std::memory_order_acquire);
    if (arena == 0) {
      extent_hooks_t* hooks = &g_memset_hooks;
      unsigned made = 0;
      len = sizeof made;
      if (mallctl("arenas.create", &made, &len, &hooks, sizeof hooks) == 0 && made != 0) {
        slot.store(made, std::memory_order_release);
        arena = made;
      }
    }
    making.clear(std::memory_order_release);
  }
  t_calloc_flags = arena == 0 ? 0 : MALLOCX_ZERO | MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
  return t_calloc_flags;
}

// A large calloc from this thread's arena of ours; null when there is none (then the
// caller uses jemalloc's calloc) or when it has no memory.
inline void* calloc_in_own_arena(std::size_t size, bool* served) noexcept {
  int flags = t_calloc_flags;
  if (flags < 0) [[unlikely]] flags = choose_calloc_flags();
  *served = flags != 0;
  return flags != 0 ? mallocx(size, flags) : nullptr;
}

}  // namespace


bool use_fast_entry_points() noexcept {
  if (g_je_free.load(std::memory_order_acquire) != nullptr) return true;
#if defined(REPLAYALLOC_PRIVATE_JEMALLOC)
  // The library's own copy: its entry points are known at link time.
  void* m = reinterpret_cast<void*>(&replayalloc_je_malloc);
  void* c = reinterpret_cast<void*>(&replayalloc_je_calloc);
  void* f = reinterpret_cast<void*>(&replayalloc_je_free);
#else
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&mallocx), &info) == 0 || info.dli_fname == nullptr) {
    return false;
  }
  // The program's own binary (jemalloc linked statically): keep mallocx.
  void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  void* m = symbol_of(handle, info.dli_fbase, "malloc");
  void* c = symbol_of(handle, info.dli_fbase, "calloc");
  void* f = symbol_of(handle, info.dli_fbase, "free");
  dlclose(handle);  // NOLOAD: drops only the reference just taken
  if (m == nullptr || c == nullptr || f == nullptr) return false;
#endif
  g_je_malloc.store(reinterpret_cast<malloc_fn>(m), std::memory_order_relaxed);
  g_je_calloc.store(reinterpret_cast<calloc_fn>(c), std::memory_order_relaxed);
  g_je_free.store(reinterpret_cast<free_fn>(f), std::memory_order_release);
#if !defined(REPLAYALLOC_ASAN)
  g_plain_malloc.store(&plain_malloc_aligned, std::memory_order_relaxed);
  g_pass_malloc.store(reinterpret_cast<malloc_fn>(m), std::memory_order_relaxed);
  g_plain_free.store(reinterpret_cast<free_fn>(f), std::memory_order_relaxed);
  g_outside_free.store(reinterpret_cast<free_fn>(f), std::memory_order_relaxed);
#endif
  return true;
}

namespace {
// Only where the plain entry points are jemalloc's own (not under AddressSanitizer).
bool front_cache_possible() noexcept {
  malloc_fn m = g_je_malloc.load(std::memory_order_relaxed);
  free_fn f = g_je_free.load(std::memory_order_relaxed);
  return m != nullptr && f != nullptr && g_plain_malloc.load(std::memory_order_relaxed) == &plain_malloc_aligned &&
         g_plain_free.load(std::memory_order_relaxed) == f;
}
}  // namespace

std::size_t front_range_wanted() noexcept { return front_cache_possible() ? front_range_bytes : 0; }

namespace {
bool g_front_joined = false;  // the front cache's range joined the gate's (reserve_front_cache)
std::uintptr_t g_front_base = 0;  // its range (reserve_front_cache)
}  // namespace

std::uintptr_t front_boot_base() noexcept { return g_front_base; }

bool reserve_front_cache() noexcept {
  std::uintptr_t base = 0;
  if (!front_cache_possible() || !reserve_front_range(&base)) return false;
  g_front_base = base;
  // Note [The gate's range] (slab_range.h): where the cache's range lies directly below
  // the slab range, no block outside the gate's is the cache's.
  g_front_joined = join_gate_range(base, front_range_bytes);
  front_backend b;
  b.malloc = &plain_malloc_aligned;  // its misses may pass on a request under 16 bytes
  b.free = g_je_free.load(std::memory_order_relaxed);
  return make_front_arena(&b) && enable_front_cache(b);
}

void use_front_frees() noexcept {
  if (!g_front_joined) g_outside_free.store(&front_free, std::memory_order_release);
  g_plain_free.store(&front_free, std::memory_order_release);
}

bool use_front_cache() noexcept {
  if (!start_front_arena()) {
    g_front_unused.store(true, std::memory_order_relaxed);
    return false;
  }
  // The frees first: other threads may be running (Note [The fallback made when first
  // needed]), and each free must know the cache's blocks before a malloc hands one out.
  use_front_frees();
  g_pass_malloc.store(&front_malloc, std::memory_order_release);
  g_plain_malloc.store(&front_malloc, std::memory_order_release);  // Note [Small blocks in the front cache]
  g_plain_memalign.store(&front_memalign, std::memory_order_release);  // Note [Aligned requests in the front cache]
  return true;
}

// Note [Thread caches left to the front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc makes a thread's cache at the thread's first call, whatever it is (a mallocx
// with MALLOCX_TCACHE_NONE, as the front cache's arenas are asked, too): 32 KiB of
// stacks, a large block zeroed, which an exited thread's stacks, dirty in arena 0, are
// zeroed for by giving their pages back (MADV_DONTNEED, Note [Zeroing by memset]): a
// TLB shootdown of every other thread and 4-8 faults for each new thread. Where the front
// cache serves 16 B-2 MiB that cache holds next to nothing (the engine's own requests,
// large callocs to 32 KiB, alignments the front cache leaves), so the engine's
// constructor, where the cache will run (on, not check mode, its range reserved), gives
// the private jemalloc `tcache:false` before it boots (at the fallback's start); a
// program's MALLOC_CONF still wins (read after). Large callocs then all go to the arenas
// of Note [Zeroing by memset]. Threads that come and go (larson) and each thread's first
// requests (small, rptest) take fewer faults and less CPU (RESULTS "Thread caches left to
// the front cache"). Where the cache's arena is refused at the start after all, jemalloc
// serves without thread caches (REPLAYALLOC_VERBOSE=2 says so).
bool leave_thread_caches_to_front() noexcept {
#if defined(REPLAYALLOC_JE_FRONT_CONF)
  replayalloc_je_malloc_conf = REPLAYALLOC_JE_FRONT_CONF;
  return true;
#else
  return false;
#endif
}

bool fallback_thread_caches_on() noexcept {
  bool on = true;
  std::size_t len = sizeof on;
  return mallctl("opt.tcache", &on, &len, nullptr, 0) != 0 || len != sizeof on || on;
}

void zero_reused_by_memset() noexcept {
  if (g_large_min.load(std::memory_order_relaxed) != std::numeric_limits<std::size_t>::max()) return;
  extent_hooks_t* hooks = nullptr;
  std::size_t len = sizeof hooks;
  std::size_t large = 0;
  std::size_t large_len = sizeof large;
  if (mallctl("arena.0.extent_hooks", &hooks, &len, nullptr, 0) != 0 || hooks == nullptr ||
      mallctl("arenas.lextent.0.size", &large, &large_len, nullptr, 0) != 0 || large == 0) {
    return;  // not jemalloc 5's interface: its own zeroing stays
  }
  // Blocks up to the thread cache's largest go back to the freeing thread's cache, where
  // an arena of ours would never find them: those are taken from jemalloc as they are
  // and memset here.
  std::size_t tcache_max = 0;
  std::size_t tcache_len = sizeof tcache_max;
  if (fallback_thread_caches_on() && mallctl("arenas.tcache_max", &tcache_max, &tcache_len, nullptr, 0) == 0 &&
      tcache_max >= large) {
    g_cached_max.store(tcache_max, std::memory_order_relaxed);
  }
  std::size_t oversize = 0;
  std::size_t oversize_len = sizeof oversize;
  if (mallctl("opt.oversize_threshold", &oversize, &oversize_len, nullptr, 0) == 0 && oversize != 0) {
    g_large_max.store(oversize, std::memory_order_relaxed);
  }
  g_memset_hooks = *hooks;  // read only: arena 0 keeps its table
  g_large_min.store(large, std::memory_order_release);
}

void* fallback_alloc(std::size_t size, std::size_t align) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  if (align <= malloc_align) {
    // The front cache's where it is on (g_pass_malloc), else jemalloc's own malloc.
    if (malloc_fn m = g_pass_malloc.load(std::memory_order_acquire)) [[likely]] return m(at_least_min(size));
    if (malloc_fn m = g_je_malloc.load(std::memory_order_relaxed)) [[likely]] return fresh(m(at_least_min(size)));
  }
  // Note [Aligned requests in the front cache] (front_classes.cc): counted toward the
  // start, one request where the boot heap serves it (its pages of its own above 256 KiB,
  // as a malloc's: a large one does not make the start there), and the cache's once it
  // serves.
  if (boot_heap_open()) [[unlikely]] {  // Note [A short process's aligned requests]
    if (void* p = boot_memalign(size, align)) {
      if (g_start_pending.load(std::memory_order_relaxed)) note_aligned(0);
      return p;
    }
  }
  if (g_start_pending.load(std::memory_order_relaxed)) [[unlikely]] note_aligned(size);
  if (plain_memalign_fn m = g_plain_memalign.load(std::memory_order_acquire)) [[likely]] {
    if (void* p = m(size, align)) return p;
  }
  return fresh(mallocx(at_least_min(size), align_flags(align)));
}

// Note [The engine's large buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's own buffers (a recording's arrays and its trace, the op hints, the
// envelope, the planner's working sets) came from the fallback as the program's blocks
// do, so where the front cache is on, from its lists: at the end of a recording the
// trace's array of 10,000 allocations (480 KB) took a block of the class the program's
// prefill had just freed, and the program's next iteration missed it and faulted fresh
// pages (bench/micro/planning_latency 10000: the second iteration, the second recording,
// 652 page faults where the same iteration passed through with nothing recorded took
// 322, and jemalloc alone 1). The engine's buffers of 32 KiB and more (engine_own_least;
// 64 KiB until Note [Idle blocks before a new run], after which a recording's arrays of
// 40-64 KiB held the runs the program's growing caches emptied: 351 -> 713 faults there)
// come from jemalloc's own malloc, outside the front cache's range, whose frees
// already send them back to jemalloc (Note [The front cache's arena]): the program's
// classes keep their blocks, and the engine's buffers reuse each other's pages from one
// recording to the next. The second recorded iteration there 652 -> 395 faults, ~1.8 ->
// ~1.1 ms (jemalloc's 0.43); the first 2,590 -> 2,760. Smaller requests, zeroed and
// over-aligned ones stay with the front cache. Measured in RESULTS ("Planning latency").
void* engine_alloc(std::size_t size, std::size_t align) noexcept {
  if (size >= engine_own_least && align <= malloc_align) {
    if (inject_failure()) [[unlikely]] return nullptr;
    if (boot_heap_open()) [[unlikely]] {  // Note [A short process's first requests]
      if (void* p = boot_malloc(size)) return p;
    }
    if (malloc_fn m = g_je_malloc.load(std::memory_order_relaxed)) [[likely]] return fresh(m(size));
  }
  return fallback_alloc(size, align);
}

void* fallback_calloc(std::size_t size) noexcept {
  if (g_start_pending.load(std::memory_order_relaxed)) [[unlikely]] {
    if (void* p = calloc_before_start(size)) return p;  // the boot heap's, zeroed (up to 256 KiB)
    note_calloc(size);
  }
  return engine_calloc(size);  // the boot heap's while it is open (Note [A short process's first requests])
}

void* engine_calloc(std::size_t size) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  if (boot_heap_open()) [[unlikely]] {
    if (void* p = boot_calloc(size == 0 ? 1 : size)) return p;
  }
#if defined(REPLAYALLOC_ASAN)
  // jemalloc's own calloc zeroes a reused block before fresh() can unpoison it (what an
  // Abseil table poisoned there: the note at the top): the block first, then the zeroes.
  if (void* p = fallback_alloc(size == 0 ? 1 : size, malloc_align)) {
    std::memset(p, 0, size);
    return p;
  }
  return nullptr;
#endif
  if (size <= front::calloc_front_most) {  // Note [Callocs of up to 32 KiB from the front cache]
    bool served = false;
    if (void* p = front::front_calloc(size, &served); served) return p;
  }
  if (size >= g_large_min.load(std::memory_order_relaxed) &&
      size < g_large_max.load(std::memory_order_relaxed)) [[unlikely]] {
    // Note [Zeroing by memset]; up to the thread cache's largest, jemalloc's own malloc.
    if (size <= g_cached_max.load(std::memory_order_relaxed)) {
      malloc_fn m = g_je_malloc.load(std::memory_order_relaxed);
      void* p = fresh(m != nullptr ? m(size) : mallocx(size, 0));
      if (p != nullptr) std::memset(p, 0, size);
      return p;
    }
    bool served = false;
    void* p = calloc_in_own_arena(size, &served);
    if (served) return fresh(p);
  }
  if (calloc_fn c = g_je_calloc.load(std::memory_order_relaxed)) [[likely]] return fresh(c(1, at_least_min(size)));
  return fresh(mallocx(at_least_min(size), MALLOCX_ZERO));
}

void fallback_free(void* p) noexcept {
  if (free_fn f = g_plain_free.load(std::memory_order_relaxed)) [[likely]] {  // the front cache's, where on
    f(p);
    return;
  }
  if (free_fn f = g_je_free.load(std::memory_order_relaxed)) [[likely]] {
    f(p);
    return;
  }
  dallocx(p, 0);
}

void fallback_free_sized(void* p, std::size_t size, std::size_t align) noexcept {
  // The plain free at any alignment: an aligned block may be the front cache's or the
  // boot heap's (Note [Aligned requests in the front cache], Note [A short process's
  // aligned requests]), which jemalloc's sdallocx must never be given; it tells them
  // from jemalloc's by their address.
  free_fn f = g_plain_free.load(std::memory_order_relaxed);
  if (f == nullptr && align <= malloc_align) f = g_je_free.load(std::memory_order_relaxed);
  if (f != nullptr) [[likely]] {
    f(p);
    return;
  }
  sdallocx(p, at_least_min(size), align_flags(align));
}

void* fallback_realloc(void* p, std::size_t size) noexcept {
  // Note [Runs for medium blocks]: jemalloc does not know a run's block. It stays where
  // the new size is of its class (the cache's: Note [A class for a page and a header]),
  // and moves otherwise; so does a block of the boot heap's, where it cannot grow in place
  // (Note [A short process's first requests]). A run's block is asked first, the common
  // case once the cache is made (the boot heap's pages say class 0 in the page map).
  // errno is ENOMEM where no block is had (realloc(3)), so that the C API's realloc
  // tail-calls this.
  if (void* q = front::run_realloc(p, at_least_min(size))) [[likely]] return q;  // Note [A run's block resized inline]
  std::size_t usable = 0, below = 0;
  const bool run = front_run_block(p, &usable, &below);
  const bool boot = !run && boot_block(p, &usable);
  void* q;
  if (run || boot) {
    const std::size_t n = at_least_min(size);
    if ((n <= usable && n > below) || (boot && boot_resize(p, n))) return p;
    q = fallback_alloc(n, malloc_align);
    if (q != nullptr) [[likely]] {
      std::memcpy(q, p, n < usable ? n : usable);
      fallback_free(p);
      return q;
    }
  } else {
    front_resizing(p);  // Note [The front cache's page map]
    q = fresh(rallocx(p, at_least_min(size), 0));
    if (q != nullptr) [[likely]] return q;
  }
  errno = ENOMEM;  // p stays valid
  return nullptr;
}

std::size_t fallback_usable_size(const void* p) noexcept {
  // Note [Runs for medium blocks], Note [A short process's first requests]
  if (std::size_t usable = 0; front_run_block(p, &usable) || boot_block(p, &usable)) return usable;
  return sallocx(const_cast<void*>(p), 0);
}

}  // namespace replayalloc::detail::backend
