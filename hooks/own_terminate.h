// The terminate handler of the LD_PRELOAD library's own copy of libstdc++ (Note [The
// copy's terminate handler], own_terminate.cc), tested by
// tests/unit/own_terminate_test.cc. Nothing here allocates: it writes with write(2).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

#include <cxxabi.h>

namespace replayalloc::detail {

inline void say_on_stderr(const char* s) noexcept {
  std::size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// What libstdc++'s verbose handler says, but the type's name as the compiler wrote it
// (mangled: no demangler), then abort().
[[noreturn]] inline void own_terminate() noexcept {
  static bool terminating = false;  // a terminate from inside (what()) aborts at once
  if (!terminating) {
    terminating = true;
    if (const std::type_info* t = abi::__cxa_current_exception_type()) {
      say_on_stderr("replayalloc: terminate called after throwing an instance of '");
      say_on_stderr(t->name());
      say_on_stderr("' (its mangled name)\n");
      try {
        throw;
      } catch (const std::exception& e) {
        say_on_stderr("  what():  ");
        say_on_stderr(e.what());
        say_on_stderr("\n");
      } catch (...) {
      }
    } else {
      say_on_stderr("replayalloc: terminate called without an active exception\n");
    }
  }
  std::abort();
}

}  // namespace replayalloc::detail
