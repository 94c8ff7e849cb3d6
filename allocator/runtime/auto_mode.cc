// The thread's side of auto mode (Note [Auto mode], runtime/auto_detect.h has the
// period detector; Note [Auto mode as a client], runtime/auto_mode.h): watching a
// thread's allocations, opening and closing the iterations it finds through
// engine::begin and engine::end, resting on a thread with no period.
#include "runtime/auto_mode.h"

#include <atomic>
#include <new>

#include "backend/backend.h"
#include "replay/cursor_ops.h"
#include "replay/fast_path.h"
#include "runtime/auto_detect.h"
#include "runtime/auto_policy.h"
#include "runtime/engine.h"
#include "support/log.h"
#include "support/reentry.h"
#include "support/grow_table.h"

namespace replayalloc::detail::auto_mode {

namespace {

std::atomic<std::uint64_t> g_rests{0};

// Note [A process whose threads show no period]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A watcher rests (Note [Auto mode rests]) after watching a few thousand allocations
// with no period, but each new thread starts watching afresh, and watching costs about
// 1,500-2,000 instructions per watched allocation: a program whose threads are short
// (larson's, which end and start successors all the time; a thread per request)
// watched every thread's first 2,048 allocations and ran 25% more instructions than
// jemalloc alone (bench/micro/threaded_stress.cc larson, callgrind). So the process
// remembers: the rests taken for want of a period since a period was last found on any
// thread (g_rests_without_period). From two on, a new thread's watcher begins with a
// rest, as long as the latest of them (one history, doubled per rest beyond the
// second, up to 32 times); a period found on any thread forgets them, and new threads
// watch at once again. Where this is wrong: a process whose first threads show no
// period and whose later ones would, each after its first rest: those later threads
// are watched one rest and a glance later (16,384 + 512 allocations by default, a few
// inferences; Note [A glance after a rest]), if the glance shows sizes that recur.
std::atomic<std::uint32_t> g_rests_without_period{0};

void rest(thread_state& t, auto_state& a, std::uint64_t budget, bool glance = false) noexcept;

}  // namespace

// Note [Auto mode], the thread's side: while watching, every allocation of at least
// the minimum size is observed with the live bytes before it; once a period is
// found, the thread waits for the boundary and then runs back-to-back iterations of
// the period's key, each ended at the first slow-path allocation after the period's
// allocations were made (in replay: the plan's slots walked, or as many allocations
// made). A program that marks its own iterations on a thread switches auto off there.

// Note [A period whose key is set aside]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The key policy sets a key aside when its plans keep failing (Note [Setting aside]):
// 8, 32, then 128 of its iterations pass through, then 4,096. For a key auto mode
// named, that verdict is on the period: the watcher rejects it at the end of the first
// iteration that passed through set aside, and watches the thread's allocations again,
// where another period may repeat. Counted as poor iterations instead (an iteration
// that passes through hands nothing out), the period would wait for
// 2 x REPLAYALLOC_REPLAN_AFTER of them in a row, and one that replayed in between
// forgave them: whether the watcher or the key gave up first was a race. ONNX
// Runtime's generation loop under Node.js (bench/run_onnx_generation.sh) showed it: the
// first period found (27 or 28 allocations, unanchored: the key/value cache grows a
// row a step, so its sizes drift) deviates; where the watcher rejected it, the decode
// step was found anchored at its first request (61% of the run's allocations from a
// slab); where the key was set aside and given up for 4,096 iterations first (5 runs
// of 6 in one setting), 0.3% came from a slab (bench/RESULTS.md, "a period whose key
// is set aside").

// Note [One verdict for auto mode]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Whether an iteration auto mode began repeated its period is the key policy's reading
// of the replay (read_replay, runtime/replay_verdict.cc), not a rule of the watcher's
// own: the watcher tells the engine what the period made (domain_state::expected: the
// period's allocations, or between quiet points what this piece made) before it ends
// the iteration, and reads back whether the replay fell short (fell_short: fewer blocks
// handed out than (100 - REPLAYALLOC_DEVIATION_PERCENT)% of the fewer of the plan's
// slots and that count; blocks that outlive the iteration have no slot, so they are
// never a shortfall). The reading's other half, misses beyond the percent, is the key's
// alone: `deviated` counts towards retiring the plan (a re-recording takes in
// allocations the plan lacks), but auto mode does not give up a period for it. In a
// loop auto mode finds in a host language's program, those misses are the language's
// own objects, whose number per step moves with its collector: ONNX Runtime under
// Node.js at two sessions replayed decode steps that handed out all 30 of the plan's
// slots with 4-8 requests beside them (misses over 10% of 30: deviated), and a watcher
// that rejected the period on the key's `counted` served 2.1% from a slab against 75.9%
// (bench/RESULTS.md, "poor iteration from the key policy's verdict, tried"). So one
// reading, one threshold, two consequences: the key retires a plan that deviates, the
// watcher rejects a period whose replays fall short.

namespace {

// Note [A period of sizes that stops at once]: a size's bit in auto_state::period_sizes,
// and whether a request's size is one the period has (or shares its bit with one).
std::size_t period_bit(std::uint64_t size) { return absl::Hash<std::uint64_t>{}(size) % period_size_bits; }
bool period_has(const auto_state& a, std::uint64_t size) { return a.period_sizes.test(period_bit(size)); }

// The watched blocks forgotten, and the filter with them: block by block where they are
// few, so that its counts' pages are touched only where blocks were counted (Note [A
// watcher's filter zeroed by the kernel]; the filter counts exactly the table's blocks).
void forget_live(auto_state& a) {
  if (a.live.size() <= 1024) {
    for (const auto& [p, b] : a.live) a.filter.remove(p);
  } else {
    a.filter.clear();
  }
  a.live.clear();
  a.live_bytes = 0;
}

// The next iteration of `key`, beginning with a request of `size` bytes.
void begin_step(thread_state& t, auto_state& a, std::size_t size, engine& eng, const char* key) {
  eng.begin(t, key, size);
  a.in_iteration = true;
  a.count = 1;
  a.at_quiet = 0;
  a.at_quiet_handed = 0;
  a.long_checked = false;
  a.sizes_seen = 1;  // Note [A period of sizes that stops at once]: read while checks are left
  a.sizes_member = a.sizes_checks_left > 0 && period_has(a, size) ? 1 : 0;
}

// The thread's period given up: watched again, never picking it again, or, the second
// given up in a row, resting (Note [Periods that keep failing], auto_policy.h).
void give_up(thread_state& t, auto_state& a, const options& opts) {
  a.det.reject_current();
  a.watch_start = a.det.count();
  if (const auto_failed f = auto_rest_after_failed(++a.periods_failed); f.rest) {
    a.rests = f.rests;
    rest(t, a, opts.auto_history);
    REPLAYALLOC_LOG(info, "auto: thread %u gave up %u periods in a row; not watched for the next %llu", t.thread_no,
                    a.periods_failed, static_cast<unsigned long long>(a.resting));
  }
}

// An allocation inside an iteration auto mode began: the iteration ends before it
// (runtime/auto_iteration.h), and the next begins with it unless the period is
// rejected (runtime/auto_policy.h).
void step_iteration(thread_state& t, auto_state& a, std::size_t size, engine& eng, const options& opts) {
  const domain_state& d = t.host;
  const bool replaying = d.ph == phase::replay;
  // Where it ends, and whether it repeated the period: runtime/auto_iteration.h.
  auto_iteration it;
  it.period = a.det.period();
  it.quiet = a.det.quiet();
  it.quiet_run = a.det.quiet_run();
  it.anchor = a.det.anchor();
  it.replaying = replaying;
  it.handed = replaying ? cursor_handed(d.cursor) : 0;
  it.count = a.count;
  it.at_quiet = a.at_quiet;
  it.cursor_next = replaying ? cursor_next(d.cursor) : 0;
  it.cursor_count = d.cursor.count;
  it.misses = replaying ? static_cast<std::uint32_t>(cursor_misses(d.cursor) - d.misses_at_begin) : 0;
  it.long_piece = a.in_long;
  it.long_checked = a.long_checked;
  const auto_cut cut = auto_iteration_cut(it, size);
  if (cut == auto_cut::none) {
    if (it.anchor != 0 && std::uint64_t{it.handed} + it.count >= it.period) a.long_checked = true;
    ++a.count;
    if (a.sizes_checks_left > 0 && !a.in_long) {  // Note [A period of sizes that stops at once]
      ++a.sizes_seen;
      a.sizes_member += period_has(a, size) ? 1 : 0;
    }
    return;
  }
  if (a.in_long) {
    // Note [Long pieces between anchors]: the rest of a long piece is its key's; the
    // key policy reads its replay, the watcher does not (the period is the step's).
    t.host.expected = std::uint64_t{it.handed} + it.count;
    eng.end(t);
    a.in_long = false;
    begin_step(t, a, size, eng, a.key);
    return;
  }
  // A period of structure (Note [Periods whose sizes change]) whose key failed once
  // (a plan retired, a recording of another structure) was taken where the program
  // only looked periodic: it is given up at once, not after many poor iterations.
  const bool failed_shape = a.det.by_shape() && it.anchor == 0 && t.host.probation;
  const bool set_aside = t.host.aside;  // Note [A period whose key is set aside]
  // Whether it repeated the period is the key policy's reading of the replay (Note
  // [One verdict for auto mode]), against what the period made.
  t.host.expected = it.quiet ? std::uint64_t{it.handed} + it.count : it.period;
  eng.end(t);
  const bool poor = t.host.fell_short;
  if (replaying && !poor && !t.host.deviated) a.periods_failed = 0;  // Note [Periods that keep failing]
  a.in_iteration = false;
  const auto_verdict v = auto_after_iteration(poor, failed_shape, set_aside, a.deviated_in_a_row, opts.replan_after);
  a.deviated_in_a_row = v.deviated_in_a_row;
  // Note [A period of sizes that stops at once].
  const bool stopped = a.sizes_checks_left > 0 && auto_sizes_stopped(a.sizes_seen, a.sizes_member, it.period);
  if (a.sizes_checks_left > 0) --a.sizes_checks_left;
  if (v.reject || stopped) {
    // The period is gone (a new shape, a new phase of the program), or was a
    // repeated part of a longer one.
    REPLAYALLOC_LOG(info, "auto: '%s' keeps deviating (%s); watching the thread's allocations again", a.key,
                    failed_shape ? "its plans failed"
                    : set_aside  ? "its key is set aside"
                    : v.reject   ? "poor iterations in a row"
                                 : "its sizes stopped repeating at once");
    give_up(t, a, opts);
    return;
  }
  if (cut == auto_cut::long_piece) {
    if (a.long_key[0] == '\0') std::snprintf(a.long_key, sizeof a.long_key, "%s/long", a.key);
    begin_step(t, a, size, eng, a.long_key);
    a.in_long = true;
    if (t.entry != nullptr) {
      std::lock_guard<std::mutex> lock(t.entry->mu);
      on_auto_period(*t.entry, true, a.det.by_shape());
    }
    return;
  }
  begin_step(t, a, size, eng, a.key);
}

// A found period begins its iterations at this allocation: the key named, the first iteration begun.
void begin_iterations(thread_state& t, auto_state& a, std::size_t size, engine& eng) {
  g_rests_without_period.store(0, std::memory_order_relaxed);  // Note [A process whose threads show no period]
  if (a.det.quiet()) {
    // The watched blocks stay tracked: their count says where iterations end.
    std::snprintf(a.key, sizeof a.key, "auto/%016llx/q%u", static_cast<unsigned long long>(a.det.signature()),
                  a.det.quiet_level());
    REPLAYALLOC_LOG(info, "auto: thread %u begins its requests where %u watched blocks are live (run %u; pieces of up "
                    "to %u allocations; structure and sizes vary; found in %llu watched); iterations of '%s' begin",
                    t.thread_no, a.det.quiet_level(), a.det.quiet_run(), a.det.period(),
                    static_cast<unsigned long long>(a.det.count() - a.watch_start), a.key);
  } else {
    forget_live(a);
    std::snprintf(a.key, sizeof a.key, "auto/%016llx/p%u",
                  static_cast<unsigned long long>(a.det.signature()), a.det.period());
    char at[48] = "";
    if (a.det.anchor() != 0) {
      std::snprintf(at, sizeof at, " at each request of %llu bytes",
                    static_cast<unsigned long long>(a.det.anchor()));
    }
    REPLAYALLOC_LOG(info, "auto: thread %u repeats every %u allocations%s (found in %llu watched); "
                    "iterations of '%s' begin%s",
                    t.thread_no, a.det.period(), a.det.by_shape() ? " (in structure; sizes vary)" : "",
                    static_cast<unsigned long long>(a.det.count() - a.watch_start), a.key, at);
  }
  a.long_key[0] = '\0';  // Note [Long pieces between anchors]: named from a.key when needed
  a.in_long = false;
  // Note [A period of sizes that stops at once]: the period's sizes, the newest period
  // of the history (any rotation of it has them all).
  a.period_sizes.reset();
  a.sizes_checks_left = 0;
  if (!a.det.quiet() && !a.det.by_shape()) {
    for (std::uint32_t k = 0; k < a.det.period(); ++k) {
      a.period_sizes.set(period_bit(a.det.size_back(k)));
    }
    a.sizes_checks_left = sizes_checked_iterations;
  }
  begin_step(t, a, size, eng, a.key);  // finds or makes the key's entry
  if (t.entry != nullptr) {
    std::lock_guard<std::mutex> lock(t.entry->mu);
    on_auto_period(*t.entry, a.det.quiet(), a.det.by_shape());
  }
  a.rests = 0;
}

// Note [Auto mode rests]
// ~~~~~~~~~~~~~~~~~~~~~~
// Watching costs a hash-map update per watched allocation and free, and the searches
// (~1,500 instructions per watched allocation in all, bench/micro/never_repeats.cc
// under callgrind), and a stream that has shown no period in two histories' worth of
// allocations (32,768 by default; Note [A first watch of two histories]) most likely has
// none (shapes that change every request, structures that never settle): the thread
// stops watching for four histories' worth (65,536), doubling with each rest in a row
// up to 64 times, then watches afresh (after a glance where the rest was for rare
// sizes: Note [A glance after a rest]). A stream in which no search of sizes ever found
// the newest size twice before it (nothing recurs, so nothing can be planned) rests
// after one history's worth already, and one in which fewer than a quarter of the
// watch's first 2,048 allocations have a size seen before in it (random sizes: ~3%)
// after those 2,048 (fewer than a sixteenth after 512 already: Note [Rare sizes said early],
// runtime/auto_detect.h), for one history: any program whose period is at most 1,024 allocations repeats at
// least half of them, a program whose sizes change by the request repeats its layers'
// shapes within one, and a watch of 2,048 allocations with a rest of 16,384 after it
// costs an eighth of one of 16,384. (Where this is wrong: a period of more than 1,536
// allocations nearly all of whose sizes differ is never found; no model's inference
// is one, its layers repeating their shapes.) A watch all of whose allocations had
// one size rests after one history too: no search of sizes finds a period there
// (every candidate is a multiple of 1), and the searches of structure and of quiet
// points take periods of at most an eighth of a history, eight of which one history
// shows (bench/micro/bursts.cc, bursts of 2,000 blocks of 100,000 bytes, each round
// one period of 2,000 allocations too long for them: before, all 40,000 of its
// allocations were watched). While it rests its allocations and frees go to the
// backend after one counter.
void rest_without_period(thread_state& t, auto_state& a, const options& opts) {
  auto_watch w;
  w.rare = a.det.sizes_rare();
  w.alone = a.det.blocks_alone();  // Note [Blocks that never overlap]
  w.sizes_recur = a.det.sizes_recur();
  w.one_size = a.det.one_size();
  w.cached_one_size = a.det.sample_one_size();  // Note [Blocks that never overlap]
  w.watched = a.det.count() - a.watch_start;
  w.rested = a.rests > 0;  // Note [A shorter watch after a rest]
  if (const auto_rest r = auto_rest_after(w, opts.auto_history); r.rest) {
    rest(t, a, r.budget, w.rare);  // Note [A glance after a rest]
    g_rests_without_period.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "auto: thread %u shows no period in %llu allocations%s; not watched for the next %llu",
                    t.thread_no, static_cast<unsigned long long>(w.watched),
                    w.rare ? " (few of their sizes recur)"
                    : w.alone ? " (each freed before the next)"
                    : w.cached_one_size ? " (all of one size the fallback caches)"
                    : w.one_size ? " (all of one size)" : "",
                    static_cast<unsigned long long>(a.resting));
  }
}

// Note [A glance after a rest]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A watch whose sample showed rare sizes (Note [Auto mode rests]) rests, and the rest
// ended in a watch as costly as the first: ~650 instructions per watched allocation in
// the watcher alone (the table of live blocks, the history, the searches; callgrind,
// threaded_stress prodcons) over another sample of 2,048, after which a stream of
// random sizes rests again. On the threaded stress programs (bench/micro/
// threaded_stress.cc), whose sizes never repeat, those second watches were half or more
// of what auto mode cost over REPLAYALLOC_MODE=off. So a rest taken for rare sizes, and
// the rest a new thread begins with (Note [A process whose threads show no period]),
// ends in a glance instead: the next glance_sample (512) allocations are only tallied
// for sizes seen before in the glance (period_detector::glance, the sample's table of
// hashed sizes: a hash and a bit; nothing followed, no history, no search, their frees
// unseen), and where fewer than a quarter of them recur (auto_glance_rare) the thread
// rests again, twice as long (up to 64x), without watching; otherwise the detector
// starts afresh and the thread is watched as after any rest. A glanced allocation takes
// the engine's slow path (no pass is granted ahead while glancing), ~150 instructions
// more than a resting one's pass (Note [Pass-through]), 512 of them a rest. Any period of up to 256 allocations
// repeats at least half of a glance's sizes, and a model's layers repeat their shapes
// within a few dozen. Where this is wrong: a program that turns, after a rest, to a
// period of more than 384 allocations nearly all of whose sizes differ is not found
// (a thread's first watch finds one of up to 1,536 as before, but a new thread of a
// process with no period begins with a rest and a glance, not a watch), and a program
// that turns periodic during a rest is watched 512 allocations later.
void glance_at(thread_state& t, auto_state& a, std::size_t size, const options& opts) {
  a.det.glance(size);
  if (--a.glancing > 0) return;
  if (auto_glance_rare(a.det.glanced(), a.det.glance_recurred())) {
    rest(t, a, opts.auto_history, true);
    g_rests_without_period.fetch_add(1, std::memory_order_relaxed);
    REPLAYALLOC_LOG(info, "auto: thread %u: few sizes recur in %u allocations after its rest; not watched for the next %llu",
                    t.thread_no, glance_sample, static_cast<unsigned long long>(a.resting));
    return;
  }
  a.det.reset();  // the glance's tally: the watch's sample begins afresh
  a.watch_start = a.det.count();
  refresh_watched_gate(t);
}

// before_alloc(), where the watcher's memory may not run out.
void watch(thread_state& t, std::size_t size) {
  if (t.marks_own || (t.depth > 0 && (t.autod == nullptr || !t.autod->in_iteration))) return;
  reentry_guard guard;
  engine& eng = engine::get();
  const options& opts = eng.opts();
  if (t.autod == nullptr) {
    // The watcher and its filter's counts in one block, zeroed (Note [A watcher's filter
    // zeroed by the kernel]).
    constexpr std::size_t counts_at = (sizeof(auto_state) + 63) & ~std::size_t{63};
    static_assert(alignof(auto_state) <= alignof(std::max_align_t), "calloc's alignment");
    void* mem = backend::engine_calloc(counts_at + zeroed_live_filter::bytes);
    if (mem == nullptr) return;
    t.autod = new (mem) auto_state(opts.auto_history, backend::thread_cache_max(), static_cast<char*>(mem) + counts_at);
    refresh_watched_gate(t);
    // Note [A process whose threads show no period]
    const std::uint32_t r = g_rests_without_period.load(std::memory_order_relaxed);
    if (const auto_start start = auto_start_of_thread(r); start.rest) {
      t.autod->rests = start.rests;
      rest(t, *t.autod, opts.auto_history, true);  // Note [A glance after a rest]
      REPLAYALLOC_LOG(info, "auto: thread %u begins resting (%llu allocations): the process's threads showed no "
                      "period in their last %u watches", t.thread_no,
                      static_cast<unsigned long long>(t.autod->resting), r);
      return;
    }
  }
  auto_state& a = *t.autod;
  if (a.resting > 0) {  // Note [Auto mode rests]
    if (--a.resting == 0) {
      if (a.glance_after_rest) {  // Note [A glance after a rest]
        a.glancing = glance_sample;
        return;
      }
      a.watch_start = a.det.count();
      refresh_watched_gate(t);
    }
    return;
  }
  if (a.glancing > 0) {
    glance_at(t, a, size, opts);
    return;
  }
  // Note [A dormant watcher]: a watched allocation wakes it.
  a.unwatched_frees = 0;
  if ((t.free_gate & gate_watched) == 0) [[unlikely]] refresh_watched_gate(t);
  else if (!t.front_watched) [[unlikely]] watch_front(t, true);  // the front cache began since: Note [Frees the watcher asks for]
  // Note [Iterations between quiet points]: the row of allocations made at the quiet
  // count; one whose last reaches the detector's run begins an iteration.
  if (a.det.quiet()) {
    const domain_state& d = t.host;
    const bool slab = a.in_iteration && d.ph == phase::replay;
    const std::uint32_t handed = slab ? cursor_handed(d.cursor) : 0;
    const std::uint64_t live = a.live.size() + (slab ? handed - cursor_freed(d.cursor) : 0);
    if (handed != a.at_quiet_handed) a.at_quiet = 0;
    a.at_quiet = live <= a.det.quiet_level() ? a.at_quiet + 1 : 0;
    a.at_quiet_handed = handed;
  }
  if (a.in_iteration) {
    step_iteration(t, a, size, eng, opts);
    return;
  }
  if (a.det.found() && auto_period_begins(period_of(a), size)) {
    begin_iterations(t, a, size, eng);
    return;
  }
  a.det.observe(size, a.live_bytes, static_cast<std::uint32_t>(a.live.size()));
  if (!a.det.found()) rest_without_period(t, a, opts);  // Note [Auto mode rests]
}

// Note [Auto mode rests]: the watcher drops its history and its table of live blocks
// and skips the next `budget` allocations, doubled for each rest in a row (up to 64x).
// Nothing watches the thread's frees meanwhile (tracking() below): the plain-free gate
// loses gate_watched until the rest ends (watch() sets it again, or glance_at() at
// the end of a glance that shows sizes recurring), so that a
// resting thread's frees of backend blocks go from the inline entry point straight to
// the backend's free, as its allocations go from the slow path's top.
void rest(thread_state& t, auto_state& a, std::uint64_t budget, bool glance) noexcept {
  a.resting = budget << std::min<std::uint32_t>(a.rests, 6);
  ++a.rests;
  a.glancing = 0;
  a.glance_after_rest = glance;
  forget_live(a);
  a.det.reset();
  set_free_gate(t, t.free_gate & ~gate_watched);
  g_rests.fetch_add(1, std::memory_order_relaxed);
}

// The watcher's history or its table of live blocks could not grow (the detector's
// arrays may differ in length by one now): both are dropped, and the thread rests as
// after a stream with no period, so that it does not fail again at once.
void out_of_memory(thread_state& t) noexcept {
  reentry_guard guard;
  auto_state* a = t.autod;
  if (a == nullptr) return;
  if (a->in_iteration) {  // a rest never ends an iteration: end it now
    a->in_iteration = false;
    a->in_long = false;
    try {
      engine::get().end(t);
    } catch (const std::bad_alloc&) {
    }
  }
  rest(t, *a, engine::get().opts().auto_history);
  REPLAYALLOC_LOG(warning, "auto: out of memory watching thread %u; not watched for the next %llu allocations",
                  t.thread_no, static_cast<unsigned long long>(a->resting));
}

// Note [A dormant watcher]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// While a thread is watched, every free of a backend block goes past the plain-free
// gate to the watcher's filter (free_backend_filtered, runtime/shortcuts.h), the small
// blocks' too: ~30 instructions more per malloc+free pair below the minimum size (a
// 64-byte pair through the LD_PRELOAD library: 118.7 against 87.3, callgrind,
// bench/micro/preload_callgrind.cc unmarked). A watcher rests only by counting watched
// allocations, so a thread that made one (a start-up buffer) and then only small ones
// paid that for good. So after dormant_after (16,384) such frees in a row with no
// watched allocation among them, and not while it counts a replayed iteration's end by
// its live blocks (Note [Iterations between quiet points]), the watcher goes dormant
// (the free that reaches the count is sent to the slow path, whose on_free() does it: a
// call in the inline free would give every free a stack frame, +3 instructions): it
// forgets its live blocks (their frees, which it no longer sees, would leave them in
// its table: they have lived dormant_after frees, long-lived in its history anyway)
// and the gate loses gate_watched. Its history and its period search stay; its next
// watched allocation (watch()) sets the gate again. What it misses meanwhile is frees
// of blocks it no longer tracks: nothing is handed out or freed differently.
void go_dormant(thread_state& t) noexcept {
  reentry_guard guard;
  auto_state& a = *t.autod;
  a.unwatched_frees = 0;
  forget_live(a);
  set_free_gate(t, t.free_gate & ~gate_watched);
}

// Outside auto iterations, and inside those between quiet points (Note [Iterations
// between quiet points]: their ends are counted from `live`).
bool tracking(const thread_state& t) {
  return t.autod != nullptr && !t.marks_own && t.autod->resting == 0 && t.autod->glancing == 0 &&
         (!t.autod->in_iteration || t.autod->det.quiet());
}

void track(thread_state& t, const void* p, std::size_t size) {
  if (!tracking(t)) return;
  reentry_guard guard;
  // The allocation just observed (watch()) is the stream's newest; one made
  // inside an iteration was not observed, and has no lifetime to settle.
  const watched_block b{size, t.autod->in_iteration ? UINT64_MAX : t.autod->det.count() - 1};
  grow_for_insert(t.autod->live);  // Note [Tables that grow before they insert]
  auto [it, fresh] = t.autod->live.try_emplace(p, b);
  if (fresh) t.autod->filter.add(p);
  if (!fresh) {
    t.autod->live_bytes -= it->second.size;
    it->second = b;
  }
  t.autod->live_bytes += size;
}

}  // namespace

void on_free(thread_state& t, const void* p) {
  // Note [A dormant watcher]: the plain-free gate's filter sent this free here.
  // (The threshold first: what counts piece ends is read only past it.)
  if (t.autod != nullptr && t.autod->unwatched_frees >= dormant_after &&
      auto_goes_dormant(t.autod->unwatched_frees, t.autod->in_iteration && t.autod->det.quiet())) [[unlikely]] {
    go_dormant(t);
  }
  if (!tracking(t)) return;
  reentry_guard guard;
  auto it = t.autod->live.find(p);
  if (it == t.autod->live.end()) return;
  t.autod->live_bytes -= it->second.size;
  t.autod->det.settle(it->second.pos);
  t.autod->live.erase(it);
  t.autod->filter.remove(p);
  // Note [Iterations between quiet points]: the free that brings a replayed iteration
  // down to the quiet count (a block that outlived the last request, served by the
  // backend as planned) ends its replay: the rest goes to the slow path, so that the
  // next request's first allocation reaches watch() and begins the next
  // iteration there, even when this one's plan was longer than the request.
  domain_state& d = t.host;
  if (t.autod->in_iteration && d.ph == phase::replay && !d.masked) {
    const std::uint32_t handed = cursor_handed(d.cursor);
    if (handed + t.autod->count >= min_quiet_piece &&
        t.autod->live.size() + (handed - cursor_freed(d.cursor)) <= t.autod->det.quiet_level()) {
      cut_plan_at_cursor(d.cursor);
    }
  }
}

void before_alloc(thread_state& t, std::size_t size) noexcept {
  try {
    watch(t, size);
  } catch (const std::bad_alloc&) {
    out_of_memory(t);
  }
}

void after_alloc(thread_state& t, const void* p, std::size_t size, bool slab) noexcept {
  if (!slab) {
    try {
      track(t, p, size);
    } catch (const std::bad_alloc&) {
      out_of_memory(t);
    }
  } else if (t.autod != nullptr && t.autod->in_iteration && t.autod->count > 0) {
    // A slot handed out here is counted by the cursor (cursor_handed()), not again
    // among the slow path's allocations: an iteration ends at handed + count, and in
    // check mode every slot is handed out here.
    --t.autod->count;
  }
}

void step_aside(thread_state& t) {
  if (owns_iteration(t)) {
    t.autod->in_iteration = false;
    t.autod->in_long = false;
    engine::get().end(t);
  }
  t.marks_own = true;
  refresh_watched_gate(t);
}

bool owns_iteration(const thread_state& t) { return t.autod != nullptr && t.autod->in_iteration; }

void forget_iteration(thread_state& t) {
  if (t.autod != nullptr) {
    t.autod->in_iteration = false;
    t.autod->in_long = false;
  }
}

void on_thread_exit(thread_state& t) {
  if (t.autod != nullptr) {
    reentry_guard guard;
    t.autod->~auto_state();
    backend::fallback_free(t.autod);
    t.autod = nullptr;
    refresh_watched_gate(t);  // before anything can free: free_backend_filtered reads autod
  }
}

std::uint64_t rests() { return g_rests.load(std::memory_order_relaxed); }

void forget_rests() { g_rests_without_period.store(0, std::memory_order_relaxed); }

}  // namespace replayalloc::detail::auto_mode
