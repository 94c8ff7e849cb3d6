// The device domain: replayalloc's record → plan → replay for CUDA device memory.
//
// Layer: integration over runtime/engine.h. The engine's state machine and the
// replay hot path are the host's; this file supplies what differs on a device:
//  * slabs from cudaMalloc (device_slabs), found from a pointer through a lock-free
//    table of 2 MiB chunks (device_owners), so a free finds its slab in O(1);
//  * misses from cudaMallocAsync on the request's stream, large-model-support slots
//    from managed (or pinned host) memory;
//  * stream order: a slab serves one stream at a time. Note [Device streams].
//
// Note [Device streams]: blocks of a slab are reused in the order of the slab's
// stream, as PyTorch's caching allocator reuses blocks: a block freed on the host
// while kernels using it are still queued is reused only by later work on the same
// stream, which runs after them. Two cases leave that order:
//  * a block last used on another stream (deallocate(p, bytes, other)): an event is
//    recorded on that stream and the slab's stream waits for it, so later reuse of
//    the bytes runs after the other stream's use;
//  * a slab taken by an iteration on another stream than its last one: when a slab
//    drains, an event is recorded on its stream; the next stream waits for it.
// Neither blocks the host.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <sys/mman.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "device_domain.h"
#include "planner/planner.h"
#include "replay/fast_path.h"
#include "replayalloc/cuda.h"
#include "replayalloc/cuda.hpp"
#include "runtime/engine.h"
#include "runtime_table.h"
#include "support/log.h"
#include "support/reentry.h"

namespace replayalloc::detail {
namespace {

constexpr std::size_t device_align = 256;  // what cudaMalloc promises

// ---- Options -----------------------------------------------------------------

std::mutex g_opts_mu;
bool g_opts_set = false;
cuda::options g_cuda_opts;

cuda::options cuda_options() {
  std::lock_guard<std::mutex> lock(g_opts_mu);
  if (!g_opts_set) {
    const options& o = process_options();
    g_cuda_opts.budget_bytes = o.cuda_budget_bytes;
    g_cuda_opts.budget_fraction = o.cuda_budget_fraction;
    g_cuda_opts.lms_threshold = o.cuda_lms_threshold;
    g_cuda_opts.lms_pinned = o.cuda_lms_pinned;
    g_opts_set = true;
  }
  return g_cuda_opts;
}

// ---- Device owners: 2 MiB chunk -> slab, lock-free lookups ------------------

// Open addressing with linear probing over a fixed table made once with mmap.
// Inserts and erases take a mutex; lookups are lock-free (acquire loads). An erased
// entry becomes a tombstone that inserts reuse.
class device_owners {
 public:
  static constexpr std::size_t capacity = std::size_t{1} << 17;  // 256 GiB of slabs
  static constexpr std::uintptr_t empty = 0, tombstone = 1;

  slab* find(const void* p) const {
    const Entry* t = table_.load(std::memory_order_acquire);
    if (t == nullptr) return nullptr;
    const std::uintptr_t key = (reinterpret_cast<std::uintptr_t>(p) >> chunk_shift) + 2;
    for (std::size_t i = hash(key), n = 0; n < capacity; i = (i + 1) & (capacity - 1), ++n) {
      const std::uintptr_t k = t[i].key.load(std::memory_order_acquire);
      if (k == key) return t[i].owner.load(std::memory_order_acquire);
      if (k == empty) return nullptr;
    }
    return nullptr;
  }

  // Registers (owner non-null) or erases every chunk of [p, p + bytes). False when full.
  bool set(const void* p, std::size_t bytes, slab* owner) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* t = table_.load(std::memory_order_relaxed);
    if (t == nullptr) {
      void* m = ::mmap(nullptr, capacity * sizeof(Entry), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return false;
      t = static_cast<Entry*>(m);
      table_.store(t, std::memory_order_release);
    }
    const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(p) >> chunk_shift;
    const std::uintptr_t last = (reinterpret_cast<std::uintptr_t>(p) + bytes - 1) >> chunk_shift;
    for (std::uintptr_t c = first; c <= last; ++c) {
      const std::uintptr_t key = c + 2;
      if (owner == nullptr) {
        for (std::size_t i = hash(key), n = 0; n < capacity; i = (i + 1) & (capacity - 1), ++n) {
          const std::uintptr_t k = t[i].key.load(std::memory_order_relaxed);
          if (k == empty) break;
          if (k == key) {
            t[i].owner.store(nullptr, std::memory_order_release);
            t[i].key.store(tombstone, std::memory_order_release);
            --used_;
            break;
          }
        }
        continue;
      }
      if (used_ + 1 >= capacity / 2) return false;  // keep probes short
      for (std::size_t i = hash(key);; i = (i + 1) & (capacity - 1)) {
        const std::uintptr_t k = t[i].key.load(std::memory_order_relaxed);
        if (k == empty || k == tombstone) {
          t[i].owner.store(owner, std::memory_order_release);
          t[i].key.store(key, std::memory_order_release);
          ++used_;
          break;
        }
      }
    }
    return true;
  }

 private:
  struct Entry {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<slab*> owner{nullptr};
  };
  static std::size_t hash(std::uintptr_t k) {
    return static_cast<std::size_t>((k * 0x9e3779b97f4a7c15ull) >> 47) & (capacity - 1);
  }
  std::atomic<Entry*> table_{nullptr};
  std::mutex mu_;
  std::size_t used_ = 0;
};

device_owners g_owners;

// ---- Managed (large-model support) blocks -------------------------------------

std::mutex g_managed_mu;
absl::flat_hash_set<void*> g_managed;  // blocks to free with cudaFree / cudaFreeHost
std::atomic<std::size_t> g_managed_count{0};

bool take_managed(void* p) {
  if (g_managed_count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(g_managed_mu);
  if (g_managed.erase(p) == 0) return false;
  g_managed_count.fetch_sub(1, std::memory_order_release);
  return true;
}

// ---- Device slabs ---------------------------------------------------------------

struct acquire_context {
  cudaStream_t stream;
};

void describe_device_memory(char* buf, std::size_t cap) {
  std::size_t free_b = 0, total_b = 0;
  int dev = -1;
  cuda_rt().get_device(&dev);
  if (cuda_rt().mem_get_info(&free_b, &total_b) == cudaSuccess) {
    std::snprintf(buf, cap, "device %d has %zu MiB free of %zu MiB", dev, free_b >> 20, total_b >> 20);
  } else {
    cuda_rt().get_last_error();
    std::snprintf(buf, cap, "device %d did not say how much memory it has", dev);
  }
}

class device_slab_source final : public slab_source {
 public:
  void* map(std::size_t bytes, const char** why) override {
    // One chunk more than asked, so the slab can start on a chunk boundary and the
    // owner table can name it by chunk.
    const std::size_t want = (bytes == 0 ? 1 : bytes) + chunk_bytes;
    void* raw = nullptr;
    const cudaError_t err = cuda_rt().malloc(&raw, want);
    if (err != cudaSuccess) {
      cuda_rt().get_last_error();
      char mem[128];
      describe_device_memory(mem, sizeof mem);
      REPLAYALLOC_LOG(error,
                      "a device slab of %zu MiB does not fit (%s: %s); its iterations pass "
                      "through to cudaMallocAsync. REPLAYALLOC_CUDA_BUDGET enables large-model "
                      "support",
                      bytes >> 20, mem, cuda_rt().get_error_string(err));
      *why = "device out of memory for the slab";
      return nullptr;
    }
    const auto r = reinterpret_cast<std::uintptr_t>(raw);
    void* base = reinterpret_cast<void*>((r + chunk_bytes - 1) & ~(std::uintptr_t{chunk_bytes} - 1));
    std::lock_guard<std::mutex> lock(mu_);
    raw_[base] = raw;
    return base;
  }

  void unmap(void* p, std::size_t) override {
    void* raw = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = raw_.find(p);
      if (it == raw_.end()) return;
      raw = it->second;
      raw_.erase(it);
    }
    cuda_rt().free(raw);  // synchronises the device: only when a plan is retired
  }

  void set_owner(void* p, std::size_t bytes, slab* owner) override {
    if (!g_owners.set(p, bytes == 0 ? 1 : bytes, owner)) {
      REPLAYALLOC_LOG(error, "device owner table full; a slab's frees will be refused");
    }
  }

  void on_acquire(slab* s, void* context) override {
    const cudaStream_t stream = static_cast<acquire_context*>(context)->stream;
    if (s->ready_event != nullptr && s->stream != static_cast<void*>(stream)) {
      // Note [Device streams]: the new stream waits for the slab's last one.
      cuda_rt().stream_wait_event(stream, static_cast<cudaEvent_t>(s->ready_event), 0);
    }
    s->stream = stream;
  }

  void on_release(slab* s) override {
    if (s->ready_event == nullptr) {
      cudaEvent_t ev = nullptr;
      if (cuda_rt().event_create_with_flags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        cuda_rt().get_last_error();
        return;
      }
      s->ready_event = ev;
    }
    cuda_rt().event_record(static_cast<cudaEvent_t>(s->ready_event), static_cast<cudaStream_t>(s->stream));
  }

 private:
  std::mutex mu_;
  absl::flat_hash_map<void*, void*> raw_;  // slab base -> what cudaMalloc returned
};

device_slab_source& device_slabs() {
  static device_slab_source* s = new device_slab_source;  // never destroyed
  return *s;
}

// ---- Large-model support --------------------------------------------------------

// Note [Large-model support]: when a device plan's slab would exceed the budget, the
// allocations at least REPLAYALLOC_CUDA_LMS_THRESHOLD large are taken out of the slab
// and served from managed (or pinned host) memory, as Caffe's LMS treats GPU memory as
// a cache of host memory; the rest is planned again into a smaller slab.
const char* lms_adjust(const trace& t, placement& p, void*) {
  const cuda::options o = cuda_options();
  std::uint64_t budget = o.budget_bytes;
  if (budget == 0 && o.budget_fraction > 0) {
    std::size_t free_b = 0, total_b = 0;
    if (cuda_rt().mem_get_info(&free_b, &total_b) != cudaSuccess) {
      cuda_rt().get_last_error();
      return nullptr;
    }
    budget = static_cast<std::uint64_t>(o.budget_fraction * static_cast<double>(total_b));
  }
  if (budget == 0 || p.slab_bytes <= budget) return nullptr;

  trace rest;
  rest.key = t.key;
  rest.ops = t.ops;
  rest.events = t.events;
  std::vector<std::size_t> kept;
  std::uint64_t moved = 0, moved_bytes = 0;
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    if (p.offsets[i] == not_in_slab) continue;
    if (t.allocations[i].size >= o.lms_threshold) {
      p.offsets[i] = not_in_slab;
      ++moved;
      moved_bytes += t.allocations[i].size;
    } else {
      kept.push_back(i);
      rest.allocations.push_back(t.allocations[i]);
    }
  }
  const std::uint64_t before = p.slab_bytes;
  planner_options po;
  po.slot_align = process_options().slot_align;
  absl::StatusOr<placement> q = plan_greedy_by_size(rest, po);
  if (!q.ok()) return "large-model support could not plan the remaining allocations";
  for (std::size_t k = 0; k < kept.size(); ++k) p.offsets[kept[k]] = q->offsets[k];
  p.slab_bytes = q->slab_bytes;
  static thread_local char msg[320];
  std::snprintf(msg, sizeof msg,
                "large-model support: the slab needed %llu MiB for a budget of %llu MiB; %llu "
                "allocations of at least %llu bytes (%llu MiB) now use %s memory, the slab %llu MiB%s",
                static_cast<unsigned long long>(before >> 20),
                static_cast<unsigned long long>(budget >> 20),
                static_cast<unsigned long long>(moved),
                static_cast<unsigned long long>(o.lms_threshold),
                static_cast<unsigned long long>(moved_bytes >> 20),
                o.lms_pinned ? "pinned host" : "managed",
                static_cast<unsigned long long>(p.slab_bytes >> 20),
                p.slab_bytes > budget ? " (still above the budget: lower the threshold)" : "");
  return msg;
}

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
  engine::get().domain_end(dt.d);
}

void device_thread_exit(thread_state& t) {
  end_device_iteration(t);
  engine::get().unregister_domain(tls_device.d);
}

// Makes the thread's device domain known to the engine: its counters reach stats(),
// and the thread's exit (through the host thread state's exit hook) unregisters it
// before its TLS goes away.
void ensure_registered(thread_state& t, device_thread& dt) {
  if (dt.d.registered) return;
  static std::once_flag hooks_once;
  engine& eng = engine::get();
  std::call_once(hooks_once, [&] {
    domain_hooks h;
    h.on_end = end_device_iteration;
    h.on_exit = device_thread_exit;
    eng.add_domain_hooks(h);
  });
  eng.register_thread(t);
  if (t.exited) return;  // a late call during the thread's exit: stay unregistered
  dt.d.kind = domain_kind::device;
  eng.register_domain(dt.d);
}

// Opens the device domain's iteration at the thread's first device allocation of the
// host iteration: the plan key is the host key with "@cuda:<device>".
void open_device_iteration(thread_state& t, device_thread& dt, int device, cudaStream_t stream) {
  engine& eng = engine::get();
  reentry_guard guard;
  ensure_registered(t, dt);
  dt.open = true;
  dt.device = device;
  dt.stream = stream;
  std::string key = t.entry != nullptr ? t.entry->key : std::string("unnamed");
  key += "@cuda:" + std::to_string(device);
  key_entry* e = eng.entry_for(key, domain_kind::device, &device_slabs(), lms_adjust, nullptr);
  acquire_context ctx{stream};
  eng.domain_begin(dt.d, e, &ctx);
}

constinit thread_local cudaError_t tls_last_error REPLAYALLOC_TLS_IE = cudaSuccess;

void* backend_device_alloc(std::size_t size, cudaStream_t stream, backend_kind kind, device_api api) {
  const cuda_runtime_table& rt = cuda_rt();
  void* p = nullptr;
  cudaError_t err;
  if (kind == backend_kind::managed) {
    err = cuda_options().lms_pinned ? rt.host_alloc(&p, size, cudaHostAllocDefault)
                                     : rt.malloc_managed(&p, size, cudaMemAttachGlobal);
    if (err == cudaSuccess) {
      reentry_guard guard;
      std::lock_guard<std::mutex> lock(g_managed_mu);
      g_managed.insert(p);
      g_managed_count.fetch_add(1, std::memory_order_release);
      return p;
    }
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
        return replay_malloc(dt.d.cursor, size, device_align,
                             [stream, api](std::size_t n, std::size_t, backend_kind k) {
                               return backend_device_alloc(n, stream, k, api);
                             });
      }
      if (dt.d.ph == phase::record) {
        void* p = backend_device_alloc(size, stream, backend_kind::ordinary, api);
        bump(dt.d.backend_bytes, size);
        // As the host records: what replay would bypass (below REPLAYALLOC_MIN_SIZE)
        // is not planned. (below_min counts as pass-through too: engine.cc add_domain.)
        if (size < dt.d.cursor.min_size || size == 0) {
          bump(dt.d.below_min);
        } else {
          bump(dt.d.passthrough);
          if (p != nullptr) engine::get().record_alloc(dt.d, p, size, device_align);
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
  const cuda_runtime_table& rt = cuda_rt();
  device_thread& dt = tls_device;
  if (slab* s = g_owners.find(p)) {
    if (api == device_api::synchronous) {
      // Note [Interposed runtime]: cudaFree returns once the device is idle.
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
  bump(dt.d.frees);
  if (dt.d.ph == phase::record && !in_engine()) engine::get().record_free(dt.d, p);
  if (take_managed(p)) {
    if (cuda_options().lms_pinned) rt.free_host(p); else rt.free(p);
    return;
  }
  if (api == device_api::synchronous) {
    rt.free(p);
  } else {
    rt.free_async(p, stream);
  }
}

cudaError_t device_last_error() { return tls_last_error; }

// Note [Interposed runtime]: under the LD_PRELOAD library a program's own calls to
// the shared CUDA runtime's allocation functions come here (hooks/cuda_hooks.cc), and
// keep the runtime's contract:
//  * cudaMalloc(p, n): the device domain on the current device's legacy default
//    stream (stream 0); a miss goes to the runtime's cudaMalloc. cudaMalloc memory is
//    usable on any stream, and programs free it right after queueing the kernels that
//    use it, because the runtime's cudaFree returns only once the device is idle. So
//    does ours for a slab block (cudaDeviceSynchronize), before the slot can be
//    reused: what replay saves is the runtime's allocation and mapping, not the wait.
//  * cudaFree(p): a slab block back to its slab, as above; anything else, and NULL
//    (how programs create their context), to the runtime.
//  * cudaMallocAsync(p, n, s) / cudaFreeAsync(p, s): the device domain on s, in the
//    slab's stream order (Note [Device streams]); misses to the runtime on s. Two
//    streams go straight to the runtime: one capturing a CUDA graph (the graph must
//    own its allocation nodes), and cudaStreamPerThread, one handle naming another
//    stream on every thread, which a slab's stream order cannot tell apart.
//  * A failure returns the runtime's error (cudaErrorInvalidValue for a null `p`,
//    cudaErrorMemoryAllocation when the device is full).
// Programs built with --default-stream per-thread call the _ptsz variants, which are
// not interposed: they reach the runtime unchanged.

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

}  // namespace replayalloc::detail

// ---- Public API -------------------------------------------------------------------

namespace replayalloc::cuda {

bool configure(const options& o) {
  if (o.budget_fraction < 0 || o.budget_fraction > 1 || o.lms_threshold == 0) return false;
  std::lock_guard<std::mutex> lock(detail::g_opts_mu);
  detail::g_cuda_opts = o;
  detail::g_opts_set = true;
  return true;
}

Stats stats() {
  const detail::domain_kind k = detail::domain_kind::device;
  return detail::engine::get().stats(&k);
}

void* memory_resource::allocate(std::size_t bytes, cudaStream_t stream) {
  int dev = 0;
  detail::cuda_rt().get_device(&dev);
  void* p = detail::device_alloc(bytes, dev, stream);
  if (p == nullptr) {
    char mem[128];
    detail::describe_device_memory(mem, sizeof mem);
    throw out_of_memory("replayalloc: cannot allocate " + std::to_string(bytes) +
                        " bytes of device memory (" + mem + ")");
  }
  return p;
}

void memory_resource::deallocate(void* p, std::size_t, cudaStream_t stream) noexcept {
  int dev = 0;
  detail::cuda_rt().get_device(&dev);
  detail::device_free(p, dev, stream);
}

}  // namespace replayalloc::cuda

extern "C" {

REPLAYALLOC_EXPORT void* replayalloc_cuda_alloc(size_t size, int device, void* stream) {
  return replayalloc::detail::device_alloc(size, device, static_cast<cudaStream_t>(stream));
}

REPLAYALLOC_EXPORT void replayalloc_cuda_free(void* ptr, size_t, int device, void* stream) {
  replayalloc::detail::device_free(ptr, device, static_cast<cudaStream_t>(stream));
}

REPLAYALLOC_EXPORT size_t replayalloc_cuda_stats_json(char* buf, size_t cap) {
  const replayalloc::Stats s = replayalloc::cuda::stats();
  char local[1];
  return replayalloc::detail::format_stats_json(s, cap == 0 ? local : buf, cap == 0 ? 1 : cap);
}

}  // extern "C"
