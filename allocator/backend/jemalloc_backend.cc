// The host fallback over jemalloc's extended API. mallocx/sdallocx reach jemalloc
// directly, whoever owns the process's `malloc` symbol.
#include <jemalloc/jemalloc.h>

#include "backend/backend.h"

namespace replayalloc::detail::backend {
namespace {

inline int align_flags(std::size_t align) noexcept {
  return align <= malloc_align ? 0 : MALLOCX_ALIGN(align);
}

}  // namespace

void* fallback_alloc(std::size_t size, std::size_t align) noexcept {
  // mallocx(0) is undefined behaviour in jemalloc's contract: serve a minimal block.
  return mallocx(size == 0 ? 1 : size, align_flags(align));
}

void* fallback_calloc(std::size_t size) noexcept {
  return mallocx(size == 0 ? 1 : size, MALLOCX_ZERO);
}

void fallback_free(void* p) noexcept { dallocx(p, 0); }

void fallback_free_sized(void* p, std::size_t size, std::size_t align) noexcept {
  sdallocx(p, size == 0 ? 1 : size, align_flags(align));
}

void* fallback_realloc(void* p, std::size_t size) noexcept {
  return rallocx(p, size == 0 ? 1 : size, 0);
}

std::size_t fallback_usable_size(const void* p) noexcept {
  return sallocx(const_cast<void*>(p), 0);
}

}  // namespace replayalloc::detail::backend
