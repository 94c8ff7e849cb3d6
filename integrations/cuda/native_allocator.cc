// The native allocator's core (replayalloc/cuda_native.hpp): a handle per device block,
// recordStream, per-device statistics in PyTorch's shape, cacheInfo and emptyCache, over
// the device domain (device_domain.h); snapshots are native_snapshot.cc's.
//
// Layer: integration (cuda), linked builds only (replayalloc_cuda, libreplayalloc_cuda.so;
// never the LD_PRELOAD library, whose process may have no PyTorch). Owns: the block
// records and their pools, the per-device counters, the map of raw allocations.
// Never: a lock, a map or a runtime call on an allocation or free a slab serves but
// the device domain's own (Note [Block records]).
//
// Note [Block records]
// ~~~~~~~~~~~~~~~~~~~~
// PyTorch's pluggable route gives the allocator a pointer and keeps its own map from
// pointer to size, device and stream under a mutex, for every allocation. Here the
// DataPtr's context is a record of the block (pointer, size, device, stream, the
// streams recordStream named), so the free finds all it needs in it:
//  * Records come from the calling thread's list (a thread-local stack, no lock). A
//    free returns its record to the freeing thread's list, whichever thread allocated
//    it; a list above high_water hands half of it to a global list under a mutex, an
//    empty one takes up to batch from there, and only when that is empty too is a chunk
//    of chunk_records made (mmap, never freed: records are reused, never returned).
//    A thread that allocates on one thread and frees on another takes the mutex once
//    per batch records, never per block.
//  * Every record ever made lies in a chunk the registry names, so a snapshot and
//    base_allocation scan them: slow paths, a record live when its pointer is non-null.
//  * Statistics are atomic counters per device on one cache line (the hot ones): 6
//    relaxed read-modify-writes an allocation, 3 a free, a peak's compare-and-swap only
//    when it rises. PyTorch's caching allocator takes its mutex for the same.
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "device_domain.h"
#include "device_slabs.h"
#include "native_records.h"
#include "replayalloc/cuda_native.hpp"
#include "runtime/domain.h"
#include "runtime_table.h"

namespace replayalloc::cuda::native {


namespace {

using detail::cuda_rt;

constexpr std::size_t chunk_records = 1024;
constexpr std::size_t max_chunks = 8192;  // 8 M records
constexpr std::uint32_t high_water = 512, batch = 128;


// ---- Records ------------------------------------------------------------------

std::atomic<block*> g_chunks[max_chunks];
std::atomic<std::size_t> g_chunk_count{0};

std::mutex g_pool_mu;
block* g_pool = nullptr;  // the global list
bool g_pool_exhausted_logged = false;

// A new chunk's records as a list (count chunk_records), or null when no more can be
// made. Under g_pool_mu.
block* new_chunk() {
  const std::size_t n = g_chunk_count.load(std::memory_order_relaxed);
  if (n == max_chunks) return nullptr;
  void* m = ::mmap(nullptr, chunk_records * sizeof(block), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (m == MAP_FAILED) return nullptr;
  block* c = static_cast<block*>(m);
  for (std::size_t i = 0; i < chunk_records; ++i) {
    new (&c[i]) block;
    c[i].next = i + 1 < chunk_records ? &c[i + 1] : nullptr;
  }
  g_chunks[n].store(c, std::memory_order_release);
  g_chunk_count.store(n + 1, std::memory_order_release);
  return c;
}

// The calling thread's free records. Zero-initialised and trivially destructible (an
// initial-exec TLS access, no guard): `limit` is 0 until the thread's first trip to the
// global list registers its exit (a pthread key), and again once it exits, so that
// put_record's one compare sends both cases there.
struct record_cache {
  block* head;
  std::uint32_t n;
  std::uint32_t limit;  // high_water once registered; 0 before and after the thread's life
  bool registered;
};

constinit thread_local record_cache tls_records REPLAYALLOC_TLS_IE = {};

// Moves k records of rc (all when k >= rc.n) to the global list.
// The last of a list's first k records (at most: *count says how many; the list is
// non-empty, k >= 1).
block* kth_record(block* first, std::uint32_t k, std::uint32_t* count) {
  block* last = first;
  std::uint32_t n = 1;
  while (n < k && last->next != nullptr) {
    last = last->next;
    ++n;
  }
  *count = n;
  return last;
}

void give_records(record_cache& rc, std::uint32_t k) {
  if (k == 0 || rc.head == nullptr) return;
  block* first = rc.head;
  std::uint32_t moved = 0;
  block* last = kth_record(first, k, &moved);
  rc.head = last->next;
  rc.n -= moved;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  last->next = g_pool;
  g_pool = first;
}

pthread_key_t g_exit_key;
void on_thread_exit(void*) {
  record_cache& rc = tls_records;
  give_records(rc, rc.n);
  rc.limit = 0;  // frees from later destructors go to the global list
}
void register_thread(record_cache& rc) {
  if (rc.registered) return;
  static const bool key_made = pthread_key_create(&g_exit_key, on_thread_exit) == 0;
  rc.registered = true;
  if (key_made && pthread_setspecific(g_exit_key, &rc) == 0) rc.limit = high_water;
  // Without the key the thread keeps limit 0: every free goes to the global list.
}

REPLAYALLOC_NOINLINE block* take_record_slow() {
  record_cache& rc = tls_records;
  register_thread(rc);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool == nullptr) g_pool = new_chunk();
  if (g_pool == nullptr) {
    if (!g_pool_exhausted_logged) {
      g_pool_exhausted_logged = true;
      REPLAYALLOC_LOG(error, "native CUDA allocator: no more block records (%zu live blocks, or no memory "
                      "for more); the allocation fails", max_chunks * chunk_records);
    }
    return nullptr;
  }
  // Up to `batch` of the global list: the first is returned, the rest kept.
  block* first = g_pool;
  std::uint32_t k = 0;
  block* last = kth_record(first, batch, &k);
  g_pool = last->next;
  last->next = nullptr;
  rc.head = first->next;
  rc.n = k - 1;
  return first;
}

inline block* take_record() {
  record_cache& rc = tls_records;
  block* b = rc.head;
  if (b == nullptr) [[unlikely]] return take_record_slow();
  rc.head = b->next;
  --rc.n;
  return b;
}

REPLAYALLOC_NOINLINE void put_record_slow(block* b) {
  record_cache& rc = tls_records;
  if (!rc.registered) register_thread(rc);
  if (rc.limit == 0) {  // exiting, or no key to be had
    std::lock_guard<std::mutex> lock(g_pool_mu);
    b->next = g_pool;
    g_pool = b;
    return;
  }
  b->next = rc.head;
  rc.head = b;
  ++rc.n;
  if (rc.n > rc.limit) give_records(rc, high_water / 2);
}

inline void put_record(block* b) {
  record_cache& rc = tls_records;
  if (rc.n >= rc.limit) [[unlikely]] return put_record_slow(b);
  b->next = rc.head;
  rc.head = b;
  ++rc.n;
}

// ---- Counters -----------------------------------------------------------------

struct counter {
  std::atomic<std::int64_t> current{0}, peak{0}, total{0};
  // reset_accumulated_stats's marks: total, and total - current, then.
  std::atomic<std::int64_t> total_mark{0}, freed_mark{0};

  void add(std::int64_t v) {
    const std::int64_t now = current.fetch_add(v, std::memory_order_relaxed) + v;
    total.fetch_add(v, std::memory_order_relaxed);
    std::int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(std::int64_t v) { current.fetch_sub(v, std::memory_order_relaxed); }

  stat read() const {
    stat s;
    s.current = current.load(std::memory_order_relaxed);
    s.peak = std::max(peak.load(std::memory_order_relaxed), s.current);
    const std::int64_t t = total.load(std::memory_order_relaxed);
    s.allocated = t - total_mark.load(std::memory_order_relaxed);
    s.freed = (t - s.current) - freed_mark.load(std::memory_order_relaxed);
    return s;
  }
  void reset_peak() { peak.store(current.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void reset_accumulated() {
    const std::int64_t t = total.load(std::memory_order_relaxed);
    total_mark.store(t, std::memory_order_relaxed);
    freed_mark.store(t - current.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
};

struct alignas(64) device_counters {
  // Every allocation and free.
  counter count, bytes, requested;
  // Blocks from the runtime, and slabs (on_slab).
  counter segments, reserved;
  std::atomic<std::int64_t> from_slab{0}, ooms{0}, synchronized_frees{0};
  std::atomic<std::int64_t> from_slab_mark{0}, ooms_mark{0}, synchronized_mark{0};
};

device_counters g_dev[max_devices];

void on_slab(int device, std::int64_t bytes) {
  if (device < 0 || device >= max_devices) return;
  device_counters& c = g_dev[device];
  if (bytes > 0) {
    c.reserved.add(bytes);
    c.segments.add(1);
  } else {
    c.reserved.sub(-bytes);
    c.segments.sub(1);
  }
}

// Slabs are counted from the first one: set before main (the library's static
// initialisation; the dlopen build's too), before any iteration maps one.
[[maybe_unused]] const bool g_observing = (detail::set_device_slab_observer(&on_slab), true);

void check_device(int device) {
  if (device < 0 || device >= max_devices) {
    throw std::invalid_argument("replayalloc: device " + std::to_string(device) + " is outside 0.." +
                                std::to_string(max_devices - 1));
  }
}

// Makes `device` current for the scope, when it is not already.
class device_scope {
 public:
  explicit device_scope(int device) {
    if (cuda_rt().get_device(&prev_) != cudaSuccess) {
      cuda_rt().get_last_error();
      prev_ = -1;
    }
    if (prev_ != device) {
      if (::cudaSetDevice(device) == cudaSuccess) {
        switched_ = true;
      } else {
        cuda_rt().get_last_error();
      }
    }
  }
  ~device_scope() {
    if (switched_ && prev_ >= 0) ::cudaSetDevice(prev_);
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int prev_ = -1;
  bool switched_ = false;
};

// ---- Raw allocations ------------------------------------------------------------

std::mutex g_raw_mu;
absl::flat_hash_map<void*, block*>& raw_blocks() {
  static auto* m = new absl::flat_hash_map<void*, block*>;  // never destroyed: frees at exit
  return *m;
}

// fork(): the child's copy of a lock another thread held would never be released, and
// a child frees what it inherited (a DataLoader worker dropping a CUDA tensor: the
// runtime refuses, the record still goes back). So both locks are taken around fork,
// the raw map's first (it is taken before the pool's in raw_delete's free).
void fork_prepare() {
  g_raw_mu.lock();
  g_pool_mu.lock();
}
void fork_release() {
  g_pool_mu.unlock();
  g_raw_mu.unlock();
}
[[maybe_unused]] const bool g_fork_safe = pthread_atfork(fork_prepare, fork_release, fork_release) == 0;

}  // namespace

namespace {

// allocate's requests for no bytes or on a device outside the range.
REPLAYALLOC_NOINLINE allocation allocate_odd(std::size_t bytes, int device) {
  check_device(device);
  (void)bytes;  // 0: as PyTorch's caching allocator, no block for no bytes
  return {};
}

// allocate when the device domain or the records could not serve: gives back what was
// had and throws.
REPLAYALLOC_NOINLINE allocation allocate_failed(void* p, block* b, std::size_t bytes, int device,
                                                cudaStream_t stream) {
  g_dev[device].ooms.fetch_add(1, std::memory_order_relaxed);
  if (b != nullptr) put_record(b);
  if (p != nullptr) {
    detail::device_free(p, device, stream);
    throw out_of_memory("replayalloc: no record for a block of " + std::to_string(bytes) +
                        " bytes (host memory or the records' limit exhausted)");
  }
  char mem[128];
  detail::describe_device_memory(mem, sizeof mem);
  throw out_of_memory("replayalloc: cannot allocate " + std::to_string(bytes) + " bytes of device memory on device " +
                      std::to_string(device) + " (" + mem + ")");
}

// free_block's rare cases: a second free, or streams named by record_stream.
REPLAYALLOC_NOINLINE void free_recorded(block* b, void* p) {
  if (p == nullptr) {
    REPLAYALLOC_LOG(error, "native CUDA allocator: a block freed twice (record %p); ignored", static_cast<void*>(b));
    return;
  }
  const std::uint32_t n = b->recorded.load(std::memory_order_acquire);
  device_scope scope(b->device);
  if (n > static_cast<std::uint32_t>(max_recorded_streams)) {
    // More streams than the record holds: wait for all of them.
    if (cuda_rt().device_synchronize() != cudaSuccess) cuda_rt().get_last_error();
    g_dev[b->device].synchronized_frees.fetch_add(1, std::memory_order_relaxed);
  } else {
    for (std::uint32_t i = 0; i < n; ++i) {
      detail::order_after(b->stream, b->streams[i].load(std::memory_order_relaxed));
    }
  }
  b->recorded.store(0, std::memory_order_relaxed);
}

}  // namespace

allocation allocate(std::size_t bytes, int device, cudaStream_t stream) {
  if (static_cast<unsigned>(device) >= static_cast<unsigned>(max_devices) || bytes == 0) [[unlikely]] {
    return allocate_odd(bytes, device);
  }
  bool from_slab = false;
  void* p = detail::device_alloc_tagged(bytes, device, stream, from_slab);
  block* b = take_record();
  if (p == nullptr || b == nullptr) [[unlikely]] return allocate_failed(p, b, bytes, device, stream);
  b->size = bytes;
  b->stream = stream;
  b->device = device;
  b->from_slab = from_slab;
  b->ptr.store(p, std::memory_order_release);
  device_counters& c = g_dev[device];
  const std::int64_t r = rounded(bytes);
  c.count.add(1);
  c.bytes.add(r);
  c.requested.add(static_cast<std::int64_t>(bytes));
  if (from_slab) {
    c.from_slab.fetch_add(1, std::memory_order_relaxed);
  } else {
    c.segments.add(1);
    c.reserved.add(r);
  }
  return {p, b};
}

void free_block(void* ctx) noexcept {
  block* b = static_cast<block*>(ctx);
  if (b == nullptr) return;
  void* p = b->ptr.load(std::memory_order_acquire);
  if (p == nullptr || b->recorded.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    free_recorded(b, p);
    if (p == nullptr) return;
  }
  b->ptr.store(nullptr, std::memory_order_relaxed);
  detail::device_free(p, b->device, b->stream);
  device_counters& c = g_dev[b->device];
  const std::int64_t r = rounded(b->size);
  c.count.sub(1);
  c.bytes.sub(r);
  c.requested.sub(static_cast<std::int64_t>(b->size));
  if (!b->from_slab) {
    c.segments.sub(1);
    c.reserved.sub(r);
  }
  put_record(b);
}

void record_stream(block* b, cudaStream_t stream) noexcept {
  if (b == nullptr || stream == b->stream) return;
  const std::uint32_t n = b->recorded.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < std::min<std::uint32_t>(n, max_recorded_streams); ++i) {
    if (b->streams[i].load(std::memory_order_relaxed) == stream) return;
  }
  const std::uint32_t slot = b->recorded.fetch_add(1, std::memory_order_acq_rel);
  if (slot < static_cast<std::uint32_t>(max_recorded_streams)) b->streams[slot].store(stream, std::memory_order_release);
}

void* block_ptr(const block* b) noexcept { return b->ptr.load(std::memory_order_acquire); }
std::size_t block_size(const block* b) noexcept { return b->size; }
int block_device(const block* b) noexcept { return b->device; }
cudaStream_t block_stream(const block* b) noexcept { return b->stream; }

void* raw_alloc(std::size_t bytes, int device, cudaStream_t stream) {
  allocation a = allocate(bytes, device, stream);
  if (a.ptr == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_raw_mu);
  raw_blocks()[a.ptr] = a.ctx;
  return a.ptr;
}

void raw_delete(void* p) noexcept {
  if (p == nullptr) return;
  block* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_raw_mu);
    auto it = raw_blocks().find(p);
    if (it != raw_blocks().end()) {
      b = it->second;
      raw_blocks().erase(it);
    }
  }
  if (b == nullptr) {
    REPLAYALLOC_LOG(error, "native CUDA allocator: raw_delete(%p) of a pointer raw_alloc did not return; ignored", p);
    return;
  }
  free_block(b);
}

device_stats stats(int device) {
  check_device(device);
  const device_counters& c = g_dev[device];
  device_stats s;
  s.allocation = c.count.read();
  s.active = s.allocation;
  s.segment = c.segments.read();
  s.allocated_bytes = c.bytes.read();
  s.active_bytes = s.allocated_bytes;
  s.reserved_bytes = c.reserved.read();
  s.requested_bytes = c.requested.read();
  s.num_ooms = c.ooms.load(std::memory_order_relaxed) - c.ooms_mark.load(std::memory_order_relaxed);
  s.synchronized_frees =
      c.synchronized_frees.load(std::memory_order_relaxed) - c.synchronized_mark.load(std::memory_order_relaxed);
  s.blocks_from_slab = c.from_slab.load(std::memory_order_relaxed) - c.from_slab_mark.load(std::memory_order_relaxed);
  return s;
}

void reset_peak_stats(int device) {
  check_device(device);
  device_counters& c = g_dev[device];
  for (counter* k : {&c.count, &c.bytes, &c.requested, &c.segments, &c.reserved}) k->reset_peak();
}

void reset_accumulated_stats(int device) {
  check_device(device);
  device_counters& c = g_dev[device];
  for (counter* k : {&c.count, &c.bytes, &c.requested, &c.segments, &c.reserved}) k->reset_accumulated();
  c.ooms_mark.store(c.ooms.load(std::memory_order_relaxed), std::memory_order_relaxed);
  c.synchronized_mark.store(c.synchronized_frees.load(std::memory_order_relaxed), std::memory_order_relaxed);
  c.from_slab_mark.store(c.from_slab.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

std::size_t largest_block(int device) {
  check_device(device);
  device_scope scope(device);
  std::size_t free_b = 0, total_b = 0;
  if (cuda_rt().mem_get_info(&free_b, &total_b) != cudaSuccess) {
    cuda_rt().get_last_error();
    return 0;
  }
  return free_b;
}

void empty_cache() noexcept {
  int devices = 0;
  if (::cudaGetDeviceCount(&devices) != cudaSuccess) {
    cuda_rt().get_last_error();
    return;
  }
  for (int d = 0; d < std::min(devices, max_devices); ++d) {
    device_scope scope(d);
    if (cuda_rt().device_synchronize() != cudaSuccess) cuda_rt().get_last_error();
    cudaMemPool_t pool = nullptr;
    if (::cudaDeviceGetDefaultMemPool(&pool, d) != cudaSuccess || ::cudaMemPoolTrimTo(pool, 0) != cudaSuccess) {
      cuda_rt().get_last_error();
    }
  }
}

void for_each_record(absl::FunctionRef<void(const block&)> f) {
  const std::size_t n = g_chunk_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    const block* c = g_chunks[i].load(std::memory_order_acquire);
    for (std::size_t j = 0; j < chunk_records; ++j) f(c[j]);
  }
}

}  // namespace replayalloc::cuda::native
