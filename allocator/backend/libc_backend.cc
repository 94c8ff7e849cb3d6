// The host fallback over the C library's allocator, for the build of the core that
// is loaded with dlopen (the CUDA pluggable allocator, Python's ctypes): Debian's
// jemalloc uses initial-exec TLS of 2.6 KiB, more than glibc keeps for libraries
// loaded after start-up, so dlopen of anything linking it fails with "cannot
// allocate memory in static TLS block". In that build the process's own malloc
// (not interposed by replayalloc) serves misses and bookkeeping.
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/boot_heap.h"
#include "backend/front_cache.h"

namespace replayalloc::detail::backend {

// g_plain_malloc and g_plain_free stay null: fallback_alloc is malloc already.
bool use_fast_entry_points() noexcept { return true; }  // malloc and free already

void keep_huge_pages() noexcept {}

// Nothing to defer (Note [The fallback made when first needed]): glibc's own caches.
void start_fallback(bool, std::uint64_t, std::uint64_t) noexcept {}
void start_fallback_now() noexcept {}
bool fallback_started() noexcept { return true; }
void fallback_start_postfork_child() noexcept {}
bool reserve_front_cache() noexcept { return false; }
bool leave_thread_caches_to_front() noexcept { return false; }  // no front cache
bool fallback_thread_caches_on() noexcept { return true; }      // glibc's tcache
bool use_front_cache() noexcept { return false; }
std::size_t front_range_wanted() noexcept { return 0; }
void narrow_plain_malloc(std::uint64_t) noexcept {}  // no plain malloc
void front_resizing(const void*) noexcept {}
void front_free_at(void*) noexcept {}  // never called: no gate range is joined
bool watch_front_frees(std::size_t, void (*)(void*) noexcept) noexcept { return false; }  // no front cache
void unwatch_front_frees() noexcept {}
void front_cache_prefork() noexcept {}
void front_cache_postfork(bool, bool) noexcept {}
front_cache_counts front_cache_stats() noexcept { return {}; }
boot_counts boot_heap_counts() noexcept { return {}; }  // no boot heap (Note [A short process's first requests])
std::uint32_t front_thread_list_count(std::size_t) noexcept { return 0; }
std::size_t thread_cache_max() noexcept { return std::size_t{128} << 10; }  // M_MMAP_THRESHOLD's default
void zero_reused_by_memset() noexcept {}  // glibc's calloc memsets a reused chunk  // glibc's own thresholds (mallopt) stay the program's

// glibc returns free memory only from the top of a heap, never by time as jemalloc's
// decay does: what the slab's iterations used from it (recorded, passed through on
// every thread before its slab) stays resident for the life of the process unless
// trimmed. So every host slab made trims every arena, whatever else is free there (the
// rest of the program pays at most a page fault per page it reuses, once per slab
// made; glibc alone faults ~2,400 times per MobileNetV3 inference by its own trimming).
// Measured with libreplayalloc_torch.so, TorchScript ResNet-50, 4 threads: peak RSS
// 441-444 -> 393-395 MiB; MobileNetV3: 262 -> 251 MiB; no page faults per inference added
// (bench/RESULTS.md, "Memory").
void release_free_memory(std::size_t) noexcept { ::malloc_trim(0); }

std::size_t fallback_allocated_bytes() noexcept {
  return static_cast<std::size_t>(::mallinfo2().uordblks);
}

std::size_t fallback_resident_bytes() noexcept {
  const struct mallinfo2 m = ::mallinfo2();
  return static_cast<std::size_t>(m.arena + m.hblkhd);
}

void* fallback_alloc(std::size_t size, std::size_t align) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  if (size == 0) size = 1;
  if (align <= malloc_align) return std::malloc(size);
  void* p = nullptr;
  return ::posix_memalign(&p, align, size) == 0 ? p : nullptr;
}

// The C library has no front cache to keep the engine's buffers out of.
void* engine_alloc(std::size_t size, std::size_t align) noexcept { return fallback_alloc(size, align); }

void* engine_calloc(std::size_t size) noexcept { return fallback_calloc(size); }

void* fallback_calloc(std::size_t size) noexcept {
  if (inject_failure()) [[unlikely]] return nullptr;
  return std::calloc(1, size == 0 ? 1 : size);
}

void fallback_free(void* p) noexcept { std::free(p); }

void fallback_free_sized(void* p, std::size_t, std::size_t) noexcept { std::free(p); }

void* fallback_realloc(void* p, std::size_t size) noexcept {
  return std::realloc(p, size == 0 ? 1 : size);
}

bool fallback_block_below(const void*, std::size_t) noexcept { return false; }  // glibc's: not known

std::size_t fallback_usable_size(const void* p) noexcept {
  return ::malloc_usable_size(const_cast<void*>(p));
}

}  // namespace replayalloc::detail::backend
