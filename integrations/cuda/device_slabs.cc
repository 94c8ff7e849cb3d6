// Device slabs and their owners (device_slabs.h): the slab source of device keys and
// the owner table its slabs are registered in.
//
// Layer: integration (cuda), over runtime/domain.h. Owns: the owner table (2 MiB
// chunk -> slab), the map from each slab's base to what cudaMalloc returned, the
// events a slab's stream order is kept with. Never: a lock or a device call in
// device_slab_owner().
//
// Note [Device streams]
// ~~~~~~~~~~~~~~~~~~~~~
// Blocks of a slab are reused in the order of the slab's stream, as PyTorch's caching
// allocator reuses blocks: a block freed on the host while kernels using it are still
// queued is reused only by later work on the same stream, which runs after them. Two
// cases leave that order:
//  * a block last used on another stream (deallocate(p, bytes, other)): an event is
//    recorded on that stream and the slab's stream waits for it, so later reuse of
//    the bytes runs after the other stream's use (device_free, device_domain.cc);
//  * a slab taken by an iteration on another stream than its last one: when a slab
//    drains, an event is recorded on its stream; the next stream waits for it
//    (on_release and on_acquire below).
// Neither blocks the host.
#include "device_slabs.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <sys/mman.h>

#include "absl/container/flat_hash_map.h"
#include "runtime_table.h"

namespace replayalloc::detail {
namespace {

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

std::atomic<device_slab_observer> g_observer{nullptr};

// ---- Device slabs ---------------------------------------------------------------

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
    int device = 0;
    if (cuda_rt().get_device(&device) != cudaSuccess) cuda_rt().get_last_error();
    {
      std::lock_guard<std::mutex> lock(mu_);
      raw_[base] = mapping{raw, bytes, device};
    }
    if (auto f = g_observer.load(std::memory_order_acquire)) f(device, static_cast<std::int64_t>(bytes));
    return base;
  }

  void unmap(void* p, std::size_t) override {
    mapping m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = raw_.find(p);
      if (it == raw_.end()) return;
      m = it->second;
      raw_.erase(it);
    }
    cuda_rt().free(m.raw);  // synchronises the device: only when a plan is retired
    if (auto f = g_observer.load(std::memory_order_acquire)) f(m.device, -static_cast<std::int64_t>(m.bytes));
  }

  void visit(absl::FunctionRef<void(const device_slab_info&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [base, m] : raw_) {
      const slab* s = g_owners.find(base);
      f(device_slab_info{m.device, base, m.bytes, s != nullptr ? s->stream : nullptr});
    }
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
  struct mapping {
    void* raw = nullptr;     // what cudaMalloc returned
    std::size_t bytes = 0;   // the slab's usable bytes from its base
    int device = 0;
  };
  std::mutex mu_;
  absl::flat_hash_map<void*, mapping> raw_;  // slab base -> its mapping
};

device_slab_source& the_device_slabs() {
  static device_slab_source* s = new device_slab_source;  // never destroyed
  return *s;
}

}  // namespace

slab_source& device_slabs() { return the_device_slabs(); }

void device_slab_visit(absl::FunctionRef<void(const device_slab_info&)> f) { the_device_slabs().visit(f); }

void set_device_slab_observer(device_slab_observer f) { g_observer.store(f, std::memory_order_release); }

slab* device_slab_owner(const void* p) { return g_owners.find(p); }

void order_after(cudaStream_t waiter, cudaStream_t other) {
  const cuda_runtime_table& rt = cuda_rt();
  cudaEvent_t ev = nullptr;
  if (rt.event_create_with_flags(&ev, cudaEventDisableTiming) == cudaSuccess) {
    rt.event_record(ev, other);
    rt.stream_wait_event(waiter, ev, 0);
    rt.event_destroy(ev);  // released once the wait is satisfied
  } else {
    rt.get_last_error();
    rt.stream_synchronize(other);  // no event to be had: order by waiting
  }
}

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

}  // namespace replayalloc::detail
