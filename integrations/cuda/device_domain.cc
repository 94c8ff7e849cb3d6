// The device domain: replayalloc's record -> plan -> replay for CUDA device memory,
// one domain per thread (device_domain.h).
//
// Layer: integration (cuda), over runtime/domain.h (the engine's state machine and
// the replay hot path are the host's). Owns the per-thread device domain: its
// domain_state, the (device, stream) its open iteration serves, the thread's last
// device error, and where each request goes (the slab, or the runtime's backend).
// The rest of the integration, by what it owns:
//   device_slabs.cc   device slabs (cudaMalloc) and their owner table; stream order,
//                     Note [Device streams]
//   large_model.cc    the CUDA options, large-model support and its managed blocks
//   cuda_api.cc       the public faces: replayalloc/cuda.hpp and replayalloc/cuda.h
// Never: a lock, a log line or a runtime call on a replay hit (replay_malloc and
// replay_free inline the host's fast path).
#include "device_domain.h"

#include <mutex>
#include <string>

#include "device_slabs.h"
#include "large_model.h"
#include "runtime/domain.h"
#include "runtime_table.h"

namespace replayalloc::detail {
namespace {

constexpr std::size_t device_align = 256;  // what cudaMalloc promises

// ---- Per-thread device domain -------------------------------------------------

struct device_thread {
  domain_state d;
  bool open = false;      // the domain's iteration is open for the host's iteration
  int device = -1;
  cudaStream_t stream = nullptr;
};

constinit thread_local device_thread tls_device REPLAYALLOC_TLS_IE;

void end_device_iteration(thread_state&) {
  device_thread& dt = tls_device;
  if (!dt.open) return;
  dt.open = false;
  domain_close(dt.d);
}

void device_thread_exit(thread_state& t) {
  end_device_iteration(t);
  domain_unregister(tls_device.d);
}

// Makes the thread's device domain known to the engine: its counters reach stats(),
// and the thread's exit (through the host thread state's exit hook) unregisters it
// before its TLS goes away.
void ensure_registered(thread_state& t, device_thread& dt) {
  if (dt.d.registered) return;
  static std::once_flag hooks_once;
  std::call_once(hooks_once, [] { domain_add_hooks(end_device_iteration, device_thread_exit); });
  domain_register(t, dt.d, domain_kind::device);
}

// Opens the device domain's iteration at the thread's first device allocation of the
// host iteration: the plan key is the host key with "@cuda:<device>".
void open_device_iteration(thread_state& t, device_thread& dt, int device, cudaStream_t stream) {
  reentry_guard guard;
  ensure_registered(t, dt);
  dt.open = true;
  dt.device = device;
  dt.stream = stream;
  std::string key(domain_host_key(t));
  key += "@cuda:" + std::to_string(device);
  acquire_context ctx{stream};
  domain_open(dt.d, key, &device_slabs(), lms_adjust, nullptr, &ctx);
}

constinit thread_local cudaError_t tls_last_error REPLAYALLOC_TLS_IE = cudaSuccess;
// Set by device_alloc_rest when a slab served its request (device_alloc_tagged reads it).
constinit thread_local bool tls_rest_from_slab REPLAYALLOC_TLS_IE = false;

void* backend_device_alloc(std::size_t size, cudaStream_t stream, backend_kind kind, device_api api) {
  const cuda_runtime_table& rt = cuda_rt();
  void* p = nullptr;
  cudaError_t err;
  if (kind == backend_kind::managed) {
    err = managed_alloc(&p, size);
    if (err == cudaSuccess) return p;
  } else if (api == device_api::synchronous) {
    err = rt.malloc(&p, size == 0 ? 1 : size);
    if (err == cudaSuccess) return p;
  } else {
    err = rt.malloc_async(&p, size == 0 ? 1 : size, stream);
    if (err == cudaSuccess) return p;
  }
  tls_last_error = err;
  rt.get_last_error();
  char mem[128];
  describe_device_memory(mem, sizeof mem);
  REPLAYALLOC_LOG(warning, "out of device memory: %zu bytes asked (%s); %s", size, mem,
                  rt.get_error_string(err));
  return nullptr;
}

}  // namespace

namespace {

// Everything device_alloc's replay hit does not serve (out of line, so that the hit
// saves no registers: Note [The device's hits inline]).
REPLAYALLOC_NOINLINE void* device_alloc_rest(std::size_t size, int device, cudaStream_t stream, device_api api) {
  thread_state& t = tls_state;
  device_thread& dt = tls_device;
  if (t.depth > 0 && !in_engine()) {
    const bool opened_here = !dt.open;
    if (opened_here) open_device_iteration(t, dt, device, stream);
    if (dt.device == device && dt.stream == stream) {
      if (dt.d.ph == phase::replay) {
        // Below the minimum: never recorded, never planned, the cursor untouched
        // (Note [Below the minimum size]).
        if (below_min_size(dt.d.cursor, size)) {
          bump(dt.d.cursor.bypassed);
          return backend_device_alloc(size, stream, backend_kind::ordinary, api);
        }
        // device_alloc tried the hit unless the iteration opened here.
        if (opened_here) {
          if (void* p = replay_try_hit(dt.d.cursor, size, device_align)) {
            tls_rest_from_slab = true;
            return p;
          }
        }
        if (void* p = replay_malloc_slow(dt.d.cursor, size, device_align)) {
          tls_rest_from_slab = true;
          return p;
        }
        return backend_device_alloc(size, stream, dt.d.cursor.last_kind, api);
      }
      if (dt.d.ph == phase::record) {
        void* p = backend_device_alloc(size, stream, backend_kind::ordinary, api);
        // As the host records: what replay would bypass (below REPLAYALLOC_MIN_SIZE)
        // is not planned. (below_min counts as pass-through too, its bytes nowhere:
        // runtime/stats.cc.)
        if (below_min_size(dt.d.cursor, size)) {
          bump(dt.d.below_min);
        } else {
          bump(dt.d.passthrough);
          bump(dt.d.backend_bytes, size);
          if (p != nullptr) domain_record_alloc(dt.d, p, size, device_align);
        }
        return p;
      }
    }
  }
  if (!dt.d.registered && !in_engine()) ensure_registered(t, dt);
  bump(dt.d.passthrough);
  bump(dt.d.backend_bytes, size);
  return backend_device_alloc(size, stream, backend_kind::ordinary, api);
}

// Every free but the predicted one (device_free).
REPLAYALLOC_NOINLINE void device_free_rest(void* p, cudaStream_t stream, device_api api) {
  if (p == nullptr) return;
  device_thread& dt = tls_device;
  const cuda_runtime_table& rt = cuda_rt();
  if (slab* s = device_slab_owner(p)) {
    if (api == device_api::synchronous) {
      // Note [Interposed runtime] (hooks/cuda_hooks.cc): cudaFree returns once the
      // device is idle.
      if (rt.device_synchronize() != cudaSuccess) rt.get_last_error();
    } else if (s->stream != static_cast<void*>(stream)) {
      order_after(static_cast<cudaStream_t>(s->stream), stream);  // last used on another stream
    }
    if (!dt.d.registered && !in_engine()) ensure_registered(tls_state, dt);
    replay_free(dt.d.cursor, p, [s](const void*) { return s; });
    return;
  }
  if (dt.d.ph == phase::record && !in_engine()) domain_record_free(dt.d, p);
  if (managed_free(p)) return;
  if (api == device_api::synchronous) {
    rt.free(p);
  } else {
    rt.free_async(p, stream);
  }
}

}  // namespace

// Note [The device's hits inline]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As the host's entry points (runtime/entry.h), the device's serve a replay hit and the
// predicted free before anything else, in functions that call nothing else but tail-call
// the rest, so that they save no registers (callgrind over the simulated runtime: a
// device pair's prologues and epilogues were ~35 of its 113 instructions).
//  * The hit: inside a host iteration, outside the engine, on the (device, stream) of
//    the thread's device iteration, the cursor's slot taken when the size fits it
//    (replay_try_hit: the cursor is closed unless the domain replays; a request below the
//    minimum never fits a planned slot, which is at least the minimum).
//  * The predicted free: the block the thread's free cursor expects next, freed
//    asynchronously on its slab's own stream, needs no event and no lookup of its slab
//    (Note [Device streams]; the cursor's frees are its current slab's). cudaFree's
//    synchronous semantics take the rest, which waits for the device. The pointer is
//    compared first: a block passed through or missed pays that compare.
// The replay hit both entry points try first (null: not one).
inline void* device_hit(std::size_t size, int device, cudaStream_t stream) {
  device_thread& dt = tls_device;
  if (dt.open && dt.device == device && dt.stream == stream && tls_state.depth > 0 && !in_engine()) [[likely]] {
    return replay_try_hit(dt.d.cursor, size, device_align);
  }
  return nullptr;
}

void* device_alloc(std::size_t size, int device, cudaStream_t stream, device_api api) {
  if (void* p = device_hit(size, device, stream)) [[likely]] return p;
  return device_alloc_rest(size, device, stream, api);
}

void* device_alloc_tagged(std::size_t size, int device, cudaStream_t stream, bool& from_slab) {
  if (void* p = device_hit(size, device, stream)) [[likely]] {
    from_slab = true;
    return p;
  }
  tls_rest_from_slab = false;
  void* p = device_alloc_rest(size, device, stream, device_api::stream_ordered);
  from_slab = tls_rest_from_slab;
  return p;
}

void device_free(void* p, int, cudaStream_t stream, device_api api) {
  replay_cursor& c = tls_device.d.cursor;
  if (c.free_cur->ptr == p && p != nullptr && api != device_api::synchronous && c.current != nullptr &&
      c.current->stream == static_cast<void*>(stream) && replay_try_free(c, p)) [[likely]] {
    return;
  }
  device_free_rest(p, stream, api);
}

cudaError_t device_last_error() { return tls_last_error; }

}  // namespace replayalloc::detail
