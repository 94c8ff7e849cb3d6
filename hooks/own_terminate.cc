// The terminate handler of the LD_PRELOAD library's own copy of libstdc++.
//
// Note [The copy's terminate handler]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The copy of libstdc++ the library carries (Note [The LD_PRELOAD library's own
// runtime], hooks/CMakeLists.txt) terminates, when an exception escapes the library's
// own code, through __cxxabiv1::__terminate_handler, which libstdc++.a's
// eh_term_handler.o sets to __gnu_cxx::__verbose_terminate_handler; that handler
// demangles the exception's type, and so linked libstdc++'s demangler in (cp-demangle.o:
// 37 KiB of code, and 3.2 KiB of tables of pointers in .data.rel.ro that the loader
// relocated at every process's start, one page of them copied). The program's own
// terminate handler is its own libstdc++'s, never this one. So the library defines the
// variable itself (the archive's member, and with it the demangler, is then never
// linked) as a handler that says the same, the type's name as the compiler wrote it, and
// aborts (own_terminate.h). /bin/true under the library: 219,503 -> 218,010
// instructions, 78.7 -> 77.8 page faults, CPU 0.986x paired over 40 alternated rounds
// (bench/RESULTS.md, "The copy's terminate handler").
#include "own_terminate.h"

namespace __cxxabiv1 {
// libstdc++'s own declaration is in an internal header (unwind-cxx.h); std::terminate,
// std::set_terminate and std::get_terminate (eh_terminate.o) use this definition.
std::terminate_handler __terminate_handler = replayalloc::detail::own_terminate;
}  // namespace __cxxabiv1
