// The C API (replayalloc.h) and the C++ helpers over it. Each entry point is the fast
// path inline (runtime/entry.h), then one call into the engine.
#include <cerrno>
#include <cstring>

#include "backend/backend.h"
#include "backend/slab_range.h"
#include "replay/fast_path.h"
#include "replayalloc/replayalloc.h"
#include "replayalloc/replayalloc.hpp"
#include "runtime/auto_mode.h"
#include "runtime/check.h"
#include "runtime/engine.h"
#include "runtime/entry.h"
#include "runtime/stats.h"
#include "support/reentry.h"

using replayalloc::detail::engine;
using replayalloc::detail::malloc_align;
using replayalloc::detail::phase;
using replayalloc::detail::slot_record;
using replayalloc::detail::thread_state;
using replayalloc::detail::tls_state;
namespace backend = replayalloc::detail::backend;
namespace auto_mode = replayalloc::detail::auto_mode;


namespace {

// A power of two. Not std::has_single_bit: without -mpopcnt GCC 12 makes that a call to
// libgcc's __popcountdi2, on posix_memalign's path (PyTorch's CPU allocator uses it).
bool valid_alignment(std::size_t a) { return a != 0 && (a & (a - 1)) == 0; }

// Bytes usable in a slab block: its slot's footprint.
std::size_t slab_usable(const void* p) {
  auto* s = static_cast<replayalloc::detail::slab*>(backend::chunk_owner(p));
  if (s == nullptr) return 0;
  const std::uint64_t off = static_cast<const std::uint8_t*>(p) - s->base;
  const slot_record* r = s->live_block_at(off);
  return r == nullptr ? 0 : s->version->plan.slots[r->index].size;
}

}  // namespace

extern "C" {

REPLAYALLOC_EXPORT int replayalloc_iteration_begin(const char* key) {
  if (key == nullptr || key[0] == '\0') {
    errno = EINVAL;
    return -1;
  }
  // The program marks its own iterations here: auto mode steps aside on this thread
  // (Note [Auto mode as a client]).
  auto_mode::step_aside(tls_state);
  return engine::get().begin(tls_state, key);
}

REPLAYALLOC_EXPORT int replayalloc_iteration_end(void) {
  if (auto_mode::owns_iteration(tls_state)) {  // nothing the program opened
    errno = EINVAL;
    return -1;
  }
  return engine::get().end(tls_state);
}

// The library's own version (replayalloc/version.h is the headers').
REPLAYALLOC_EXPORT const char* replayalloc_version(void) { return REPLAYALLOC_VERSION_STRING; }

REPLAYALLOC_EXPORT int replayalloc_wait_plans(void) {
  engine::get().wait_plans();
  return 0;
}

REPLAYALLOC_EXPORT int replayalloc_iteration_recording(void) {
  const thread_state& t = tls_state;
  return t.depth > 0 && t.host.ph == phase::record ? 1 : 0;
}

REPLAYALLOC_EXPORT void* replayalloc_malloc(size_t size) { return replayalloc::detail::entry_alloc(size, malloc_align); }

REPLAYALLOC_EXPORT void* replayalloc_calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  // Note [Small callocs zeroed by memset]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A calloc took the ladder, zeroed (runtime/host_slow_path.cc), at every size: below
  // the minimum, the slow path's checks and the backend's calloc (jemalloc's, outside
  // the front cache) came to 223 instructions a 64-byte calloc+free pair, where
  // jemalloc's own library takes 146, tcmalloc 124 and mimalloc 138 (callgrind,
  // bench/micro/preload_callgrind 64 256 100 calloc; cc1plus callocs 414,000 times
  // compiling bench/micro/threaded_stress.cc: 2.2% of its instructions went there).
  // So a calloc below the minimum, and of 4 KiB at most, is malloc's inline path below
  // the minimum (Note [Below the minimum, inline]: never recorded, planned or watched)
  // and a memset of its bytes, as jemalloc's calloc zeroes a small block: 90 instructions
  // (tests/perf/instruction_budget.txt, below_min_preload_calloc_64). Larger ones keep
  // the ladder, where the backend does not write pages it knows are zero.
  if (replayalloc::detail::small_request(bytes) && bytes <= 4096) [[likely]] {
    void* p = replayalloc::detail::backend::g_plain_malloc.load(std::memory_order_acquire)(bytes);
    if (p != nullptr) [[likely]] std::memset(p, 0, bytes);
    return p;
  }
  return replayalloc::detail::host_alloc_slow(tls_state, bytes, malloc_align, true);
}

namespace {

// aligned_alloc's and posix_memalign's block, the alignment a power of two.
[[gnu::always_inline]] inline void* aligned_entry(std::size_t alignment, std::size_t size) {
  // Beyond what a slot can promise: the ladder (whose engine rung gives it to the
  // backend), not the inline path, whose replay hit assumes a slot's alignment.
  if (alignment > replayalloc::detail::max_slot_align) [[unlikely]] {
    return replayalloc::detail::host_alloc_slow(tls_state, size, alignment, false);
  }
  return replayalloc::detail::entry_alloc(size, alignment < malloc_align ? malloc_align : alignment);
}

// posix_memalign past the front cache's inline class: errno kept as it was where no
// block is had (posix_memalign(3): errno is not set). Out of line, so that the inline
// way in front of it saves no register for it (Note [posix_memalign's two ways]).
[[gnu::noinline]] int posix_memalign_rest(void** out, std::size_t alignment, std::size_t size) {
  const int saved = errno;
  void* p = aligned_entry(alignment, size);
  if (p == nullptr) [[unlikely]] {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

}  // namespace

REPLAYALLOC_EXPORT void* replayalloc_aligned_alloc(size_t alignment, size_t size) {
  if (!valid_alignment(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned_entry(alignment, size);
}

// Note [posix_memalign's two ways]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// libtorch's CPU allocator and ONNX Runtime make every tensor with posix_memalign(64).
// Its inline way serves what entry_alloc would serve without its slow path: below the
// minimum the front cache's class aligned as asked (Note [Aligned requests in the front
// cache]), and at or above it, where the thread has passes granted ahead (Note [Passes
// granted ahead], shortcuts.h: none while it replays, so no replay hit is passed over),
// that class again, the pass counted, both without the errno saved for the other way (a
// block served leaves it as it was but where a system call inside failed and the cache
// served all the same). The other way (posix_memalign_rest, out of line, so that the
// inline way saves no register for it) saves errno, which it gives back where no block
// is had (posix_memalign(3): errno is not set), and takes aligned_alloc's way without its
// call or its second test of the alignment. A request at or above the minimum went
// through errno's save, aligned_alloc's call and frame and entry_alloc's tests before its
// pass: a 4 KiB pair of posix_memalign(64) and free passed through 176.2 -> 124.2
// instructions (tcmalloc's 112.2), one below the minimum 113.2 -> 111.2, a 4 KiB pair
// served from a slab 122.2 -> 115.2, one watched and then resting (auto mode, nothing
// marked) 263.3 -> 215.3 (tests/perf/instruction_budget.txt; preload_callgrind).
REPLAYALLOC_EXPORT int replayalloc_posix_memalign(void** out, size_t alignment, size_t size) {
  if (!valid_alignment(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  if (alignment > malloc_align) {
    if (void* p = replayalloc::detail::aligned_below_min(size, alignment)) [[likely]] {
      *out = p;
      return 0;
    }
    // At or above the minimum, a pass granted ahead (none while the thread replays, so
    // no replay hit is passed over), as entry_alloc takes it.
    if (void* p = replayalloc::detail::aligned_pass(tls_state, size, alignment)) [[likely]] {
      *out = p;
      return 0;
    }
  }
  return posix_memalign_rest(out, alignment, size);
}

REPLAYALLOC_EXPORT void replayalloc_free(void* ptr) { replayalloc::detail::entry_free(ptr); }

REPLAYALLOC_EXPORT void replayalloc_free_sized(void* ptr, size_t size) {
  if (ptr == nullptr) return;
  // A slab block, or a backend block that something must see (Note [The plain-free
  // gate]: check mode, a recording, auto mode's watcher, the engine, a thread not yet
  // registered): the free that knows them all. Otherwise the size spares jemalloc its
  // lookup.
  if (backend::in_slab_range(ptr) || tls_state.free_gate != 0) {
    replayalloc_free(ptr);
    return;
  }
  backend::fallback_free_sized(ptr, size, malloc_align);
}

REPLAYALLOC_EXPORT size_t replayalloc_usable_size(const void* ptr) {
  if (ptr == nullptr) return 0;
  if (backend::in_slab_range(ptr)) return slab_usable(ptr);
  return backend::fallback_usable_size(ptr);
}

namespace {
// realloc's other ways, out of line, so that the backend's way in front of them saves no
// register for them (as posix_memalign_rest).
[[gnu::noinline]] void* realloc_rest(void* ptr, size_t size) {
  if (ptr == nullptr) return replayalloc_malloc(size);
  if (size == 0) {  // glibc: frees the block and returns NULL
    replayalloc_free(ptr);
    return nullptr;
  }
  // A slab block cannot grow in place, and inside an iteration the move must be seen
  // as an allocation and a free so recording and replay agree.
  const bool in_slab = backend::in_slab_range(ptr);
  const std::size_t old = in_slab ? slab_usable(ptr) : backend::fallback_usable_size(ptr);
  void* p = replayalloc_malloc(size);
  if (p == nullptr) return nullptr;  // the old block stays valid, as the contract says
  std::memcpy(p, ptr, old < size ? old : size);
  replayalloc_free(ptr);
  return p;
}
}  // namespace

REPLAYALLOC_EXPORT void* replayalloc_realloc(void* ptr, size_t size) {
  // A backend block outside any iteration (a program's reallocs, where nothing is
  // recorded or replayed on the thread): the backend's own realloc, which may keep it in
  // place. Every other case (null, size 0, a slab block, an iteration, check mode) moves
  // it through malloc and free, out of line.
  if (ptr != nullptr && size != 0 && !backend::in_slab_range(ptr) && tls_state.host.ph == phase::none &&
      !replayalloc::detail::check::enabled()) [[likely]] {
    return backend::fallback_realloc(ptr, size);  // errno ENOMEM where it fails
  }
  return realloc_rest(ptr, size);
}

REPLAYALLOC_EXPORT unsigned replayalloc_op_id(const char* name) {
  if (name == nullptr || name[0] == '\0') return 0;
  return engine::get().op_id(name);
}

REPLAYALLOC_EXPORT void replayalloc_set_op(unsigned op_id) { tls_state.op = op_id; }

REPLAYALLOC_EXPORT unsigned replayalloc_current_op(void) { return tls_state.op; }

REPLAYALLOC_EXPORT size_t replayalloc_stats_json(char* buf, size_t cap) {
  const replayalloc::Stats s = engine::get().stats();
  char local[1];
  return replayalloc::detail::format_stats_json(s, cap == 0 ? local : buf, cap == 0 ? 1 : cap);
}

REPLAYALLOC_EXPORT void replayalloc_reset_stats(void) { replayalloc::detail::reset_stats_baseline(); }

REPLAYALLOC_EXPORT int replayalloc_save_trace(const char* key, const char* path) {
  if (key == nullptr || path == nullptr) return -1;
  return engine::get().save_trace(key, path);
}

}  // extern "C"

// The C++ API (replayalloc.hpp): what it does not inline leaves the library as the C
// API does.
namespace replayalloc {
REPLAYALLOC_EXPORT Stats stats() { return detail::engine::get().stats(); }
REPLAYALLOC_EXPORT void reset_stats() { detail::reset_stats_baseline(); }
}  // namespace replayalloc
