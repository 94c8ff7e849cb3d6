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
#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/debugging/symbolize.h"
#include "runtime/engine.h"
#include "support/options.h"

namespace replayalloc::detail {
namespace {

constexpr int max_depth = 16;       // REPLAYALLOC_STACK_DEPTH's upper bound
constexpr int max_walk = 64;        // frames walked in all (ours included)

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

struct walk {
  std::uintptr_t lo, hi;
  int depth;         // frames wanted outside this library
  int n = 0;         // frames kept
  int seen = 0;      // frames walked
  std::uintptr_t pcs[max_depth];
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<walk*>(arg);
  if (++w->seen > max_walk) return _URC_END_OF_STACK;
  const std::uintptr_t pc = _Unwind_GetIP(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  if (pc >= w->lo && pc < w->hi) return _URC_NO_REASON;  // the hook, the API, the engine
  w->pcs[w->n++] = pc;
  return w->n == w->depth ? _URC_END_OF_STACK : _URC_NO_REASON;
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

// pre: recording, under the reentry guard (engine::record_alloc).
std::uint32_t stack_op() {
  const std::uint32_t depth = process_options().stack_depth;
  if (depth == 0) return 0;
  if (g_hi.load(std::memory_order_acquire) == 0) find_own_range();
  walk w{g_lo.load(std::memory_order_relaxed), g_hi.load(std::memory_order_relaxed),
         static_cast<int>(depth < max_depth ? depth : max_depth), 0, 0, {}};
  _Unwind_Backtrace(on_frame, &w);
  if (w.n == 0) return 0;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < w.n; ++i) h = (h ^ w.pcs[i]) * 0x100000001b3ull;

  std::lock_guard<std::mutex> lock(g_mu);
  if (g_ops == nullptr) g_ops = new absl::flat_hash_map<std::uint64_t, std::uint32_t>;  // never freed
  if (auto it = g_ops->find(h); it != g_ops->end()) return it->second;
  auto* f = new frames{w.n, {}};  // never freed: the op may be named at exit
  std::memcpy(f->pcs, w.pcs, sizeof(std::uintptr_t) * static_cast<std::size_t>(w.n));
  const std::uint32_t op = engine::get().op_id_deferred(reinterpret_cast<std::uintptr_t>(f));
  g_ops->emplace(h, op);
  return op;
}

// Installs the tagger and its namer; stores two pointers, allocates nothing, makes no engine.
[[gnu::constructor]] void install_stack_ops() {
  g_deferred_op_namer.store(&name_frames, std::memory_order_release);
  g_untagged_op_source.store(&stack_op, std::memory_order_release);
}

}  // namespace
}  // namespace replayalloc::detail
