// The CUDA runtime under libreplayalloc_preload.so: a program's cudaMalloc, cudaFree,
// cudaMallocAsync and cudaFreeAsync, each forwarding in one line to the device
// domain (integrations/cuda/device_domain.h) with the runtime's contract kept,
// Note [Interposed runtime] below.
//
// Layer: hooks. Built only with the CUDA toolkit's headers; the library never links
// libcudart, so programs without CUDA load it as before. The domain reaches the real
// runtime through the table made here (integrations/cuda/runtime_table.h): the next
// definitions after this library's own, found with dlsym(RTLD_NEXT) on first use; when
// the runtime was loaded where RTLD_NEXT does not look (dlopen'ed RTLD_LOCAL, as a
// Python extension's dependencies are), the loaded libcudart.so* itself. Never:
// an entry of the table pointing back into this library, or an allocation that
// reaches the engine while the table is made (it is made under the reentry guard).
//
// Note [Interposed runtime]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Under the LD_PRELOAD library a program's own calls to the shared CUDA runtime's
// allocation functions come here, and keep the runtime's contract:
//  * cudaMalloc(p, n): the device domain on the current device's legacy default
//    stream (stream 0); a miss goes to the runtime's cudaMalloc. cudaMalloc memory is
//    usable on any stream, and programs free it right after queueing the kernels that
//    use it, because the runtime's cudaFree returns only once the device is idle. So
//    does ours for a slab block (cudaDeviceSynchronize, device_free), before the slot
//    can be reused: what replay saves is the runtime's allocation and mapping, not the
//    wait.
//  * cudaFree(p): a slab block back to its slab, as above; anything else, and NULL
//    (how programs create their context), to the runtime.
//  * cudaMallocAsync(p, n, s) / cudaFreeAsync(p, s): the device domain on s, in the
//    slab's stream order (Note [Device streams], integrations/cuda/device_slabs.cc);
//    misses to the runtime on s. Two streams go straight to the runtime: one capturing
//    a CUDA graph (the graph must own its allocation nodes), and cudaStreamPerThread,
//    one handle naming another stream on every thread, which a slab's stream order
//    cannot tell apart.
//  * A failure returns the runtime's error (cudaErrorInvalidValue for a null `p`,
//    cudaErrorMemoryAllocation when the device is full).
// Programs built with --default-stream per-thread call the _ptsz variants, which are
// not interposed: they reach the runtime unchanged.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "device_domain.h"
#include "replayalloc/export.h"
#include "runtime_table.h"
#include "runtime/thread_state.h"
#include "support/reentry.h"

#define RA_HOOK extern "C" REPLAYALLOC_EXPORT

namespace replayalloc::detail {
namespace {

// The runtime's allocation functions with their contract, Note [Interposed runtime].

cudaError_t interposed_malloc(void** p, std::size_t size) {
  const cuda_runtime_table& rt = cuda_rt();
  int device = 0;
  if (p == nullptr || size == 0 || rt.get_device(&device) != cudaSuccess) return rt.malloc(p, size);
  *p = device_alloc(size, device, nullptr, device_api::synchronous);
  return *p != nullptr ? cudaSuccess : device_last_error();
}

cudaError_t interposed_free(void* p) {
  if (p == nullptr) return cuda_rt().free(nullptr);
  device_free(p, 0, nullptr, device_api::synchronous);
  return cudaSuccess;
}

cudaError_t interposed_malloc_async(void** p, std::size_t size, cudaStream_t stream) {
  const cuda_runtime_table& rt = cuda_rt();
  int device = 0;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (p == nullptr || size == 0 || stream == cudaStreamPerThread ||
      rt.stream_is_capturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone ||
      rt.get_device(&device) != cudaSuccess) {
    return rt.malloc_async(p, size, stream);
  }
  *p = device_alloc(size, device, stream, device_api::stream_ordered);
  return *p != nullptr ? cudaSuccess : device_last_error();
}

cudaError_t interposed_free_async(void* p, cudaStream_t stream) {
  if (p == nullptr) return cuda_rt().free_async(p, stream);
  device_free(p, 0, stream, device_api::stream_ordered);
  return cudaSuccess;
}

}  // namespace
}  // namespace replayalloc::detail

namespace rd = replayalloc::detail;

RA_HOOK cudaError_t cudaMalloc(void** p, size_t n) { return rd::interposed_malloc(p, n); }
RA_HOOK cudaError_t cudaFree(void* p) { return rd::interposed_free(p); }
RA_HOOK cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s) {
  return rd::interposed_malloc_async(p, n, s);
}
RA_HOOK cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return rd::interposed_free_async(p, s); }

namespace replayalloc::detail {
namespace {

// What the table holds where no runtime is loaded.
cudaError_t none_malloc(void**, std::size_t) { return cudaErrorInitializationError; }
cudaError_t none_free(void*) { return cudaErrorInitializationError; }
cudaError_t none_malloc_async(void**, std::size_t, cudaStream_t) { return cudaErrorInitializationError; }
cudaError_t none_free_async(void*, cudaStream_t) { return cudaErrorInitializationError; }
cudaError_t none_alloc_flags(void**, std::size_t, unsigned int) { return cudaErrorInitializationError; }
cudaError_t none_mem_get_info(std::size_t*, std::size_t*) { return cudaErrorInitializationError; }
cudaError_t none_get_device(int*) { return cudaErrorInitializationError; }
cudaError_t none_void() { return cudaErrorInitializationError; }
const char* none_error_string(cudaError_t) { return "no CUDA runtime is loaded in this process"; }
cudaError_t none_stream(cudaStream_t) { return cudaErrorInitializationError; }
cudaError_t none_is_capturing(cudaStream_t, cudaStreamCaptureStatus*) { return cudaErrorInitializationError; }
cudaError_t none_event_create(cudaEvent_t*, unsigned int) { return cudaErrorInitializationError; }
cudaError_t none_event_record(cudaEvent_t, cudaStream_t) { return cudaErrorInitializationError; }
cudaError_t none_wait_event(cudaStream_t, cudaEvent_t, unsigned int) { return cudaErrorInitializationError; }
cudaError_t none_event_destroy(cudaEvent_t) { return cudaErrorInitializationError; }

constexpr cuda_runtime_table none_table{
    none_malloc,       none_free,          none_malloc_async,  none_free_async,
    none_alloc_flags,  none_alloc_flags,   none_free,          none_mem_get_info,
    none_get_device,   none_void,          none_error_string,  none_stream,
    none_void,         none_is_capturing,  none_event_create,  none_event_record,
    none_wait_event,   none_event_destroy,
};

// The handle of a loaded libcudart.so* (RTLD_NOLOAD: never loads one), or null.
void* loaded_cudart() {
  char path[512] = "";
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const char* base = std::strrchr(name, '/');
        base = base != nullptr ? base + 1 : name;
        if (std::strncmp(base, "libcudart.so", 12) != 0 || std::strlen(name) >= 512) return 0;
        std::strcpy(static_cast<char*>(out), name);
        return 1;
      },
      path);
  return path[0] != '\0' ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

// `slot` = the runtime's `name`, unless missing or one of ours (then the stub stays).
template <class F>
void resolve(F& slot, const char* name, void* handle, F ours) {
  void* f = dlsym(handle, name);
  if (f != nullptr && f != reinterpret_cast<void*>(ours)) slot = reinterpret_cast<F>(f);
}

bool resolve_from(cuda_runtime_table& t, void* h) {
  t = none_table;
  resolve(t.malloc, "cudaMalloc", h, &::cudaMalloc);
  resolve(t.free, "cudaFree", h, &::cudaFree);
  resolve(t.malloc_async, "cudaMallocAsync", h, &::cudaMallocAsync);
  resolve(t.free_async, "cudaFreeAsync", h, &::cudaFreeAsync);
  resolve(t.malloc_managed, "cudaMallocManaged", h, t.malloc_managed);
  resolve(t.host_alloc, "cudaHostAlloc", h, t.host_alloc);
  resolve(t.free_host, "cudaFreeHost", h, t.free_host);
  resolve(t.mem_get_info, "cudaMemGetInfo", h, t.mem_get_info);
  resolve(t.get_device, "cudaGetDevice", h, t.get_device);
  resolve(t.get_last_error, "cudaGetLastError", h, t.get_last_error);
  resolve(t.get_error_string, "cudaGetErrorString", h, t.get_error_string);
  resolve(t.stream_synchronize, "cudaStreamSynchronize", h, t.stream_synchronize);
  resolve(t.device_synchronize, "cudaDeviceSynchronize", h, t.device_synchronize);
  resolve(t.stream_is_capturing, "cudaStreamIsCapturing", h, t.stream_is_capturing);
  resolve(t.event_create_with_flags, "cudaEventCreateWithFlags", h, t.event_create_with_flags);
  resolve(t.event_record, "cudaEventRecord", h, t.event_record);
  resolve(t.stream_wait_event, "cudaStreamWaitEvent", h, t.stream_wait_event);
  resolve(t.event_destroy, "cudaEventDestroy", h, t.event_destroy);
  return t.malloc != none_table.malloc;
}

std::mutex g_mu;
cuda_runtime_table g_table = none_table;
std::atomic<bool> g_ready{false};

}  // namespace

// Made once a runtime is found; until then (a program that has none, or has not
// loaded it yet) every call looks again, and gets the stubs.
const cuda_runtime_table& cuda_rt() {
  if (g_ready.load(std::memory_order_acquire)) [[likely]] return g_table;
  reentry_guard guard;  // dlsym and dlopen allocate: straight to the backend
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_ready.load(std::memory_order_relaxed)) return g_table;
  cuda_runtime_table t;
  bool found = resolve_from(t, RTLD_NEXT);
  if (!found) {
    if (void* h = loaded_cudart()) found = resolve_from(t, h);  // handle kept: never unloaded
  }
  if (!found) return none_table;
  g_table = t;
  g_ready.store(true, std::memory_order_release);
  return g_table;
}

}  // namespace replayalloc::detail
