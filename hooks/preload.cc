// libreplayalloc_preload.so: replayalloc under an unmodified program.
//
//   LD_PRELOAD=libreplayalloc_preload.so ./my_inference_service
//
// Layer: hooks, over the C API (allocator/include/replayalloc/replayalloc.h). Every
// function of the allocation interface forwards in one line; malloc, free, operator
// new and delete inline the C API's fast paths (runtime/entry.h), so the replay hit
// and jemalloc's small blocks cost no extra call here. What makes this safe:
//  * start-up: the engine is made at the first call or when the library is loaded,
//    whichever comes first (Note [The engine made at load]), under the re-entry guard;
//    it reads the environment from `environ` itself, and any
//    allocation made while it is being made (by libc, jemalloc, Abseil) goes straight
//    to jemalloc (runtime/api.cc: alloc_slow);
//  * thread-local state is initial-exec (no allocation on first access);
//  * fork: the engine's atfork handlers (Note [Fork] in runtime/lifecycle.cc);
//  * thread exit: a pthread key ends the thread's open iteration.
// The program marks its iterations with replayalloc_iteration_begin/end (exported
// here too: call them directly, or find them with dlsym).
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "replayalloc/export.h"
#include "replayalloc/replayalloc.h"
#include "runtime/engine.h"
#include "runtime/entry.h"

#define RA_HOOK extern "C" REPLAYALLOC_EXPORT

namespace {

std::size_t page_size() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

#if defined(REPLAYALLOC_PRELOAD_OWN_RUNTIME)
// Note [The LD_PRELOAD library's own runtime] (hooks/CMakeLists.txt): libstdc++ is
// linked inside, hidden, so std::get_new_handler() here would read this copy's handler,
// which the program cannot set, and a bad_alloc thrown or caught here would be this
// copy's, whose exception bookkeeping (std::uncaught_exceptions, the emergency pool) is
// not the one the program's catch updates. So the program's own C++ runtime is asked
// for its handler and throws (and, for the nothrow forms, catches: new_nothrow), found
// by name even where it was loaded RTLD_LOCAL (a Python extension's); the reference
// taken is kept, so it stays loaded. A C program has none: this copy's is used. The
// engine's own allocations (under the reentry guard) keep this copy's: the engine
// catches their bad_alloc itself.
std::atomic<void*> g_cxx_runtime{nullptr};

void* program_cxx_runtime() noexcept {
  if (void* h = g_cxx_runtime.load(std::memory_order_acquire)) return h;
  for (const char* name : {"libstdc++.so.6", "libc++.so.1"}) {
    if (void* h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD)) {
      void* none = nullptr;
      if (!g_cxx_runtime.compare_exchange_strong(none, h, std::memory_order_acq_rel)) dlclose(h);
      return g_cxx_runtime.load(std::memory_order_acquire);
    }
  }
  return nullptr;
}
template <typename Fn>
Fn program_cxx_function(const char* name) noexcept {
  if (replayalloc::detail::in_engine()) return nullptr;
  void* runtime = program_cxx_runtime();
  return runtime == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(runtime, name));
}
std::new_handler current_new_handler() noexcept {
  if (replayalloc::detail::in_engine()) return nullptr;
  using get_fn = std::new_handler (*)() noexcept;
  const auto get = program_cxx_function<get_fn>("_ZSt15get_new_handlerv");
  return get != nullptr ? get() : std::get_new_handler();
}
[[noreturn]] void throw_bad_alloc() {
  using throw_fn = void (*)();
  if (const auto thrower = program_cxx_function<throw_fn>("_ZSt17__throw_bad_allocv")) thrower();
  if (const auto thrower = program_cxx_function<throw_fn>("_ZNSt3__117__throw_bad_allocEv")) thrower();  // libc++
  throw std::bad_alloc();
}
// The program's nothrow operator new (its runtime's own, which calls the throwing one,
// this library's, and catches in that runtime), or null.
using nothrow_new_fn = void* (*)(std::size_t, const std::nothrow_t&) noexcept;
using nothrow_aligned_new_fn = void* (*)(std::size_t, std::align_val_t, const std::nothrow_t&) noexcept;
void* program_nothrow_new(std::size_t size, std::size_t align, bool* found) noexcept {
  if (align == 0) {
    const auto f = program_cxx_function<nothrow_new_fn>("_ZnwmRKSt9nothrow_t");
    *found = f != nullptr;
    return f != nullptr ? f(size, std::nothrow) : nullptr;
  }
  const auto f = program_cxx_function<nothrow_aligned_new_fn>("_ZnwmSt11align_val_tRKSt9nothrow_t");
  *found = f != nullptr;
  return f != nullptr ? f(size, std::align_val_t{align}, std::nothrow) : nullptr;
}
#else
std::new_handler current_new_handler() noexcept { return std::get_new_handler(); }
[[noreturn]] void throw_bad_alloc() { throw std::bad_alloc(); }
void* program_nothrow_new(std::size_t, std::size_t, bool* found) noexcept {
  *found = false;
  return nullptr;
}
#endif

void* new_attempt(std::size_t size, std::size_t align) noexcept {
  return align <= alignof(std::max_align_t)
             ? replayalloc::detail::entry_alloc(size == 0 ? 1 : size, replayalloc::detail::malloc_align)
             : replayalloc_aligned_alloc(align, size == 0 ? 1 : size);
}

// operator new's contract: retry through the new_handler, else throw.
void* new_impl(std::size_t size, std::size_t align) {
  for (;;) {
    if (void* p = new_attempt(size, align)) return p;
    std::new_handler h = current_new_handler();
    if (h == nullptr) throw_bad_alloc();
    h();
  }
}

// operator new(size) as C++ programs call it most (PyTorch: millions in a TorchScript
// model's first inferences): malloc's inline path with no stack frame of its own; only
// a null result goes on to new_impl's handler loop. A request of 0 bytes is served as
// 16 (unique, as new must be): by the plain malloc below the minimum (Note [Below the
// minimum, inline]), else by the slow path.
REPLAYALLOC_ALWAYS_INLINE void* new_fast(std::size_t size) {
  if (void* p = replayalloc::detail::entry_alloc(size, replayalloc::detail::malloc_align)) [[likely]] return p;
  return new_impl(size, 0);
}

// The nothrow forms: null where the throwing form would throw. A handler may throw,
// so where there is one its calls are left to the program's runtime's nothrow new,
// whose catch is that runtime's (Note [The LD_PRELOAD library's own runtime]).
void* new_nothrow(std::size_t size, std::size_t align) noexcept {
  if (void* p = new_attempt(size, align)) [[likely]] return p;
  if (current_new_handler() == nullptr) return nullptr;
  bool found = false;
  void* p = program_nothrow_new(size, align, &found);
  if (found) return p;
  try {
    return new_impl(size, align);
  } catch (...) {
    return nullptr;
  }
}

// Note [The engine made at load]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The engine's work at exit (the statistics, plans still being saved) is registered
// with atexit. Registered by the engine's constructor, run by the process's first
// allocation, it could be registered from inside glibc's atexit while that holds its
// list's lock (a library's static objects registering their destructors: the list
// grows by calloc, the first allocation of a process whose start makes none before) and
// would wait on that lock forever: with libstdc++'s static objects inside this library
// (Note [The LD_PRELOAD library's own runtime]), REPLAYALLOC_STATS hung every C program
// at start-up. So in this library the engine's constructor registers nothing, and this
// constructor, which glibc calls with no lock of its own held, makes the engine (if no
// allocation made it before: a library initialised before this one) and registers its
// work at exit, before any static object of this library registers a destructor
// (priority 101 comes first).
__attribute__((constructor(101))) void make_engine_at_load() {
  replayalloc::detail::engine::get().register_at_exit();
}

}  // namespace

RA_HOOK void* malloc(size_t size) noexcept {
  return replayalloc::detail::entry_alloc(size, replayalloc::detail::malloc_align);
}
#if defined(REPLAYALLOC_PRELOAD_OWN_RUNTIME)
// The copy of libstdc++'s and of the unwinder's own calls of malloc (--wrap=malloc):
// the library's memory, never watched (Note [The LD_PRELOAD library's own runtime]).
extern "C" __attribute__((visibility("hidden"))) void* __wrap_malloc(size_t size) noexcept {
  replayalloc::detail::reentry_guard guard;
  return replayalloc::detail::entry_alloc(size, replayalloc::detail::malloc_align);
}
#endif
RA_HOOK void free(void* p) noexcept { replayalloc::detail::entry_free(p); }
RA_HOOK void* calloc(size_t n, size_t size) noexcept { return replayalloc_calloc(n, size); }
RA_HOOK void* realloc(void* p, size_t size) noexcept { return replayalloc_realloc(p, size); }
RA_HOOK size_t malloc_usable_size(void* p) noexcept { return replayalloc_usable_size(p); }
RA_HOOK int posix_memalign(void** out, size_t align, size_t size) noexcept {
  return replayalloc_posix_memalign(out, align, size);
}
RA_HOOK void* aligned_alloc(size_t align, size_t size) noexcept {
  return replayalloc_aligned_alloc(align, size);
}
// glibc's memalign rounds an alignment that is not a power of two up to one (0 and
// those below 16 serve as malloc) and refuses one above SIZE_MAX / 2 + 1 (EINVAL).
RA_HOOK void* memalign(size_t align, size_t size) noexcept {
  if (align > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return nullptr;
  }
  size_t a = 16;
  while (a < align) a *= 2;
  return replayalloc_aligned_alloc(a, size);
}
RA_HOOK void* valloc(size_t size) noexcept { return replayalloc_aligned_alloc(page_size(), size); }
RA_HOOK void* pvalloc(size_t size) noexcept {
  const size_t page = page_size();
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return replayalloc_aligned_alloc(page, size == 0 ? page : (size + page - 1) & ~(page - 1));
}
RA_HOOK void* reallocarray(void* p, size_t n, size_t size) noexcept {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return replayalloc_realloc(p, bytes);
}

// operator new and delete, every form.
REPLAYALLOC_EXPORT void* operator new(std::size_t n) { return new_fast(n); }
REPLAYALLOC_EXPORT void* operator new[](std::size_t n) { return new_fast(n); }
REPLAYALLOC_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, 0);
}
REPLAYALLOC_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, 0);
}
REPLAYALLOC_EXPORT void* operator new(std::size_t n, std::align_val_t a) {
  return new_impl(n, static_cast<std::size_t>(a));
}
REPLAYALLOC_EXPORT void* operator new[](std::size_t n, std::align_val_t a) {
  return new_impl(n, static_cast<std::size_t>(a));
}
REPLAYALLOC_EXPORT void* operator new(std::size_t n, std::align_val_t a,
                                      const std::nothrow_t&) noexcept {
  return new_nothrow(n, static_cast<std::size_t>(a));
}
REPLAYALLOC_EXPORT void* operator new[](std::size_t n, std::align_val_t a,
                                        const std::nothrow_t&) noexcept {
  return new_nothrow(n, static_cast<std::size_t>(a));
}
REPLAYALLOC_EXPORT void operator delete(void* p) noexcept { replayalloc::detail::entry_free(p); }
REPLAYALLOC_EXPORT void operator delete[](void* p) noexcept { replayalloc::detail::entry_free(p); }
REPLAYALLOC_EXPORT void operator delete(void* p, std::size_t n) noexcept {
  replayalloc::detail::entry_free_sized(p, n);
}
REPLAYALLOC_EXPORT void operator delete[](void* p, std::size_t n) noexcept {
  replayalloc::detail::entry_free_sized(p, n);
}
REPLAYALLOC_EXPORT void operator delete(void* p, std::align_val_t) noexcept { replayalloc::detail::entry_free(p); }
REPLAYALLOC_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { replayalloc::detail::entry_free(p); }
REPLAYALLOC_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  replayalloc::detail::entry_free(p);
}
REPLAYALLOC_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  replayalloc::detail::entry_free(p);
}
REPLAYALLOC_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept {
  replayalloc::detail::entry_free(p);
}
REPLAYALLOC_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept {
  replayalloc::detail::entry_free(p);
}
REPLAYALLOC_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  replayalloc::detail::entry_free(p);
}
REPLAYALLOC_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  replayalloc::detail::entry_free(p);
}
