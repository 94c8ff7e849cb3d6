// replayalloc/runtime/thread_state.h: everything the engine keeps per thread.
//
// Layer: runtime. One constinit, initial-exec thread_local: no constructor, no TLS
// wrapper call, safe to touch from the first malloc of a thread. Its counters are
// atomics written only by their thread (relaxed; see bump()) so statistics can be
// summed from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "replay/fast_path.h"
#include "support/config.h"

namespace replayalloc::detail {

class trace_recorder;
struct key_entry;

enum class phase : std::uint8_t {
  none,    // no iteration, or one that passes through (mode off, no slab, someone else records)
  record,  // recording this iteration
  replay,  // replaying: the cursor is set
};

struct thread_state {
  replay_cursor cursor;  // hot: first
  phase ph = phase::none;
  bool registered = false;
  bool exited = false;
  bool no_slab = false;  // this iteration wanted a slab and got none
  std::uint32_t depth = 0;
  std::uint32_t op = 0;
  std::uint32_t thread_no = 0;
  key_entry* entry = nullptr;
  plan_version* version = nullptr;
  trace_recorder* recorder = nullptr;
  std::uint64_t misses_at_begin = 0;
  std::uint64_t min_size = 0;
  key_entry* deviation_entry = nullptr;  // the key deviating_in_a_row counts for
  std::uint32_t deviating_in_a_row = 0;

  std::atomic<std::uint64_t> slab_hits{0};
  std::atomic<std::uint64_t> hit_bytes{0};
  std::atomic<std::uint64_t> passthrough{0};
  std::atomic<std::uint64_t> backend_bytes{0};
  std::atomic<std::uint64_t> no_slab_fallbacks{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> iterations{0};

  thread_state* next = nullptr;  // engine registry (under the engine's mutex)
  thread_state* prev = nullptr;
};

extern constinit thread_local thread_state tls_state REPLAYALLOC_TLS_IE;

}  // namespace replayalloc::detail
