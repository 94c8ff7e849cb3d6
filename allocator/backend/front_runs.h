// replayalloc/backend/front_runs.h: the front cache's runs, blocks of 16 B-128 KiB
// carved from runs of 64 KiB-1 MiB that replayalloc manages itself (Note [Runs for
// medium blocks], below).
//
// Layer: backend, private to the front cache (front_cache.cc and front_runs.cc).
//
// Note [Runs for medium blocks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// jemalloc makes each block of 16 KiB and more an extent of its own, and its slabs of
// the classes of 4-14 KiB hold one to four blocks (a slab is the least common multiple
// of the page and the class): every such block the front cache's lists and depot cannot
// serve costs an extent's split or coalescing, jemalloc's radix tree at both ends and
// the arena's lock, 2,000-6,000 instructions a pair. A burst of blocks larger than the
// cache's budgets (a batch's tensors, a request's buffers, allocated together and freed
// together) pays that for every block: 10,000 blocks of 20 KB ran at 8x mimalloc's time
// (RESULTS "Bursts"), 40,000 of 8 KiB at 2.2x, with 2.8x jemalloc's own instructions
// (its thread cache batches the slab work, which MALLOCX_TCACHE_NONE does not).
// mimalloc and tcmalloc carve such blocks from pages or spans of many blocks. So the
// front cache does, for its classes from 4 KiB to 128 KiB:
//  * a run is one block of the cache's arena (Note [The front cache's arena]) in a slot
//    of the smallest power of two holding 16 blocks, at least 64 KiB and at most 1 MiB
//    (7-64 blocks; from 256 KiB a size step short of it: Note [A run a size step short
//    of its slot]), aligned to its size, so that a block's run is its address rounded down;
//    the page map's bytes (Note [The front cache's page map]) of the pages its blocks
//    begin in (all of its pages for blocks of up to 4 KiB) are its class from its
//    making to its giving back, and a page's byte of a run class says that the block
//    beginning there is a run's (a free in the range reads that byte anyway);
//  * its blocks are carved in order as they are asked for (the pages past the last
//    carved are never touched), and those given back are linked through their first
//    word, the run's own free list; a table beside the range (one entry per 64 KiB,
//    reserved, made as written) holds each run's list, counts and links;
//  * each arena's runs of a class are a pool under a spin lock: the runs with free
//    blocks in a list; a list's miss takes up to half a list's blocks from them in one
//    lock (the whole list at a second miss with no overflow of the list between: a
//    burst; front_cache.cc's run_miss), a list given back (the depot full, a purge) returns its blocks to their runs'
//    pools, whichever thread frees them, a pool's lock held across the list's blocks of
//    that pool (give_back_list);
//  * a run that no block is out of stays as the pool's one empty run, or goes to its
//    arena's stash (Note [Empty runs kept]), and from there back to the arena (its page
//    map bytes cleared first), whose dirty pages decay and are purged as any others
//    (Note [Purging what a slab replaces]; front_cache_release gives the kept ones back
//    too); a run that goes empty starts again uncarved, so that its next blocks are
//    handed out by their addresses, their memory not read; a class that needs a new run
//    first takes a stashed run of its size, then the empty
//    run another class of the same run size keeps in the same arena's pools (its pages
//    already made: sizes that grow, a K/V cache a token longer a step, leave each class
//    its empty run behind: bench/micro/planning_latency 10000 1, mode off, 2,990 -> 2,790
//    page faults), and only then asks the arena.
// jemalloc never sees a run's blocks: the fallback's realloc and usable size ask the
// page map first (front_run_block), and a block of a run class that jemalloc made
// (realloc in place, found at a free with its byte unknown) goes back to jemalloc, never
// to a list. Where a run cannot be made, the request goes to jemalloc's own malloc,
// outside the range. (jemalloc's own API, sallocx or sdallocx, called on a block malloc
// gave: the LD_PRELOAD library that carries jemalloc exports that API and handles such a
// block, hooks/jemalloc_api.cc; one linked to libjemalloc.so.2 hands it a block jemalloc
// does not know, a run's as a slab's.) Measured side by side in bench/RESULTS.md ("Bursts").
// The classes below 4 KiB come from runs too (runs of 64 KiB: 32 blocks of 2 KiB, 4,096
// of 16 B). They came from jemalloc's slabs a block at a time (Note [Small blocks in the
// front cache]), and without a thread cache each block cost jemalloc's arena ~1,000
// instructions to make and ~800 to take back: a burst of 100,000 blocks of 1 KiB beyond
// the lists and the depot ran 1,763 instructions a pair (jemalloc alone 803, tcmalloc 420,
// mimalloc 180), and 264 from runs (callgrind, bench/micro/bursts.cc 100000 1024). Their
// pages are of one class, as jemalloc's slabs' were; a run's pages past the last block
// carved are never touched.

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/front_cache.h"
#include "backend/front_depot.h"
#include "backend/front_stash.h"

namespace replayalloc::detail::backend::front {

// A run's memory from the cache's arena `slot`, run_extent_bytes(bytes) long (at least)
// and aligned to `bytes`; null when it cannot be had.
using run_memory_fn = void* (*)(std::size_t bytes, unsigned slot) noexcept;
// Note [Idle blocks before a new run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A run of 1 MiB holds 8-25 blocks (the classes of 40-128 KiB), and a class's list of
// four blocks and the depot's lists of it (20 blocks of 40 KiB in 1 MiB) can hold every
// block of a run out of it while no request uses them. Sizes that grow leave classes
// so: a K/V cache a row longer a step moves 24 caches from the class of 40 KiB to that
// of 48 KiB together, the 24 blocks of 40 KiB wait on the thread's list and in the
// depot for requests that do not come, and the class of 48 KiB's runs were made of
// fresh pages where jemalloc would have coalesced the freed extents (planning_latency
// 10000 1, nothing recorded: 2,315 page faults against jemalloc's 812). So before a run
// of 1 MiB is made of the arena's memory (none stashed, no empty run of its size kept),
// each other class of its size whose blocks waiting on the calling thread's list and in
// the depot are every block out of one of their runs, a run at least a quarter written
// (empties_a_run: a walk of at most 65 lists), has them go back to their runs (`idle`,
// front_cache.cc; a large class only where the thread has left it, Note [Classes a
// stream has left]), and a run they leave empty is taken instead. Only such runs: a
// stream that never repeats (never_repeats 2000) took 4.5% more instructions where every
// waiting block went back (the runs emptied were stashed, given back to the arena and
// made again), and 2.4% more peak RSS where runs of a block or two were taken (their
// pages few, the run's class then making another). The cost is bounded by the runs
// made, each of which faults in up to 256 pages. The smaller runs (64-512 KiB, 16
// blocks and more) never ask: the small classes' runs are made often as a program
// grows, and a list of theirs never holds a run's blocks. Measured side by side in
// bench/RESULTS.md ("Planning latency").
//
// Class k's blocks that wait on the calling thread's list and in the depot, given back
// to their runs (the note above).
using run_idle_fn = void (*)(unsigned k) noexcept;

// Once, as the cache is enabled (after its page map is made): the classes served from
// runs are those of class_size in [run_least, run_most]; runs come from `memory` and go
// back through `release`, as every other block give_back is handed; the range is
// base..base+span and page_class its page map; `table` the runs' table, run_table_bytes
// of zeroes (Note [The front cache's tables in its range]); `now` times the empty runs
// kept (null: none kept but each pool's one); `idle` gives a class's waiting blocks back
// before a run of 1 MiB is made of fresh memory (null: never). False (nothing served
// from runs) when memory or table is null.
bool configure_runs(const std::uint32_t* class_size, std::uintptr_t base, std::size_t span,
                    std::atomic<std::uint8_t>* page_class, void* table, run_memory_fn memory,
                    front_free_fn release, run_clock_fn now, run_idle_fn idle = nullptr) noexcept;
// The bytes of the runs' table of a range of `span` bytes.
std::size_t run_table_bytes(std::size_t span) noexcept;

// A run class's block size, 0 for the other classes (class 0 and, before
// configure_runs, every class); read inline by run_realloc (front_inline.h).
inline constinit std::uint32_t g_run_size[max_classes] = {};
// Whether class k's blocks come from runs (false for 0 and before configure_runs).
bool run_class(unsigned k) noexcept;
// Blocks in a run of class k (0 for the others); Note [A burst's lists twice as long].
std::uint32_t run_blocks(unsigned k) noexcept;

// A block of run class k from the runs of the arena `slot`, and up to want - 1 more
// (at most 64 in all) onto *list, linked through their first words (list may be null
// where want is 1); null when no run could be made (the caller serves the request
// elsewhere). Of them, at most `fresh` (at least 1) begin where nothing of the run was
// written since the arena made it: the link writes a block's first page, which a list
// that is not all used would fault in for nothing.
void* run_take(unsigned k, unsigned slot, free_list* list, unsigned want, unsigned fresh = ~0u) noexcept;

// Note [A run's blocks in address order]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// run_take's blocks go out in the order the run gave them: its blocks given back first
// (the last given back first), then those never carved, by their addresses. The first is
// the request's; the others go onto the list last first, so that its pops follow on. A
// burst carved from fresh runs goes out a class's size apart, forwards, and a program
// that walks its blocks in the order it got them (writes each, reads each, frees each)
// walks its memory forwards, as the hardware's prefetchers follow. Pushed first first (as
// before), a list went out 0, n-1, n-2, ..., 1, and those walks missed at every block:
// bursts' later rounds of 8 KiB blocks 1.36x mimalloc's, 0.98x now (RESULTS "A run's
// blocks in address order"). Frees stay last in, first out: the block freed last, its
// line still in the cache, is the next one out.

// A block of the cache back to where it came from, by its page's byte (every block the
// cache holds has it): its run, or the arena through `release`.
void give_back(void* p) noexcept;

// Block p of run class k (p's page map byte) back to its run; a run that no block is
// out of is kept for its class (one per arena) or in its arena's stash (Note [Empty
// runs kept]).
void run_give(void* p, unsigned k) noexcept;

// Every block of a list (linked through their first words) back as give_back does, a
// run pool's lock held across blocks of the same pool.
void give_back_list(void* head) noexcept;

// Whether the blocks of class k on the lists heads[0..n) (linked through their first
// words) are every block out of one of their runs, one at least a quarter written since the
// arena made it (Note [Idle blocks before a new run]).
bool empties_a_run(unsigned k, void* const* heads, unsigned n) noexcept;

// The runs kept empty, by the pools and the stashes, given back to the arena
// (front_cache_release, before a purge).
void release_empty_runs() noexcept;

// The runs the stashes of arena `slot` keep, given back to it (before it makes a block
// of a class above the runs': Note [Empty runs kept]).
void release_stashed_runs(unsigned slot) noexcept;

// Fork: the lock of every run pool that can be used held (front_cache_prefork /
// postfork): the pools of the `slots` arenas' run classes; the others are never
// locked. Each lock written is a page copied in the parent and in the child after
// fork(): a shell script forks hundreds of times.
void lock_runs(unsigned slots) noexcept;
void unlock_runs(unsigned slots) noexcept;

// Its counts into c (front_cache_stats).
void run_counts(front_cache_counts* c) noexcept;

}  // namespace replayalloc::detail::backend::front
