// Note [The copy's terminate handler] (hooks/own_terminate.cc): the LD_PRELOAD library's
// terminate handler says what was thrown and what() said, or that nothing was, on
// stderr, and aborts; it allocates nothing (write(2) only).
#include "../hooks/own_terminate.h"  // tests/ is on the include path

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>

namespace {

using replayalloc::detail::own_terminate;

// An exception escaping a noexcept function, as one escaping the library's code would.
void call_noexcept(void (*f)()) noexcept { f(); }
void throw_standard() { throw std::runtime_error("the slab range is gone"); }
struct odd {};
void throw_odd() { throw odd{}; }

TEST(OwnTerminate, SaysWhatWasThrownAndAborts) {
  EXPECT_DEATH(
      {
        std::set_terminate(&own_terminate);
        call_noexcept(&throw_standard);
      },
      "replayalloc: terminate called after throwing an instance of 'St13runtime_error' \\(its mangled name\\)\n"
      "  what\\(\\):  the slab range is gone");
}

TEST(OwnTerminate, SaysWhenNothingWasThrown) {
  EXPECT_DEATH(
      {
        std::set_terminate(&own_terminate);
        std::terminate();
      },
      "replayalloc: terminate called without an active exception");
}

TEST(OwnTerminate, ANonStandardExceptionIsNamedWithoutWhat) {
  EXPECT_DEATH(
      {
        std::set_terminate(&own_terminate);
        call_noexcept(&throw_odd);
      },
      "throwing an instance of '.*odd.*' \\(its mangled name\\)\n$");
}

}  // namespace
