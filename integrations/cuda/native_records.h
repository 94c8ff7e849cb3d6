// integrations/cuda/native_records.h: the native allocator's block records, for the
// files of its core (native_allocator.cc: the records' pools, allocation and free;
// native_snapshot.cc: snapshots and base_allocation, which scan them).
//
// Layer: integration (cuda), linked builds only. Note [Block records] in
// native_allocator.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "replayalloc/cuda_native.hpp"

namespace replayalloc::cuda::native {

// A block's record: a DataPtr's context. Live while `ptr` is non-null; the other fields
// are written before `ptr` is published (release) and read after it is seen (acquire).
struct block {
  std::atomic<void*> ptr{nullptr};  // null while the record is free
  std::size_t size = 0;             // asked for
  cudaStream_t stream = nullptr;
  std::int32_t device = 0;
  bool from_slab = false;
  std::atomic<std::uint32_t> recorded{0};  // streams record_stream named (may pass the max)
  std::atomic<cudaStream_t> streams[max_recorded_streams];
  block* next = nullptr;  // in a free list
};

// The bytes a block counts for: its size rounded up to 256 (what cudaMalloc aligns to).
constexpr std::int64_t rounded(std::size_t n) { return static_cast<std::int64_t>((n + 255) & ~std::size_t{255}); }

// Calls f for every record ever made, live or not (slow: snapshots). Any thread; a
// record may change while f reads it.
void for_each_record(absl::FunctionRef<void(const block&)> f);

}  // namespace replayalloc::cuda::native
