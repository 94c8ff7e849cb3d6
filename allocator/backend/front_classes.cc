// The front cache's size classes (Note [The fallback's front cache], front_cache.cc):
// jemalloc's and two more (Note [A class for a page and a header]), numbered once as the
// cache is enabled; how the small ones are kept (Note [Small blocks in the front cache])
// and which are kept in bytes (Note [Large blocks in the front cache]); and which of them
// a thread's stream has left.
#include "backend/front_classes.h"

#include <atomic>
#include <bit>

#include "backend/backend.h"
#include "backend/front_cache.h"

namespace replayalloc::detail::backend::front {

// Note [Small blocks in the front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Below 4 KiB jemalloc's thread cache was the fallback's floor: its malloc and free are
// ~77 instructions a pair where tcmalloc's and mimalloc's are ~40-50, and threads that
// hand small blocks to each other (larson, producer/consumer) flush them block by block
// to their arena under its lock. So the front cache serves every class from 16 B to
// 64 KiB, the small ones as the others: the thread's list, the depot, then its arena.
// The inline malloc below the minimum tail-calls front_malloc (narrowed: Note [Below the
// minimum, narrowed]), and the free of such a block is inside the gate's range (Note
// [The gate's range]), so it costs the free no test more than jemalloc's blocks did. A small class's list is filled half at once, from
// the runs of the thread's arena (Note [Runs for medium blocks]; where runs cannot be
// made, a block of the arena each: mallocx fills the bin's slabs with free regions
// first, where jemalloc's experimental.batch_alloc took fresh slabs and raised
// ResNet-50's peak RSS at 8 threads by 16 MiB). A small class's list holds 16 KiB of blocks (at
// least 4, at most 64), not 64 KiB: a short-lived thread (larson) fills a list of each
// class it touches, and what it held at its exit went back to its runs (the arena's
// slabs before) as dirty pages. Requests of under 16 bytes get 16 (glibc's alignment).
// A small class's blocks share pages, all of one class (a run's), so the page
// map's byte is theirs; a block jemalloc's realloc moves out of the cache's range is
// jemalloc's. REPLAYALLOC_FRONT_CACHE=0 leaves small requests to jemalloc's malloc, as
// before. Measured side by side in bench/RESULTS.md ("Small blocks in the front cache").

// Note [A burst's lists twice as long]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A burst (a batch's blocks allocated together, then freed together) moves its blocks
// between the thread's list and its runs a list at a time: a list's miss takes a list
// from the depot or the runs, an overflow hands one on, and past the depot's budget it
// goes back to its runs, each under a lock of a line the other threads share. Lists of
// 64 KiB of blocks (eight of 8 KiB, four of 16 KiB) made that a visit every four to
// eight blocks, and a burst's blocks (each on a page of its own, written just before)
// stalled there: 40,000 blocks of 8 KiB cost 25.6 ns a malloc and 25.0 a free past the
// first round against mimalloc's 19.3 and 14.9, though fewer instructions (perf, 8 KiB:
// the depot's put 18% of the samples). So where a thread bursts a class it also frees
// (its second miss into the runs with no overflow between, Note [Runs for medium
// blocks], and a list of the class handed on at any time before: `frees_too`, kept for
// the thread's life), its list of the class holds twice as many (at most 64, and at most
// a run's blocks) until its next miss into the runs that is not a burst's: the miss
// takes up to that many (what its runs have left), and the frees that follow hold that
// many before a list goes on (halves first: Note [Half a list handed on]). A thread that
// only allocates the class (a producer) or only frees it (a consumer) keeps its own
// lists' length, and a list the depot hands a thread may be longer than its own (its
// next free hands it on, as a full one's). Lists of 32 blocks of 4 KiB were slower where
// tried, whether a list took from two runs of 16 (18.4 -> 28.4 ns a malloc) or from runs
// made twice as large (23.1; not found why), so no list's length is more than a run's
// blocks (4 KiB's 16 are one's; a take may still span two partly used runs). Four times
// as long was not faster at 8 KiB (its runs' 16) and would hold 1 MiB of 64 KiB blocks a
// thread. Measured side by side in bench/RESULTS.md ("A burst's lists twice as long").

// Note [Large blocks in the front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Above 64 KiB jemalloc's interface was the fallback's floor: a large block is an
// extent of its own, and each malloc and free of one splits or coalesces extents,
// writes jemalloc's radix tree at both ends and takes the arena's lock (~2,000
// instructions a pair, ~4,400 with the stream's page writes between: a stream of
// 4 KiB-1 MiB blocks that never repeats ran at 2.2x mimalloc's time, RESULTS "Large
// blocks in the front cache"). jemalloc's thread cache can keep them (tcache_max) but
// holds up to 20 blocks of every class in every thread, with no budget of bytes (peak
// RSS 1.2-1.6x the leanest at 8-16 threads: Note [The fallback's thread cache]). So
// the front cache keeps the blocks of jemalloc's classes above 64 KiB up to 2 MiB (20
// classes, four per doubling) itself, counted in bytes:
//  * a thread keeps, on its lists of those classes, at most its share of 16 MiB (the
//    threads with a cache open sharing it, at least 512 KiB each); a block freed past
//    that goes to the depot with up to 15 of its class's list (1 MiB at most) as one
//    list, whose budget for these classes is 8 MiB, and past that back to the arena. So
//    the cache never holds more than 24 MiB of them however many threads there are: at
//    16 threads, 512 KiB-1 MiB each;
//  * a request takes a block of its class: the thread's list, then the depot (a list,
//    which an exited thread's may be), then the arena (every block the cache holds is
//    on its own class's list, as below 64 KiB);
//  * but one its class's list and the depot cannot serve first takes the thread's cached
//    block of one of the next two classes (at most 1.5x its size), which goes back to
//    its own class's list when freed: a stream of random sizes makes fewer blocks
//    (never_repeats 3000: 73.2 -> 54.1 µs a request, peak RSS 52.5 -> 47.2 MiB; 2000
//    under callgrind 124.5 M -> 91.7 M instructions; three classes up or four were as
//    fast with more memory, one up slower: RESULTS "Larger cached blocks for a miss");
//  * a request the cache cannot serve first gives the thread's cached blocks of larger
//    classes back to the arena, as many bytes as it asks for where there are, so that
//    the arena serves it from their pages: the classes the cache holds follow the
//    requests, and its blocks do not sit beside fresh pages made for other classes
//    (never_repeats: peak RSS 50.6 -> 47.3 MiB, as fast; giving back the smaller
//    classes' too took it to 36.5 MiB but doubled its time), and before them its
//    blocks of the classes it has left (Note [Classes a stream has left]);
//  * their lists' max is 0, so their frees always take free_slow, which keeps the
//    thread's count of bytes, and their requests are past the lists' fast path (above
//    g_largest); a few instructions against jemalloc's thousands.
// A burst of them (many allocated, then all freed: a batch's buffers) moves in batches:
// a run class's second miss with no large free between takes 2 blocks from its runs,
// the next such in a row 4, 8, then up to 16 (large_run_miss in front_cache.cc; past the first, only blocks whose first page
// was written before, run_take's `fresh`: a list's links would fault in pages no request
// may use), and a free past the thread's budget sends its block and up to 15 of its
// list, 1 MiB at most, to the depot as one list (callgrind, bench/micro/bursts 2000 100000 10: 19.81 M
// -> 14.74 M instructions, mimalloc 19.25 M; blocks of 40,000 and 65,536 B, kept in
// lists, as before). Keeping the classes of 40-64 KiB so too (front_limit 32 KiB) was
// tried and not kept: a K/V cache a row longer a step gave the classes it left back to
// their runs (planning_latency 10000 1, nothing recorded: 2,315 -> 1,487 page faults in
// the first iteration), but a stream that never repeats took 21-23% more instructions
// (never_repeats 2000: 124.4 M -> 150.5 M), and the threaded stress programs' peak RSS
// grew 13-25% (RESULTS "Planning latency").
// Each block is its own extent, page-aligned, so the page map's byte of its first page
// is its class (Note [The front cache's page map]); jemalloc's realloc shrinks or grows
// such a block in place, which front_resizing answers as for any class of 4 KiB and up.
// What the budgets trade: a stream of random sizes (4 KiB-1 MiB) reuses a cached block
// of its class only as often as the bytes kept allow (never_repeats at 16+8 MiB: ~1.1x
// mimalloc; at 8+8, 1.3x; at 32 MiB, ~1.0x with peak RSS 1.5x mimalloc's), and blocks
// cached are held beside jemalloc's own dirty pages until reused. Measured side by side
// in bench/RESULTS.md ("Large blocks in the front cache").
namespace {

// Note [The classes asked once each]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The tables map every 16 bytes up to 64 KiB (and every 16 KiB up to 2 MiB) to a class.
// Asking the class function (jemalloc's nallocx, ~70 instructions) for each of the 4,097
// + 124 indexes was 37% of the instructions of a process that starts and exits under
// the LD_PRELOAD library (/bin/true: 293,000 of 800,000, callgrind). A class function
// is monotone and a class is its own class, so the indexes from i up to the class c's
// own index all have class c: the numbering asks once a class (and once more, at c's own
// index, to check that it is c's: where it is not, it steps one index, as before).
// tests/unit/front_classes_test.cc numbers the classes both ways and counts the questions.
template <typename F>
std::size_t same_class_up_to(std::size_t i, std::size_t last, std::size_t c, F class_at) noexcept {
  if (last <= i) return i;
  return class_at(last) == c ? last : i;
}

// Note [Large blocks in the front cache]: jemalloc's classes above 64 KiB up to 2 MiB,
// numbered from n + 1 into class_size (their lists' max 0: their frees take the slow
// path, which keeps count of bytes) and class_of (size / 16 KiB -> class); none where
// the classes are not multiples of 16 KiB there. Returns the largest request they serve
// (`largest`, that of the classes below, when none).
std::size_t number_large_classes(std::size_t (*size_class)(std::size_t) noexcept, unsigned n, std::size_t largest,
                                 std::uint32_t* class_size, std::uint32_t* list_max_of, std::uint8_t* class_of) noexcept {
  for (std::size_t i = (front_limit >> large_shift) + 1; i <= (large_limit >> large_shift);) {
    const std::size_t c = size_class(i << large_shift);
    if (c % (std::size_t{1} << large_shift) != 0 || c > large_limit) break;
    if (class_size[n] != c) {
      if (n + 1 == max_classes) break;
      ++n;
      class_size[n] = static_cast<std::uint32_t>(c);
      list_max_of[n] = 0;
    }
    // Every index up to c's own is of class c (Note [The classes asked once each]).
    const std::size_t last =
        same_class_up_to(i, c >> large_shift, c, [&](std::size_t j) { return size_class(j << large_shift); });
    for (; i <= last; ++i) class_of[i] = static_cast<std::uint8_t>(n);
    largest = last << large_shift;
  }
  return largest;
}

}  // namespace

// Note [A class for a page and a header]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program's buffers are often a power of two and a header: SQLite's page cache asks
// 4,104 and 4,368 bytes a page (4 KiB pages; 8,200 and 8,464 with 8 KiB), which
// jemalloc's classes (four a doubling: 4, 5, 6, 7, 8, 10 KiB) put in blocks of 5 and 10
// KiB, a fifth of each unused and its pages faulted in and kept all the same: sqlite3
// inserting 200,000 rows into a database in memory peaked at 149 MiB under replayalloc
// (jemalloc and mimalloc 143, glibc, which fits each chunk to 16 bytes, 123). The runs
// are the cache's own (Note [Runs for medium blocks]), so its classes need not be
// jemalloc's: for a power of two P of 4 and 8 KiB, one more, P + P/8 (4.5 and 9 KiB),
// takes the requests just above P, at most an eighth over: 148.8 -> 134.1 MiB and 0.93x
// the CPU, 142.3 -> 128.3 MiB and 0.93x with 8 KiB pages (bench/RESULTS.md, "Programs
// nobody tuned on"). Each class costs lists and runs of its own, its free blocks waiting
// there: eight classes a doubling from 4 to 16 KiB (tcmalloc's spacing) left sqlite3 as
// lean but raised the threaded stress programs' peak (sizes drawn log-uniform) by 2.4-3.8
// MiB, these two by 0.3-1.1 MiB; two more at 18 and 36 KiB gained nothing measured and
// raised it 0.8-1.6 MiB, so jemalloc's classes stay there. A run block keeps its place at
// a realloc while the new size is of its class (fallback_realloc), whatever jemalloc's.
std::size_t class_for(std::size_t n, std::size_t (*size_class)(std::size_t) noexcept) noexcept {
  if (n > header_least && n <= 2 * header_most) {
    const std::size_t p = std::bit_floor(n - 1);  // the power of two below n
    if (n <= p + p / 8) return p + p / 8;
  }
  return size_class(n);
}

bool number_classes(std::size_t (*size_class)(std::size_t) noexcept, front_classes* out) noexcept {
  // class_for's from 16 B to 64 KiB, numbered from 1; class 0 for the requests of every
  // other class.
  unsigned n = 0;  // the last class numbered
  constexpr std::size_t top = front_limit / 16;
  for (std::size_t i = 0; i <= top;) {
    const auto class_at = [&](std::size_t j) { return class_for(j == 0 ? 16 : j * 16, size_class); };
    const std::size_t c = class_at(i);
    // Every index up to c's own is of class c (Note [The classes asked once each]).
    const std::size_t last = same_class_up_to(i, c / 16 < top ? c / 16 : top, c, class_at);
    if (c < front_least || c > front_limit) {
      for (; i <= last; ++i) out->class_of[i] = 0;
      continue;
    }
    if (n == 0 || out->class_size[n] != c) {
      if (n + 1 == max_classes) return false;
      ++n;
      out->class_size[n] = static_cast<std::uint32_t>(c);
      const std::uint32_t m = static_cast<std::uint32_t>((c < fill_below ? small_list_bytes : list_bytes) / c);
      out->list_max_of[n] = m < list_min ? list_min : m > list_max ? list_max : m;
    }
    for (; i <= last; ++i) out->class_of[i] = static_cast<std::uint8_t>(n);
    out->largest = c;
  }
  if (n == 0) return false;
  out->first_large = n + 1;
  out->large_largest =
      number_large_classes(size_class, n, out->largest, out->class_size, out->list_max_of, out->large_class_of);
  return true;
}

// Note [Classes a stream has left]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread's lists keep the blocks of every class above 64 KiB that it freed, up to its
// budget (Note [Large blocks in the front cache]), for its next request of the class.
// Where the sizes grow (a K/V cache a token longer every step, concatenated into a new
// block), the stream moves to the next class every few steps and never asks the last
// one again in the request: its 24 blocks wait on the thread's list while the next
// class's are made of fresh pages, where jemalloc would have coalesced the freed blocks
// and served the larger ones from their pages. bench/micro/planning_latency 60000 1
// (the caches 32-277 KiB) faulted 10,113 pages in the cold iteration with nothing recorded
// (REPLAYALLOC_MODE=off), against jemalloc's 2,459, and took 2.8x its time; 100,000
// allocations 11,068 against 3,443. So a thread counts its requests of these classes
// (each takes the cache's slow path: no cost on the fast one) and the last at which it
// asked each class; at a request its lists and the depot cannot serve, before the arena
// or a run makes a block, it gives back the lists of the classes it has left: asked once,
// and not in its last 16 requests of these classes. Their blocks go back to the arena
// (coalesced with their neighbours, dirty, so the arena makes the next class's block of
// their pages) or to their runs (which, empty, a class of the same run size takes: Note
// [Empty runs kept]). A class the thread comes back to soon after its blocks went back
// (within as many requests again) had not been left: its patience doubles (up to 8
// times), and halves where it stayed away longer, so a class asked now and then in a
// stream of random sizes, or once an iteration in a repeating one, stays cached
// (bench/micro/never_repeats: its time and peak RSS as they were; up to 64 times kept
// 2 MiB more resident, and with no patience, 16 requests always, its time went from 42
// to 52 µs a request). A class the thread never asked (blocks freed here, made by
// another thread) is never left: its blocks go to the depot for the thread that asks,
// as before. Measured side by side in bench/RESULTS.md ("Planning latency").
void class_recency::came_back(unsigned k) noexcept {
  if (asked - left_at[k] <= (left_after << patience[k])) {
    if (patience[k] < patience_most) ++patience[k];
  } else if (patience[k] != 0) {
    --patience[k];
  }
  left_at[k] = 0;
}

}  // namespace replayalloc::detail::backend::front

namespace replayalloc::detail::backend {

// Note [Below the minimum, narrowed]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The inline malloc below the minimum (Note [Below the minimum, inline], thread_state.h)
// calls the plain malloc with sizes under REPLAYALLOC_MIN_SIZE only, and front_malloc
// first asks whether a size is one of its lists' (size <= g_largest, 64 KiB), which
// every such size is wherever the minimum is at most 64 KiB + 1 (4 KiB in the LD_PRELOAD
// library). So the fallback's start (Note [The fallback made when first needed]), told
// the minimum for that path, makes the plain malloc front_malloc without the question
// (front_malloc_below): two instructions fewer
// a pair below the minimum (64 B 53.1 -> 51.1, tests/perf/instruction_budget.txt). A
// larger minimum keeps front_malloc, whose question sends the sizes between to their
// large classes (tests/entry/entry_wide_min_test.cc). Nothing else calls the plain
// malloc: what is passed through, of any size, goes to g_pass_malloc, front_malloc.
// (Here, beside the classes it asks about, as front_cache.cc is at its 600 lines.)
void narrow_plain_malloc(std::uint64_t limit) noexcept {
  if (g_plain_malloc.load(std::memory_order_relaxed) == &front_malloc) {
    g_plain_malloc.store(front_malloc_below(limit), std::memory_order_relaxed);
  }
}

// Note [Aligned requests in the front cache]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every tensor libtorch makes is posix_memalign(64) (c10's alloc_cpu), and ONNX
// Runtime's CPU allocator aligns to 64 as well; such a request went past the front cache
// to jemalloc's mallocx (one arena for every thread: Note [The fallback's shared arena]),
// so everything a plan does not serve of those programs (warm-up, recordings, iterations
// passed through, tensors below the minimum) was jemalloc's, its locks and its decay:
// posix_memalign(64) of 16 B-64 KiB at 8 threads took 7.14x the best general-purpose
// allocator's CPU (bench/RESULTS.md, "Threaded stress with aligned requests in the front
// cache"). The cache's blocks are aligned by their class already: a run is aligned to its
// size, a power of two of 64 KiB or more (Note [Runs for medium blocks]), and its blocks
// lie at multiples of the class's size from its start, so a block of class c is aligned
// to c's lowest set bit; every class from 4A up (four a doubling, jemalloc's) is a
// multiple of A, and A, 2A and 3A are classes, as are the headers' P + P/8 wherever a
// multiple of A falls on one (4,608 and 9,216: aligned to 512 and 1,024). So a request of
// n bytes aligned to A (at most 4 KiB) takes the class of n rounded up to a multiple of A
// (and at least A): for A = 64, sizes under 256 round to 64, 128, 192 or 256, larger ones
// keep their class. A request of 64 KiB or more stays jemalloc's: the cache's classes
// above are kept within byte budgets per thread and in the depot, which held what
// jemalloc's one arena shares between threads (BERT-like at 16 threads peaked 20 MiB
// higher; "End to end: T = 8 and 16, oversubscribed, with aligned requests in the front
// cache"), and above 128 KiB they are jemalloc's extents, aligned to a cache line only;
// ResNet-50's 1x1 convolutions' weights of exactly 64 KiB, in the cache, left jemalloc's
// arena 8 MiB more dirty pages (its large extents' holes no longer reused) and the peak
// 7 MiB higher at one thread (311 against 300 MiB, mode off; auto mode 310 against 302),
// where below 64 KiB it is 301 ("The aligned classes below 64 KiB"). A block
// that is not aligned after all (a run could not be made, and jemalloc's own malloc
// served the class) goes back, and jemalloc's mallocx serves the request. Below the
// minimum the entry points call this inline (g_plain_memalign, as malloc calls the plain
// malloc; posix_memalign before it saves errno), and so does a pass granted ahead
// (pass_granted_aligned, runtime/shortcuts.h): a 64 B pair of posix_memalign(64) and
// free 235.2 -> 114.2 instructions, a 4 KiB pair passed through 254.2 -> 176.2 (and
// 124.2 since Note [posix_memalign's two ways], runtime/api.cc)
// (tests/perf/instruction_budget.txt; jemalloc's own 192.2 and 222.6, tcmalloc's 109.2
// and 112.2, mimalloc's 163.4 and 371.7).
void* front_memalign(std::size_t size, std::size_t align) noexcept {
  if (align > 4096 || size >= front::front_limit) return nullptr;
  const std::size_t n = ((size < align ? align : size) + align - 1) & ~(align - 1);
  void* p = front_malloc(n);
  if (p == nullptr || (reinterpret_cast<std::uintptr_t>(p) & (align - 1)) == 0) return p;
  front_free(p);
  return nullptr;
}

}  // namespace replayalloc::detail::backend
