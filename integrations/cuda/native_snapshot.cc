// Snapshots and base_allocation of the native allocator's core
// (replayalloc/cuda_native.hpp): what torch.cuda.memory._snapshot() and
// getBaseAllocation ask, from the device slabs (device_slabs.h) and the block records
// (native_records.h).
//
// Layer: integration (cuda), linked builds only. Slow paths: each scans every record.
#include <algorithm>
#include <utility>
#include <vector>

#include "device_slabs.h"
#include "native_records.h"
#include "replayalloc/cuda_native.hpp"
#include "runtime/domain.h"

namespace replayalloc::cuda::native {

void* base_allocation(void* p, std::size_t* size) {
  if (const detail::slab* s = detail::device_slab_owner(p)) {
    if (size != nullptr) *size = s->mapped;
    return s->base;
  }
  void* found = nullptr;
  for_each_record([&](const block& b) {
    void* q = b.ptr.load(std::memory_order_acquire);
    if (found == nullptr && q != nullptr && !b.from_slab && q == p) {
      found = q;
      if (size != nullptr) *size = b.size;
    }
  });
  return found;
}

std::vector<segment_info> snapshot() {
  struct live {
    std::uintptr_t address;
    std::size_t size;
    int device;
    cudaStream_t stream;
    bool from_slab;
  };
  std::vector<live> blocks;
  for_each_record([&](const block& b) {
    void* q = b.ptr.load(std::memory_order_acquire);
    if (q != nullptr) blocks.push_back({reinterpret_cast<std::uintptr_t>(q), b.size, b.device, b.stream, b.from_slab});
  });
  std::sort(blocks.begin(), blocks.end(), [](const live& a, const live& b) { return a.address < b.address; });

  std::vector<segment_info> out;
  detail::device_slab_visit([&](const detail::device_slab_info& s) {
    segment_info seg;
    seg.device = s.device;
    seg.address = reinterpret_cast<std::uintptr_t>(s.base);
    seg.total_size = s.bytes;
    seg.stream = static_cast<cudaStream_t>(const_cast<void*>(s.stream));
    seg.slab = true;
    const std::uintptr_t end = seg.address + seg.total_size;
    auto it = std::lower_bound(blocks.begin(), blocks.end(), seg.address,
                               [](const live& l, std::uintptr_t a) { return l.address < a; });
    std::uintptr_t at = seg.address;
    for (; it != blocks.end() && it->address < end; ++it) {
      if (!it->from_slab) continue;
      if (it->address > at) seg.blocks.push_back({at, it->address - at, 0, false});
      const std::size_t r = static_cast<std::size_t>(rounded(it->size));
      seg.blocks.push_back({it->address, r, it->size, true});
      seg.allocated_size += r;
      seg.requested_size += it->size;
      at = std::max(at, it->address + r);
    }
    if (at < end) seg.blocks.push_back({at, end - at, 0, false});
    out.push_back(std::move(seg));
  });
  for (const live& l : blocks) {
    if (l.from_slab) continue;
    segment_info seg;
    seg.device = l.device;
    seg.address = l.address;
    seg.total_size = static_cast<std::size_t>(rounded(l.size));
    seg.allocated_size = seg.total_size;
    seg.requested_size = l.size;
    seg.stream = l.stream;
    seg.blocks.push_back({l.address, seg.total_size, l.size, true});
    out.push_back(std::move(seg));
  }
  std::sort(out.begin(), out.end(),
            [](const segment_info& a, const segment_info& b) { return a.address < b.address; });
  return out;
}

}  // namespace replayalloc::cuda::native
