// A simulated CUDA runtime for tests on machines without a GPU (fake_cudart.h).
#include "fake_cudart.h"

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

struct CUstream_st {
  int id;
};
struct CUevent_st {
  int id;
  int recorded_on = -1;
};

namespace {

std::mutex g_mu;
// A forked child's copy of g_mu is free whichever thread held it (tests fork beside
// threads that call the runtime).
[[maybe_unused]] const bool g_fork_safe =
    pthread_atfork([] { g_mu.lock(); }, [] { g_mu.unlock(); }, [] { g_mu.unlock(); }) == 0;
std::vector<std::string> g_log;
std::unordered_map<void*, std::size_t> g_device;   // device blocks -> size
std::unordered_map<void*, std::size_t> g_managed;  // managed and pinned blocks
std::size_t g_total = std::size_t{16} << 30;
std::size_t g_used = 0;
int g_next_stream = 1, g_next_event = 1;
cudaError_t g_last = cudaSuccess;

thread_local int g_device_of_thread = 0;

// Device memory is mapped memory, never the process's malloc: under the LD_PRELOAD
// library (tests/preload_cuda) that malloc is replayalloc's own, and simulated device
// blocks must not mix with the host's iterations.
void* map_device(std::size_t size) {
  void* p = ::mmap(nullptr, size == 0 ? 1 : size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap_device(void* p, std::size_t size) { ::munmap(p, size == 0 ? 1 : size); }

std::string sname(cudaStream_t s) { return "s" + std::to_string(s == nullptr ? 0 : s->id); }

void note(std::string line) { g_log.push_back(std::move(line)); }

cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

cudaError_t device_alloc(void** p, std::size_t size, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (size > g_total - g_used) {
    note(what + " " + std::to_string(size) + " FAILED");
    return fail(cudaErrorMemoryAllocation);
  }
  *p = map_device(size);
  if (*p == nullptr) return fail(cudaErrorMemoryAllocation);
  g_device[*p] = size;
  g_used += size;
  note(what + " " + std::to_string(size));
  return cudaSuccess;
}

cudaError_t device_free(void* p, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (p == nullptr) return cudaSuccess;
  auto it = g_device.find(p);
  if (it == g_device.end()) {
    note(what + " INVALID");
    return fail(cudaErrorInvalidValue);
  }
  g_used -= it->second;
  unmap_device(p, it->second);
  g_device.erase(it);
  note(what);
  return cudaSuccess;
}

}  // namespace

namespace fake_cuda {

void set_device_memory(std::size_t total) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_total = total;
}
std::size_t device_memory_used() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_used;
}
std::vector<std::string> log() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_log;
}
void clear_log() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_log.clear();
}
std::string name(const void* stream) { return sname(static_cast<cudaStream_t>(const_cast<void*>(stream))); }

}  // namespace fake_cuda

extern "C" {

cudaError_t cudaMalloc(void** p, size_t size) { return device_alloc(p, size, "malloc"); }
cudaError_t cudaFree(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_managed.find(p);
    if (it != g_managed.end()) {
      unmap_device(p, it->second);
      g_managed.erase(it);
      note("free_managed");
      return cudaSuccess;
    }
  }
  return device_free(p, "free");
}
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) {
  return device_alloc(p, size, "malloc_async " + sname(s) + ":");
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return device_free(p, "free_async " + sname(s)); }
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int) {
  std::lock_guard<std::mutex> lock(g_mu);
  *p = map_device(size);
  g_managed[*p] = size;
  note("managed " + std::to_string(size));
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
  std::lock_guard<std::mutex> lock(g_mu);
  *p = map_device(size);
  g_managed[*p] = size;
  note("host_alloc " + std::to_string(size));
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_managed.find(p);
  if (it != g_managed.end()) {
    unmap_device(p, it->second);
    g_managed.erase(it);
  }
  note("free_host");
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  std::lock_guard<std::mutex> lock(g_mu);
  *free_b = g_total - g_used;
  *total_b = g_total;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = g_device_of_thread;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 2;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d > 1) return fail(cudaErrorInvalidDevice);  // two simulated devices
  g_device_of_thread = d;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  note("sync_device");
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;  // no graphs here
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "unknown error";
  }
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  std::lock_guard<std::mutex> lock(g_mu);
  *s = new CUstream_st{g_next_stream++};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_mu);
  note("sync " + sname(s));
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  std::lock_guard<std::mutex> lock(g_mu);
  *e = new CUevent_st{g_next_event++};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_mu);
  e->recorded_on = s == nullptr ? 0 : s->id;
  note("record ev" + std::to_string(e->id) + " " + sname(s));
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  std::lock_guard<std::mutex> lock(g_mu);
  note("wait " + sname(s) + " ev" + std::to_string(e->id) + " from s" + std::to_string(e->recorded_on));
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
// One pool per device, named by the device: the log says which was trimmed.
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device > 1) return fail(cudaErrorInvalidDevice);
  *pool = reinterpret_cast<cudaMemPool_t>(static_cast<std::uintptr_t>(device + 1));
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  std::lock_guard<std::mutex> lock(g_mu);
  note("trim pool" + std::to_string(reinterpret_cast<std::uintptr_t>(pool) - 1) + " " + std::to_string(keep));
  return cudaSuccess;
}

}  // extern "C"
