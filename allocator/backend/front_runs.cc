// The front cache's runs: blocks of its classes of 16 B-128 KiB (jemalloc's, and two more:
// Note [A class for a page and a header]) carved from runs of 64 KiB-1 MiB, each of one
// class, that the cache manages itself.
//
// (Note [Runs for medium blocks], front_runs.h.)

#include "backend/front_runs.h"

#include <bit>
#include <iterator>

#include "backend/backend.h"
#include "backend/front_stash.h"

namespace replayalloc::detail::backend::front {
namespace {

constexpr std::size_t run_least = 16;           // the smallest class served from runs: all
constexpr std::size_t run_most = 128 * 1024;    // the largest
constexpr unsigned table_shift = 16;            // one table entry per 64 KiB of the range
constexpr std::size_t run_bytes_least = std::size_t{1} << table_shift;
constexpr std::size_t run_bytes_most = 1024 * 1024;
constexpr unsigned blocks_wanted = 16;
constexpr unsigned most_taken = 64;  // blocks run_take hands out at once (a list's most)

struct run_header {
  void* free;             // its blocks given back, linked through their first word
  std::uint32_t carved;   // blocks carved so far, in order
  std::uint32_t out;      // blocks out of it (live, on a list or in the depot)
  std::uint32_t next;     // its pool's runs with free blocks: table index + 1, 0 none
  std::uint32_t prev;
  std::uint8_t slot;
  std::uint8_t klass;     // the class whose page map bytes it has (Note [Empty runs kept])
  // Bytes from its start that a carved block's link has written since the arena made it
  // (the blocks that begin below are not fresh: run_take's `fresh`).
  std::uint32_t touched;
};

struct alignas(64) run_pool {
  std::atomic<bool> locked{false};
  std::uint32_t partial = 0;  // runs with free blocks (index + 1), most recent first
  // The one run kept with no block out (index + 1): written under the lock, peeked
  // without it (release_empty_runs).
  std::atomic<std::uint32_t> empty{0};
};

std::uint32_t g_blocks[max_classes];      // blocks per run
std::uint8_t g_same_size[max_classes];    // the next run class with runs of its size (itself: none)
std::size_t g_run_bytes[max_classes];     // its runs' size
std::uintptr_t g_base = 0;
std::size_t g_span = 0;
// The table's origin: the range's start rounded down to 64 KiB (runs are aligned to
// their size, at least 64 KiB; the range's start need not be).
std::uintptr_t g_origin = 0;
std::atomic<std::uint8_t>* g_page_class = nullptr;
run_memory_fn g_memory = nullptr;
run_idle_fn g_idle = nullptr;
front_free_fn g_release = nullptr;
run_header* g_table = nullptr;
// For give_back_list: g_span once runs are configured (0 before), and g_table biased so
// that the header of the run at `start` is at g_table_at + (start >> 11).
std::size_t g_runs_span = 0;
std::uintptr_t g_table_at = 0;
REPLAYALLOC_LARGE_ZEROED constinit run_pool g_pools[front_max_arenas][max_classes];
std::atomic<std::uint64_t> g_made{0};
std::atomic<std::uint64_t> g_given_back{0};
std::atomic<std::size_t> g_bytes{0};

std::uint32_t index_of(std::uintptr_t start) noexcept {
  return static_cast<std::uint32_t>((start - g_origin) >> table_shift);
}
std::uintptr_t start_at(std::uint32_t i) noexcept { return g_origin + (std::uintptr_t{i} << table_shift); }
// The run class of the block at p by its page's byte; 0 (none) outside the range or
// before the runs are configured (a block of jemalloc's: it has no byte).
// listed_class: the same, base and span given (give_back_list keeps them in registers);
// 0 outside base..base+span, null too (base is above 0). g_runs_span is 0 until the runs
// are configured.
unsigned listed_class(const void* q, std::uintptr_t base, std::size_t span) noexcept {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(q) - base;
  return offset < span ? g_page_class[offset >> page_map_shift].load(std::memory_order_relaxed) : 0;
}
unsigned class_at(const void* p) noexcept { return listed_class(p, g_base, g_runs_span); }
std::uintptr_t start_of(const void* p, unsigned k) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) & ~(g_run_bytes[k] - 1);
}

// The page map's bytes of the pages a run of class k's blocks begin in (`v`: its class,
// or 0 as it goes back): every page of a run of blocks of at most a page, one page a
// block above (a 1 MiB run of 104 KiB blocks: 9 bytes, not 256). Frees, realloc and the
// usable size read the byte of a block's first page only, and the pages between are
// never a block's first while the run lasts.
void mark(std::uintptr_t start, unsigned k, std::uint8_t v) noexcept {
  const std::size_t first = (start - g_base) >> page_map_shift;
  if (g_run_size[k] <= (std::size_t{1} << page_map_shift)) {
    for (std::size_t i = 0; i < (run_extent_bytes(g_run_bytes[k]) >> page_map_shift); ++i) {
      g_page_class[first + i].store(v, std::memory_order_relaxed);
    }
    return;
  }
  for (std::uint32_t b = 0; b < g_blocks[k]; ++b) {
    const std::size_t page = (std::size_t{b} * g_run_size[k]) >> page_map_shift;
    g_page_class[first + page].store(v, std::memory_order_relaxed);
  }
}

void link_partial(run_pool& pool, std::uint32_t i) noexcept {
  run_header& r = g_table[i];
  r.prev = 0;
  r.next = pool.partial;
  if (pool.partial != 0) g_table[pool.partial - 1].prev = i + 1;
  pool.partial = i + 1;
}
void unlink_partial(run_pool& pool, std::uint32_t i) noexcept {
  run_header& r = g_table[i];
  if (r.prev != 0) {
    g_table[r.prev - 1].next = r.next;
  } else {
    pool.partial = r.next;
  }
  if (r.next != 0) g_table[r.next - 1].prev = r.prev;
  r.next = r.prev = 0;
}

// Blocks of the pool's runs (at most want), under its lock, linked on from *last (a
// block's first word the next one's address), last left at the last one's word.
unsigned pop_blocks(run_pool& pool, unsigned k, void**& last, unsigned want, unsigned fresh) noexcept {
  void** tail = last;  // in a register, not through the reference
  unsigned got = 0;
  if (const std::uint32_t e = pool.empty.load(std::memory_order_relaxed); pool.partial == 0 && e != 0) {
    link_partial(pool, e - 1);
    pool.empty.store(0, std::memory_order_relaxed);
  }
  const std::uint32_t blocks = g_blocks[k];
  const std::uintptr_t size = g_run_size[k];
  while (got < want && pool.partial != 0) {
    const std::uint32_t i = pool.partial - 1;
    run_header& r = g_table[i];
    // Its blocks given back first, then those never carved, by their addresses (a run
    // that went empty starts again uncarved: give_locked), whose memory is not read. The
    // ones given back are linked already: the first of its list taken as they lie.
    if (void* p = r.free; p != nullptr) {
      *tail = p;
      std::uint32_t m = 0;
      do {
        tail = static_cast<void**>(p);
        p = *tail;
        ++m;
      } while (got + m < want && p != nullptr);
      r.free = p;
      r.out += m;
      got += m;
    }
    std::uint32_t n = blocks - r.carved;
    if (n > want - got) n = want - got;
    // Of those, the ones beginning past what was ever written: `fresh` at most.
    const std::uint32_t written = static_cast<std::uint32_t>((r.touched + size - 1) / size);
    const std::uint32_t old = written > r.carved ? written - r.carved : 0;
    if (n > old && n - old > fresh) n = old + fresh;  // (fresh may be ~0u: no limit)
    fresh -= n > old ? n - old : 0;
    if (n != 0) {  // each linked to the one after it, the last first
      const std::uintptr_t b = start_at(i) + std::uintptr_t{r.carved} * size;
      const std::uintptr_t end = b + (n - 1) * size;
      for (std::uintptr_t a = end; a != b; a -= size) *reinterpret_cast<void**>(a - size) = reinterpret_cast<void*>(a);
      *tail = reinterpret_cast<void*>(b);
      tail = reinterpret_cast<void**>(end);
    }
    got += n;
    r.carved += n;
    r.out += n;
    const std::uintptr_t end = std::uintptr_t{r.carved} * size;
    if (end > r.touched) r.touched = static_cast<std::uint32_t>(end);
    if (r.out == blocks) {
      unlink_partial(pool, i);  // full: found again at a free
    } else if (got < want) {
      break;  // its fresh blocks spent, the run not full
    }
  }
  last = tail;
  return got;
}

// The empty run another class of the same run size keeps in the arena `slot`'s pools,
// taken from it (its page map bytes still that class's); 0 when there is none.
std::uintptr_t take_empty_run(unsigned k, unsigned slot) noexcept {
  for (unsigned j = g_same_size[k]; j != k; j = g_same_size[j]) {
    run_pool& other = g_pools[slot][j];
    if (other.empty.load(std::memory_order_relaxed) == 0) continue;  // a peek
    spin_lock(other.locked);
    const std::uint32_t e = other.empty.load(std::memory_order_relaxed);
    other.empty.store(0, std::memory_order_relaxed);
    spin_unlock(other.locked);
    if (e == 0) continue;
    return start_at(e - 1);
  }
  return 0;
}

// The run at `start`, `bytes` long and no block out of it, to the arena, its page map
// bytes (its class's, kept while it waited: Note [Empty runs kept]) cleared first.
void give_back_run(std::uintptr_t start, std::size_t bytes) noexcept {
  mark(start, g_table[index_of(start)].klass, 0);
  g_given_back.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  g_release(reinterpret_cast<void*>(start));
}

// Note [Empty runs kept]: run i of class k, no block out of it and its pool keeping
// another, to its arena's stash, its page map bytes kept (the class that takes it next is
// mostly its own); given back where nothing is stashed.
void stash_run(std::uint32_t i, unsigned k) noexcept {
  if (!stashing()) return give_back_run(start_at(i), g_run_bytes[k]);
  stash(start_at(i), g_table[i].slot, g_run_bytes[k]);
}

// Note [Idle blocks before a new run] (front_runs.h).
std::uintptr_t reuse_idle_run(unsigned k, unsigned slot, std::size_t bytes) noexcept {
  if (g_idle == nullptr || bytes != run_bytes_most) return 0;
  for (unsigned j = g_same_size[k]; j != k; j = g_same_size[j]) g_idle(j);
  const std::uintptr_t start = unstash(slot, bytes);
  return start != 0 ? start : take_empty_run(k, slot);
}

// A new run of class k (a stashed run of its size, another class's empty run, one that
// blocks waiting on lists left empty, or one from the arena), in the pool's list; false
// when none can be made.
bool make_run(run_pool& pool, unsigned k, unsigned slot) noexcept {
  const std::size_t bytes = g_run_bytes[k];
  std::uintptr_t start = unstash(slot, bytes);
  if (start == 0) start = take_empty_run(k, slot);
  if (start == 0) start = reuse_idle_run(k, slot, bytes);
  unsigned marked = 0;  // the class whose page map bytes the run has (0: none)
  std::uint32_t touched = 0;
  if (start != 0) {
    marked = g_table[index_of(start)].klass;
    touched = g_table[index_of(start)].touched;
  } else {
    // Note [Empty runs kept]: stashed runs of other sizes go back to the arena first
    // (one larger, else the smaller ones), for it to make this run of their pages.
    stash_room_for(slot, bytes);
    void* m = g_memory(bytes, slot);
    if (m == nullptr) return false;
    start = reinterpret_cast<std::uintptr_t>(m);
    // jemalloc serves a thread whose own state it has torn down from another arena,
    // outside the range (Note [The front cache's page map]): not a run.
    if (start - g_base >= g_span || (start & (bytes - 1)) != 0) {
      g_release(m);
      return false;
    }
    g_made.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  const std::uint32_t i = index_of(start);
  g_table[i] = run_header{nullptr, 0, 0, 0, 0, static_cast<std::uint8_t>(slot), static_cast<std::uint8_t>(k), touched};
  if (marked != k) {
    if (marked != 0) mark(start, marked, 0);
    mark(start, k, static_cast<std::uint8_t>(k));
  }
  spin_lock(pool.locked);
  link_partial(pool, i);
  return true;  // with the pool's lock held
}

}  // namespace

std::size_t run_table_bytes(std::size_t span) noexcept { return ((span >> table_shift) + 2) * sizeof(run_header); }

bool configure_runs(const std::uint32_t* class_size, std::uintptr_t base, std::size_t span,
                    std::atomic<std::uint8_t>* page_class, void* table, run_memory_fn memory,
                    front_free_fn release, run_clock_fn now, run_idle_fn idle) noexcept {
  // give_back needs these whether or not runs are made.
  g_base = base;
  g_span = span;
  g_page_class = page_class;
  g_release = release;
  if (memory == nullptr || page_class == nullptr || table == nullptr) return false;
  for (unsigned k = 0; k < max_classes; ++k) {
    const std::size_t c = class_size[k];
    if (c < run_least || c > run_most) continue;
    std::size_t bytes = std::bit_ceil(c * blocks_wanted);
    bytes = run_slot_bytes(bytes < run_bytes_least ? run_bytes_least : bytes > run_bytes_most ? run_bytes_most : bytes);
    g_run_size[k] = static_cast<std::uint32_t>(c);
    g_run_bytes[k] = bytes;
    g_blocks[k] = static_cast<std::uint32_t>(run_extent_bytes(bytes) / c);  // its extent's blocks
  }
  // Each run class's next of its run size, in a cycle, found in one pass (by the size's width).
  std::uint8_t first[32] = {}, last[32] = {};  // 0: none (class 0 is no run class)
  for (unsigned k = 0; k < max_classes; ++k) {
    g_same_size[k] = static_cast<std::uint8_t>(k);
    if (g_run_size[k] == 0) continue;
    const int b = std::bit_width(g_run_bytes[k]);
    (last[b] != 0 ? g_same_size[last[b]] : first[b]) = static_cast<std::uint8_t>(k);
    last[b] = static_cast<std::uint8_t>(k);
  }
  for (unsigned b = 0; b < 32; ++b) if (last[b] != 0) g_same_size[last[b]] = first[b];  // the cycle closed
  g_origin = base & ~(run_bytes_least - 1);
  g_memory = memory;
  g_idle = idle;
  configure_stash(now, &give_back_run);
  g_table = static_cast<run_header*>(table);
  static_assert(sizeof(run_header) == std::size_t{1} << (table_shift - 11));
  g_table_at = reinterpret_cast<std::uintptr_t>(table) - (g_origin >> 11);
  g_runs_span = span;
  return true;
}

bool run_class(unsigned k) noexcept { return g_run_size[k] != 0; }
std::uint32_t run_blocks(unsigned k) noexcept { return g_blocks[k]; }

void* run_take(unsigned k, unsigned slot, free_list* list, unsigned want, unsigned fresh) noexcept {
  if (want > most_taken) want = most_taken;
  run_pool& pool = g_pools[slot][k];
  void* first = nullptr;
  void** tail = &first;
  spin_lock(pool.locked);
  unsigned got = pop_blocks(pool, k, tail, want, fresh);
  spin_unlock(pool.locked);
  if (got == 0) {
    if (!make_run(pool, k, slot)) return nullptr;
    got = pop_blocks(pool, k, tail, want, fresh);
    spin_unlock(pool.locked);
  }
  // The first is the request's; the others go onto the list in the order they came
  // (Note [A run's blocks in address order]), before its blocks.
  if (got > 1) {
    *tail = list->head;
    list->head = *static_cast<void**>(first);
    list->count += got - 1;
  }
  return first;
}

void give_back(void* p) noexcept {
  // A block outside the range is jemalloc's (a list filled once jemalloc had torn down
  // the thread's state may hold some: Note [The front cache's page map]); it has no byte.
  if (const unsigned k = class_at(p); run_class(k)) return run_give(p, k);
  g_release(p);
}

namespace {

// Run i, its last block just in, under its pool's lock: carved again from its start, its
// free list forgotten (pop_blocks), and kept as the pool's empty run; or, the pool
// keeping another, its index + 1, to be stashed.
std::uint32_t went_empty(run_pool& pool, std::uint32_t i) noexcept {
  run_header& r = g_table[i];
  r.free = nullptr;
  r.carved = 0;
  unlink_partial(pool, i);
  if (pool.empty.load(std::memory_order_relaxed) == 0) {
    pool.empty.store(i + 1, std::memory_order_relaxed);
    return 0;
  }
  return i + 1;
}

// A stretch's run given back to (give_back_list) that was full (into its pool's list)
// or went empty (went_empty's result; 0 where it did not).
std::uint32_t settled(run_pool& pool, const run_header* r, bool was_full, bool emptied) noexcept {
  const auto i = static_cast<std::uint32_t>(r - g_table);
  if (was_full) link_partial(pool, i);
  return emptied ? went_empty(pool, i) : 0;
}

// For give_back_list: the header of the run at `start`.
run_header* header_of(std::uintptr_t start) noexcept {
  return reinterpret_cast<run_header*>(g_table_at + (start >> 11));
}

// Block p (of run i, `blocks` blocks a run) back to its run, under its pool's lock: the
// run to stash (index + 1), its last block in and the pool keeping another; or 0.
[[gnu::always_inline]] inline std::uint32_t give_locked(run_pool& pool, void* p, std::uint32_t i,
                                                        std::uint32_t blocks) noexcept {
  run_header& r = g_table[i];
  *static_cast<void**>(p) = r.free;
  r.free = p;
  if (r.out-- == blocks) link_partial(pool, i);  // it was full
  if (r.out != 0) [[likely]] return 0;
  return went_empty(pool, i);
}

}  // namespace

void run_give(void* p, unsigned k) noexcept {
  const std::uint32_t i = index_of(start_of(p, k));
  run_pool& pool = g_pools[g_table[i].slot][k];  // a run's slot is fixed while a block is out
  spin_lock(pool.locked);
  const std::uint32_t to_give = give_locked(pool, p, i, g_blocks[k]);
  spin_unlock(pool.locked);
  if (to_give != 0) stash_run(to_give - 1, k);
}

// Note [Runs for medium blocks]: a list's blocks are mostly of one run, or of a few runs
// of one pool, so the pool's lock is held from one block to the next of the same pool,
// not taken for each (a burst of 100,000 blocks of 1 KiB gives back every list of 16 the
// depot cannot keep: a lock and an unlock per block, ~17 instructions and two atomic
// stores). Runs left empty go back to the arena, and blocks outside the runs to
// `release`, with no lock held.
//
// A list's blocks are of one class (a thread's list, the depot's), mostly of one run
// after another: each stretch of one run's blocks goes onto its free list at once (one
// header's look-up, one update of its count), its class's mask and blocks read again
// where the class changes, its pool where the class or the run's slot does. The inner
// loop runs while neither changes, on the range read once (a block outside it is
// jemalloc's, as is every block where no runs were configured: span 0) and the table
// biased so that a run's header is a shift and an add from its start (header_of). Perl's
// hash.pl gives back 1.15 M stretches of one block: 58.3 -> 46.2 M instructions.
void give_back_list(void* head) noexcept {
  std::uint32_t empty_run[16];
  unsigned empty_class[16];
  unsigned n = 0;
  // The pool locked (g_pools[slot][k]; slot 256: none), the class (none: max_classes).
  run_pool* held = nullptr;
  unsigned slot = 256;
  unsigned k = max_classes;
  std::uintptr_t run_mask = 0;
  std::uint32_t blocks = 0;
  const auto let_go = [&] {
    if (held != nullptr) spin_unlock(held->locked);
    held = nullptr;
    slot = 256;
    for (unsigned e = 0; e < n; ++e) stash_run(empty_run[e], empty_class[e]);
    n = 0;
  };
  const std::uintptr_t base = g_base;
  const std::size_t span = g_runs_span;
  const auto class_of = [&](const void* q) { return listed_class(q, base, span); };
  for (void* p = head; p != nullptr;) {
    if (const unsigned c = class_of(p); c != k) {
      if (!run_class(c)) {  // jemalloc's (give_back)
        void* next = *static_cast<void**>(p);
        let_go();
        g_release(p);
        p = next;
        continue;
      }
      k = c;
      run_mask = ~(g_run_bytes[k] - 1);
      blocks = g_blocks[k];
      slot = 256;  // another class's pool
    }
    run_header* r = header_of(reinterpret_cast<std::uintptr_t>(p) & run_mask);
    if (r->slot != slot) {
      if (held != nullptr) spin_unlock(held->locked);
      slot = r->slot;
      held = &g_pools[slot][k];
      spin_lock(held->locked);
    }
    for (;;) {
      // give_locked's steps for the stretch (bench/bursts 100000 1024 4: 60.1 -> 56.8 M).
      const std::uintptr_t run_start = reinterpret_cast<std::uintptr_t>(p) & run_mask;
      void* first = r->free;
      const std::uint32_t was = r->out;
      std::uint32_t out = was;
      do {
        void* next = *static_cast<void**>(p);
        *static_cast<void**>(p) = first;
        first = p;
        --out;
        p = next;
      } while ((reinterpret_cast<std::uintptr_t>(p) & run_mask) == run_start);  // null: 0, not a run's
      r->free = first;
      r->out = out;
      if (was == blocks || out == 0) [[unlikely]] {  // it was full, or it went empty
        if (const std::uint32_t to_give = settled(*held, r, was == blocks, out == 0); to_give != 0) {
          empty_run[n] = to_give - 1;
          empty_class[n++] = k;
          if (n == std::size(empty_run)) {
            let_go();
            break;
          }
        }
      }
      // On while the next block is of the class (null is not: the outer loop ends) and of
      // a run of the pool's slot.
      if (class_of(p) != k) break;
      r = header_of(reinterpret_cast<std::uintptr_t>(p) & run_mask);
      if (r->slot != slot) break;
    }
  }
  let_go();
}

bool empties_a_run(unsigned k, void* const* heads, unsigned n) noexcept {
  if (g_table == nullptr || !run_class(k)) return false;
  // The runs the lists' blocks are of (the first 32), and how many of each.
  constexpr unsigned most = 32;
  std::uint32_t run[most];
  std::uint32_t waiting[most];
  unsigned runs = 0;
  for (unsigned l = 0; l < n; ++l) {
    for (void* p = heads[l]; p != nullptr; p = *static_cast<void**>(p)) {
      if (class_at(p) != k) continue;  // jemalloc's (give_back)
      const std::uint32_t i = index_of(start_of(p, k));
      unsigned e = 0;
      while (e < runs && run[e] != i) ++e;
      if (e == runs) {
        if (runs == most) continue;
        run[runs] = i;
        waiting[runs++] = 0;
      }
      ++waiting[e];
    }
  }
  // A run's slot is fixed while a block is out of it (these are). A run of a few blocks
  // written is not worth taking from its class.
  for (unsigned e = 0; e < runs; ++e) {
    run_pool& pool = g_pools[g_table[run[e]].slot][k];
    spin_lock(pool.locked);
    const bool all = g_table[run[e]].out == waiting[e] && g_table[run[e]].touched >= g_run_bytes[k] / 4;
    spin_unlock(pool.locked);
    if (all) return true;
  }
  return false;
}

void release_empty_runs() noexcept {
  if (g_table == nullptr) return;
  for (unsigned s = 0; s < front_max_arenas; ++s) {
    for (unsigned k = 0; k < max_classes; ++k) {
      run_pool& pool = g_pools[s][k];
      if (pool.empty.load(std::memory_order_relaxed) == 0) continue;  // a peek: a run kept meanwhile stays
      spin_lock(pool.locked);
      const std::uint32_t e = pool.empty.load(std::memory_order_relaxed);
      pool.empty.store(0, std::memory_order_relaxed);
      spin_unlock(pool.locked);
      if (e != 0) give_back_run(start_at(e - 1), g_run_bytes[k]);
    }
    release_stashed_runs(s);
  }
}

void release_stashed_runs(unsigned slot) noexcept { empty_stashes(slot); }

void lock_runs(unsigned slots) noexcept {
  for (unsigned s = 0; s < slots; ++s) {
    for (unsigned k = 0; k < max_classes; ++k) {
      if (run_class(k)) spin_lock(g_pools[s][k].locked);
    }
  }
  lock_stashes(slots);
}

void unlock_runs(unsigned slots) noexcept {
  unlock_stashes(slots);
  for (unsigned s = 0; s < slots; ++s) {
    for (unsigned k = 0; k < max_classes; ++k) {
      if (run_class(k)) spin_unlock(g_pools[s][k].locked);
    }
  }
}

void run_counts(front_cache_counts* c) noexcept {
  c->runs_made = g_made.load(std::memory_order_relaxed);
  c->runs_given_back = g_given_back.load(std::memory_order_relaxed);
  c->run_bytes = g_bytes.load(std::memory_order_relaxed);
  stash_counts(c);
}

}  // namespace replayalloc::detail::backend::front

namespace replayalloc::detail::backend {

bool front_run_block(const void* p, std::size_t* usable, std::size_t* below) noexcept {
  using namespace front;
  const unsigned k = class_at(p);
  if (!run_class(k)) return false;
  *usable = g_run_size[k];
  // The classes are numbered by size, the run classes from 1 (g_run_size[0] is 0).
  if (below != nullptr) *below = g_run_size[k - 1];
  return true;
}

// backend.h's, for the jemalloc backend: the cache's runs are the blocks it knows.
bool fallback_block_below(const void* p, std::size_t bytes) noexcept {
  std::size_t usable = 0;
  return front_run_block(p, &usable) && usable < bytes;
}

}  // namespace replayalloc::detail::backend
