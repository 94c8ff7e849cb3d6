// replayalloc/replay/cursor_ops.h: a replay's beginning, end and abandonment, the
// only places outside the hot path (fast_path.h) and the slow path (slow_path.cc) that
// set a replay_cursor's fields.
//
// Layer: replay. The runtime starts a replay on a plan and a slab, and at the
// iteration's end finishes it into a replay_outcome (what it handed out and freed, its
// misses, where it first left the plan); it never writes a cursor field itself.
#pragma once

#include <cstdint>

#include "replay/compiled_plan.h"
#include "replay/fast_path.h"
#include "replay/slab_pool.h"

namespace replayalloc::detail {

// Every miss the cursor counted, over all reasons (cumulative for the thread).
inline std::uint64_t cursor_misses(const replay_cursor& c) {
  std::uint64_t n = 0;
  for (const auto& m : c.misses) n += m.load(std::memory_order_relaxed);
  return n;
}

// Starts replaying plan `p` on slab `s` (ready: its records read "not reached"), from
// its first slot. Returns the thread's misses so far (finish_replay() counts from it).
inline std::uint64_t start_replay(replay_cursor& c, const compiled_plan& p, slab* s) {
  c.slots = p.slots.data();
  c.overlaps = p.overlaps.data();
  c.recs = s->recs;
  c.first_frees = s->first_frees();
  c.second_frees = s->second_frees();
  c.base = s->base;
  c.next = 0;
  c.count = static_cast<std::uint32_t>(p.slots.size());
  c.free_count = s->free_count;
  c.dead_prefix = 0;
  c.pending = 0;
  c.mismatched = false;
  c.handed = 0;
  c.freed_here = 0;
  c.hit_bytes = 0;
  c.current = s;
  c.free_cur = c.free_published = c.first_frees;
  c.serving = true;
  open_cursor(c);
  c.grown = 0;
  c.too_large_at = 0;
  c.first_miss_at = 0;
  c.first_too_large_at = 0;
  return cursor_misses(c);
}

// What one replay did.
struct replay_outcome {
  slab* s = nullptr;              // its slab: the caller adds `outstanding` to its refs
  std::int64_t outstanding = 0;   // blocks handed out and not freed by this thread
  std::uint32_t handed = 0;       // slots handed out
  std::uint32_t freed_here = 0;   // of which freed by this thread during the iteration
  std::uint64_t hit_bytes = 0;
  std::uint64_t misses = 0;       // requests the plan did not serve (since start_replay)
  std::uint32_t grown = 0;        // slots whose request outgrew them
  std::uint32_t first_miss_at = 0;  // slot + 1 of the first miss; 0: none
  std::uint64_t first_miss_size = 0;
  std::uint32_t first_too_large_at = 0;
  std::uint64_t first_too_large_size = 0;
};

// Stops the replay (the hit can no longer serve, the frees are synced) and clears the
// cursor; `misses_at_start`: start_replay()'s value. The slab may go back to its pool
// only after this.
inline replay_outcome finish_replay(replay_cursor& c, std::uint64_t misses_at_start) {
  replay_outcome o;
  o.misses = cursor_misses(c) - misses_at_start;
  close_cursor(c);
  sync_frees(c);
  c.serving = false;
  c.free_cur = c.free_published = c.free_saved = &g_closed_free;
  o.s = c.current;
  o.handed = c.handed;
  o.freed_here = c.freed_here;
  o.hit_bytes = c.hit_bytes;
  o.outstanding = static_cast<std::int64_t>(c.handed) - c.freed_here;
  o.grown = c.grown;
  o.first_miss_at = c.first_miss_at;
  o.first_miss_size = c.first_miss_size;
  o.first_too_large_at = c.first_too_large_at;
  o.first_too_large_size = c.first_too_large_size;
  c.count = 0;
  c.next = 0;
  c.free_count = 0;
  c.current = nullptr;
  c.base = nullptr;
  return o;
}

// Abandons the replay without returning its slab (a forked child's open iteration:
// its blocks stay valid, the slab never returns to its pool, so nothing it handed out
// is ever handed out again).
inline void abandon_replay(replay_cursor& c) {
  c.serving = false;
  c.cur = &g_closed_slot;
  c.free_cur = c.free_published = c.free_saved = &g_closed_free;
  c.count = 0;
  c.free_count = 0;
  c.current = nullptr;
  c.base = nullptr;
}

}  // namespace replayalloc::detail
