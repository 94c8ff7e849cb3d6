// libreplayalloc_preload.so: jemalloc's non-standard API, over the library's own copy.
//
// Layer: hooks. Built only where the library carries jemalloc inside (Note [The
// LD_PRELOAD library's own runtime], hooks/CMakeLists.txt): the process then has one
// jemalloc, the one that serves replayalloc's fallback, whoever calls it. A program
// that calls mallocx or mallctl (linking libjemalloc.so.2 itself, or finding them with
// dlsym) reaches these before its own library, as it reached the shared jemalloc that
// the LD_PRELOAD library linked before.
//
// What the program allocates through this API (mallocx) is jemalloc's, as it was (in
// check mode replayalloc's, so that its record holds every block: allocate_as); what
// it hands back may be any block malloc or operator new gave it, replayalloc's own
// included (a slab's, the front cache's): dallocx and sdallocx free it as free does,
// sallocx measures it as malloc_usable_size does, and rallocx and xallocx treat it as
// realloc may (xallocx never resizes one of replayalloc's in place: it reports the size
// the block has, as jemalloc does when it cannot). A block of jemalloc's own handed
// back with flags that choose an arena or a thread cache goes to jemalloc with them
// (to_jemalloc), and xallocx resizes jemalloc's blocks in place as jemalloc does.
#include <jemalloc/jemalloc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "replayalloc/export.h"
#include "replayalloc/replayalloc.h"
#include "backend/slab_range.h"
#include "runtime/check.h"
#include "runtime/entry.h"

// The copy's names (backend/private_jemalloc.cmake), hidden inside the library.
extern "C" {
void* replayalloc_je_mallocx(size_t size, int flags);
void* replayalloc_je_rallocx(void* ptr, size_t size, int flags);
size_t replayalloc_je_xallocx(void* ptr, size_t size, size_t extra, int flags);
void replayalloc_je_dallocx(void* ptr, int flags);
size_t replayalloc_je_nallocx(size_t size, int flags);
int replayalloc_je_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);
int replayalloc_je_mallctlnametomib(const char* name, size_t* mibp, size_t* miblenp);
int replayalloc_je_mallctlbymib(const size_t* mib, size_t miblen, void* oldp, size_t* oldlenp, void* newp,
                                size_t newlen);
void replayalloc_je_malloc_stats_print(void (*write_cb)(void*, const char*), void* cbopaque, const char* opts);
}

namespace {

constexpr int lg_align_mask = 0x3f;  // MALLOCX_LG_ALIGN's bits

// What a request's flags ask beyond a malloc: an alignment, zeroed bytes, an arena or
// a thread cache (the bits above MALLOCX_ZERO).
std::size_t align_of_flags(int flags) {
  const int lg = flags & lg_align_mask;
  return lg == 0 ? 0 : std::size_t{1} << lg;
}
bool chooses_arena_or_cache(int flags) { return (flags & ~(lg_align_mask | MALLOCX_ZERO)) != 0; }

// A block of jemalloc's own: outside replayalloc's ranges (the slab's and the front
// cache's, Note [The gate's range]), as entry_free tells them apart. Outside check mode,
// whose record holds every block.
bool jemallocs_own(const void* p) {
  return !replayalloc::detail::check::enabled() &&
         reinterpret_cast<std::uintptr_t>(p) - replayalloc::detail::backend::g_gate_range.from >=
             replayalloc::detail::backend::g_gate_range.span;
}
// A block of jemalloc's own handed back with flags that choose a thread cache or an
// arena goes to jemalloc with them: its contract rests on them (a block freed with
// MALLOCX_TCACHE_NONE never waits in a thread cache, which arena.<i>.destroy relies on).
bool to_jemalloc(const void* p, int flags) { return p != nullptr && chooses_arena_or_cache(flags) && jemallocs_own(p); }

// A block of `size` bytes as the flags ask: jemalloc's where they choose an arena or a
// thread cache, else replayalloc's (malloc's, aligned or zeroed as asked). Check mode
// (Note [Check mode], runtime/check.h) records every block the program holds, so there
// every block is replayalloc's, the arena and cache flags ignored.
void* allocate_as(std::size_t size, int flags) {
  if (chooses_arena_or_cache(flags) && !replayalloc::detail::check::enabled()) {
    return replayalloc_je_mallocx(size, flags);
  }
  const bool zeroed = (flags & MALLOCX_ZERO) != 0;
  const std::size_t align = align_of_flags(flags);
  if (align <= replayalloc::detail::malloc_align) {
    return zeroed ? replayalloc_calloc(1, size) : replayalloc::detail::entry_alloc(size, replayalloc::detail::malloc_align);
  }
  void* p = nullptr;
  if (replayalloc_posix_memalign(&p, align, size) != 0) return nullptr;
  if (zeroed) std::memset(p, 0, size);
  return p;
}

}  // namespace

#define RA_HOOK extern "C" REPLAYALLOC_EXPORT

RA_HOOK void* mallocx(size_t size, int flags) {
  if (replayalloc::detail::check::enabled()) [[unlikely]] return allocate_as(size, flags);
  return replayalloc_je_mallocx(size, flags);
}
RA_HOOK size_t nallocx(size_t size, int flags) { return replayalloc_je_nallocx(size, flags); }

RA_HOOK void dallocx(void* ptr, int flags) {
  if (to_jemalloc(ptr, flags)) return replayalloc_je_dallocx(ptr, flags);
  replayalloc::detail::entry_free(ptr);
}
// Unsized to jemalloc: a block the fallback made may be of a size rounded from the one
// the program knows.
RA_HOOK void sdallocx(void* ptr, size_t /*size*/, int flags) { dallocx(ptr, flags); }
RA_HOOK size_t sallocx(const void* ptr, int /*flags*/) { return replayalloc_usable_size(ptr); }
// In place: jemalloc's blocks as jemalloc does; replayalloc's never (their size).
RA_HOOK size_t xallocx(void* ptr, size_t size, size_t extra, int flags) {
  if (jemallocs_own(ptr)) return replayalloc_je_xallocx(ptr, size, extra, flags);
  return replayalloc_usable_size(ptr);
}

// A plain request (no alignment above malloc's, no zeroing, no arena or cache) is
// realloc's; any other moves the block into one made as the flags say, zeroing from the
// old block's usable size up, as jemalloc's MALLOCX_ZERO does.
RA_HOOK void* rallocx(void* ptr, size_t size, int flags) {
  if (size == 0) size = 1;
  if (to_jemalloc(ptr, flags)) return replayalloc_je_rallocx(ptr, size, flags);
  if (flags == 0 || (align_of_flags(flags) <= replayalloc::detail::malloc_align && !chooses_arena_or_cache(flags) &&
                     (flags & MALLOCX_ZERO) == 0)) {
    return replayalloc_realloc(ptr, size);
  }
  void* moved = allocate_as(size, flags & ~MALLOCX_ZERO);
  if (moved == nullptr) return nullptr;  // ptr untouched, as rallocx leaves it
  const std::size_t old = replayalloc_usable_size(ptr);
  const std::size_t kept = std::min(old, size);
  std::memcpy(moved, ptr, kept);
  if ((flags & MALLOCX_ZERO) != 0) {  // to the new block's real size, as jemalloc's
    const std::size_t real = replayalloc_usable_size(moved);
    if (real > kept) std::memset(static_cast<char*>(moved) + kept, 0, real - kept);
  }
  replayalloc::detail::entry_free(ptr);
  return moved;
}

RA_HOOK int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen) {
  return replayalloc_je_mallctl(name, oldp, oldlenp, newp, newlen);
}
RA_HOOK int mallctlnametomib(const char* name, size_t* mibp, size_t* miblenp) {
  return replayalloc_je_mallctlnametomib(name, mibp, miblenp);
}
RA_HOOK int mallctlbymib(const size_t* mib, size_t miblen, void* oldp, size_t* oldlenp, void* newp,
                         size_t newlen) {
  return replayalloc_je_mallctlbymib(mib, miblen, oldp, oldlenp, newp, newlen);
}
RA_HOOK void malloc_stats_print(void (*write_cb)(void*, const char*), void* cbopaque, const char* opts) {
  replayalloc_je_malloc_stats_print(write_cb, cbopaque, opts);
}
