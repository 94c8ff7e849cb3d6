// libtorch's CPU allocator over replayalloc, and op tags from RecordFunction.
//
// Layer: integration over the C API (replayalloc.h).
//
// Note [Op tags]
// ~~~~~~~~~~~~~~
// A global RecordFunction callback pushes the op's name on a thread-local stack at its
// start and pops it at its end; the innermost name is the thread's replayalloc op
// (replayalloc_set_op), so every allocation recorded carries the op that asked for it.
// Names are interned once: aten ops by the address of their (static) name, user scopes
// (record_function) by their text, since those strings may be temporaries. Ops that
// only make storage for their caller are transparent (is_transparent). The callback
// runs only on a thread whose iteration is being recorded (a thread-local callback
// added by Iteration and removed at its end), so replayed iterations do not pay for
// it; bench/RESULTS.md has its measured cost per op.
#include "replayalloc/torch.hpp"

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "replayalloc/export.h"

#define REPLAYALLOC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace replayalloc::torch {
namespace {

// c10's own CPU alignment (c10/core/alignment.h: gAlignment), which vectorised
// kernels rely on.
constexpr std::size_t cpu_alignment = 64;

void release(void* p) { replayalloc_free(p); }

class cpu_allocator final : public c10::Allocator {
 public:
#if REPLAYALLOC_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    void* p = n == 0 ? nullptr : replayalloc_aligned_alloc(cpu_alignment, n);
    TORCH_CHECK(n == 0 || p != nullptr, "replayalloc: out of memory allocating ", n, " bytes");
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#if REPLAYALLOC_TORCH_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif
};

cpu_allocator g_allocator;
std::mutex g_mu;
c10::Allocator* g_previous = nullptr;
bool g_installed = false;
// c10 keeps the allocator of the highest priority registered so far: each install and
// uninstall registers with a higher one than the last.
std::uint8_t g_priority = 0;
unsigned g_outside = 0;

// See Note [Op tags].
constexpr int max_depth = 64;
struct op_stack {
  unsigned ids[max_depth];
  int depth = 0;
  absl::flat_hash_map<const char*, unsigned> by_address;  // aten ops: static names
};
thread_local op_stack t_ops;

// Ops that only make storage for their caller (aten::empty inside batch_norm, a
// resize_ of an out= argument) are transparent: an allocation inside one is tagged
// with the op that called it, which is what a user looks for. At top level they name
// themselves.
constexpr unsigned transparent_bit = 1u << 31;

bool is_transparent(const char* name) {
  static constexpr const char* names[] = {"aten::empty", "aten::empty_strided", "aten::empty_like",
                                          "aten::new_empty", "aten::new_empty_strided",
                                          "aten::resize_"};
  for (const char* n : names) {
    if (std::strcmp(n, name) == 0) return true;
  }
  return false;
}

unsigned intern(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (name == nullptr || name[0] == '\0') return 0;
  if (fn.scope() == at::RecordScope::USER_SCOPE) return replayalloc_op_id(name);
  auto [it, fresh] = t_ops.by_address.try_emplace(name, 0u);
  if (fresh) it->second = replayalloc_op_id(name) | (is_transparent(name) ? transparent_bit : 0u);
  return it->second;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  op_stack& s = t_ops;
  const unsigned current = replayalloc_current_op();
  if (s.depth < max_depth) s.ids[s.depth] = current;
  const bool nested = s.depth > 0;
  ++s.depth;
  const unsigned id = intern(fn);
  if (!(id & transparent_bit) || !nested) replayalloc_set_op(id & ~transparent_bit);
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  op_stack& s = t_ops;
  if (s.depth == 0) return;  // installed while this op ran
  --s.depth;
  replayalloc_set_op(s.depth < max_depth ? s.ids[s.depth] : g_outside);
}

}  // namespace

// torch.hpp's functions leave the shared library as its C functions do: torch.hpp is
// installed with it.
REPLAYALLOC_EXPORT void install() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_installed) return;
  TORCH_CHECK(g_priority < 250, "replayalloc: installed and uninstalled too many times");
  g_outside = replayalloc_op_id(outside_ops);
  g_previous = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&g_allocator, ++g_priority);
  g_installed = true;
}

REPLAYALLOC_EXPORT void uninstall() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_installed) return;
  c10::SetCPUAllocator(g_previous, ++g_priority);
  g_installed = false;
}

REPLAYALLOC_EXPORT bool installed() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_installed;
}

namespace {

// Adds this thread's op-tag callback when its (outermost) iteration records.
std::uint64_t start_tags(int begin_rc) {
  if (begin_rc != 0 || !replayalloc_iteration_recording()) return 0;
  t_ops.depth = 0;
  replayalloc_set_op(replayalloc_op_id(outside_ops));
  try {
    return at::addThreadLocalCallback(
        at::RecordFunctionCallback(on_enter, on_exit)
            .needsInputs(false)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  } catch (const std::exception&) {
    return 0;  // no tags: the recording still works
  }
}

void stop_tags(std::uint64_t handle) {
  if (handle == 0) return;
  at::removeCallback(handle);
  t_ops.depth = 0;
  replayalloc_set_op(0);
}

thread_local std::uint64_t t_python_callback = 0;  // for the C entry points below

}  // namespace

REPLAYALLOC_EXPORT Iteration::Iteration(const char* key) noexcept : it_(key) {
  callback_ = start_tags(it_.ok() && !it_.nested() ? 0 : -1);
}

REPLAYALLOC_EXPORT Iteration::~Iteration() {
  stop_tags(callback_);
  callback_ = 0;
}

}  // namespace replayalloc::torch

extern "C" {

REPLAYALLOC_EXPORT int replayalloc_torch_install(void) {
  try {
    replayalloc::torch::install();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayalloc: cannot install the libtorch CPU allocator: %s\n", e.what());
    return -1;
  }
}

REPLAYALLOC_EXPORT int replayalloc_torch_uninstall(void) {
  try {
    replayalloc::torch::uninstall();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayalloc: cannot uninstall the libtorch CPU allocator: %s\n", e.what());
    return -1;
  }
}

REPLAYALLOC_EXPORT const char* replayalloc_torch_version(void) {
  return TORCH_VERSION;
}

REPLAYALLOC_EXPORT int replayalloc_torch_iteration_begin(const char* key) {
  const int rc = replayalloc_iteration_begin(key);
  if (rc == 0) replayalloc::torch::t_python_callback = replayalloc::torch::start_tags(0);
  return rc;
}

REPLAYALLOC_EXPORT int replayalloc_torch_iteration_end(void) {
  const int rc = replayalloc_iteration_end();
  if (rc == 0) {
    replayalloc::torch::stop_tags(replayalloc::torch::t_python_callback);
    replayalloc::torch::t_python_callback = 0;
  }
  return rc;
}

}  // extern "C"
