// Call-stack op tags for preloaded programs: while a thread records, an allocation the
// program did not tag (replayalloc_set_op) is named by the few frames above the hook,
// e.g. "at::native::empty_cpu <- at::empty <- at::zeros <- ...". Note [Stack op tags].
//
// Layer: hooks, installed into the engine's record path (g_untagged_op_source in
// runtime/engine.h) when the library loads; nothing else runs at load time.
//
// Note [Stack op tags]
// ~~~~~~~~~~~~~~~~~~~~
// The engine calls stack_op() only from record_alloc, so only while an iteration
// records, and under the reentry guard (invariant 5: whatever the unwinder, the
// symbolizer or the table allocate goes to the backend, never back into the engine).
// The replayed hot path never comes here: its cost is unchanged
// (bench/micro/hotpath_callgrind). A stack is taken with the DWARF unwinder
// (_Unwind_Backtrace, which reads unwind tables rather than trusting frame pointers,
// so frames of libraries built without them do not derail it); frames inside this
// library (hooks, C API, engine) are skipped, the next REPLAYALLOC_STACK_DEPTH return
// addresses hashed. A stack seen for the first time keeps its addresses and becomes a
// deferred op (Note [Deferred op names] in runtime/engine.h): it is symbolized
// (Abseil's symbolizer: the ELF symbol tables, demangled; no malloc) only when a name
// is read, a trace or plan written, never on the recorded iteration's path. Later
// ones cost the walk and one hash lookup. Names are per-process strings: traces and
// plans compare the names, never the addresses, so they match across runs despite
// ASLR.
//
// Note [Cached unwind steps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The DWARF walk costs about 1 us per recorded allocation (it interprets each frame's
// call-frame information), which made a recorded iteration with call-stack tags 6-11x
// the same iteration under jemalloc (bench/RESULTS.md, "Planning latency"). But a
// recording passes the same call sites over and over, and at a given return address
// the frame's CFA (the caller's stack pointer) is, in compiled code, the stack pointer
// plus a constant: the frame's size there. So each thread keeps a table of those
// constants by return address, learnt from the DWARF walks it makes (the difference of
// two frames' stack pointers, as libgcc computed them), and walks the stack with it: CFA = SP + k(pc), the return
// address at CFA - 8, SP = CFA, until `depth` frames outside this library. A return
// address not in the table (a call site seen for the first time) makes that walk a
// DWARF one, which fills the table; one whose constant was seen to differ between two
// walks (a frame that grows its stack at run time: alloca, variable-length arrays) is
// marked and walks with DWARF from then on. Every load of the walk is checked against
// the thread's stack, and an address that leaves it ends the walk with DWARF. The
// frames, hence the names, are the DWARF walk's (tests/preload_cuda/stack_program.cc
// compares both). x86-64 only (the return address just below the CFA); elsewhere, and
// with REPLAYALLOC_STACK_CACHE=0, every walk is DWARF. Two shortcuts on top, both per
// thread: the library's own frames between the tagger and the hook are the same chain
// walk after walk (one per entry point: malloc, calloc, new ..), so the last chain's
// return addresses and sizes are kept and stepped through comparing return addresses
// (no table lookup) as far as they match; and a stack's op is kept by its hash in a
// small table of the thread's, so that the process's table and its lock are taken only
// for a stack the thread sees first. A recorded allocation's tag: 569 -> 466
// instructions (callgrind, bench/micro/planning_latency 10000 1).
#include <dlfcn.h>
#include <pthread.h>
#include <link.h>
#include <unwind.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "absl/debugging/symbolize.h"
#include "backend/backend.h"
#include "runtime/engine.h"
#include "support/config.h"
#include "support/no_cancel.h"
#include "support/options.h"

namespace replayalloc::detail {
namespace {

constexpr int max_depth = 16;       // REPLAYALLOC_STACK_DEPTH's upper bound
constexpr int max_walk = 64;        // frames walked in all (ours included)

// Note [The unwinder the stacks are walked with]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The LD_PRELOAD library carries libgcc's unwinder (Note [The LD_PRELOAD library's own
// runtime], hooks/CMakeLists.txt), whose table of frames registered at run time
// (__register_frame: code a JIT made) is its own, empty: a walk with it ends at such a
// frame. So where the program has libgcc_s loaded when this library starts (a C++
// program: libstdc++ needs it), the stacks are walked with libgcc_s's own functions,
// which know what the program registered; otherwise (a C program, or libgcc_s loaded
// later by dlopen) with the copy's, which know every frame of the loaded objects. The
// three functions are taken together: a context is read by the unwinder that made it.
using backtrace_fn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);
using context_fn = _Unwind_Ptr (*)(_Unwind_Context*);
using cfa_fn = _Unwind_Word (*)(_Unwind_Context*);
struct unwinder {
  backtrace_fn backtrace = &_Unwind_Backtrace;
  context_fn get_ip = &_Unwind_GetIP;
  cfa_fn get_cfa = &_Unwind_GetCFA;
};
unwinder g_unwinder;  // set once, by install_stack_ops, before any thread records

void use_programs_unwinder() {
#if defined(REPLAYALLOC_PRELOAD_OWN_RUNTIME)
  // Looked for among the loaded objects first: dlopen's search, where it is not loaded
  // (a C program), cost /bin/true 3 page faults.
  const auto is_libgcc_s = [](dl_phdr_info* info, std::size_t, void*) -> int {
    const char* name = info->dlpi_name != nullptr ? std::strrchr(info->dlpi_name, '/') : nullptr;
    return name != nullptr && std::strcmp(name, "/libgcc_s.so.1") == 0;
  };
  if (dl_iterate_phdr(is_libgcc_s, nullptr) == 0) return;
  void* h = dlopen("libgcc_s.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return;
  const auto backtrace = reinterpret_cast<backtrace_fn>(dlsym(h, "_Unwind_Backtrace"));
  const auto get_ip = reinterpret_cast<context_fn>(dlsym(h, "_Unwind_GetIP"));
  const auto get_cfa = reinterpret_cast<cfa_fn>(dlsym(h, "_Unwind_GetCFA"));
  if (backtrace != nullptr && get_ip != nullptr && get_cfa != nullptr) g_unwinder = unwinder{backtrace, get_ip, get_cfa};
  // (the reference dlopen took is kept: libgcc_s is never unloaded under the walks)
#endif
}

// [lo, hi): this library's loaded segments, found once.
std::atomic<std::uintptr_t> g_lo{0}, g_hi{0};

void find_own_range() {
  struct range {
    std::uintptr_t self, lo, hi;
  } r{reinterpret_cast<std::uintptr_t>(&find_own_range), 0, 0};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) {
        auto* r = static_cast<range*>(arg);
        std::uintptr_t lo = UINTPTR_MAX, hi = 0;
        bool mine = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const std::uintptr_t a = info->dlpi_addr + ph.p_vaddr;
          lo = a < lo ? a : lo;
          hi = a + ph.p_memsz > hi ? a + ph.p_memsz : hi;
          mine |= r->self >= a && r->self < a + ph.p_memsz;
        }
        if (!mine) return 0;
        r->lo = lo;
        r->hi = hi;
        return 1;
      },
      &r);
  g_lo.store(r.lo, std::memory_order_relaxed);
  g_hi.store(r.hi, std::memory_order_release);
}

// Note [Cached unwind steps]: a thread's table of frame sizes by return address,
// direct-mapped, made on its first walk (from the backend: we run inside the reentry
// guard) and never freed (a thread's exit leaves it: a few KiB per thread that
// recorded). k = 0 is an empty slot; k < 0 marks a return address walked with DWARF.
struct step_cache {
  static constexpr std::size_t slots = 2048;
  static constexpr int chain_most = 24;
  std::uintptr_t pc[slots];
  std::int32_t k[slots];
  std::uintptr_t stack_lo, stack_hi;  // the thread's stack, [lo, hi)
  // The library's own frames from unwind_stack's caller up to the program's first, as
  // the last walk found them: their return addresses and sizes (Note [Cached unwind
  // steps]: the same chain walk after walk, one per entry point).
  int chain_n;
  std::uintptr_t chain_pc[chain_most];
  std::int32_t chain_k[chain_most];
  // The ops of the stacks this thread saw, by their hash (direct-mapped; hash 0 is an
  // empty slot): the process's table and its lock only for a stack seen first here.
  static constexpr std::size_t op_slots = 256;
  std::uint64_t op_hash[op_slots];
  std::uint32_t op[op_slots];
  static std::size_t slot(std::uintptr_t pc) { return (pc ^ (pc >> 11)) % slots; }
  // The frame size at pc: > 0 when known, 0 when not, < 0 when it varies.
  std::int32_t at(std::uintptr_t p) const {
    const std::size_t i = slot(p);
    return pc[i] == p ? k[i] : 0;
  }
  void learn(std::uintptr_t p, std::intptr_t size) {
    const std::size_t i = slot(p);
    if (size <= 0 || size > (1 << 24)) size = -1;  // not a frame size: DWARF there
    if (pc[i] == p && k[i] != 0 && k[i] != size) size = -1;  // it varies: DWARF there
    if (size < 0) chain_n = 0;  // the chain may hold it: walked again from the table
    pc[i] = p;
    k[i] = static_cast<std::int32_t>(size);
  }
};
constinit thread_local step_cache* t_steps REPLAYALLOC_TLS_IE = nullptr;

step_cache* thread_steps() {
  if (t_steps != nullptr) return t_steps;
  void* mem = backend::fallback_alloc(sizeof(step_cache), alignof(step_cache));
  if (mem == nullptr) return nullptr;
  auto* c = new (mem) step_cache{};
  pthread_attr_t attr;
  void* base = nullptr;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
  }
  c->stack_lo = reinterpret_cast<std::uintptr_t>(base);
  c->stack_hi = c->stack_lo + size;
  t_steps = c;
  return c;
}

struct walk {
  std::uintptr_t lo, hi;
  int depth;         // frames wanted outside this library
  int n = 0;         // frames kept
  int seen = 0;      // frames walked
  std::uintptr_t pcs[max_depth];  // the first n written
  step_cache* steps = nullptr;     // where the DWARF walk teaches frame sizes
  std::uintptr_t prev_sp = 0;      // the frame before's stack pointer and return
  std::uintptr_t prev_pc = 0;      // address (the DWARF walk)
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<walk*>(arg);
  if (++w->seen > max_walk) return _URC_END_OF_STACK;
  const std::uintptr_t pc = g_unwinder.get_ip(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  // Note [Cached unwind steps]: libgcc's CFA of a frame's context is the stack pointer
  // of that frame (the CFA of the one it called), so the frame before this one, stepped
  // past, was this CFA minus the one before in size, at its return address.
  const std::uintptr_t sp = g_unwinder.get_cfa(ctx);
  if (w->steps != nullptr && w->seen > 1) w->steps->learn(w->prev_pc, static_cast<std::intptr_t>(sp - w->prev_sp));
  w->prev_sp = sp;
  w->prev_pc = pc;
  if (w->seen == 1) return _URC_NO_REASON;  // unwind_stack itself
  if (pc >= w->lo && pc < w->hi) return _URC_NO_REASON;  // the hook, the API, the engine
  w->pcs[w->n++] = pc;
  return w->n == w->depth ? _URC_END_OF_STACK : _URC_NO_REASON;
}

// Note [Cached unwind steps]: the walk from unwind_stack's caller with the thread's
// table; false (w unchanged) when a frame's size is not known there or a load would
// leave the thread's stack. `sp` is unwind_stack's CFA, `pc` its return address. The
// library's own frames first go by the chain the last walk found, comparing return
// addresses (no table lookup) as far as they match; a walk whose own frames differ
// from it leaves its own in the chain.
bool cached_walk(walk* w, step_cache& c, std::uintptr_t sp, std::uintptr_t pc) {
#if defined(__x86_64__)
  int seen = 0;
  while (seen < c.chain_n && pc == c.chain_pc[seen]) {
    const std::uintptr_t cfa = sp + static_cast<std::uintptr_t>(c.chain_k[seen]);
    if (cfa - 8 < c.stack_lo || cfa > c.stack_hi) return false;
    pc = *reinterpret_cast<const std::uintptr_t*>(cfa - 8);
    sp = cfa;
    ++seen;
  }
  const int matched = seen;
  std::uintptr_t chain_pc[step_cache::chain_most];
  std::int32_t chain_k[step_cache::chain_most];
  int own = seen;  // own frames before the program's first (while n == 0)
  std::uintptr_t pcs[max_depth];
  int n = 0;
  for (;; ++seen) {
    if (seen == max_walk || pc == 0) return false;
    const bool mine = pc >= w->lo && pc < w->hi;
    if (!mine) {
      pcs[n++] = pc;
      if (n == w->depth) break;
    }
    // Step past this frame: only frames stepped past need their size.
    const std::int32_t k = c.at(pc);
    if (k <= 0) return false;
    if (mine && n == 0 && own < step_cache::chain_most) {
      chain_pc[own] = pc;
      chain_k[own] = k;
      ++own;
    }
    const std::uintptr_t cfa = sp + static_cast<std::uintptr_t>(k);
    if (cfa - 8 < c.stack_lo || cfa > c.stack_hi) return false;
    pc = *reinterpret_cast<const std::uintptr_t*>(cfa - 8);
    sp = cfa;
  }
  if (own != matched || matched != c.chain_n) {  // another chain: this walk's own frames
    for (int i = matched; i < own; ++i) {
      c.chain_pc[i] = chain_pc[i];
      c.chain_k[i] = chain_k[i];
    }
    c.chain_n = own;
  }
  std::memcpy(w->pcs, pcs, sizeof(std::uintptr_t) * static_cast<std::size_t>(n));
  w->n = n;
  return true;
#else
  (void)w, (void)c, (void)sp, (void)pc;
  return false;
#endif
}

// The stack above this library, into w: with the thread's table of frame sizes where
// it knows every frame on the way, else with the DWARF walk, which teaches the table.
// Its own frame keeps a frame pointer, so that its CFA (its caller's stack pointer) is
// known without unwinding.
#if defined(__clang__)
[[gnu::noinline]]
#else
[[gnu::noinline, gnu::optimize("no-omit-frame-pointer")]]
#endif
void unwind_stack(walk* w) {
  step_cache* c = process_options().stack_cache ? thread_steps() : nullptr;
  if (c != nullptr) {
    const auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)) + 16;
    const auto pc = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
    if (cached_walk(w, *c, sp, pc)) return;
  }
  w->steps = c;
  g_unwinder.backtrace(on_frame, w);
  asm volatile("" ::: "memory");  // keep the call above from becoming a tail call
}

// One frame's name into `out`: the demangled function without its "()", else
// "library+0xoffset", else the address. Return addresses point past the call: the
// symbol is looked up at pc - 1.
void frame_name(std::uintptr_t pc, char* out, int cap) {
  const void* at = reinterpret_cast<const void*>(pc - 1);
  if (absl::Symbolize(at, out, cap)) {
    const std::size_t n = std::strlen(out);
    if (n >= 2 && out[n - 2] == '(' && out[n - 1] == ')') out[n - 2] = '\0';
    return;
  }
  Dl_info info;
  if (dladdr(at, &info) != 0 && info.dli_fname != nullptr) {
    const char* base = std::strrchr(info.dli_fname, '/');
    std::snprintf(out, cap, "%s+0x%" PRIxPTR, base != nullptr ? base + 1 : info.dli_fname,
                  pc - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
    return;
  }
  std::snprintf(out, cap, "0x%" PRIxPTR, pc);
}

// One stack's frames, kept for its name. Immutable once made and never freed: the
// engine's namer reads it without a lock.
struct frames {
  int n;
  std::uintptr_t pcs[max_depth];
};

// Note [Deferred op names]: the token is the stack's frames.
void name_frames(std::uint64_t token, char* out, std::size_t cap) {
  const no_cancel no_cancel;  // the symbolizer reads files (Note [No cancellation point inside])
  const auto* f = reinterpret_cast<const frames*>(static_cast<std::uintptr_t>(token));
  std::size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < f->n && len + 8 < cap; ++i) {
    if (i > 0) {
      std::memcpy(out + len, " <- ", 4);
      len += 4;
    }
    frame_name(f->pcs[i], out + len, static_cast<int>(cap - len));
    len += std::strlen(out + len);
  }
  out[len] = '\0';
}

std::mutex g_mu;
absl::flat_hash_map<std::uint64_t, std::uint32_t>* g_ops = nullptr;  // stack hash -> op id

// The op of a stack (h its hash), from the process's table under its lock, made there
// when it is new.
std::uint32_t op_of(const walk& w, std::uint64_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_ops == nullptr) g_ops = new absl::flat_hash_map<std::uint64_t, std::uint32_t>;  // never freed
  if (auto it = g_ops->find(h); it != g_ops->end()) return it->second;
  auto* f = new frames{w.n, {}};  // never freed: the op may be named at exit
  std::memcpy(f->pcs, w.pcs, sizeof(std::uintptr_t) * static_cast<std::size_t>(w.n));
  const std::uint32_t op = engine::get().op_id_deferred(reinterpret_cast<std::uintptr_t>(f));
  g_ops->emplace(h, op);
  return op;
}

// pre: recording, under the reentry guard (engine::record_alloc).
std::uint32_t stack_op() {
  const std::uint32_t depth = process_options().stack_depth;
  if (depth == 0) return 0;
  if (g_hi.load(std::memory_order_acquire) == 0) find_own_range();
  walk w;  // its pcs past n never read: not zeroed
  w.lo = g_lo.load(std::memory_order_relaxed);
  w.hi = g_hi.load(std::memory_order_relaxed);
  w.depth = static_cast<int>(depth < max_depth ? depth : max_depth);
  unwind_stack(&w);
  if (w.n == 0) return 0;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < w.n; ++i) h = (h ^ w.pcs[i]) * 0x100000001b3ull;
  h |= h == 0;  // 0 marks an empty slot of the thread's table
  step_cache* c = t_steps;
  if (c == nullptr) return op_of(w, h);
  const std::size_t i = (h ^ (h >> 29)) % step_cache::op_slots;
  if (c->op_hash[i] != h) {
    c->op[i] = op_of(w, h);
    c->op_hash[i] = h;
  }
  return c->op[i];
}

// Installs the tagger and its namer (two pointers, no engine made) and picks the
// unwinder (Note [The unwinder the stacks are walked with]).
[[gnu::constructor]] void install_stack_ops() {
  use_programs_unwinder();
  g_deferred_op_namer.store(&name_frames, std::memory_order_release);
  g_untagged_op_source.store(&stack_op, std::memory_order_release);
}

}  // namespace
}  // namespace replayalloc::detail
