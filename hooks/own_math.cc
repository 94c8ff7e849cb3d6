// Note [The LD_PRELOAD library without libm]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With its own runtime inside (Note [The LD_PRELOAD library's own runtime],
// CMakeLists.txt), the library still needed libm, for thirteen functions: sqrt (the
// period detector's divisors), log2 (the planner's window; Abseil's sampling), nan and
// nanf (Abseil's from_chars), exp, log and round (jemalloc's heap profiling, under
// MALLOC_CONF=prof:true only), and frexp, frexpl, ldexp, ldexpf, ldexpl and modf
// (Abseil's number formatting, 128-bit integers and durations), which the C library
// exports too, but weakly, so that the link took libm's. Most programs a shell runs
// load no libm (coreutils, sed, grep, the shell itself), and loading it cost each of
// them ~35 us and 11 page faults (/bin/true preloaded with libm.so.6 alone: 664 against
// 625-645 us, 61 faults against 51). So on x86-64 the library defines those thirteen
// itself, not exported (preload.map): its own code and the copies inside it bind to
// them when linked, the program's calls still reach the program's libm, and the link
// drops libm (--as-needed; -z defs fails it where a new call to libm appears). They
// are the processor's own instructions (own_math.h): sqrt correctly rounded; log, log2
// and exp in the x87's extended precision, rounded once to double (within an ulp of
// libm's); round, modf, frexp and ldexp exact (ldexp rounded once where it leaves the
// type's range); nan and nanf as C defines them, through the C library's strtod and
// strtof. tests/unit/own_math_test.cc compares each with libm's over its range. They
// set no errno (libm's sqrt, log and exp do, on a domain or range error): no caller
// inside the library reads it.
#include "own_math.h"

#define REPLAYALLOC_OWN_MATH extern "C"

using namespace replayalloc::detail::own_math;

REPLAYALLOC_OWN_MATH double sqrt(double x) noexcept { return sqrt_of(x); }
REPLAYALLOC_OWN_MATH double log2(double x) noexcept { return log2_of(x); }
REPLAYALLOC_OWN_MATH double log(double x) noexcept { return log_of(x); }
REPLAYALLOC_OWN_MATH double exp(double x) noexcept { return exp_of(x); }
REPLAYALLOC_OWN_MATH double round(double x) noexcept { return round_of(x); }
REPLAYALLOC_OWN_MATH double nan(const char* tag) noexcept { return nan_of(tag); }
REPLAYALLOC_OWN_MATH float nanf(const char* tag) noexcept { return nanf_of(tag); }
REPLAYALLOC_OWN_MATH double ldexp(double x, int n) noexcept { return static_cast<double>(scale(x, n)); }
REPLAYALLOC_OWN_MATH float ldexpf(float x, int n) noexcept { return static_cast<float>(scale(x, n)); }
REPLAYALLOC_OWN_MATH long double ldexpl(long double x, int n) noexcept { return scale(x, n); }
REPLAYALLOC_OWN_MATH double frexp(double x, int* e) noexcept { return static_cast<double>(split(x, e)); }
REPLAYALLOC_OWN_MATH long double frexpl(long double x, int* e) noexcept { return split(x, e); }
REPLAYALLOC_OWN_MATH double modf(double x, double* ip) noexcept { return split_integral(x, ip); }
