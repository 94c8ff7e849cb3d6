// The replay slow path: everything the hot path does not do in a straight line.
//
// Note [Replay mismatch]
// ~~~~~~~~~~~~~~~~~~~~~~
// The program asked for something other than the slot at the cursor. Either the request
// is extra (or its size changed) and the next request will be the one the cursor
// expects; or allocations the plan expected are missing and the program has moved on to
// a slot further ahead. One request cannot tell the two apart, so the mismatching
// request goes to the backend and the cursor stays; if its size is found within
// REPLAYALLOC_RESYNC_WINDOW slots ahead, that match is kept as pending. The next
// request decides: the cursor's slot (the mismatch was extra), the slot after it (the
// mismatch replaced the cursor's slot: its size changed), or the slot after the pending
// match (allocations were missing: the skipped slots are passed over and the cursor
// jumps). Each deviation costs one fallback and no lost hits; when equal sizes make the
// cases look alike, the first reading wins, which may cost one more fallback, never
// correctness. Slots passed over are marked dead or blocked (Note [Overlap lists] in
// compiled_plan.h), never handed out later.
//
// With shapes that change, a slot is a capacity (Note [Envelope], trace.h): a request
// "matches" a slot it fits. A request larger than the cursor's slot is most often
// that slot's allocation at a shape larger than any planned (counted as too_large:
// the key then records once more and grows its envelope). When the slot scales with
// the shape (its recordings varied) that reading is taken at once: the slot is passed
// over and the cursor moves on. When it has one fixed size, the next request decides:
// if it fits both, the slot after the cursor wins over the cursor's (the larger
// request replaced it), unless the next request has exactly the cursor slot's size
// (the fixed-shape reading: the larger one was extra). Either reading only decides which
// slot is handed out; what keeps memory safe is the same in both: capacity and the
// overlap lists.

#include "replay/fast_path.h"
#include "support/log.h"

namespace replayalloc::detail {
namespace {

bool overlaps_free(const replay_cursor& c, const slot& s) {
  const std::uint32_t* o = c.overlaps + s.overlap_begin;
  for (std::uint32_t k = 0; k < s.overlap_count; ++k) {
    if (slot_occupied(c, o[k])) return false;
  }
  return true;
}

void pass_over(replay_cursor& c, std::uint32_t j) {
  const slot& s = c.slots[j];
  const bool busy = s.offset != not_in_slab && !overlaps_free(c, s);
  c.recs[j].state.store(busy ? slot_blocked : slot_dead, std::memory_order_release);
}

// Note [Freed prefix] (slot_record.h): moves dead_prefix over the ranks whose slots
// are dead. A slot passed over while its bytes were busy becomes dead here once the
// slots it waited for are free (the same test pass_over() makes).
void advance_dead_prefix(replay_cursor& c) {
  while (c.dead_prefix < c.free_count) {
    slot_record& r = *c.first_frees[c.dead_prefix].rec;
    const std::uint32_t st = r.state.load(std::memory_order_acquire);
    if (st != slot_dead) {
      if (st != slot_blocked || !overlaps_free(c, c.slots[r.index])) return;
      r.state.store(slot_dead, std::memory_order_release);
    }
    ++c.dead_prefix;
  }
}

// Moves the dead prefix on (which also frees the slots passed over behind a block held
// longer than recorded, once it is freed: without that, every later slot on those
// bytes would wait for a free that never comes), and puts the free cursor back in the
// first copy of the free order when the dead prefix has caught up with it, so that
// hits are served without the overlap check again.
void restore_free_prefix(replay_cursor& c) {
  if (c.free_cur == &g_closed_free) return;
  advance_dead_prefix(c);
  if (c.free_cur >= c.first_frees) {
    // Ranks the dead prefix passed are freed already (or passed over): the next free
    // the recording predicts is past them.
    const auto rank = static_cast<std::uint32_t>(c.free_cur - c.first_frees);
    if (rank < c.dead_prefix) set_free_rank(c, c.dead_prefix);
    return;
  }
  const auto rank = static_cast<std::uint32_t>(c.free_cur - c.second_frees);
  if (rank <= c.dead_prefix) set_free_rank(c, rank);
}

// Closes the allocation cursor for the slow path's work (if open), and opens it again
// at the end: the slow path moves it by `next`.
class cursor_scope {
 public:
  explicit cursor_scope(replay_cursor& c) : c_(c), was_open_(cursor_open(c)) { close_cursor(c); }
  ~cursor_scope() {
    if (was_open_) open_cursor(c_);
  }
  cursor_scope(const cursor_scope&) = delete;
  cursor_scope& operator=(const cursor_scope&) = delete;

 private:
  replay_cursor& c_;
  bool was_open_;
};

// The request goes to the domain's backend (the caller allocates it).
REPLAYALLOC_COLD void* miss(replay_cursor& c, miss_reason why, std::size_t size) {
  if (c.first_miss_at == 0 && why != miss_reason::alignment) {
    c.first_miss_at = c.next + 1;
    c.first_miss_size = size;
  }
  if (c.first_too_large_at == 0 && why == miss_reason::too_large) {
    c.first_too_large_at = c.next + 1;
    c.first_too_large_size = size;
  }
  bump(c.misses[static_cast<unsigned>(why)]);
  bump(c.miss_bytes, size);
  c.last_kind = backend_kind::ordinary;
  return nullptr;
}

// Takes slot i for this request (the cursor moves past it), from the slab when its
// bytes are free, else from the backend.
// pre: i >= c.next (the cursor only moves forward).
void* take(replay_cursor& c, std::uint32_t i, std::size_t size, std::size_t align) {
#if REPLAYALLOC_DEBUG >= 1
  if (i < c.next) __builtin_trap();
#endif
  const slot& s = c.slots[i];
  c.next = i + 1;
  if (s.offset == not_in_slab) {
    // The recording saw this block outlive the iteration, or large-model support
    // moved it out of the slab: the backend serves it, as planned.
    bump(c.backend_planned);
    c.last_kind = static_cast<backend_kind>(s.offset_row);
    return nullptr;
  }
  if ((s.offset & (align - 1)) != 0) {
    pass_over(c, i);
    return miss(c, miss_reason::alignment, size);
  }
  slot_record& r = c.recs[i];
  if (!overlaps_free(c, s)) {
    // An earlier block on these bytes is still held (freed later than recorded).
    r.state.store(slot_blocked, std::memory_order_release);
    return miss(c, miss_reason::overlap_live, size);
  }
  r.state.store(slot_live, std::memory_order_relaxed);
  ++c.handed;
  c.hit_bytes += size;
  return r.ptr;
}

}  // namespace

void* replay_malloc_slow(replay_cursor& c, std::size_t size, std::size_t align) {
  const cursor_scope scope(c);
  restore_free_prefix(c);
  if (c.next >= c.count) return miss(c, miss_reason::beyond_plan, size);
  const std::uint32_t lookahead = c.pending;
  c.pending = 0;
  const auto fits = [&](std::uint32_t i) { return size <= c.slots[i].size && size >= c.slots[i].least; };
  // A too_large miss at this very cursor position came just before: with this one, or
  // with the slot after the cursor taken below, the cursor's allocation grew (an
  // extra allocation is followed by the one the cursor expects instead).
  const bool after_too_large = c.too_large_at == c.next + 1;
  c.too_large_at = 0;
  if (c.mismatched) {
    c.mismatched = false;
    const bool cursor_fits = fits(c.next);
    // The slot after the cursor: the previous request replaced the cursor's slot (its
    // size changed), unless this request is exactly what the cursor's slot was made for.
    if (c.next + 1 < c.count && fits(c.next + 1) &&
        !(cursor_fits && c.slots[c.next].size == size)) {
      if (after_too_large) ++c.grown;
      pass_over(c, c.next);
      return take(c, c.next + 1, size, align);
    }
    // The slot at the cursor: the previous mismatch was an extra allocation.
    if (cursor_fits) return take(c, c.next, size, align);
    // The slot after the previous request's look-ahead match: allocations are missing.
    // Only while that slot is still ahead: hits on the fast path may have moved the
    // cursor since, and the cursor must never move back (a slot behind it may be live).
    if (lookahead > c.next && lookahead < c.count && fits(lookahead)) {
      for (std::uint32_t j = c.next; j < lookahead; ++j) pass_over(c, j);
      return take(c, lookahead, size, align);
    }
  } else if (fits(c.next)) {
    // The fast path refused the cursor's slot (bytes busy, alignment, outliving).
    return take(c, c.next, size, align);
  }
  c.mismatched = true;
  // Look ahead for an exact size first (the fixed-shape reading), else a slot it fits.
  const std::uint32_t window = c.resync_window;
  const std::uint32_t limit = c.count - c.next > window ? c.next + window + 1 : c.count;
  std::uint32_t fit_at = 0;
  bool exact = false;
  for (std::uint32_t i = c.next + 1; i < limit; ++i) {
    if (c.slots[i].size == size) {
      fit_at = i + 1;
      exact = true;
      break;
    }
    if (fit_at == 0 && fits(i)) fit_at = i + 1;
  }
  c.pending = fit_at;
  // Larger than the cursor's slot and made for no slot ahead: most likely that slot's
  // allocation at a shape beyond the envelope (the key grows its plan).
  if (size > c.slots[c.next].size && !exact) {
    if (c.slots[c.next].least < c.slots[c.next].size) {
      // The cursor's slot scales with the shape (its recordings varied) and this
      // request outgrew it: the shape grew past the envelope, and this is the slot's
      // allocation. The slot is passed over at once, so the next request meets the
      // next slot, on the fast path; left at the cursor, a smaller next request
      // would take it there and put every later request one slot off.
      ++c.grown;
      c.mismatched = false;
      c.pending = 0;
      pass_over(c, c.next);
      void* none = miss(c, miss_reason::too_large, size);
      ++c.next;
      return none;
    }
    if (after_too_large) ++c.grown;
    c.too_large_at = c.next + 1;
    return miss(c, miss_reason::too_large, size);
  }
  return miss(c, miss_reason::size_mismatch, size);
}

void replay_free_slow(replay_cursor& c, void* p, slab* s) {
  if (s == nullptr) {
    bump(c.invalid_frees);
    REPLAYALLOC_LOG(warning, "free(%p): inside the slab range but in no slab; ignored", p);
    return;
  }
  const std::uint64_t off = static_cast<std::uint64_t>(static_cast<std::uint8_t*>(p) - s->base);
  const compiled_plan& plan = s->version->plan;
  bool planned = false;
  slot_record* r = s->live_block_at(off, &planned);
  if (!planned) {
    bump(c.invalid_frees);
    REPLAYALLOC_LOG(warning, "free(%p): not the start of a block (slab offset %llu); ignored", p,
                    static_cast<unsigned long long>(off));
    return;
  }
  std::uint32_t expected = slot_live;
  if (r == nullptr || !r->state.compare_exchange_strong(expected, slot_dead, std::memory_order_acq_rel,
                                                        std::memory_order_relaxed)) {
    bump(c.double_frees);
    REPLAYALLOC_LOG(warning, "free(%p): block is not live (double free?); ignored", p);
    return;
  }
  if (s == c.current) {
    ++c.freed_here;
    advance_dead_prefix(c);
    // Predict from here on (the free cursor is never hidden while the plan is).
    const std::uint32_t rank = plan.slots[r->index].free_rank;
    if (rank != no_rank && c.free_cur != &g_closed_free) set_free_rank(c, rank + 1);
    return;
  }
  bump(c.remote_frees);
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) s->version->release(s);
}

}  // namespace replayalloc::detail
