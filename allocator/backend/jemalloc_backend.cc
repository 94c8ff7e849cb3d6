// The host fallback over jemalloc's extended API. mallocx/sdallocx reach jemalloc
// directly, whoever owns the process's `malloc` symbol.
#include <jemalloc/jemalloc.h>

#include "backend/backend.h"

// AddressSanitizer does not see jemalloc's blocks (mallocx is not intercepted), but
// code that ran in them may have poisoned parts of them (Abseil's hash tables poison
// their empty slots under ASan): a block jemalloc hands out again must be unpoisoned,
// as ASan's own allocator would.
#if defined(__SANITIZE_ADDRESS__)
#define REPLAYALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAYALLOC_ASAN 1
#endif
#endif
#if defined(REPLAYALLOC_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace replayalloc::detail::backend {
namespace {

inline int align_flags(std::size_t align) noexcept {
  return align <= malloc_align ? 0 : MALLOCX_ALIGN(align);
}

// glibc's contract: every block is a multiple of 16 bytes aligned on 64-bit systems,
// whatever its size (jemalloc gives blocks of 8 bytes or less 8-byte alignment). So
// requests below malloc_align are served, and freed with sdallocx, as malloc_align
// bytes; this also serves size 0 (mallocx(0) is undefined in jemalloc's contract).
inline std::size_t at_least_min(std::size_t size) noexcept {
  return size < malloc_align ? malloc_align : size;
}

inline void* fresh(void* p) noexcept {
#if defined(REPLAYALLOC_ASAN)
  if (p != nullptr) ASAN_UNPOISON_MEMORY_REGION(p, sallocx(p, 0));
#endif
  return p;
}

}  // namespace

void* fallback_alloc(std::size_t size, std::size_t align) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  return fresh(mallocx(at_least_min(size), align_flags(align)));
}

void* fallback_calloc(std::size_t size) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  return fresh(mallocx(at_least_min(size), MALLOCX_ZERO));
}

void fallback_free(void* p) noexcept { dallocx(p, 0); }

void fallback_free_sized(void* p, std::size_t size, std::size_t align) noexcept {
  sdallocx(p, at_least_min(size), align_flags(align));
}

void* fallback_realloc(void* p, std::size_t size) noexcept {
  return fresh(rallocx(p, at_least_min(size), 0));
}

std::size_t fallback_usable_size(const void* p) noexcept {
  return sallocx(const_cast<void*>(p), 0);
}

}  // namespace replayalloc::detail::backend
