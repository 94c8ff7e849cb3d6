// allocator/support/stream_init.cc: the standard streams left to the program (Note
// [Standard streams left to the program]).
//
// Layer: support, shared libraries only (replayalloc_core_library links it with
// --wrap of the two symbols below).
//
// Note [Standard streams left to the program]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With g++ 12's libstdc++, every translation unit that includes <iostream> runs
// std::ios_base::Init when its library loads: the eight standard streams and their
// locales are built, 64 pages touched (a library of one such unit preloaded into
// /bin/true: 75 -> 139 minor faults, ~9 µs each on the test host). Abseil's cord.h
// includes <iostream> and status.h includes cord.h, so nearly every unit of the core
// does, though no replayalloc library uses a standard stream (`nm -D` finds no
// reference to cout, cerr, clog or cin in any of them). Under LD_PRELOAD that is paid
// by every process, C programs included. The libraries therefore link their references
// to Init's constructor and destructor to the empty functions below (both, so
// libstdc++'s count of initialisers stays balanced): a program that uses the streams
// initialises them from its own units, as it must anyway. A later libstdc++ (g++ 13)
// initialises the streams inside itself and no unit refers to Init: the wrap is then
// unused. Each unit still registered the empty destructor with __cxa_atexit (60 of the
// library's 63 exit handlers: glibc's first list holds 32, so two more lists were callocs
// of the boot heap's, and exit and __cxa_finalize walked them all): the library's
// references to __cxa_atexit are wrapped too, and the registration of the empty
// destructor is dropped (ctest preload.own_requests).

extern "C" {
__attribute__((visibility("hidden"))) void __wrap__ZNSt8ios_base4InitC1Ev(void*) {}
__attribute__((visibility("hidden"))) void __wrap__ZNSt8ios_base4InitD1Ev(void*) {}
int __real___cxa_atexit(void (*)(void*), void*, void*);
__attribute__((visibility("hidden"))) int __wrap___cxa_atexit(void (*f)(void*), void* arg, void* dso) {
  if (f == &__wrap__ZNSt8ios_base4InitD1Ev) return 0;  // nothing to run at exit
  return __real___cxa_atexit(f, arg, dso);
}
}
