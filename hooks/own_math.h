// The few functions of libm the LD_PRELOAD library's code calls, so that it does not
// load libm into programs that do not (Note [The LD_PRELOAD library without libm],
// own_math.cc). x86-64 only: the processor's x87 and SSE2 instructions do the work.
// Each is defined for the library by own_math.cc and tested against libm by
// tests/unit/own_math_test.cc.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace replayalloc::detail::own_math {

// The square root, correctly rounded (SSE2's sqrtsd); a NaN below zero, as libm's.
inline double sqrt_of(double x) noexcept {
  asm("sqrtsd %1, %0" : "=x"(x) : "x"(x));
  return x;
}

// y * log2(x) in the x87's extended precision (fyl2x: within an ulp of a 64-bit
// significand), then rounded once to double: +0 at 1, -inf at 0, +inf at +inf, a NaN
// below 0 and at a NaN.
inline long double y_log2(long double x, long double y) noexcept {
  long double r;
  asm("fyl2x" : "=t"(r) : "0"(x), "u"(y) : "st(1)");
  return r;
}
inline double log2_of(double x) noexcept { return static_cast<double>(y_log2(x, 1.0L)); }
inline double log_of(double x) noexcept {
  return static_cast<double>(y_log2(x, 0.693147180559945309417232121458176568L));
}

// e^x as 2^(x log2 e): the exponent's integer part by fscale, its fraction (at most a
// half) by f2xm1, in extended precision, rounded once to double (within an ulp of
// libm's). Infinities and NaNs are answered before: inf - inf would make a NaN of them.
inline double exp_of(double x) noexcept {
  if (x != x) return x;
  if (x > 709.79) return __builtin_huge_val();  // beyond the largest double
  if (x < -745.2) return 0.0;                    // below the smallest subnormal
  const long double t = x * 1.442695040888963407359924681001892137L;
  long double n, m, r;
  asm("frndint" : "=t"(n) : "0"(t));
  asm("f2xm1" : "=t"(m) : "0"(t - n));
  asm("fscale" : "=t"(r) : "0"(m + 1.0L), "u"(n));
  return static_cast<double>(r);
}

// The nearest integer, halves away from zero, exactly: a double of at least 2^52 (or
// infinite, or a NaN) is its own; below, truncation and the fraction it left (exact).
inline double round_of(double x) noexcept {
  if (!(__builtin_fabs(x) < 4503599627370496.0)) return x;
  double t = static_cast<double>(static_cast<std::int64_t>(x));
  if (__builtin_fabs(x - t) >= 0.5) t += x > 0 ? 1.0 : -1.0;
  return __builtin_copysign(t, x);
}

// x 2^n and the split of x into a significand in [0.5, 1) and a power of two: exact in
// the x87's extended range (fscale, fxtract), the scaled value rounded once to its type
// (its infinity where it overflows, zero or a subnormal where it underflows). Zero,
// infinities and NaNs split into themselves and 0, as in glibc.
inline long double scale(long double x, int n) noexcept {
  long double r;
  asm("fscale" : "=t"(r) : "0"(x), "u"(static_cast<long double>(n)));
  return r;
}
inline long double split(long double x, int* e) noexcept {
  if (x == 0 || x != x || x - x != 0) {  // zero, NaN, infinity
    *e = 0;
    return x;
  }
  long double significand, exponent;
  asm("fxtract" : "=t"(significand), "=u"(exponent) : "0"(x));
  *e = static_cast<int>(exponent) + 1;
  return significand / 2;
}

// The integral part of x (to *ip) and the fraction, both of x's sign, exactly.
inline double split_integral(double x, double* ip) noexcept {
  if (!(__builtin_fabs(x) < 4503599627370496.0)) {  // integral already, infinite or a NaN
    *ip = x;
    return x != x ? x : __builtin_copysign(0.0, x);
  }
  const double t = static_cast<double>(static_cast<std::int64_t>(x));
  *ip = __builtin_copysign(t, x);
  return __builtin_copysign(x - t, x);
}

// nan(tag) and nanf(tag) as C defines them: strtod("NAN(tag)") and strtof("NAN(tag)"),
// the C library's (which take a number in the tag as the NaN's payload); a tag longer
// than 120 characters gives the plain NaN.
template <class Float, class Parse>
inline Float nan_of(const char* tag, Parse parse) noexcept {
  char text[128] = "NAN(";
  const std::size_t n = std::strlen(tag);
  if (n <= sizeof text - 6) {
    std::memcpy(text + 4, tag, n);
    text[4 + n] = ')';
    text[5 + n] = '\0';
  } else {
    text[3] = '\0';
  }
  return parse(text);
}
inline double nan_of(const char* tag) noexcept {
  return nan_of<double>(tag, [](const char* s) { return std::strtod(s, nullptr); });
}
inline float nanf_of(const char* tag) noexcept {
  return nan_of<float>(tag, [](const char* s) { return std::strtof(s, nullptr); });
}

}  // namespace replayalloc::detail::own_math
