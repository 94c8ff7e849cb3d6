// The front cache's size classes (Note [The fallback's front cache], front_cache.cc):
// jemalloc's, numbered once as the cache is enabled; and which of them a thread's stream
// has left.
#include "backend/front_classes.h"

namespace replayalloc::detail::backend::front {
namespace {

// Note [Large blocks in the front cache]: jemalloc's classes above 64 KiB up to 2 MiB,
// numbered from n + 1 into class_size (their lists' max 0: their frees take the slow
// path, which keeps count of bytes) and class_of (size / 16 KiB -> class); none where
// the classes are not multiples of 16 KiB there. Returns the largest request they serve
// (`largest`, that of the classes below, when none).
std::size_t number_large_classes(std::size_t (*size_class)(std::size_t) noexcept, unsigned n, std::size_t largest,
                                 std::uint32_t* class_size, std::uint32_t* list_max_of, std::uint8_t* class_of) noexcept {
  for (std::size_t i = (front_limit >> large_shift) + 1; i <= (large_limit >> large_shift); ++i) {
    const std::size_t c = size_class(i << large_shift);
    if (c % (std::size_t{1} << large_shift) != 0 || c > large_limit) break;
    if (class_size[n] != c) {
      if (n + 1 == max_classes) break;
      ++n;
      class_size[n] = static_cast<std::uint32_t>(c);
      list_max_of[n] = 0;
    }
    class_of[i] = static_cast<std::uint8_t>(n);
    largest = i << large_shift;
  }
  return largest;
}

}  // namespace

bool number_classes(std::size_t (*size_class)(std::size_t) noexcept, front_classes* out) noexcept {
  // jemalloc's from 16 B to 64 KiB, numbered from 1; class 0 for the requests of every
  // other class.
  unsigned n = 0;  // the last class numbered
  for (std::size_t i = 0; i <= front_limit / 16; ++i) {
    const std::size_t c = size_class(i == 0 ? 16 : i * 16);
    if (c < front_least || c > front_limit) {
      out->class_of[i] = 0;
      continue;
    }
    if (n == 0 || out->class_size[n] != c) {
      if (n + 1 == max_classes) return false;
      ++n;
      out->class_size[n] = static_cast<std::uint32_t>(c);
      const std::uint32_t m = static_cast<std::uint32_t>((c < fill_below ? small_list_bytes : list_bytes) / c);
      out->list_max_of[n] = m < list_min ? list_min : m > list_max ? list_max : m;
    }
    out->class_of[i] = static_cast<std::uint8_t>(n);
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
