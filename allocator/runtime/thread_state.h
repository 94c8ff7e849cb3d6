// replayalloc/runtime/thread_state.h: everything the engine keeps per thread.
//
// Layer: runtime. A thread replays in one or more domains: the host (the malloc
// family of the C API) and, with the CUDA integration, a device. Each domain has its
// own cursor, recorder and plan key ("resnet50" and "resnet50@cuda:0"), opened and
// closed with the thread's iteration.
//
// Both structs are constinit, initial-exec thread_locals: no constructor, no TLS
// wrapper call, safe from the first malloc of a thread. Counters are atomics written
// only by their thread (relaxed; see bump()) so statistics can be summed from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/slab_range.h"
#include "replay/fast_path.h"
#include "runtime/iteration_log.h"
#include "support/reentry.h"
#include "support/config.h"

namespace replayalloc::detail {

class trace_recorder;
struct key_entry;
struct key_policy_state;

enum class phase : std::uint8_t {
  none,    // no iteration, or one that passes through (mode off, no slab, someone else records)
  record,  // recording this iteration
  replay,  // replaying: the cursor is set
};

enum class domain_kind : std::uint8_t { host, device };

struct domain_state {
  replay_cursor cursor;  // hot: first
  phase ph = phase::none;
  domain_kind kind = domain_kind::host;
  bool registered = false;
  bool no_slab = false;  // this iteration wanted a slab and got none
  key_entry* entry = nullptr;
  plan_version* version = nullptr;
  int regime = -1;      // the regime of entry this iteration replays, or was predicted
  bool probing = false; // this iteration records as a probe (Note [Regimes])
  bool growing = false; // this iteration records because regime's plan was outgrown
  bool sizing = false;  // this iteration records: no regime serves its first size
  std::int8_t marked[2] = {-1, -1};  // the marked context this iteration records for
  bool probation = false;  // the key was on probation at the begin (Note [Probation slabs])
  bool aside = false;  // the key was set aside at the begin: this iteration passes through (Note [Setting aside])
  std::uint64_t first_size = 0;      // its first request, when known at its beginning (auto mode)
  // Note [One verdict for auto mode]: what the client expected the iteration to make,
  // set before its end (auto mode; 0: not known), and whether a replay fell short of it
  // or deviated by the key policy's reading, written at the end.
  std::uint64_t expected = 0;
  bool fell_short = false, deviated = false;
  trace_recorder* recorder = nullptr;
  std::uint64_t misses_at_begin = 0;
  const key_policy_state* deviation_entry = nullptr;  // the key deviating_in_a_row counts for
  std::uint32_t deviating_in_a_row = 0;
  // Check mode (runtime/check.h): the plan is hidden from the cursor (hide_plan()) so
  // that every request takes the slow path, while `masked`.
  bool masked = false;
  iteration_log log;  // Note [The iteration log]: this iteration's, at REPLAYALLOC_VERBOSE=3

  std::atomic<std::uint64_t> slab_hits{0};
  std::atomic<std::uint64_t> hit_bytes{0};
  std::atomic<std::uint64_t> passthrough{0};
  std::atomic<std::uint64_t> below_min{0};  // passed through below REPLAYALLOC_MIN_SIZE (not in passthrough)
  std::atomic<std::uint64_t> backend_bytes{0};
  std::atomic<std::uint64_t> no_slab_fallbacks{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> iterations{0};
  std::atomic<std::uint64_t> set_aside{0};  // iterations passed through: key set aside
  std::atomic<std::uint64_t> awaiting_plan{0};  // iterations passed through: plan on the way

  domain_state* next = nullptr;  // engine registry (under the engine's mutex)
  domain_state* prev = nullptr;
};

// thread_state::free_gate's bits (Note [The plain-free gate]).
inline constexpr std::uint32_t gate_unready = 1, gate_recording = 2, gate_engine = 4, gate_watched = 8;

struct thread_state {
  domain_state host;  // first, so the host cursor sits at the TLS block's start
  bool registered = false;
  bool exited = false;
  std::uint32_t depth = 0;  // open iterations (nested ones join the outermost)
  std::uint32_t op = 0;
  std::uint32_t thread_no = 0;
  // Note [The plain-free gate]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~
  // 0 when a free of a backend block (outside the slab range) needs nothing but the
  // backend's own free, so that the inline entry point asks one range instead of five
  // conditions (runtime/entry.h). Each bit is a reason to look closer, kept in step by
  // the code that changes the reason:
  //   gate_unready   the thread is not registered, check mode is on, or the backend
  //                  has no plain free (engine::register_thread, on_thread_exit);
  //   gate_recording the host domain records (set_phase()): then
  //                  free_backend_filtered asks the recording's filter;
  //   gate_engine    the thread is inside the engine (reentry_guard);
  //   gate_watched   auto mode watches the thread (refresh_watched_gate()): then
  //                  free_backend_filtered asks the watcher's filter.
  // The inline free asks the gate as a range of addresses, `look_from` and
  // `look_span`: a pointer p with p - look_from >= look_span (unsigned) goes straight
  // to the backend's free, or, in the `look_front` bytes below look_from, to the front
  // cache's list. While the gate is 0 the range is the slab's part of the gate's range
  // (Note [The gate's range], backend/slab_range.h), the front cache's part below it;
  // null, below both, goes to the backend's free too, which ignores it. While any bit
  // is set it is every address, and look_front 0. One subtraction and one compare
  // answer "not a slab block, not null (or null: harmless)"; one add and its carry
  // then "the front cache's block, and nothing needs to see it".
  // Only the thread reads or writes them, always through set_free_gate(). A bit left
  // set where it need not be costs a slower free, never a wrong one: every reason's
  // path frees the block the same way. gate_recording and gate_watched may be set
  // only while their recorder and watcher exist (free_backend_filtered reads them
  // when no other bit is set).
  std::uint32_t free_gate = gate_unready;
  std::uintptr_t look_from = 0;
  std::uintptr_t look_span = UINTPTR_MAX;
  std::uintptr_t look_front = 0;  // the front cache's part of the range (Note [The gate's range])
  key_entry* entry = nullptr;  // the open iteration's host key
  // Auto mode's state on the thread (runtime/auto_mode.h: its watcher, whether the
  // open iteration is one it began; Note [Auto mode as a client]); null: none.
  struct auto_state* autod = nullptr;
  bool marks_own = false;  // the program marked an iteration on this thread (C API): no auto
  // Note [Frees the watcher asks for] (backend/front_idle.cc): the front cache calls the
  // watcher at the frees it may need, so the gate leaves the cache's part to its lists.
  bool front_watched = false;
  // Note [Passes granted ahead] (runtime/shortcuts.h): requests at or above the minimum
  // the inline entry point may pass to the backend's plain malloc without asking
  // anything else (0: none); `pass_home`, where a rest's passes came from (the watcher's
  // count, given back when they are revoked), else null.
  std::uint64_t pass_left = 0;
  std::uint64_t* pass_home = nullptr;
};

extern constinit thread_local thread_state tls_state REPLAYALLOC_TLS_IE;

// Note [Below the minimum, inline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Requests below REPLAYALLOC_MIN_SIZE (and aligned as malloc aligns) go straight to the
// backend's own malloc from the inline entry point (runtime/entry.h), tested as one
// unsigned compare with a process-wide figure, size < g_small_limit: below_min_size()
// of the host domain (Note [Below the minimum size] in replay/fast_path.h), answered
// ahead for that path. REPLAYALLOC_MIN_SIZE once the engine is made, when the backend
// has a plain malloc and free (backend::g_plain_malloc/free) and check mode is off;
// else 0, and the slow path asks below_min_size() itself. Requests under malloc_align
// bytes (0 included) take it too: the plain malloc serves them as glibc aligns, as a
// block of the front cache's 16-byte class (Note [Small blocks in the front cache]) or,
// where jemalloc's malloc is the plain one, through backend::plain_malloc_aligned,
// which rounds them up (jemalloc's 8-byte class is aligned to 8); while they were left
// to the slow path's first lines, an 8-byte pair cost 77.1 instructions against 57.1
// for 64 bytes, and 1.6x the best general-purpose allocator's time (bench/RESULTS.md,
// "Small path"). C++'s sized delete asks the same of the size it is given
// (entry_free_sized). Nothing in it is per thread (the minimum, the backend and check
// mode are the process's), so the test needs no TLS block, and none of these requests
// is counted: each would cost the path one instruction more (runtime/entry.h). Written
// once, with release order, by the engine's constructor after the backend's entry
// points (set_small_limit()); read by small_request().
inline constinit std::uint64_t g_small_limit = 0;

inline void set_small_limit(std::uint64_t limit) { __atomic_store_n(&g_small_limit, limit, __ATOMIC_RELEASE); }

// True when size < g_small_limit (Note [Below the minimum, inline]): a request the
// backend's plain malloc serves, which it can once this says so (the release above
// orders g_plain_malloc's store before). One compare with the figure in memory: an
// atomic load is never folded into the compare by the compiler, which would cost one
// instruction more on 95% of a Python service's calls, so the load is the compare's
// operand in asm. On x86-64 an aligned 8-byte load is atomic and loads are not
// reordered with other loads; the asm is volatile, with a memory clobber, so the
// compiler moves no load of the backend's entry points above it (it is the entry
// point's first statement: nothing cached is lost). ThreadSanitizer builds use the
// atomic load, which it understands.
REPLAYALLOC_ALWAYS_INLINE bool small_request(std::size_t size) {
#if defined(__x86_64__) && !defined(REPLAYALLOC_UNDER_TSAN)
  bool below;
  asm volatile("cmpq %2, %1" : "=@ccb"(below) : "r"(size), "m"(g_small_limit) : "memory");
  return below;
#else
  return size < __atomic_load_n(&g_small_limit, __ATOMIC_ACQUIRE);
#endif
}

// Sets the plain-free gate (Note [The plain-free gate]) and the range the inline free
// asks for it. The slab range is reserved when the engine is made, before any thread
// registers (gate_unready is cleared only then), and never moves afterwards.
void watch_front(thread_state& t, bool on) noexcept;  // runtime/host_slow_path.cc
inline void set_free_gate(thread_state& t, std::uint32_t gate) {
  if (((t.free_gate ^ gate) & gate_watched) != 0) [[unlikely]] watch_front(t, (gate & gate_watched) != 0);
  t.free_gate = gate;
  if (gate == 0) {
    // The slab's part of the gate's range, above the front cache's.
    t.look_from = backend::g_gate_range.from + backend::g_gate_range.front;
    t.look_span = backend::g_gate_range.span - backend::g_gate_range.front;
    t.look_front = backend::g_gate_range.front;
  } else if (gate == gate_watched && t.front_watched) {
    // Note [Frees the watcher asks for]: every address but the front cache's part
    // (below look_from, look_front bytes: the inline free's wrap sends it to the lists).
    t.look_from = backend::g_gate_range.from + backend::g_gate_range.front;
    t.look_span = std::uintptr_t{0} - backend::g_gate_range.front;
    t.look_front = backend::g_gate_range.front;
  } else {
    t.look_from = 0;
    t.look_span = UINTPTR_MAX;
    t.look_front = 0;
  }
}

// Takes back the passes granted ahead (Note [Passes granted ahead], runtime/shortcuts.h),
// giving a rest's back to the watcher's count, so that the next request at or above the
// minimum asks the slow path again. Every change of what the grant assumed happens
// inside the engine, whose reentry guard (below) calls this, or in set_phase().
inline void revoke_passes(thread_state& t) {
  if (t.pass_home != nullptr) *t.pass_home += t.pass_left;
  t.pass_left = 0;
  t.pass_home = nullptr;
}

// Invariant 5's guard (support/reentry.h counts the depth). While the thread is inside
// the engine, its host cursor is closed, so that an allocation made from there (by the
// engine's libraries) never takes a slot: the inline hit asks nothing else; and the
// passes granted ahead are taken back, so that none is passed inline either. Every
// region the engine's code runs in takes this guard, never the depth alone.
class reentry_guard {
 public:
  reentry_guard() noexcept {
    if (reentry_depth++ == 0) {
      if (tls_state.pass_left != 0 || tls_state.pass_home != nullptr) revoke_passes(tls_state);
      replay_cursor& c = tls_state.host.cursor;
      close_cursor(c);
      c.guarded = true;
      set_free_gate(tls_state, tls_state.free_gate | gate_engine);
    }
  }
  ~reentry_guard() {
    if (--reentry_depth == 0) {
      replay_cursor& c = tls_state.host.cursor;
      c.guarded = false;
      open_cursor(c);
      set_free_gate(tls_state, tls_state.free_gate & ~gate_engine);
    }
  }
  reentry_guard(const reentry_guard&) = delete;
  reentry_guard& operator=(const reentry_guard&) = delete;
};

// Sets a domain's phase; the host's also keeps the plain-free gate in step. pre: d is
// the calling thread's.
inline void set_phase(domain_state& d, phase p) {
  d.ph = p;
  thread_state& t = tls_state;
  if (&d == &t.host) {
    revoke_passes(t);
    set_free_gate(t, p == phase::record ? t.free_gate | gate_recording : t.free_gate & ~gate_recording);
  }
}

// Keeps gate_watched in step with auto mode: set while the thread has a watcher and
// marks no iteration of its own.
inline void refresh_watched_gate(thread_state& t) {
  set_free_gate(t, t.autod != nullptr && !t.marks_own ? t.free_gate | gate_watched : t.free_gate & ~gate_watched);
}

}  // namespace replayalloc::detail
