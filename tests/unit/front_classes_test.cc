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

}  // namespace
