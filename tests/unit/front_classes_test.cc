// The front cache's size classes (backend/front_classes.cc), numbered from a class
// function of jemalloc's shape (four a doubling, as nallocx answers) without jemalloc:
// Note [A class for a page and a header] (P + P/8 for the powers of two P of 4 and 8
// KiB, so a page and a header, 4,104 or 8,200 bytes, wastes at most an eighth of its
// block), jemalloc's classes elsewhere, and every request of up to 64 KiB served by the
// smallest class that holds it.
#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/front_classes.h"

namespace {

namespace front = replayalloc::detail::backend::front;

// jemalloc 5's classes: 8, 16, then 16-byte steps to 128, then four a doubling.
std::size_t je_class(std::size_t n) noexcept {
  if (n <= 8) return 8;
  if (n <= 128) return (n + 15) & ~std::size_t{15};
  const std::size_t step = std::bit_floor(n - 1) / 4;
  return (n + step - 1) & ~(step - 1);
}

TEST(FrontClasses, APageAndAHeaderWasteAtMostAnEighth) {
  EXPECT_EQ(front::class_for(4096, je_class), 4096u);
  EXPECT_EQ(front::class_for(4097, je_class), 4608u);
  EXPECT_EQ(front::class_for(4104, je_class), 4608u) << "a 4 KiB page and its header";
  EXPECT_EQ(front::class_for(4368, je_class), 4608u);
  EXPECT_EQ(front::class_for(4609, je_class), 5120u) << "jemalloc's past P + P/8";
  EXPECT_EQ(front::class_for(8200, je_class), 9216u) << "an 8 KiB page and its header";
  EXPECT_EQ(front::class_for(9217, je_class), 10240u);
  EXPECT_EQ(front::class_for(16400, je_class), 20480u) << "jemalloc's above 9 KiB";
  EXPECT_EQ(front::class_for(32800, je_class), 40960u);
  EXPECT_EQ(front::class_for(65536, je_class), 65536u);
  for (std::size_t n = 16; n <= front::front_limit; ++n) {
    const std::size_t c = front::class_for(n, je_class);
    ASSERT_GE(c, n);
    ASSERT_LE(c, je_class(n)) << n << ": a class larger than jemalloc's";
    if (c != je_class(n)) {
      const std::size_t p = std::bit_floor(n - 1);
      ASSERT_TRUE(p >= front::header_least && p <= front::header_most) << n;
      ASSERT_EQ(c, p + p / 8) << n;
    }
  }
  EXPECT_EQ(front::class_for(3000, je_class), je_class(3000)) << "below 4 KiB, jemalloc's";
}

TEST(FrontClasses, EveryRequestGetsTheSmallestClassThatHoldsIt) {
  front::front_classes cls;
  ASSERT_TRUE(front::number_classes(je_class, &cls));
  ASSERT_GT(cls.first_large, 1u);
  ASSERT_LT(cls.first_large, front::max_classes);
  for (unsigned k = 2; k < front::max_classes && cls.class_size[k] != 0; ++k) {
    ASSERT_GT(cls.class_size[k], cls.class_size[k - 1]) << "classes numbered by size";
  }
  EXPECT_EQ(cls.largest, front::front_limit);
  unsigned headers = 0;
  for (unsigned k = 1; k < cls.first_large; ++k) {
    for (std::size_t p = front::header_least; p <= front::header_most; p *= 2) headers += cls.class_size[k] == p + p / 8;
  }
  EXPECT_EQ(headers, 2u) << "4.5 and 9 KiB";
  for (std::size_t n = 1; n <= front::front_limit; ++n) {
    const unsigned k = cls.class_of[(n + 15) / 16];
    ASSERT_NE(k, 0u) << n;
    ASSERT_GE(cls.class_size[k], n);
    ASSERT_TRUE(k == 1 || cls.class_size[k - 1] < (n < 16 ? 16 : n)) << n << ": a smaller class holds it";
  }
}

// Note [The classes asked once each]: the numbering asks the class function about twice
// a class, not once every 16 bytes, and numbers exactly as asking every index did.
// The reference below is the numbering as it was: one question per index.
front::front_classes number_each_index(std::size_t (*size_class)(std::size_t) noexcept) {
  front::front_classes out;
  unsigned n = 0;
  for (std::size_t i = 0; i <= front::front_limit / 16; ++i) {
    const std::size_t c = front::class_for(i == 0 ? 16 : i * 16, size_class);
    if (c < front::front_least || c > front::front_limit) continue;
    if (n == 0 || out.class_size[n] != c) {
      ++n;
      out.class_size[n] = static_cast<std::uint32_t>(c);
      const std::uint32_t m =
          static_cast<std::uint32_t>((c < front::fill_below ? front::small_list_bytes : front::list_bytes) / c);
      out.list_max_of[n] = m < front::list_min ? front::list_min : m > front::list_max ? front::list_max : m;
    }
    out.class_of[i] = static_cast<std::uint8_t>(n);
    out.largest = c;
  }
  out.first_large = n + 1;
  out.large_largest = out.largest;
  for (std::size_t i = (front::front_limit >> front::large_shift) + 1; i <= (front::large_limit >> front::large_shift);
       ++i) {
    const std::size_t c = size_class(i << front::large_shift);
    if (c % (std::size_t{1} << front::large_shift) != 0 || c > front::large_limit) break;
    if (out.class_size[n] != c) {
      if (n + 1 == front::max_classes) break;
      ++n;
      out.class_size[n] = static_cast<std::uint32_t>(c);
      out.list_max_of[n] = 0;
    }
    out.large_class_of[i] = static_cast<std::uint8_t>(n);
    out.large_largest = i << front::large_shift;
  }
  return out;
}

unsigned g_questions = 0;
std::size_t counted_je_class(std::size_t n) noexcept {
  ++g_questions;
  return je_class(n);
}
// Two classes a doubling, jemalloc's rounded up to 48 bytes (not their own classes: the
// numbering steps an index at a time there; above 64 KiB not multiples of 16 KiB, where
// the large classes stop), and few classes up to 64 KiB, then one every 16 KiB (more
// than the cache numbers: it stops at its 72nd). A class function is monotone (nallocx is);
// whatever it is, each index's class holds the index's size (the numbering fills up to
// the class's own index only).
std::size_t two_a_doubling(std::size_t n) noexcept {
  if (n <= 128) return (n + 15) & ~std::size_t{15};
  const std::size_t step = std::bit_floor(n - 1) / 2;
  return (n + step - 1) & ~(step - 1);
}
std::size_t steps_of_48(std::size_t n) noexcept { return (je_class(n) + 47) / 48 * 48; }
std::size_t few_classes(std::size_t n) noexcept {
  return n <= 4096 ? 4096 : n <= 8192 ? 8192 : n <= 65536 ? 65536 : (n + 16383) & ~std::size_t{16383};
}

TEST(FrontClasses, NumberedAsAskingEveryIndexWithAQuestionOrTwoAClass) {
  for (auto* f : {&counted_je_class, &two_a_doubling, &steps_of_48, &few_classes}) {
    front::front_classes fast;
    g_questions = 0;
    ASSERT_TRUE(front::number_classes(f, &fast));
    const unsigned asked = g_questions;
    const front::front_classes ref = number_each_index(f);
    EXPECT_EQ(fast.first_large, ref.first_large);
    EXPECT_EQ(fast.largest, ref.largest);
    EXPECT_EQ(fast.large_largest, ref.large_largest);
    EXPECT_EQ(std::memcmp(fast.class_of, ref.class_of, sizeof fast.class_of), 0);
    EXPECT_EQ(std::memcmp(fast.large_class_of, ref.large_class_of, sizeof fast.large_class_of), 0);
    EXPECT_EQ(std::memcmp(fast.class_size, ref.class_size, sizeof fast.class_size), 0);
    EXPECT_EQ(std::memcmp(fast.list_max_of, ref.list_max_of, sizeof fast.list_max_of), 0);
    if (f == &counted_je_class) {
      unsigned classes = 0;
      for (unsigned k = 1; k < front::max_classes && fast.class_size[k] != 0; ++k) ++classes;
      EXPECT_LE(asked, 2 * classes + 4) << classes << " classes; asking every index took 4,220 questions";
    }
  }
}

}  // namespace
