// replayalloc/torch.hpp: replayalloc as libtorch's CPU allocator, with op tags.
//
//     replayalloc::torch::install();                 // once, before the model runs
//     for (auto& x : requests) {
//       replayalloc::torch::Iteration it("resnet50/bs1");
//       auto y = module.forward({x}).toTensor();
//     }
//
// install() registers a c10::Allocator over replayalloc with c10::SetCPUAllocator. An
// Iteration that is being recorded adds, on its thread and for its duration, a
// RecordFunction callback that keeps the stack of running ops: each allocation recorded
// is tagged with the innermost one (aten::conv2d, a record_function scope, ...), which
// the trace files and reports show. Replayed iterations run without it, so op tags cost
// nothing in the steady state. Builds against libtorch 1.13 (Debian) and 2.x.
#pragma once

#include <cstdint>
#include <string>

#include "replayalloc/replayalloc.hpp"

namespace replayalloc::torch {

/// Installs the CPU allocator and the op-tag callback. Idempotent; thread-safe.
void install();
/// Restores the CPU allocator that was in place at install() and removes the callback.
/// Tensors made meanwhile keep their deleter and may be freed at any time.
void uninstall();
bool installed();

/// The op tag of allocations made outside any op (a thread's own code).
inline constexpr const char* outside_ops = "(outside ops)";

/// One inference on this thread: an iteration of `key`; when it is recorded, its
/// allocations are tagged with their ops (outside any op: `outside_ops`).
class Iteration {
 public:
  explicit Iteration(const char* key) noexcept;
  explicit Iteration(const std::string& key) noexcept : Iteration(key.c_str()) {}
  ~Iteration();
  Iteration(const Iteration&) = delete;
  Iteration& operator=(const Iteration&) = delete;
  bool ok() const noexcept { return it_.ok(); }
  bool nested() const noexcept { return it_.nested(); }

 private:
  replayalloc::Iteration it_;
  std::uint64_t callback_ = 0;  // the thread-local op-tag callback, while recording
};

}  // namespace replayalloc::torch

extern "C" {
/// For ctypes: install/uninstall (0 on success, -1 with a message on stderr), the
/// libtorch version this library was built against ("1.13.0"), and iterations with op
/// tags while recording (as replayalloc_iteration_begin/end).
int replayalloc_torch_install(void);
int replayalloc_torch_uninstall(void);
const char* replayalloc_torch_version(void);
int replayalloc_torch_iteration_begin(const char* key);
int replayalloc_torch_iteration_end(void);
}
