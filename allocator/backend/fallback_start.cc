// The fallback's start: its front cache and its jemalloc settings, made once a process
// has shown it is more than a short command.
//
// Note [The fallback made when first needed]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every process the LD_PRELOAD library enters paid, before its first instruction, for
// what only a process that allocates much uses: the front cache (slot 0's arena, its
// base and bins, the page map and run table it first writes: ~29 page faults; Note
// [The fallback's front cache]) and ten mallctl calls (keep_huge_pages,
// zero_reused_by_memset, the front arena's), the first of which makes jemalloc build
// its ctl statistics (~30 faults, whichever control is asked). A page's first touch
// costs ~9 us on this host, and a build or a shell script runs thousands of short
// processes: /bin/true took 279 faults and 3.9x glibc's time to start and exit under
// the library, jemalloc alone 169 and 2.5x (bench/RESULTS.md, "Start-up").
// So the engine's constructor reserves the cache's range, joins it to the gate's (no
// thread's gate may open before the range it will hold is known: Note [The gate's
// range]) and configures the cache (its classes, page map and run table: address space
// and a few pages, no call into jemalloc's controls), all before any other thread can
// use them; and it puts counting mallocs in place of the plain and passing ones
// (g_plain_malloc, g_pass_malloc): jemalloc's own malloc behind one load, one compare
// and one store (a calloc tells the count of itself). After REPLAYALLOC_FALLBACK_AFTER
// requests (4,096: at 1,024, `ls /usr/bin`, `find`, `tar` and `perl -e 1`, 1,100-4,000
// requests each, made the start, ~130 page faults more than with 4,096; a process of more
// requests than that, `ls -l /usr/bin`, took ~45 more, its boot heap's pages fuller), or at
// the first of 1 MiB or more (a block jemalloc would purge at
// its free without keep_huge_pages) or calloc of 16 KiB or more (one jemalloc would zero
// by giving its pages back when reused, without zero_reused_by_memset; while the boot heap
// serves them, neither: Note [A short process's large requests], Note [A short process's
// callocs]), the thread that
// counts the last makes the start: jemalloc's settings, the cache's first arena (Note
// [Arenas made when first used]), then the cache's entry points, the frees before the
// mallocs (use_front_cache): other threads may be allocating, and any free must know
// the cache's blocks before one is handed out; blocks jemalloc served before are freed
// to jemalloc by their address, as ever. Last, the narrowed plain malloc (Note [Below
// the minimum, narrowed]). One thread makes the start (a compare-and-swap); the others
// go on counting into jemalloc's malloc until the cache's are stored, and a child forked
// while another thread was making it keeps jemalloc's, its counting mallocs taken away
// (fallback_start_postfork_child; it is never made twice). Before the start a program
// sees the boot heap while it has one thread (Note [A short process's first requests],
// boot_heap.cc: the counting mallocs serve from it), else jemalloc with its defaults,
// where they cost nothing yet (an aligned request or a
// realloc, not counted, may grow a block to 8 MiB on the main thread, purged at its
// free); the statistics and auto mode's rule (thread_cache_max() below) already count
// the cache. Where its first arena cannot be made at the start, it
// stays configured and unused (logged at REPLAYALLOC_VERBOSE=2).
// REPLAYALLOC_FALLBACK_AFTER=0 makes the start at once.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"
#include "backend/jemalloc_names.h"
#include "support/log.h"

namespace replayalloc::detail::backend {
namespace {

enum : unsigned char { start_none, start_counting, start_making, start_made };
std::atomic<unsigned char> g_start{start_none};
// Requests left before the start; counted without a read-modify-write (a count lost to
// a race only moves the start a little).
std::atomic<std::uint64_t> g_left{0};
// A request this large starts it at once.
constexpr std::size_t start_at_size = std::size_t{1} << 20;
// Written before the counting mallocs are stored, read after.
bool g_front = false;
std::uint64_t g_small_limit = 0;
std::uint64_t g_after = 0;
plain_malloc_fn g_plain_before = nullptr;
plain_malloc_fn g_pass_before = nullptr;
// A setting may have raised jemalloc's thread cache above its default (read once, by the
// engine's constructor: getenv is not safe beside another thread's setenv).
bool g_tcache_set = false;
// Note [Thread caches left to the front cache]: jemalloc's thread caches, off from its
// boot (read at the start).
bool g_caches_off = false;
// The boot heap stopped serving (Note [The start once the boot heap stops serving]); a
// race between threads only applies the limit twice.
std::atomic<bool> g_boot_stopped{false};

void make_start(bool front, std::uint64_t small_limit) noexcept {
  close_boot_heap();
  keep_huge_pages();
  zero_reused_by_memset();
  g_caches_off = !fallback_thread_caches_on();
  if (front && !use_front_cache()) g_front = false;
  narrow_plain_malloc(small_limit);
}

inline void count(std::size_t size) noexcept {
  const std::uint64_t left = g_left.load(std::memory_order_relaxed);
  if (left > 1 && size < start_at_size) [[likely]] {
    g_left.store(left - 1, std::memory_order_relaxed);
    return;
  }
  start_fallback_now();
}

// jemalloc's first large class (4 KiB pages): a calloc of it or more reused is zeroed
// by giving its pages back until zero_reused_by_memset.
constexpr std::size_t large_calloc = std::size_t{16} << 10;

// Note [A short process's first requests] (boot_heap.cc): the boot heap's blocks while it
// is open (count() may make the start, which closes it).
// Note [The start once the boot heap stops serving]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The start waits for REPLAYALLOC_FALLBACK_AFTER requests (4,096) so that a short command,
// served by the boot heap, never makes it. Once the heap no longer serves (a second thread
// closed it, or its MiB is spent) jemalloc serves the requests with its defaults, booted
// anyway, and waiting on is a cost: the blocks made meanwhile are arena 0's, whose pages
// the front cache never reuses (larson, whose main thread makes every thread's first
// blocks: peak RSS 101 -> 120 MiB with the start at 4,096 requests instead of 1,024;
// never_repeats, whose one thread asks blocks of 4 KiB-1 MiB, 48.9 -> 68.9 MiB when the
// start waited). Where the heap, still open (the process has one thread), refuses a
// request (its MiB spent, or one above 256 KiB after its pages of their own: Note [A
// short process's large requests]), the start comes at that request, which the front
// cache then serves: a process that asked that much is no short command. Where a second
// thread closed it, the start comes within a quarter of the count (1,024 by default),
// counted from the process's first request; at once where that many were made already.
// Where there was no heap (the front cache off, check mode) the count is as set.
void boot_heap_stopped() noexcept {
  if (boot_heap_open()) return start_fallback_now();
  const std::uint64_t quarter = g_after / 4;
  const std::uint64_t left = g_left.load(std::memory_order_relaxed);
  const std::uint64_t made = g_after - left;
  if (made >= quarter) return start_fallback_now();
  if (left > quarter - made) g_left.store(quarter - made, std::memory_order_relaxed);
  g_boot_stopped.store(true, std::memory_order_relaxed);
}

// The counting plain malloc (entry g_plain_malloc, jemalloc's before it) and passing one.
template <std::atomic<plain_malloc_fn>& entry, plain_malloc_fn& before>
void* counting(std::size_t size) noexcept {
  if (size > boot_largest) [[unlikely]] {
    if (void* p = large_before_start(size)) return p;
  }
  count(size);
  if (void* p = boot_malloc(size)) return p;
  if (!g_boot_stopped.load(std::memory_order_relaxed)) [[unlikely]] {
    boot_heap_stopped();
    if (g_start.load(std::memory_order_acquire) == start_made) return entry.load(std::memory_order_acquire)(size);
  }
  return before(size);
}
constexpr plain_malloc_fn counting_plain = &counting<g_plain_malloc, g_plain_before>;
constexpr plain_malloc_fn counting_pass = &counting<g_pass_malloc, g_pass_before>;

// jemalloc's own mallocs in place of the counting ones, where those are still there.
void stop_counting() noexcept {
  plain_malloc_fn counting = counting_plain;
  g_plain_malloc.compare_exchange_strong(counting, g_plain_before, std::memory_order_acq_rel);
  counting = counting_pass;
  g_pass_malloc.compare_exchange_strong(counting, g_pass_before, std::memory_order_acq_rel);
}

}  // namespace

void start_fallback(bool front, std::uint64_t small_limit, std::uint64_t after) noexcept {
  const char* conf = std::getenv("MALLOC_CONF");
  g_tcache_set = conf != nullptr && std::strstr(conf, "tcache_max") != nullptr;
  g_front = front && reserve_front_cache();
  if (g_front) leave_thread_caches_to_front();  // before jemalloc boots (at the start)
  g_small_limit = small_limit;
  g_after = after;
  g_plain_before = g_plain_malloc.load(std::memory_order_relaxed);
  g_pass_before = g_pass_malloc.load(std::memory_order_relaxed);
  if (after == 0 || g_plain_before == nullptr || g_pass_before == nullptr) {
    g_start.store(start_made, std::memory_order_release);
    make_start(g_front, small_limit);
    return;
  }
  // Note [A short process's first requests]: the frees first, as at the start.
  if (g_front && open_boot_heap(front_boot_base())) {
    use_front_frees();
  } else {
    g_boot_stopped.store(true, std::memory_order_relaxed);  // no heap to stop serving: the count as set
  }
  g_left.store(after, std::memory_order_relaxed);
  g_start.store(start_counting, std::memory_order_release);
  g_start_pending.store(true, std::memory_order_relaxed);
  g_plain_malloc.store(counting_plain, std::memory_order_release);
  g_pass_malloc.store(counting_pass, std::memory_order_release);
}

void start_fallback_now() noexcept {
  unsigned char expected = start_counting;
  if (!g_start.compare_exchange_strong(expected, start_making, std::memory_order_acq_rel)) return;
  // Called from a malloc, in the engine or not (the reentry guard is the runtime's):
  // nothing here allocates through malloc (jemalloc's controls and arenas use its own
  // metadata, the cache's maps are mmap'd, the log formats on the stack).
  // jemalloc's own entry points back first (the front cache's replace them where it is
  // made).
  stop_counting();
  make_start(g_front, g_small_limit);
  g_start.store(start_made, std::memory_order_release);
  g_start_pending.store(false, std::memory_order_relaxed);
  const std::uint64_t left = g_left.load(std::memory_order_relaxed);
  REPLAYALLOC_LOG(info, "fallback: started at request %llu of %llu%s%s", static_cast<unsigned long long>(g_after - left + 1),
                  static_cast<unsigned long long>(g_after), g_front ? " (front cache on)" : " (front cache off)",
                  g_caches_off ? ", jemalloc's thread caches off" : "");
}

// Note [A short process's large requests] (boot_heap.cc): pages of its own, counted as
// one request, not as a large one (which would make the start).
void* large_before_start(std::size_t size) noexcept {
  if (g_start.load(std::memory_order_relaxed) != start_counting) return nullptr;
  void* p = boot_big_malloc(size);
  if (p != nullptr) count(1);
  return p;
}

// Note [A short process's callocs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A calloc of 16 KiB or more made the start (note_calloc): jemalloc zeroes a reused block
// of its large classes by giving its pages back, and zero_reused_by_memset, made at the
// start, has it memset them instead. But while the boot heap is open the calloc is the
// heap's, zeroed by memset where a freed block is reused (boot_calloc): jemalloc is not
// asked, and the calloc counts as one request. Perl callocs 32 KiB (its string table) at
// its 36th request: each `perl -e 1` made the start, 493 page faults against glibc's 288
// and mimalloc's 345. Above 256 KiB a calloc still makes the start: pages of its own
// (Note [A short process's large requests]) are given back at its free, and a program
// that callocs such a block again would fault them in again, where jemalloc zeroes its
// free pages in place (Entry.ALargeBlockCallocdAgainIsZeroedInPlace).
void* calloc_before_start(std::size_t size) noexcept {
  if (g_start.load(std::memory_order_relaxed) != start_counting || size > boot_largest) return nullptr;
  void* p = boot_calloc(size == 0 ? 1 : size);
  if (p != nullptr) count(1);
  return p;
}

void note_calloc(std::size_t size) noexcept {
  if (g_start.load(std::memory_order_relaxed) == start_counting) count(size >= large_calloc ? start_at_size : size);
}

void note_aligned(std::size_t size) noexcept {
  if (g_start.load(std::memory_order_relaxed) == start_counting) count(size);
}

REPLAYALLOC_FORK_CHILD_CODE void fallback_start_postfork_child() noexcept {
  // Forked while another thread was making the start: it is never made here, and the
  // counting mallocs would ask for it at every request.
  if (g_start.load(std::memory_order_relaxed) != start_making) return;
  stop_counting();
  g_start_pending.store(false, std::memory_order_relaxed);
}

bool fallback_started() noexcept {
  const unsigned char s = g_start.load(std::memory_order_acquire);
  return s == start_made || s == start_none;
}

void keep_huge_pages() noexcept {
  std::size_t opt = 1;
  std::size_t len = sizeof opt;
  if (mallctl("opt.oversize_threshold", &opt, &len, nullptr, 0) != 0 || opt != 0) return;
  // The other arenas' threshold when the option is 0 (jemalloc: the largest size class
  // plus a page; no block reaches it).
  std::size_t never = std::numeric_limits<std::size_t>::max();
  mallctl("arena.0.oversize_threshold", nullptr, nullptr, &never, sizeof never);
}

// Note [The fallback's thread cache] (jemalloc_backend.cc): the front cache's too, from
// the engine's constructor on where it is configured. Before the start, jemalloc's own
// limit is asked only where a setting may have raised it (its default, 32 KiB, is below
// the front cache's 128 KiB): any mallctl builds jemalloc's statistics. A program's own
// `malloc_conf` symbol raising it is not seen until the start.
std::size_t thread_cache_max() noexcept {
  const std::size_t front = front_thread_kept_max();
  if (!fallback_started() && front != 0 && !g_tcache_set) return front;
  if (fallback_started() && g_caches_off) return front;  // jemalloc keeps none
  std::size_t max = 0;
  std::size_t len = sizeof max;
  return mallctl("arenas.tcache_max", &max, &len, nullptr, 0) == 0 && len == sizeof max && max > front ? max : front;
}

}  // namespace replayalloc::detail::backend
