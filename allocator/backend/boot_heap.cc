// The boot heap: a short process's first requests, served before jemalloc is booted.
//
// Note [A short process's first requests]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A process the LD_PRELOAD library enters booted jemalloc at its first request (and,
// before that, at load: jemalloc's own constructor, removed from the private copy by
// private_jemalloc.cmake): its options and the system's (a readlink and two files read),
// three mappings of 2-4 MiB, arena 0's bins, extent sets and heaps, its base blocks and
// the first slabs: ~145 us and 58 page faults of the ~290 us and ~120 faults by which a
// process's start under the library exceeded glibc's (bench/RESULTS.md, "A short
// process's first requests": a library of jemalloc alone, with and without a request at
// load). A command of a shell script or a build (expr, sort, tr, sed, cut) makes 200-330
// requests of 18-57 KB in all before it exits, and the library's own libstdc++ asks 71 KiB
// for its exceptions' emergency pool. So, while the fallback waits for its start (Note
// [The fallback made when first needed], fallback_start.cc) and the process has one
// thread, requests of up to 256 KiB that take malloc's alignment are served here: a block
// of the first MiB of the front cache's range (readable and writable with the range's
// tables: Note [The front cache's tables in its range]; a page touched as it is first
// used), after a 16-byte header with its size, by a
// bump pointer; a block freed goes on a list of its size (sizes of up to 4 KiB, in steps
// of 16) for the next request of it, or, the last block made, back to the bump pointer.
// jemalloc is booted by the first request the heap does not serve (an aligned one, one
// above 256 KiB, the range spent), by the fallback's start, or by a call of the engine's
// into jemalloc's controls; a process that makes none exits without it.
// It closes for good at the fallback's start and when the process has had a second
// thread (glibc's __libc_single_threaded, which pthread_create clears: support/
// one_thread.h), which is what lets it take no lock: while it is open, only one thread
// can call it. Its blocks stay valid when it closes, and their frees do nothing from
// then on (at most its MiB of address space, and the pages that were touched, kept).
// Every entry point knows them: a free in the front cache's range whose page's byte says
// 0 asks boot_block before jemalloc (front_cache.cc, free_slow); realloc and the usable
// size ask it before jemalloc's (jemalloc_backend.cc); the exported jemalloc API sends a
// block inside the gate's range to replayalloc's entry points. A free of a block that is
// not live (a double free) is ignored, where jemalloc's behaviour is undefined.
// Off with the front cache (REPLAYALLOC_FRONT_CACHE=0, check mode), and where the start
// is made at once (REPLAYALLOC_FALLBACK_AFTER=0).
#include "backend/boot_heap.h"

#include <sys/mman.h>

#include <cstring>

#include "backend/front_cache.h"
#include "support/one_thread.h"

namespace replayalloc::detail::backend {
namespace {

constexpr std::size_t header_bytes = 16;
constexpr std::size_t list_limit = 4096;  // sizes kept on lists, in steps of 16
constexpr std::uint32_t live = 0x6c697665;
constexpr std::uint32_t freed = 0x66726565;

struct header {
  std::uint32_t size;   // the block's usable size (a multiple of 16)
  std::uint32_t state;  // live or freed
  std::uint64_t unused;
};
static_assert(sizeof(header) == header_bytes);

// Written only while the heap is open, by its one thread; g_base never changes once set.
std::uintptr_t g_base = 0;
std::uintptr_t g_bump = 0;  // the next block's header
std::uintptr_t g_high = 0;  // the most g_bump has been: the bytes above were never written
std::uint64_t g_requests = 0;
void* g_lists[list_limit / 16 + 1] = {};

// Note [A short process's large requests]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A request above boot_largest made the fallback's start (1 MiB and more: Note [The
// fallback made when first needed]) or booted jemalloc for itself. `sort` reading a pipe
// asks 8.5 MB for its buffer at its first line, so each `sort` of a shell script paid
// jemalloc's boot, its settings and the front cache's first arena: 333 page faults and
// 2.07 ms of CPU against glibc's 159 and 1.56 ms (`tr`, which asks nothing that large,
// 194 faults). So while the heap is open such a request gets pages of its own, as glibc's
// malloc maps one of 128 KiB and more: the next pages of the front cache's range
// (take_front_pages, after what the arenas took, never theirs), page-aligned, fresh. Its
// free gives them back to the kernel at once (mapped PROT_NONE again; the addresses stay
// the range's and are never handed out again), whichever thread frees it and whether or
// not the heap is still open; a second free of it is ignored, as the heap's are. At most
// big_most of them, 1 GiB in all, and none once one was freed: a program that frees a
// large block and asks for another repeats them, and it makes the start as before (jemalloc
// keeps such a block's pages for the next: Note [The fallback's huge blocks]); so does a
// calloc that large (Note [A short process's callocs]). Their frees, reallocs and sizes
// find them as the heap's (boot_block).
constexpr unsigned big_most = 8;
constexpr std::size_t big_bytes_most = std::size_t{1} << 30;
struct big_block {
  std::atomic<std::uintptr_t> start{0};  // 0 until made; never changes after
  std::atomic<bool> live{false};
  std::size_t bytes = 0;
};
big_block g_big[big_most];
unsigned g_bigs = 0;  // made (while the heap is open: one thread)
std::size_t g_big_bytes = 0;
std::atomic<bool> g_big_freed{false};
// The addresses the big blocks lie in (a block made after another is above it).
std::atomic<std::uintptr_t> g_big_low{0};
std::atomic<std::uintptr_t> g_big_high{0};

big_block* big_at(const void* p) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t low = g_big_low.load(std::memory_order_relaxed);
  if (a - low >= g_big_high.load(std::memory_order_relaxed) - low) return nullptr;
  for (big_block& b : g_big) {
    if (b.start.load(std::memory_order_relaxed) == a) return &b;
  }
  return nullptr;
}

header* header_of(const void* p) noexcept {
  return reinterpret_cast<header*>(reinterpret_cast<std::uintptr_t>(p) - header_bytes);
}

// Whether a call may use the heap: open, and the process still of one thread (it closes
// otherwise).
bool usable_now() noexcept {
  if (!boot_heap_open()) return false;
  if (!process_has_one_thread()) [[unlikely]] {
    close_boot_heap();
    return false;
  }
  return true;
}

// A block of n bytes from the bump pointer, aligned to `align` (16 to 4096), its header
// right below it (the bytes skipped to align it are never used); *fresh when its bytes
// were never written.
void* bump(std::size_t n, std::size_t align, bool* fresh) noexcept {
  const std::uintptr_t block = (g_bump + header_bytes + align - 1) & ~(std::uintptr_t{align} - 1);
  if (block + n > g_base + boot_range_bytes) return nullptr;
  auto* h = reinterpret_cast<header*>(block - header_bytes);
  h->size = static_cast<std::uint32_t>(n);
  h->state = live;
  g_bump = block + n;
  *fresh = block >= g_high;  // else a block freed last wrote there
  if (g_bump > g_high) g_high = g_bump;
  ++g_requests;
  return h + 1;
}

// A block of n bytes (a multiple of 16, at most boot_largest); *fresh when its bytes were
// never written (zero).
void* take(std::size_t n, bool* fresh) noexcept {
  if (n <= list_limit) {
    if (void* p = g_lists[n >> 4]) {
      g_lists[n >> 4] = *static_cast<void**>(p);
      header_of(p)->state = live;
      *fresh = false;
      ++g_requests;
      return p;
    }
  }
  return bump(n, header_bytes, fresh);
}

std::size_t rounded(std::size_t size) noexcept { return size <= 16 ? 16 : (size + 15) & ~std::size_t{15}; }

}  // namespace

bool open_boot_heap(std::uintptr_t base) noexcept {
  if (g_base != 0 || base == 0 || !process_has_one_thread()) return false;
  g_base = base;
  g_bump = base;
  g_high = base;
  g_boot_open.store(true, std::memory_order_release);
  return true;
}

void close_boot_heap() noexcept { g_boot_open.store(false, std::memory_order_release); }

void* boot_malloc(std::size_t size) noexcept {
  if (size > boot_largest || !usable_now()) return nullptr;
  bool fresh = false;
  return take(rounded(size), &fresh);
}

void* boot_calloc(std::size_t size) noexcept {
  if (size > boot_largest || !usable_now()) return nullptr;
  bool fresh = false;
  void* p = take(rounded(size), &fresh);
  if (p != nullptr && !fresh) std::memset(p, 0, size);
  return p;
}

void* boot_big_malloc(std::size_t size) noexcept {
  if (size <= boot_largest || g_bigs == big_most || !usable_now() || g_big_freed.load(std::memory_order_relaxed)) {
    return nullptr;
  }
  const std::size_t bytes = (size + 4095) & ~std::size_t{4095};
  if (bytes < size || bytes > big_bytes_most - g_big_bytes) return nullptr;
  void* p = take_front_pages(bytes);
  if (p == nullptr) return nullptr;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  big_block& b = g_big[g_bigs++];
  b.bytes = bytes;
  b.live.store(true, std::memory_order_relaxed);
  b.start.store(a, std::memory_order_relaxed);
  g_big_bytes += bytes;
  if (g_big_low.load(std::memory_order_relaxed) == 0) g_big_low.store(a, std::memory_order_relaxed);
  g_big_high.store(a + bytes, std::memory_order_relaxed);
  ++g_requests;
  return p;
}

// Note [A short process's aligned requests]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An aligned request (posix_memalign, aligned_alloc, memalign, valloc, an aligned new)
// booted jemalloc: `cat` asks 128 KiB aligned to a page for its buffer (coreutils 9's
// xalignalloc), and took 246 page faults to glibc's 149 (`head`, which asks none, 197).
// While the heap is open, one aligned to at most a page is the heap's too: its header
// right below it, the bump pointer moved up to the alignment first (the bytes skipped are
// never used again: at most a page a request), or, above boot_largest, pages of its own
// (Note [A short process's large requests]: a page's alignment). Its free, realloc and
// size are any block's of the heap (a list of its size may hand it to an unaligned
// request later, never to an aligned one: those always take the bump pointer). Counted
// toward the start as a malloc is (Note [Aligned requests in the front cache]).
void* boot_memalign(std::size_t size, std::size_t align) noexcept {
  if (align > 4096 || (align & (align - 1)) != 0 || !usable_now()) return nullptr;
  if (size > boot_largest) return boot_big_malloc(size);
  bool fresh = false;
  return bump(rounded(size), align < header_bytes ? header_bytes : align, &fresh);
}

bool boot_block(const void* p, std::size_t* usable) noexcept {
  if (reinterpret_cast<std::uintptr_t>(p) - g_base >= boot_range_bytes || g_base == 0) {
    const big_block* b = big_at(p);
    if (b == nullptr) return false;
    *usable = b->bytes;
    return true;
  }
  *usable = header_of(p)->size;
  return true;
}

namespace {
void free_big(big_block& b, void* p) noexcept {
  if (!b.live.exchange(false, std::memory_order_acq_rel)) return;  // freed twice
  g_big_freed.store(true, std::memory_order_relaxed);
  ::mmap(p, b.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void free_small(void* p) noexcept {
  if (!usable_now()) return;
  header* h = header_of(p);
  if (h->state != live) return;  // freed twice, or not a block's start
  h->state = freed;
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + h->size;
  if (end == g_bump) {
    g_bump = reinterpret_cast<std::uintptr_t>(h);
  } else if (h->size <= list_limit) {
    *static_cast<void**>(p) = g_lists[h->size >> 4];
    g_lists[h->size >> 4] = p;
  }
}
}  // namespace

bool boot_release(void* p) noexcept {
  if (reinterpret_cast<std::uintptr_t>(p) - g_base < boot_range_bytes && g_base != 0) {
    free_small(p);
    return true;
  }
  if (big_block* b = big_at(p)) {
    free_big(*b, p);
    return true;
  }
  return false;
}

void boot_free(void* p) noexcept { (void)boot_release(p); }

bool boot_resize(void* p, std::size_t size) noexcept {
  if (size > boot_largest || !usable_now() || big_at(p) != nullptr) return false;
  header* h = header_of(p);
  const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(p);
  if (h->state != live || start + h->size != g_bump) return false;
  const std::size_t n = rounded(size);
  if (n > g_base + boot_range_bytes - start) return false;
  h->size = static_cast<std::uint32_t>(n);
  g_bump = start + n;
  if (g_bump > g_high) g_high = g_bump;
  return true;
}

boot_counts boot_heap_counts() noexcept {
  boot_counts c;
  c.requests = g_requests;
  c.bytes = g_base == 0 ? 0 : g_bump - g_base;
  return c;
}

}  // namespace replayalloc::detail::backend
