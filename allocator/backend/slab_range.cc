#include "backend/slab_range.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "backend/backend.h"
#include "support/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace replayalloc::detail::backend {
namespace {

// A plain pthread mutex: it never allocates, so it is safe under LD_PRELOAD.
std::mutex g_mu;
std::uint8_t* g_used = nullptr;  // one byte per chunk: 1 when part of a slab
std::size_t g_chunks = 0;
std::size_t g_mapped = 0;
std::size_t g_mapped_peak = 0;
std::uintptr_t g_below = 0;  // the range reserved below the slab range, until taken
std::size_t g_below_bytes = 0;

std::size_t round_chunks(std::size_t bytes) { return (bytes + chunk_bytes - 1) >> chunk_shift; }

// The bytes of a slab made readable and writable: its size rounded up to whole pages.
// The rest of its last chunk stays PROT_NONE, so REPLAYALLOC_MAX_SLAB_MEMORY counts
// memory a slab can commit, not the address space it reserves (a 300 KiB slab fits
// under the 1 MiB minimum).
std::size_t commit_bytes(std::size_t bytes) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return ((bytes == 0 ? 1 : bytes) + page - 1) / page * page;
}

void prefault_pages(void* p, std::size_t bytes) {
  if (bytes == 0) return;
  if (::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: touch one byte per page. Fresh anonymous pages read as zero, so
  // writing zero changes nothing but commits the page now rather than on first use.
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t off = 0; off < bytes; off += static_cast<std::size_t>(page)) c[off] = 0;
}

}  // namespace

bool reserve_slab_range(std::size_t bytes, std::size_t below) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_slab_range.base != 0) return true;
  // Only before the front cache joins the gate's range (join_gate_range), which takes
  // this range as it finds it: a later reservation would leave the cache's blocks
  // outside the gate, to jemalloc's free.
  if (g_gate_range.front != 0) {
    REPLAYALLOC_LOG(error,
                    "the slab range was asked for after the front cache's; replay is off, every call goes to the fallback");
    return false;
  }
  bytes = round_chunks(bytes) << chunk_shift;
  below = (below + chunk_bytes - 1) & ~(std::size_t{chunk_bytes} - 1);
  // Note [The gate's range]: at each size, first with the range below, then without.
  const auto next = [below](std::size_t& want, std::size_t& extra) {
    if (extra != 0) {
      extra = 0;
    } else {
      want /= 2;
      extra = below;
    }
  };
  for (std::size_t want = bytes, extra = below; want >= (std::size_t{64} << 20); next(want, extra)) {
    // Room so the start can be aligned to range_align (a chunk boundary, and the front
    // cache's range below it, a multiple of it, begins one: Note [The page map's bytes
    // off their pages' starts], backend/front_inline.h).
    void* raw = ::mmap(nullptr, extra + want + range_align, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) continue;
    const auto r = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t base = (r + extra + range_align - 1) & ~(std::uintptr_t{range_align} - 1);
    const std::size_t chunks = want >> chunk_shift;
    const std::size_t table_bytes = chunks * (sizeof(std::atomic<void*>) + 1);
    void* table = ::mmap(nullptr, table_bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (table == MAP_FAILED) {
      ::munmap(raw, extra + want + range_align);
      continue;
    }
    g_chunks = chunks;
    g_used = static_cast<std::uint8_t*>(table) + chunks * sizeof(std::atomic<void*>);
    g_slab_range.owners = static_cast<std::atomic<void*>*>(table);  // zero-filled = null
    g_slab_range.bytes = want;
    g_slab_range.base = base;
    g_gate_range = {base, want, 0};
    if (extra != 0) g_below = base - extra;  // chunk-aligned, inside the mapping
    g_below_bytes = extra;
    if (want != bytes) {
      REPLAYALLOC_LOG(warning, "reserved %zu MiB for slabs instead of the %zu MiB asked (REPLAYALLOC_RESERVE)",
                      want >> 20, bytes >> 20);
    }
    return true;
  }
  REPLAYALLOC_LOG(error, "could not reserve address space for slabs (%s); replay is off, every call goes to the fallback",
                  std::strerror(errno));
  return false;
}

void* take_range_below(std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_below == 0 || bytes != g_below_bytes) return nullptr;
  void* p = reinterpret_cast<void*>(g_below);
  g_below = 0;
  return p;
}

bool join_gate_range(std::uintptr_t base, std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_slab_range.base == 0) {
    // No slab range (REPLAYALLOC_MODE=off, or its reservation refused): the gate's
    // range is the front cache's alone, its slab part empty.
    g_gate_range = {base, bytes, bytes};
    return true;
  }
  if (base + bytes != g_slab_range.base) return false;
  g_gate_range = {base, bytes + g_slab_range.bytes, bytes};
  return true;
}

std::atomic<std::int64_t> g_engine_failures{0};

void fail_engine_allocations(std::int64_t n) noexcept {
  g_engine_failures.store(n, std::memory_order_relaxed);
}

void* map_slab(std::size_t bytes, std::size_t touch_bytes, bool prefault, std::size_t limit,
               bool* over_limit) noexcept {
  if (inject_failure()) return nullptr;
  const std::size_t n = round_chunks(bytes == 0 ? 1 : bytes);
  const std::size_t commit = commit_bytes(bytes);
  std::size_t start = g_chunks;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_slab_range.base == 0) return nullptr;
    if (g_mapped + commit > limit) {
      if (over_limit != nullptr) *over_limit = true;
      return nullptr;
    }
    // First fit over the chunk map; slabs are few and made rarely.
    for (std::size_t i = 0, run = 0; i < g_chunks; ++i) {
      run = g_used[i] ? 0 : run + 1;
      if (run == n) {
        start = i + 1 - n;
        break;
      }
    }
    if (start == g_chunks) return nullptr;
    std::memset(g_used + start, 1, n);
    g_mapped += commit;
    if (g_mapped > g_mapped_peak) g_mapped_peak = g_mapped;
  }
  void* p = reinterpret_cast<void*>(g_slab_range.base + (start << chunk_shift));
  if (::mprotect(p, commit, PROT_READ | PROT_WRITE) != 0) {
    REPLAYALLOC_LOG(warning, "could not commit a %zu KiB slab (%s); falling back to jemalloc",
                    commit >> 10, std::strerror(errno));
    std::lock_guard<std::mutex> lock(g_mu);
    std::memset(g_used + start, 0, n);
    g_mapped -= commit;
    return nullptr;
  }
  // Huge pages (fewer TLB misses) are asked for only once the pages are in, so that
  // khugepaged may collapse them later, in the background. Asked before, every fault
  // in the slab tried to make a huge page first, compacting memory synchronously where
  // the system's THP defrag setting is "madvise" (Debian's default): a TorchScript
  // ResNet-50's 10.6 MiB slab took 14.8-68.5 ms to fault in, on a machine with no huge
  // page to give (AnonHugePages 0), against 3.6-19.2 ms (1-4 threads on 2 cores; the
  // iteration log, Note [The iteration log]). A slab faulted in lazily (not prefaulted:
  // Note [Probation slabs]) gets no advice, so its faults never compact either.
  if (prefault) {
    prefault_pages(p, touch_bytes < commit ? touch_bytes : commit);
    if (commit >= chunk_bytes) ::madvise(p, commit, MADV_HUGEPAGE);  // advisory
  }
  return p;
}

void set_chunk_owner(void* p, std::size_t bytes, void* owner) noexcept {
  const std::uintptr_t first = (reinterpret_cast<std::uintptr_t>(p) - g_slab_range.base) >> chunk_shift;
  const std::size_t n = round_chunks(bytes == 0 ? 1 : bytes);
  for (std::size_t i = 0; i < n; ++i) g_slab_range.owners[first + i].store(owner, std::memory_order_release);
}

void unmap_slab(void* p, std::size_t bytes) noexcept {
  const std::size_t n = round_chunks(bytes == 0 ? 1 : bytes);
  const std::size_t len = n << chunk_shift;
  // Replace the pages by a fresh PROT_NONE reservation: memory goes back to the system
  // and the address space stays ours.
  ::mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  const std::size_t start = (reinterpret_cast<std::uintptr_t>(p) - g_slab_range.base) >> chunk_shift;
  std::lock_guard<std::mutex> lock(g_mu);
  std::memset(g_used + start, 0, n);
  g_mapped -= commit_bytes(bytes);
}

std::size_t mapped_slab_bytes() noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_mapped;
}

std::size_t mapped_slab_bytes_peak() noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_mapped_peak;
}

void reset_mapped_slab_peak() noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  g_mapped_peak = g_mapped;
}

std::size_t resident_slab_bytes() noexcept {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  unsigned char vec[chunk_bytes / 4096];  // one byte per page of a chunk (pages of 4 KiB or more)
  const std::size_t pages = chunk_bytes / page;
  std::size_t resident = 0;
  std::lock_guard<std::mutex> lock(g_mu);
  for (std::size_t i = 0; i < g_chunks; ++i) {
    if (g_used[i] == 0) continue;
    void* p = reinterpret_cast<void*>(g_slab_range.base + (i << chunk_shift));
    if (::mincore(p, chunk_bytes, vec) != 0) continue;
    for (std::size_t k = 0; k < pages; ++k) resident += (vec[k] & 1) != 0 ? page : 0;
  }
  return resident;
}

void lock_for_fork() noexcept { g_mu.lock(); }
void unlock_after_fork() noexcept { g_mu.unlock(); }

}  // namespace replayalloc::detail::backend
