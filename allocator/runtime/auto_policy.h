// replayalloc/runtime/auto_policy.h: auto mode's decisions on a watched thread, apart
// from the watcher that applies them.
//
// Layer: runtime. Pure functions of the counters the watcher (runtime/auto_mode.cc)
// keeps and the period detector (runtime/auto_detect.h) reports: whether the watcher
// goes dormant, whether a new thread begins resting, whether a period found begins
// iterations at this request, what an ended iteration's verdict leads to, and whether a
// watch that found no period rests.
// Where an iteration ends and whether it repeated its period are
// runtime/auto_iteration.h's. Tested without an engine (tests/unit/auto_detect_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace replayalloc::detail {

// Note [A dormant watcher] (auto_mode.cc): backend frees in a row, with no watched
// allocation among them, after which the watcher stops seeing frees until its next
// watched allocation; never while it counts where pieces between quiet points end (Note
// [Iterations between quiet points]), which needs every free. Asked by the inline free
// (runtime/shortcuts.h) and by the slow path's.
inline constexpr std::uint32_t dormant_after = 16384;
inline bool auto_goes_dormant(std::uint32_t unwatched_frees, bool counting_ends) {
  return unwatched_frees >= dormant_after && !counting_ends;
}

// Note [A process whose threads show no period] (auto_mode.cc): from two rests without
// a period in the process on, a new thread's watcher begins resting, as long as the
// latest of them (its rests in a row set to `rests`, which rest() doubles by).
struct auto_start {
  bool rest = false;
  std::uint32_t rests = 0;
};
inline auto_start auto_start_of_thread(std::uint32_t rests_without_period) {
  if (rests_without_period < 2) return {};
  return {true, std::min<std::uint32_t>(rests_without_period - 2, 5)};
}

// What the watcher knows of a found period when a request of `size` bytes arrives
// outside an iteration (runtime/auto_detect.h).
struct auto_period {
  bool found = false;
  bool quiet = false;              // Note [Iterations between quiet points]
  std::uint32_t at_quiet = 0;      // requests in a row at the quiet count
  std::uint32_t quiet_run = 0;     // as many as begin an iteration
  std::uint64_t anchor = 0;        // Note [Anchored iterations]; 0: none
  std::uint64_t count = 0;         // allocations observed
  std::uint64_t next_boundary = 0; // where the period's next iteration begins
};

// Whether iterations of the period begin at this request: between quiet points, once a
// run of requests at the quiet count is long enough; anchored, at a request of the
// anchor's size; otherwise at the period's next boundary.
inline bool auto_period_begins(const auto_period& p, std::uint64_t size) {
  if (!p.found) return false;
  if (p.quiet) return p.at_quiet >= p.quiet_run;
  if (p.anchor != 0) return size == p.anchor;
  return p.count == p.next_boundary;
}

// After an iteration auto mode began ends: the poor ones in a row (`poor`: the replay
// fell short of the period by the key policy's reading, Note [One verdict for auto
// mode]; one that repeated its period resets them), and whether the period is
// rejected (watch again, never picking it again) instead of beginning the next
// iteration: at once a period of
// structure whose key failed once (`failed_shape`: taken where the program only looked
// periodic) and a period whose key the key policy set aside (`set_aside`: Note [A
// period whose key is set aside], auto_mode.cc), any other after 2 x
// REPLAYALLOC_REPLAN_AFTER poor iterations in a row.
struct auto_verdict {
  std::uint32_t deviated_in_a_row = 0;
  bool reject = false;
};
inline auto_verdict auto_after_iteration(bool poor, bool failed_shape, bool set_aside, std::uint32_t deviated_in_a_row,
                                         std::uint32_t replan_after) {
  const std::uint32_t n = poor ? deviated_in_a_row + 1 : 0;
  if (failed_shape || set_aside || n >= 2 * std::max<std::uint32_t>(1, replan_after)) return {0, true};
  return {n, false};
}

// Note [Periods that keep failing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A period given up (above; a set-aside key's; one whose sizes stopped at once, below)
// sent the watcher back to a watch with a whole budget (four histories where sizes recur),
// so a program that looks periodic for a while, again and again, was watched throughout:
// clang++ -O2 (bench/programs, "clang") found five periods of 27-62 allocations in its
// 37,463 watched ones, each recorded, planned, re-recorded and set aside (30 recordings,
// 10 plans), and never rested. So periods given up in a row count as watches that found
// none: the second rests the thread one history, each one after it twice as long (up to
// 64x, as rests in a row), and a replay that repeated its period (neither fell short nor
// deviated, by the key policy's reading) ends the row. ONNX Runtime's loop under Node.js
// gives up one period at most (the prefill's layers, below) before its decode step's,
// the e2e models one a thread at most (MobileNetV3), and neither rests. clang++ now rests
// after its third (the second's replays were clean once): 16 recordings and 6 plans,
// 5,744.5 M -> 5,700.0 M instructions under callgrind, REPLAYALLOC_MODE=off 5,643.4 M
// (bench/RESULTS.md, "Periods that keep failing: what auto mode costs clang++").
// Where this is wrong: a program whose third period is its real one, after two that did
// not hold, finds it a history later.
inline constexpr std::uint32_t periods_failed_before_rest = 2;
struct auto_failed {
  bool rest = false;
  std::uint32_t rests = 0;  // rests in a row it counts as (the budget's doublings)
};
inline auto_failed auto_rest_after_failed(std::uint32_t failed_in_a_row) {
  if (failed_in_a_row < periods_failed_before_rest) return {};
  return {true, std::min<std::uint32_t>(failed_in_a_row - periods_failed_before_rest, 6)};
}

// Note [A period of sizes that stops at once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A model's identical layers make a period of sizes inside one request: ONNX Runtime's
// prefill under Node.js, four layers of 28 watched requests alike, is found as a period
// of 28 before the decode step's is. Its iterations then cut the steps across, and
// since recordings forgave its poor replays, it was recorded 11-33 times and replayed
// poorly until its key was set aside: ~1,000-2,000 allocations of a run at two
// sessions, and at one in some runs (p27). A period of sizes was seen at least three
// times just before its iterations begin, so the first of them repeat its sizes; where
// fewer than half of the requests the watcher sees in one of the first two (a
// recording, or a replay that missed at least half a period) have a size of the period
// (a bit per hash of size, period_size_bits), the program has left it: rejected at
// once, as a set-aside key's period is (Note [A period whose key is set aside]).
// Periods of structure and between quiet points change their sizes by design and are
// not checked. Measured (bench/onnx, two sessions, 20 + 60 requests, alternated with
// 283daf6): 82.0-82.6% of the allocations of at least 4 KiB from a slab against
// 81.7-81.9%; one session unchanged (80.3%). tests/preload/host_held_generation.cc: 13
// recordings against 67, 4,635 allocations passed through against 6,153. Where it is
// wrong: a program whose sizes change right after the period is found (a new batch at
// once) loses the period of sizes for good, and is found again by structure (eight
// periods alike) or quiet points.

// Whether an iteration of a period of sizes, of which the watcher saw `seen` requests
// (at least half a period: a recording, or a replay that missed that much), `members`
// of them of a size the period has, shows a program that no longer repeats the period.
inline bool auto_sizes_stopped(std::uint32_t seen, std::uint32_t members, std::uint32_t period) {
  return 2 * std::uint64_t{seen} >= period && 2 * std::uint64_t{members} < seen;
}

// Note [Blocks that never overlap]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A watch whose first recur_sample (2,048) allocations were each freed before the next
// (those still live at the sample's end, a start-up's buffers, left out:
// period_detector::sample_alone), none larger than the fallback's thread cache keeps
// (backend::thread_cache_max(): 128 KiB under the library's settings, what its front
// cache keeps), rests after those 2,048, for one history, as a stream of rare sizes
// does: a plan of them could only put every block at offset 0, which the fallback's
// thread cache already does for such blocks, at ~100 instructions a pair, and an
// iteration's begin and end would cost more than that. A stream of 4 KiB malloc/free
// pairs, one size recurring, was watched for four histories (65,536 allocations, ~1,000
// instructions each) before its first rest: 673.8 instructions per pair over 256,000
// pairs, now 215.3 (jemalloc's 111.0; bench/micro/preload_callgrind.cc 4096 unmarked,
// RESULTS "Small path"). Where this is wrong: a program whose iteration begins with
// 2,048 blocks made one at a time and only then holds several is watched again only
// after each rest.
// Blocks all still live at the sample's end overlap, whatever comes after: at least half
// of the sample must have been freed (a burst's first 2,048 were said to be alone).
//
// A sample all of one size the fallback caches (period_detector::sample_of_one_size:
// the newest's size, at most 32 blocks of other sizes, still live, left out) rests
// after it too, for one history, whatever its blocks' lifetimes: a plan of one size
// could only give each block a slot of that size, which the fallback's size class (the
// thread cache, the front cache's runs) already does, and the searches could only find
// a period of structure there (Note [Auto mode rests]). Bursts of 2,000 blocks of
// 100,000 bytes, allocated and then all freed (bench/micro/bursts.cc), were watched for
// one history first and for 7,231 more allocations after the rest, ~1,280 instructions
// each (the searches ~350, the table of live blocks ~380, the history ~170): 67.5 M
// instructions in 20 rounds, now 41.7 M (REPLAYALLOC_MODE=off 37.2 M, mimalloc 36.9 M).
// Where this is wrong: a program that repeats rounds of one size (the detector finds
// rounds of 64-700 blocks within a history: PeriodDetector.OneSizeInRoundsIsFound..)
// no longer replays them, served by the fallback's class instead, ~100 instructions a
// pair where the class keeps the round's blocks (~900 where, as above, its runs are made
// and given back every round) against a replay's ~40 (RESULTS "Micro"); sizes above the
// thread cache (jemalloc's extents, page faults and purges) are still watched for a
// history.
//
// Both are said at the sample's 512th allocation already (early_sample, as rare sizes
// are: Note [Rare sizes said early], auto_detect.h) where its first 512 show them (of one
// size, at most 8 blocks of other sizes still live there), else at its 2,048th: why a
// plan could do no better (offset 0; the class's slot) holds at any length, and what the
// longer sample was for, a start-up's blocks still live among the first, is left out
// as before (a sample more than half still live is not "alone"; more than a 64th of other
// sizes still live is not "of one size"). Bursts of 100,000-byte blocks were watched for
// 2 x 2,048 allocations, ~1,150 instructions each (after Note [Empty runs kept]'s
// change): bursts 2000 100000 20 21.3 M -> 17.3 M instructions (REPLAYALLOC_MODE=off
// 16.6 M), 10000 20000 20 54.9 M -> 47.9 M (off 45.9 M); 4 KiB malloc/free pairs
// 156.4 -> 89.5 instructions a pair over 25,600, 104.0 -> 77.3 over 256,000 (mode off
// 69.1, jemalloc's 111.0; bench/micro/preload_callgrind.cc 4096 256 N unmarked). The
// end-to-end models never rest (bench/e2e, the five models at T = 1 and ResNet-50 and
// the BERT-like encoder at T = 8: auto_rests 0, their slab hits as before), ONNX
// Runtime's loop under Node.js serves 76.8% / 80.1% from a slab as before. Where this is
// wrong: a program whose first 512 watched allocations are pairs, or bursts of one size,
// and whose period begins right after them is found a history later (16,384
// allocations), where the 2,048 of its sample showed more.

// Note [Auto mode rests] and Note [Blocks that never overlap] (above): a watch
// that found no period rests once its sizes are rare, its blocks never overlap or its
// sample is of one size the fallback caches, or after its budget of allocations (four
// histories where sizes recur and differ, else one; a first watch of recurring sizes
// rests after two: Note [A first watch of two histories]); the rest lasts that budget
// (doubled by rest() for each rest in a row).
//
// Note [A first watch of two histories]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread's first watch of recurring sizes lasted its whole budget, four histories
// (65,536 allocations by default), for a period behind a long start-up. Every period
// this project's programs show was found within 18,315 watched allocations (REPLAYALLOC_VERBOSE=2's
// "found in N watched", 2026-12-07: ONNX Runtime's loop under Node.js 1,577-18,315, its
// arena on the latest; Python's ResNet-50 loop 5,443, its generation loop 7,092; the
// end-to-end models 98-2,322 at 1 and 4 threads; clang++'s 244-3,246), while a program
// without one paid ~1,500 instructions for each of the 65,536 (sqlite3 on insert.sql:
// 2.6% of its instructions). So the first watch rests after two histories, for the
// budget it had (four): sqlite3 4,737.9 -> 4,690.4 M instructions, g++ -O2 (cc1plus,
// whose period of 46 allocations, found at its 36,314th and set aside, is no longer
// found) 5,468.3 -> 5,454.7 M (bench/RESULTS.md, "A first watch of two histories").
// Where this is wrong: a period whose third repetition ends past two histories (behind
// a start-up of 32,768 watched allocations less three periods) is found after the
// rest, 65,536 allocations and up to a history later.
//
// Note [A shorter watch after a rest]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Four histories are for a period behind a long start-up (a Python loop's start-up
// fills a history); a watch after a rest without a period comes after the start-up, and
// any period the detector can take (a third of a history at most) shows within one
// history: such a watch rests after one history, for the budget it would have had.
// sqlite3 inserting 200,000 rows in memory (bench/programs/insert.sql: sizes recurring,
// no period) watched 65,536 allocations, rested 65,536 and watched again until it
// exited, ~1,600 instructions a watched allocation; its second watch is now 16,384.
// Where this is wrong: a program that turns periodic after a rest with a period it
// shows only after more than a history (a long piece of rare sizes first) is found one
// rest later.
struct auto_watch {
  bool sizes_recur = false;  // a search of sizes found the newest size twice before it
  bool rare = false;         // few of the sample's sizes recur
  bool alone = false;        // the sample's blocks were each freed before the next
  bool one_size = false;     // every allocation the detector's history keeps had one size
  bool cached_one_size = false;  // the sample's allocations had one size the fallback caches
  bool rested = false;       // the watch follows a rest without a period (Note [A shorter watch after a rest])
  std::uint64_t watched = 0; // allocations observed since the watch began
};
struct auto_rest {
  bool rest = false;
  std::uint64_t budget = 0;
};
inline constexpr std::uint64_t first_watch_histories = 2;  // Note [A first watch of two histories]
inline auto_rest auto_rest_after(const auto_watch& w, std::uint64_t history) {
  const bool early = w.rare || w.alone || w.cached_one_size;
  const bool recur = w.sizes_recur && !early && !w.one_size;
  const std::uint64_t budget = std::uint64_t{recur ? 4u : 1u} * history;
  const std::uint64_t watch = w.rested ? history : recur ? first_watch_histories * history : budget;
  return {early || w.watched >= watch, budget};
}

// Note [A glance after a rest] (auto_mode.cc): the allocations a rest for rare sizes
// is followed by before watching, tallied for sizes seen before among them; fewer than a
// quarter recurring rests again (twice as long, up to 64x), as a watch's sample of rare
// sizes does.
inline constexpr std::uint32_t glance_sample = 512;
inline bool auto_glance_rare(std::uint32_t glanced, std::uint32_t recurred) {
  return std::uint64_t{recurred} * 4 < glanced;
}

}  // namespace replayalloc::detail
