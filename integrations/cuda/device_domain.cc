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

void* device_alloc(std::size_t size, int device, cudaStream_t stream, device_api api) {
  thread_state& t = tls_state;
  device_thread& dt = tls_device;
  if (t.depth > 0 && !in_engine()) {
    if (!dt.open) open_device_iteration(t, dt, device, stream);
    if (dt.device == device && dt.stream == stream) {
      if (dt.d.ph == phase::replay) {
        // Below the minimum: never recorded, never planned, the cursor untouched
        // (Note [Below the minimum size]).
        if (below_min_size(dt.d.cursor, size)) {
          bump(dt.d.cursor.bypassed);
          return backend_device_alloc(size, stream, backend_kind::ordinary, api);
        }
        return replay_malloc(dt.d.cursor, size, device_align,
                             [stream, api](std::size_t n, std::size_t, backend_kind k) {
                               return backend_device_alloc(n, stream, k, api);
                             });
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

void device_free(void* p, int, cudaStream_t stream, device_api api) {
  if (p == nullptr) return;
  device_thread& dt = tls_device;
  // The predicted free (replay/fast_path.h), first: the block the thread's free cursor
  // expects next, freed on its slab's own stream, needs no event and no lookup of its
  // slab (Note [Device streams]); the slab is the cursor's, whose frees it orders.
  // cudaFree's (synchronous) semantics take the path below, which waits for the device.
  // The pointer compared first: a block passed through or missed pays that compare.
  replay_cursor& c = dt.d.cursor;
  if (c.free_cur->ptr == p && api != device_api::synchronous && c.current != nullptr &&
      c.current->stream == static_cast<void*>(stream) && replay_try_free(c, p)) {
    return;
  }
  const cuda_runtime_table& rt = cuda_rt();
  if (slab* s = device_slab_owner(p)) {
    if (api == device_api::synchronous) {
      // Note [Interposed runtime] (hooks/cuda_hooks.cc): cudaFree returns once the
      // device is idle.
      if (rt.device_synchronize() != cudaSuccess) rt.get_last_error();
    } else if (s->stream != static_cast<void*>(stream)) {
      // Note [Device streams]: the block was last used on another stream.
      cudaEvent_t ev = nullptr;
      if (rt.event_create_with_flags(&ev, cudaEventDisableTiming) == cudaSuccess) {
        rt.event_record(ev, stream);
        rt.stream_wait_event(static_cast<cudaStream_t>(s->stream), ev, 0);
        rt.event_destroy(ev);  // released once the wait is satisfied
      } else {
        rt.get_last_error();
        rt.stream_synchronize(stream);  // no event to be had: order by waiting
      }
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

cudaError_t device_last_error() { return tls_last_error; }

}  // namespace replayalloc::detail
