// Note [The LD_PRELOAD library without libm] (hooks/own_math.cc): the functions of libm
// the LD_PRELOAD library defines for itself answer as libm's do, over their ranges and
// at their edges: exactly where libm's answer is exact (sqrt, round, modf, frexp,
// ldexp, nan), within an ulp where it is not (log, log2, exp).
#if defined(__x86_64__)
#include "../hooks/own_math.h"  // tests/ is on the include path

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

namespace om = replayalloc::detail::own_math;

namespace {

template <class T>
auto bits(T x) {
  if constexpr (sizeof(T) == 8) {
    std::uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
  } else if constexpr (sizeof(T) == 4) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  } else {  // x87 extended: its 10 bytes
    std::pair<std::uint64_t, std::uint16_t> b;
    std::memcpy(&b.first, &x, 8);
    std::memcpy(&b.second, reinterpret_cast<const char*>(&x) + 8, 2);
    return b;
  }
}
#define EXPECT_SAME(a, b, x) EXPECT_EQ(bits(a), bits(b)) << "at " << (x) << ": " << (a) << " against " << (b)

// Doubles of every magnitude and both signs: random bit patterns, NaNs and infinities
// left out (tested apart).
double any_double(std::mt19937_64& rng) {
  for (;;) {
    const std::uint64_t b = rng();
    double x;
    std::memcpy(&x, &b, 8);
    if (std::isfinite(x)) return x;
  }
}

// How many ulps of the reference a result is from it.
double ulps(double got, double want) {
  if (got == want) return 0;
  const double ulp = std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
  return std::fabs(got - want) / ulp;
}

constexpr int samples = 200000;
constexpr double inf = std::numeric_limits<double>::infinity();

TEST(OwnMath, SqrtIsCorrectlyRounded) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < samples; ++i) {
    const double x = std::fabs(any_double(rng));
    EXPECT_SAME(om::sqrt_of(x), std::sqrt(x), x);
  }
  EXPECT_SAME(om::sqrt_of(0.0), 0.0, 0.0);
  EXPECT_SAME(om::sqrt_of(-0.0), -0.0, -0.0);
  EXPECT_EQ(om::sqrt_of(inf), inf);
  EXPECT_TRUE(std::isnan(om::sqrt_of(-1.0)));
  EXPECT_TRUE(std::isnan(om::sqrt_of(NAN)));
}

TEST(OwnMath, LogAndLog2WithinAnUlp) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < samples; ++i) {
    const double x = std::fabs(any_double(rng));
    if (x == 0) continue;
    EXPECT_LE(ulps(om::log_of(x), std::log(x)), 1.0) << x;
    EXPECT_LE(ulps(om::log2_of(x), std::log2(x)), 1.0) << x;
  }
  // Near 1, where the result is small and libm's is most careful.
  std::uniform_real_distribution<double> near_one(0.999, 1.001);
  for (int i = 0; i < samples / 10; ++i) {
    const double x = near_one(rng);
    EXPECT_LE(ulps(om::log_of(x), std::log(x)), 1.0) << x;
    EXPECT_LE(ulps(om::log2_of(x), std::log2(x)), 1.0) << x;
  }
  for (int e = -1074; e <= 1023; ++e) EXPECT_EQ(om::log2_of(std::ldexp(1.0, e)), e);  // exact at powers of two
  EXPECT_SAME(om::log_of(1.0), 0.0, 1.0);
  EXPECT_EQ(om::log_of(0.0), -inf);
  EXPECT_EQ(om::log2_of(-0.0), -inf);
  EXPECT_EQ(om::log_of(inf), inf);
  EXPECT_TRUE(std::isnan(om::log_of(-1.0)));
  EXPECT_TRUE(std::isnan(om::log2_of(-inf)));
  EXPECT_TRUE(std::isnan(om::log_of(NAN)));
}

TEST(OwnMath, ExpWithinAnUlpOverItsRange) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> range(-745.0, 709.7);
  std::uniform_real_distribution<double> small(-1.0, 1.0);
  for (int i = 0; i < samples; ++i) {
    for (const double x : {range(rng), small(rng), small(rng) * 1e-10}) {
      const double want = std::exp(x);
      if (want < DBL_MIN) {  // a subnormal result: within its absolute ulp
        EXPECT_LE(std::fabs(om::exp_of(x) - want), std::numeric_limits<double>::denorm_min()) << x;
      } else {
        EXPECT_LE(ulps(om::exp_of(x), want), 1.0) << x;
      }
    }
  }
  EXPECT_SAME(om::exp_of(0.0), 1.0, 0.0);
  EXPECT_SAME(om::exp_of(-0.0), 1.0, -0.0);
  EXPECT_EQ(om::exp_of(709.79), inf);
  EXPECT_EQ(om::exp_of(1e300), inf);
  EXPECT_EQ(om::exp_of(inf), inf);
  EXPECT_SAME(om::exp_of(-746.0), 0.0, -746.0);
  EXPECT_SAME(om::exp_of(-inf), 0.0, -inf);
  EXPECT_TRUE(std::isnan(om::exp_of(NAN)));
}

TEST(OwnMath, RoundIsExact) {
  std::mt19937_64 rng(4);
  for (int i = 0; i < samples; ++i) {
    const double x = any_double(rng);
    EXPECT_SAME(om::round_of(x), std::round(x), x);
  }
  // Halves, their neighbours and the largest non-integers, both signs.
  for (double k = 0; k < 3000; ++k) {
    for (const double h : {k + 0.5, std::nextafter(k + 0.5, 0.0), std::nextafter(k + 0.5, 10000.0), k + 0.25}) {
      EXPECT_SAME(om::round_of(h), std::round(h), h);
      EXPECT_SAME(om::round_of(-h), std::round(-h), -h);
    }
  }
  for (const double x : {4503599627370495.5, -4503599627370495.5, 4503599627370496.0, 0.49999999999999994,
                         -0.49999999999999994, -0.0, 0.0, 1e300, -1e300, inf, -inf}) {
    EXPECT_SAME(om::round_of(x), std::round(x), x);
  }
  EXPECT_TRUE(std::isnan(om::round_of(NAN)));
}

TEST(OwnMath, ModfIsExact) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < samples; ++i) {
    const double x = any_double(rng);
    double ip = 0, want_ip = 0;
    const double f = om::split_integral(x, &ip), want = std::modf(x, &want_ip);
    EXPECT_SAME(f, want, x);
    EXPECT_SAME(ip, want_ip, x);
  }
  for (const double x : {-0.5, 0.5, -3.0, 3.0, -0.0, 0.0, 4503599627370495.5, inf, -inf}) {
    double ip = 0, want_ip = 0;
    EXPECT_SAME(om::split_integral(x, &ip), std::modf(x, &want_ip), x);
    EXPECT_SAME(ip, want_ip, x);
  }
  double ip = 0;
  EXPECT_TRUE(std::isnan(om::split_integral(NAN, &ip)));
  EXPECT_TRUE(std::isnan(ip));
}

TEST(OwnMath, FrexpAndLdexpAreExact) {
  std::mt19937_64 rng(6);
  std::uniform_int_distribution<int> power(-1200, 1200);
  for (int i = 0; i < samples; ++i) {
    const double x = any_double(rng);
    int e = 7, want_e = 7;
    EXPECT_SAME(static_cast<double>(om::split(x, &e)), std::frexp(x, &want_e), x);
    EXPECT_EQ(e, want_e) << x;
    const long double lx = static_cast<long double>(x) * 3;
    EXPECT_SAME(om::split(lx, &e), std::frexp(lx, &want_e), x);
    EXPECT_EQ(e, want_e) << x;
    const int n = power(rng);
    EXPECT_SAME(static_cast<double>(om::scale(x, n)), std::ldexp(x, n), x);  // rounded once, subnormals too
    const auto f = static_cast<float>(x);
    EXPECT_SAME(static_cast<float>(om::scale(f, n / 8)), std::ldexp(f, n / 8), x);
    EXPECT_SAME(om::scale(lx, n * 13), std::ldexp(lx, n * 13), x);
  }
  for (const double x : {0.0, -0.0, inf, -inf, std::numeric_limits<double>::denorm_min(), DBL_MAX}) {
    int e = 7, want_e = 7;
    EXPECT_SAME(static_cast<double>(om::split(x, &e)), std::frexp(x, &want_e), x);
    EXPECT_EQ(e, want_e) << x;
    for (const int n : {-2000000000, -1075, -1, 0, 1, 1024, 2000000000}) {
      EXPECT_SAME(static_cast<double>(om::scale(x, n)), std::ldexp(x, n), x);
    }
  }
  int e = 7;
  EXPECT_TRUE(std::isnan(static_cast<double>(om::split(NAN, &e))));
  EXPECT_TRUE(std::isnan(static_cast<double>(om::scale(NAN, 3))));
}

TEST(OwnMath, NanCarriesItsTagAsLibmDoes) {
  for (const char* tag : {"", "1", "123", "0x7ff", "0777", "abc", "12abc", "_", "99999999999999999999999"}) {
    EXPECT_SAME(om::nan_of(tag), std::nan(tag), tag);
    EXPECT_SAME(om::nanf_of(tag), std::nanf(tag), tag);
  }
  const std::string long_tag(500, '7');  // past the buffer: the plain NaN
  EXPECT_SAME(om::nan_of(long_tag.c_str()), std::nan(""), "500 sevens");
}

}  // namespace
#endif
