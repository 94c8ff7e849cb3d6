// The front cache's size classes (Note [The fallback's front cache], front_cache.cc):
// jemalloc's, numbered once as the cache is enabled.
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

}  // namespace replayalloc::detail::backend::front
