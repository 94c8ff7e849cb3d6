// replayalloc/support/config.h: compile-time switches and the few constants every
// layer agrees on.
//
// Layer: support (the bottom). Every REPLAYALLOC_* compile flag is a CMake option()
// mapped here; nothing else reads -D flags directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "replayalloc/export.h"  // REPLAYALLOC_EXPORT

// REPLAYALLOC_DEBUG: invariant checks.
//   0: none on the hot path (release builds)
//   1: cheap asserts off the hot path (replay/slow_path.cc: the cursor only moves forward)
// No level checks whole plans: validate() checks every plan at every level, before the
// engine installs it (runtime/plans.cc) and when a plan file is read (planner/plan_file.cc).
#ifndef REPLAYALLOC_DEBUG
#define REPLAYALLOC_DEBUG 0
#endif

// REPLAYALLOC_ASAN: built with AddressSanitizer (GCC's macro, or Clang's feature).
#if defined(__SANITIZE_ADDRESS__)
#define REPLAYALLOC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAYALLOC_ASAN 1
#endif
#endif

#if defined(__GNUC__)
#define REPLAYALLOC_NOINLINE __attribute__((noinline))
#define REPLAYALLOC_ALWAYS_INLINE inline __attribute__((always_inline))
#define REPLAYALLOC_COLD __attribute__((cold, noinline))
// Note [Large zeroed tables last]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A process's start writes a few dozen of the library's small zeroed globals (the
// engine, the boot heap's pointers, the front cache's settings), and each page of .bss it
// writes is a page fault (15-30 us on a virtual machine: bench/RESULTS.md, "Large zeroed
// tables last"). The front cache's tables of 1 KiB and more (the depot's lists, the runs'
// pools and stashes), which a short command never writes, lay between those globals and
// spread them over nine pages. Marked with this they go to .lbss, the x86-64 linker's
// section for large zeroed data, placed after every object's .bss (where the private
// jemalloc's already go: private_jemalloc.cmake), so the small ones lie together. So do
// the closed threads' empty cache (2,336 bytes, only read, and only once the front cache
// serves) and the statistics' baseline (1,440 bytes, written by reset_stats): the .bss a
// start writes 5 -> 4 pages (`/bin/true`: 78 -> 75 page-fault events, 78.7 -> 77.8 minor
// faults in rusage: bench/RESULTS.md, "The closed cache and the baseline last").
// Zero-initialized objects only (the section is NOBITS); the code that reads them is the
// same (the library is one image: its addresses are within reach of a RIP-relative load).
#if defined(__x86_64__) && defined(__ELF__)
#define REPLAYALLOC_LARGE_ZEROED __attribute__((section(".lbss.replayalloc")))
#else
#define REPLAYALLOC_LARGE_ZEROED
#endif
// Note [A forked child's code together]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// fork() copies the page tables of the memory a process wrote, not those of its code: the
// child faults at the first instruction it runs in each 64 KiB window of the library's
// code (the kernel maps a window's cached pages at one fault; ~20 us a fault on a virtual
// machine), and a shell forks for every command and pipeline stage. The fork child
// handler ran code in three windows (runtime/lifecycle.cc's handler and
// engine::postfork_child, engine::get, the front cache's and the fallback's postfork in
// backend/). Marked with this, that code lies in one place: the linker's default script
// gathers every object's .text.sorted.* sections together, sorted by name, ahead of the
// rest of .text (GNU ld 2.36 and later; elsewhere they are .text as any other), and the
// LD_PRELOAD library's hooks/start_code.ld puts them first in its .text, next to the PLT
// the handler calls through (Note [The start's code together]).
#if defined(__ELF__)
#define REPLAYALLOC_FORK_CHILD_CODE __attribute__((section(".text.sorted.replayalloc_fork_child")))
#else
#define REPLAYALLOC_FORK_CHILD_CODE
#endif
// Initial-exec TLS (no __tls_get_addr call on the hot path) unless this build of the
// core is meant to be loaded with dlopen (REPLAYALLOC_DLOPEN), where static TLS may
// be unavailable.
#if defined(REPLAYALLOC_DLOPEN) && REPLAYALLOC_DLOPEN
#define REPLAYALLOC_TLS_IE
#else
#define REPLAYALLOC_TLS_IE __attribute__((tls_model("initial-exec")))
#endif
#else
#define REPLAYALLOC_NOINLINE
#define REPLAYALLOC_ALWAYS_INLINE inline
#define REPLAYALLOC_COLD
#define REPLAYALLOC_TLS_IE
#define REPLAYALLOC_LARGE_ZEROED
#define REPLAYALLOC_FORK_CHILD_CODE
#endif

// The library's version (CMake's project version), written into plan files: a plan
// made by another version is refused.
#ifndef REPLAYALLOC_VERSION_STRING
#define REPLAYALLOC_VERSION_STRING "0.0.0-unknown"
#endif

namespace replayalloc::detail {

// Every slab starts on a chunk boundary; the owner table has one entry per chunk, so
// "which slab owns p" is one subtraction, one compare and one shift (invariant 3).
inline constexpr unsigned chunk_shift = 21;  // 2 MiB
inline constexpr std::size_t chunk_bytes = std::size_t{1} << chunk_shift;

// The largest alignment a slot may ask for: slabs are chunk-aligned, so an offset
// aligned to A gives a pointer aligned to A for any A <= chunk_bytes.
inline constexpr std::size_t max_slot_align = chunk_bytes;

// Sizes above this are refused outright (ENOMEM): no plan or slab can hold them and
// arithmetic on them would overflow (2^47 bytes = 128 TiB).
inline constexpr std::uint64_t max_request_bytes = std::uint64_t{1} << 47;

// Alignment the C malloc contract guarantees on x86-64 and aarch64 glibc.
inline constexpr std::size_t malloc_align = 16;

}  // namespace replayalloc::detail
