// replayalloc/runtime/auto_detect.h: finding the iteration of a program that marks none.
//
// Layer: runtime.
//
// Note [Auto mode]
// ~~~~~~~~~~~~~~~~
// Auto mode (REPLAYALLOC_MODE=auto, the LD_PRELOAD default) watches each thread's
// stream of allocations (those of at least REPLAYALLOC_MIN_SIZE) for a period: the P
// whose repetition reaches farthest back (at least three periods alike, 64
// allocations, and at least min_period_bytes per period), the smaller on ties
// (period_detector::detect says why). The iteration boundary is then put where the
// fewest bytes were live over the last period (an inference's inputs and outputs, not
// its activations, are live there), and from that point on the thread runs iterations
// of P allocations, recorded, planned and replayed as marked ones are. Sizes and
// lifetimes only, no call sites; a program whose period changes (another program)
// deviates, is recorded again, and, deviating on, goes back to watching.
//
// Note [Periods whose sizes change]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A service fed other shapes on every request (a transformer's sequence length) repeats
// no size, but does repeat its structure: the same number of allocations, each freed
// after the same number of later ones. When no period of sizes is found, the detector
// looks for one in that structure: each watched allocation's symbol is its lifetime
// counted in watched allocations (1..63, or 64 and more, or still live after 64), known
// once it is freed or 64 allocations old, so the search runs over all but the newest
// 64. It asks for eight periods alike (not three): a program whose structure changes
// with some shapes (tensors crossing REPLAYALLOC_MIN_SIZE as they grow, kernels that
// allocate per chunk) matches itself for a few requests by chance, and a period taken
// there would drift off the requests at the first other shape, costing plans and slabs
// for nothing. Constant symbols (every block freed at once, as in a stream of random
// sizes) give no period (a multiple of 1), and a layer repeated inside an inference is
// the shorter run, as with sizes. The key is named after the symbols, not the sizes, so
// every shape of the program is one key; its recordings agree in structure and are
// planned as their envelope (Note [Envelope]).
//
// Note [Iterations between quiet points]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program whose structure itself changes with the shape (PyTorch: the kernels of a
// longer sequence allocate more workspaces, so a BERT-like encoder makes 32, 40, 48 or
// 54 watched allocations per request as the length crosses 64, 124 and 252) repeats
// neither sizes nor one structure, but its requests still begin where the fewest
// watched blocks are live: between two requests only what outlives a request (its
// output, held until the next one's is made) and what lives for good (weights) are
// live; inside one, an activation always is too. When neither search finds a period,
// the detector takes the least count of live watched blocks over the newest 512
// allocations (or 1,024, .., `quiet_window`, the shortest window that shows the pieces
// below) and cuts the stream where it is reached: at the last allocation of each run at
// that count, runs as long as most are (a request's output serialized after it returns,
// made and freed at that count, belongs to the request before; the next one begins with
// the allocation after). It is taken for the program's iteration only when it looks
// like one: at least 8 pieces, each of at least `min_quiet_piece` allocations and
// min_period_bytes, the longest at most 4 times the shortest, and at most max_regimes
// lengths among the newest 8 (each length a structure: a regime of the key,
// runtime/key_entry.h). Iterations then begin and end at that count (auto_mode.cc),
// not after a number of allocations, and the first request's size picks the regime
// (Note [Regimes]: the structures of one shape range). Where it can be wrong: a program
// whose activations fall below REPLAYALLOC_MIN_SIZE mid-request reaches the count there
// too, and its pieces are parts of requests; they deviate and are given up like any
// period that does not hold (auto_mode.cc).
//
// Note [Anchored iterations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Counting allocations from one boundary keeps iterations on the program's only while
// every iteration makes the same number: one extra (a prefill among decode steps, a
// tensor crossing REPLAYALLOC_MIN_SIZE) shifts every boundary after it, and the
// iterations, cut across, deviate until the period is given up. When the size at the
// boundary comes exactly once a period (and one and two periods before), it is the
// period's anchor: iterations begin at its requests and end at the next one (after half
// a period at least; after two, the anchor lost, anyway), so they resynchronize at the
// first step after any other. A period of structure whose boundary of least live bytes
// has no such size begins at the allocation of least live bytes among those that do:
// live bytes say little where a host's collector frees blocks in batches, and climb
// between collections. ONNX Runtime under Node.js is the case: each decode step is one
// run that starts with a 7,008-byte block; its key/value cache and logits are copied
// into calloc'd JavaScript buffers the collector frees hundreds of allocations later,
// on another thread, so no quiet point shows a request, and the step, not the request,
// is the iteration (its sizes grow token by token: Note [Growth headroom], scaled at
// once as periodic plans are, key_policy.cc). Such steps are taken after an eighth of a
// history (anchored_wait), not a whole one, when at most a third of their blocks
// outlive them; the steps of a Python loop hand their caches on (11 of 18 outlive a
// step) and wait for their requests (Note [Requests of repeated steps]). A quarter
// waited two requests more under Node.js, whose start-up and session make ~1,400 of
// the watched allocations: 6,642 of 106,000 passed through, 5,047 with an eighth
// (bench/onnx, 20 + 60 requests). A piece between anchors that is not a step (the
// prefill) is split: Note [Long pieces between anchors] (auto_iteration.h).
#pragma once

#include <bitset>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "runtime/auto_iteration.h"
#include "runtime/auto_policy.h"
#include "support/live_filter.h"

namespace replayalloc::detail {

// The least a period must allocate to be taken for an iteration (see detect()).
inline constexpr std::uint64_t min_period_bytes = std::uint64_t{256} << 10;
// Note [Periods whose sizes change]: lifetimes are told apart up to this many watched
// allocations; the search for a period of structure runs every shape_every observed,
// or every history/8 once the history is longer (period_detector::observe).
inline constexpr std::uint8_t max_life = 64;
inline constexpr std::uint64_t shape_every = 512;
inline constexpr std::size_t shape_periods = 8;  // periods alike before one of structure is taken
// Note [Anchored iterations]: steps that stand alone are taken after history /
// anchored_wait watched allocations.
inline constexpr std::uint64_t anchored_wait = 8;
// Note [A period of sizes that stops at once] (auto_policy.h).
inline constexpr std::size_t period_size_bits = 1024;
inline constexpr std::uint32_t sizes_checked_iterations = 2;
// See Note [Iterations between quiet points].
inline constexpr std::size_t quiet_window = 4096;
// min_quiet_piece: runtime/auto_iteration.h.
inline constexpr int quiet_lengths = 4;  // max_regimes (runtime/engine.h)
// Note [Requests of repeated steps]: the most cuts one search looks at.
inline constexpr std::size_t max_quiet_cuts = quiet_window / min_quiet_piece + 2;
// Note [Auto mode rests]: a watch's first recur_sample allocations are tallied for
// sizes seen before in it, in a table of recur_bits bits (one per hash of a size).
//
// Note [Rare sizes said early]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A watch's sample said whether its sizes are rare after 2,048 allocations (fewer than
// a quarter seen before in it); on a stream of random sizes that watch costs ~650
// instructions an allocation in the watcher, 1.3 M a thread, and the threaded stress
// programs (bench/micro/threaded_stress.cc) start 4-8 threads watching at once: after
// Note [A glance after a rest] (auto_mode.cc) those first watches were most of what
// auto mode still cost over REPLAYALLOC_MODE=off (callgrind, 8 threads, 100,000
// operations: rptest 303.9 -> 299.0 M, prodcons 205.9 -> 199.9 M, aligned 354.1 ->
// 347.7 M, larson 344.2 -> 338.3 M; off 286-289, 198.0, 345.5 and 332.8 M). So from
// the sample's 512th allocation (early_sample) on, fewer than a sixteenth seen before
// (random sizes in 1 MiB: ~1%) says rare at once. Any period of up to 480 allocations
// repeats more than a sixteenth of 512, a model's start-up repeats its layers' shapes
// (a normalization's four vectors of one size), and the end-to-end models' threads
// never rested (bench/e2e, ResNet-50 and the BERT-like encoder at T = 1 and 8: no
// auto_rests). Where this is wrong: a program whose first 512 watched allocations
// hardly repeat a size and whose period begins after them is found after one rest and
// a glance (16,384 + 512 allocations), not within its first watch.
inline constexpr std::uint32_t recur_sample = 2048;
inline constexpr std::uint32_t early_sample = 512;  // Note [Rare sizes said early] (auto_mode.cc)
inline constexpr std::uint32_t recur_bits = 32768;
// The candidates a search examines at most (period_detector::best_period).
inline constexpr std::size_t most_candidates = 256;
// Note [A run of one value walked once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A search of sizes (period_detector::best_period) walks back from the newest value to
// measure, for a candidate period p, how far the stream keeps p (its run) and each of
// p's divisors d (whether p is a multiple). Where the newest values are one long run of
// one size, each of those walks went through the whole run before reaching the first
// difference: cc1plus (g++ -O2 on bench/micro/threaded_stress.cc) makes 8,032-byte
// obstack chunks for 86% of its 37,745 watched allocations, in runs of hundreds, shows no
// period it keeps, and never rested (a first watch then lasted four histories: Note [A
// first watch of two histories]): its searches cost 133,000 instructions each, half of
// it such walks. The run's length is known once a search has measured trail[1] (for d =
// 1), and inside it every comparison at a distance up to it holds, so each walk starts
// past them: the same answers and periods. Measured on the watched streams of cc1plus, sqlite3
// (insert.sql), CPython (json_roundtrip.py), Perl (hash.pl) and jq (bench/programs),
// logged and fed to the detector (callgrind): the periods found, where and what, are
// identical; cc1plus's searches of sizes 55.9 M -> 27.7 M instructions, sqlite3's 53.9 M ->
// 54.9 M (the start computed for walks that were short anyway); cc1plus under the
// LD_PRELOAD library 4,477.8 M -> 4,450.3 M in all (REPLAYALLOC_MODE=off 4,345.7 M,
// jemalloc 4,404.9 M).
//
// Note [A search put off to a run's end]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A search of sizes takes as candidates the earlier places of the newest size, the
// nearest first, and examines at most most_candidates (256) of them. Where the newest
// size ends a run of it longer than that, every candidate lies inside the run, each a
// multiple of 1, never taken: a period made mostly of one long run (a request of a few
// hundred blocks of one size and a few others) was found only when a search happened to
// fall on one of its other sizes, one to three periods late for runs of 300-390 and in
// one start-up of four for runs of 1,000 (tests/unit/auto_detect_test.cc,
// PeriodDetector.APeriodMostlyOfOneLongRunIsFoundOnTime). So a search of sizes that falls
// inside such a run is put off to the allocation that ends it (search_at_run_end_), whose
// size's earlier places are the period's candidates; the searches of structure and quiet
// points keep their times. A stream of one size over a search's reach is left to
// detect(), which answers it at once. The watched streams of sqlite3, CPython, Perl and
// jq (Note [A run of one value walked once]) show the same periods at the same places;
// cc1plus's logged stream, whose 8,032-byte runs are the case, two more (2,507
// allocations at its 21,329th, then one of quiet points), but under the LD_PRELOAD
// library its run found p46 as before (one recording, its key set aside), at 4,433.1 M
// instructions against 4,425.4 M (+0.17%: the searches at runs' ends examine candidates
// the ones inside them could not).
// Note [Blocks that never overlap]: the largest block the fallback keeps in its thread
// cache or front cache under the library's settings (Note [The fallback's thread
// cache], backend/jemalloc_backend.cc); a detector's default, auto mode gives it what
// the backend says (backend::thread_cache_max()).
inline constexpr std::uint64_t thread_cached_max = std::uint64_t{128} << 10;

class period_detector {
 public:
  explicit period_detector(std::uint32_t history = 16384, std::uint64_t cached_max = thread_cached_max)
      : history_(history), cached_max_(cached_max) {}
  // Note [Blocks that never overlap]: the largest block a sample may hold and still rest.
  std::uint64_t cached_max() const { return cached_max_; }

  // One allocation of `size` bytes, with `live` bytes in `live_blocks` watched blocks
  // live just before it. Returns true when a period was found by this call.
  bool observe(std::uint64_t size, std::uint64_t live, std::uint32_t live_blocks = 0);
  // The allocation observed at stream position `pos` was freed now (Note [Periods
  // whose sizes change]).
  void settle(std::uint64_t pos);
  // True when the period found is one of structure: its sizes vary.
  bool by_shape() const { return by_shape_; }
  // Note [Iterations between quiet points]: true when iterations begin where
  // quiet_level() watched blocks are live, not every period() allocations (period()
  // is then the longest piece seen).
  bool quiet() const { return quiet_; }
  std::uint32_t quiet_level() const { return quiet_level_; }
  // Allocations in a row at that count where an iteration begins (the last of them).
  std::uint32_t quiet_run() const { return quiet_run_; }

  bool found() const { return period_ != 0; }
  std::uint32_t period() const { return period_; }
  // The stream position (count of observed allocations) where the next iteration
  // starts: a boundary at or after count().
  std::uint64_t next_boundary() const;
  std::uint64_t count() const { return count_; }
  // The size observed `back` allocations before the newest (0: the newest); pre: back
  // below the history's length (at least period() once found).
  std::uint64_t size_back(std::size_t back) const { return sizes_[sizes_.size() - 1 - back]; }
  // A stable name for the period's sequence of sizes.
  std::uint64_t signature() const { return signature_; }
  // Note [Anchored iterations]: the size of the allocation that begins each iteration
  // when it recurs exactly once a period (0: none; iterations are counted).
  std::uint64_t anchor() const { return anchor_; }
  // Note [Auto mode rests]: true once some search of sizes since the last reset found
  // the newest size at least twice before it (a stream that repeats anything does;
  // random sizes almost never).
  bool sizes_recur() const { return sizes_recur_; }
  // Note [Auto mode rests]: true once the first recur_sample allocations since the last
  // reset are tallied and fewer than a quarter of them had a size seen before among
  // them, or, from the first early_sample on, fewer than a sixteenth (Note [Rare sizes
  // said early], auto_mode.cc). Any period of up to recur_sample / 2 allocations
  // repeats at least half of them; random sizes in 1 MiB repeat ~3% (the table's
  // collisions).
  bool sizes_rare() const {
    return sampled_ >= early_sample && recurred_ * (sampled_ >= recur_sample ? 4 : 16) < sampled_;
  }
  // Note [Auto mode rests]: true when every allocation the history keeps has one size
  // (only a period of structure or of quiet points can be found there).
  bool one_size() const { return !sizes_.empty() && same_run_ >= sizes_.size(); }
  // Note [Blocks that never overlap] (auto_policy.h): true once the first early_sample
  // or recur_sample allocations since the last reset are observed (said early: Note
  // [Blocks that never overlap]), when each of them that was freed by then was freed
  // before the next (settle() says when), and none was larger than the fallback's
  // thread cache keeps.
  bool blocks_alone() const { return blocks_alone_; }
  // Note [Blocks that never overlap]: true once the first early_sample or recur_sample
  // allocations since the last reset are observed, when all of them had one size, no
  // larger than cached_max() (a size the fallback keeps blocks of), but at most a 64th
  // of them of other sizes still live (period_detector::sample_of_one_size).
  bool sample_one_size() const { return sample_one_size_; }
  void reset();
  // Note [A glance after a rest] (auto_mode.cc): tallies `size` as the sample does (a
  // size seen before since the last reset?) and nothing else: no history, no search,
  // count() unchanged. glanced(): sizes tallied since the last reset; glance_recurred():
  // those seen before.
  void glance(std::uint64_t size);
  std::uint32_t glanced() const { return sampled_; }
  std::uint32_t glance_recurred() const { return recurred_; }
  // The current period did not hold up (its iterations kept deviating): forget it and
  // never pick it again.
  void reject_current();

 private:
  bool detect();
  bool detect_shape();
  bool detect_quiet();
  bool detect_quiet(std::size_t window);
  enum class requests_seen { none, too_few, found };
  requests_seen detect_requests(std::size_t step);
  bool grows(std::size_t p, std::size_t n) const;
  std::size_t quiet_cuts(std::size_t from, std::size_t n, std::uint32_t* cuts, std::size_t capacity,
                         std::uint32_t& level, std::uint32_t& run) const;
  void take_quiet(const std::uint32_t* cuts, std::size_t k, std::uint32_t level, std::uint32_t run);
  template <class Value>
  std::size_t best_period(std::size_t n, Value value, std::size_t periods, std::size_t probe,
                          int* matches = nullptr, std::size_t* due = nullptr) const;
  std::uint8_t symbol(std::size_t i) const;
  void found_at(std::size_t p, std::size_t end, bool by_shape);
  bool anchors(std::size_t j, std::size_t p) const;
  bool steps_stand_alone(std::size_t p, std::size_t n) const;
  bool rejected(std::size_t p) const;
  bool sample_alone() const;
  bool sample_of_one_size() const;
  // Sets the bit of `size` in seen_; whether it was set (a size seen since the last reset).
  bool mark_seen(std::uint64_t size);
  std::vector<std::uint32_t, backend::internal_allocator<std::uint32_t>> rejected_;
  std::uint32_t history_;
  std::uint64_t cached_max_;
  std::vector<std::uint64_t, backend::internal_allocator<std::uint64_t>> sizes_;
  std::vector<std::uint64_t, backend::internal_allocator<std::uint64_t>> live_;
  // Per observed allocation: 0 while live, else its lifetime in watched allocations,
  // capped at max_life (which also stands for "still live after max_life").
  std::vector<std::uint8_t, backend::internal_allocator<std::uint8_t>> life_;
  // Per observed allocation: watched blocks live just before it.
  std::vector<std::uint32_t, backend::internal_allocator<std::uint32_t>> blocks_;
  bool by_shape_ = false;
  bool sizes_recur_ = false;
  std::size_t same_run_ = 0;  // the newest sizes_ that are all one size
  bool search_at_run_end_ = false;  // Note [A search put off to a run's end]
  std::bitset<recur_bits> seen_;  // sizes observed since the last reset, hashed
  bool newest_seen_ = false;      // the newest's bit was set before it (Note [A size never seen before])
  std::uint32_t sampled_ = 0;
  std::uint32_t recurred_ = 0;
  bool blocks_alone_ = false;
  std::uint64_t sample_largest_ = 0;  // the sample's largest size
  bool sample_one_size_ = false;
  bool quiet_ = false;
  std::uint32_t quiet_level_ = 0;
  std::uint32_t quiet_run_ = 0;
  std::uint32_t quiet_rejections_ = 0;  // quiet iterations given up; 2 end the search
  // Note [Requests of repeated steps]: the latest period of structure found (kept
  // when it is given up), the step that requests may be made of.
  std::uint32_t step_ = 0;
  std::uint64_t next_detect_ = 0;  // stream positions of the next searches
  std::uint64_t next_shape_ = 0;
  std::uint64_t count_ = 0;    // allocations observed (the stream position)
  std::uint64_t base_ = 0;     // stream position of sizes_[0]
  std::uint64_t watched_from_ = 0;  // stream position of the last reset
  std::uint32_t period_ = 0;
  std::uint64_t boundary_ = 0; // a stream position where an iteration starts
  std::uint64_t signature_ = 0;
  std::uint64_t anchor_ = 0;
};

// A thread's watcher (auto_mode.cc): the detector, and the watched blocks live now
// (their bytes are the detector's "live" input, so frees of watched blocks must be
// seen).
//
// Every free of a backend block on a watching thread would otherwise be a hash lookup:
// `filter` (Note [Live filters], support/live_filter.h) says which it can skip.
// A watched block: its size and its position in the detector's stream.
struct watched_block {
  std::uint64_t size;
  std::uint64_t pos;
};

struct auto_state {
  // pre: `filter_counts` holds zeroed_live_filter::bytes zero bytes, as long as this.
  auto_state(std::uint32_t history, std::uint64_t cached_max, void* filter_counts)
      : det(history, cached_max), filter(filter_counts) {}
  period_detector det;
  absl::flat_hash_map<const void*, watched_block, absl::Hash<const void*>, std::equal_to<const void*>,
                      backend::internal_allocator<std::pair<const void* const, watched_block>>>
      live;
  std::uint64_t live_bytes = 0;
  char key[48] = "";
  std::uint32_t deviated_in_a_row = 0;
  std::uint32_t periods_failed = 0;  // Note [Periods that keep failing] (auto_policy.h)
  // Note [Auto mode rests] (auto_mode.cc): where watching began (a stream position),
  // how many watched allocations are left to skip while resting, and rests in a row.
  std::uint64_t watch_start = 0;
  std::uint64_t resting = 0;
  std::uint32_t rests = 0;
  // Note [A glance after a rest] (auto_mode.cc): whether the rest ends in a glance, and
  // the glance's allocations still to tally.
  bool glance_after_rest = false;
  std::uint32_t glancing = 0;
  // Note [Iterations between quiet points]: slow-path allocations in a row made at
  // the quiet count, and the slab hits of the iteration when the last was counted (a
  // hit in between breaks the row).
  std::uint32_t at_quiet = 0;
  std::uint32_t at_quiet_handed = 0;
  // Note [Auto mode as a client]: whether the thread's open iteration is one auto mode
  // began, and the slow-path allocations it saw (slab slots the cursor counts).
  bool in_iteration = false;
  std::uint32_t count = 0;
  // Note [Long pieces between anchors] (auto_iteration.h): the open iteration is a long
  // piece's rest, of the key `long_key`; the step's iteration asked whether it is one.
  bool in_long = false;
  bool long_checked = false;
  char long_key[56] = "";
  // Note [A period of sizes that stops at once] (auto_policy.h): the period's sizes (one
  // bit per hash), the iterations still to check, and the current one's requests seen
  // and those of a size in the period.
  std::bitset<period_size_bits> period_sizes;
  std::uint32_t sizes_checks_left = 0;
  std::uint32_t sizes_seen = 0;
  std::uint32_t sizes_member = 0;
  // Note [A dormant watcher] (auto_mode.cc): backend frees the gate sent to the watcher
  // since its last watched allocation.
  std::uint32_t unwatched_frees = 0;

  // Of `live` (Note [A watcher's filter zeroed by the kernel]): its counts follow this
  // object in the block watch() callocs (auto_mode.cc).
  zeroed_live_filter filter;
};

// What auto_period_begins() asks of the thread's found period (the next boundary only
// where it decides: it divides).
inline auto_period period_of(const auto_state& a) {
  auto_period p;
  p.found = true;
  p.quiet = a.det.quiet();
  p.at_quiet = a.at_quiet;
  p.quiet_run = a.det.quiet_run();
  p.anchor = a.det.anchor();
  p.count = a.det.count();
  if (!p.quiet && p.anchor == 0) p.next_boundary = a.det.next_boundary();
  return p;
}

}  // namespace replayalloc::detail
