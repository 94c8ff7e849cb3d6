#include "runtime/auto_detect.h"

#include <algorithm>
#include <cmath>

#include "absl/hash/hash.h"
#include "support/hash.h"

namespace replayalloc::detail {

void period_detector::reset() {
  next_detect_ = 0;
  next_shape_ = 0;
  sizes_.clear();
  same_run_ = 0;
  search_at_run_end_ = false;
  live_.clear();
  life_.clear();
  blocks_.clear();
  by_shape_ = false;
  sizes_recur_ = false;
  seen_.reset();
  sampled_ = 0;
  recurred_ = 0;
  blocks_alone_ = false;
  sample_largest_ = 0;
  sample_one_size_ = false;
  quiet_ = false;
  quiet_level_ = 0;
  quiet_run_ = 0;
  base_ = count_;
  watched_from_ = count_;
  period_ = 0;
  boundary_ = 0;
  signature_ = 0;
  anchor_ = 0;
}

bool period_detector::observe(std::uint64_t size, std::uint64_t live, std::uint32_t live_blocks) {
  if (sizes_.size() >= history_) {  // keep the newer half
    const std::size_t drop = sizes_.size() / 2;
    sizes_.erase(sizes_.begin(), sizes_.begin() + static_cast<std::ptrdiff_t>(drop));
    live_.erase(live_.begin(), live_.begin() + static_cast<std::ptrdiff_t>(drop));
    life_.erase(life_.begin(), life_.begin() + static_cast<std::ptrdiff_t>(drop));
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(drop));
    base_ += drop;
    same_run_ = std::min<std::size_t>(same_run_, sizes_.size());
  }
  same_run_ = !sizes_.empty() && sizes_.back() == size ? same_run_ + 1 : 1;
  sizes_.push_back(size);
  live_.push_back(live);
  life_.push_back(0);
  blocks_.push_back(live_blocks);
  ++count_;
  // Note [Auto mode rests]: a size seen before? Note [A size never seen before]: kept
  // for every allocation, not only the sample's.
  newest_seen_ = mark_seen(size);
  if (sampled_ < recur_sample) {
    recurred_ += newest_seen_;
    ++sampled_;
    sample_largest_ = std::max(sample_largest_, size);
    if (sampled_ == early_sample || sampled_ == recur_sample) {  // Note [Blocks that never overlap]
      blocks_alone_ = sample_alone();
      sample_one_size_ = sample_of_one_size();
    }
  }
  // A search of sizes scans up to a third of the history back, so it runs every 16
  // allocations while the history is short and every history/64 once it is long (every
  // history/16 found the period of a Python ResNet-50 loop, whose start-up fills the
  // history, five inferences later: preload.auto_resnet50); the searches of structure
  // and quiet points (up to quiet_window back, several passes) every shape_every, and
  // every history/8 once that is longer. A stream with no period costs ~400
  // instructions per watched allocation in searches (callgrind,
  // bench/micro/never_repeats.cc; ~560 with the second kind every 512 too).
  if (period_ != 0) return false;
  // Note [A search put off to a run's end] (auto_detect.h).
  if (search_at_run_end_ && same_run_ == 1) {
    search_at_run_end_ = false;
    if (detect()) return true;
  }
  if (count_ < next_detect_) return false;
  next_detect_ = count_ + std::max<std::uint64_t>(16, sizes_.size() / 64);
  if (same_run_ > most_candidates && same_run_ - 1 < 2 * (sizes_.size() / 3)) {
    search_at_run_end_ = true;
  } else if (detect()) {
    return true;
  }
  if (count_ < next_shape_) return false;
  next_shape_ = count_ + std::max<std::uint64_t>(shape_every, sizes_.size() / 8);
  return detect_shape() || detect_quiet();
}

bool period_detector::mark_seen(std::uint64_t size) {
  const std::size_t bit = absl::Hash<std::uint64_t>{}(size) % recur_bits;
  const bool was = seen_.test(bit);
  seen_.set(bit);
  return was;
}

void period_detector::glance(std::uint64_t size) {
  recurred_ += mark_seen(size);
  ++sampled_;
}

void period_detector::settle(std::uint64_t pos) {
  if (pos < base_ || pos >= count_) return;
  const std::uint64_t lifetime = count_ - pos;  // later allocations observed meanwhile
  life_[pos - base_] = static_cast<std::uint8_t>(lifetime < max_life ? lifetime : max_life);
}

// Note [Blocks that never overlap] (auto_policy.h), asked once the sample's last
// allocation is observed: every block of the sample freed by now, the newest aside, was
// freed before the next allocation (a lifetime of 1); blocks still live (a start-up's
// buffers, weights) say nothing of overlap and are left out, as long as they are at most
// half of the sample (blocks all still live, a burst's, overlap: it said "alone" of them).
bool period_detector::sample_alone() const {
  if (watched_from_ < base_ || sample_largest_ > cached_max_) return false;
  std::size_t freed = 0;
  for (std::size_t i = watched_from_ - base_; i + 1 < life_.size(); ++i) {
    if (life_[i] > 1) return false;
    freed += life_[i] != 0;
  }
  // The newest, just made, counted as freed (it is "aside"): not a sample of blocks all live.
  return 2 * (freed + 1) >= life_.size() - (watched_from_ - base_);
}

// Note [Blocks that never overlap], asked there too: the sample's blocks all of one size
// the fallback caches (the newest's), but at most a 64th of them of other sizes still
// live (a start-up's pool or buffers, made once: they say nothing of the stream).
bool period_detector::sample_of_one_size() const {
  if (watched_from_ < base_ || sizes_.empty() || sizes_.back() > cached_max_) return false;
  const std::uint64_t size = sizes_.back();
  std::size_t others = 0;
  for (std::size_t i = watched_from_ - base_; i < sizes_.size(); ++i) {
    if (sizes_[i] == size) continue;
    if (life_[i] != 0 || ++others > sampled_ / 64) return false;
  }
  return true;
}

std::uint8_t period_detector::symbol(std::size_t i) const {
  return life_[i] != 0 ? life_[i] : max_life;  // pre: i at least max_life behind
}

namespace {

// Whether test(d) holds for some divisor d of p below p (p at least 2), asked in
// ascending order up to the first that does: those up to sqrt(p), then their
// cofactors. A candidate period's divisors were found by trying every d up to p / 2,
// a division each: 256 candidates of up to a third of the history per search, ~4,600
// instructions per watched allocation in ONNX Runtime's loop under Node.js with its
// arena on, where no period is found (bench/run_onnx_instructions.sh).
template <class Test>
bool any_divisor(std::size_t p, Test test) {
  auto root = static_cast<std::size_t>(std::sqrt(static_cast<double>(p)));
  while (root * root > p) --root;
  while ((root + 1) * (root + 1) <= p) ++root;
  for (std::size_t d = 1; d <= root; ++d) {
    if (p % d == 0 && test(d)) return true;
  }
  for (std::size_t d = root; d >= 2; --d) {
    if (p % d == 0 && p / d != d && test(p / d)) return true;
  }
  return false;
}

}  // namespace

// Candidate periods: distances back from the newest value (index n - 1) to earlier
// positions whose last `probe` values are the same. Each is scored by how far back the
// stream keeps that period (its run): at least `periods` periods alike and 64 values;
// the longest run wins, the shorter period on ties (a period's multiples have shorter
// runs, and a repeated layer inside one inference has a run shorter than the
// inference's). A multiple of a shorter period is that period repeated, judged as that
// one. And an inference moves far more than min_period_bytes per iteration;
// interpreters' start-up loops, which also repeat, do not. Returns the period, or 0.
//
// Note [A period found on time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Searches run every history/64 allocations (observe()), so a period could be found up
// to that many allocations after its third period completed: past the request its
// iterations begin at (Note [Anchored iterations]), which then waits a whole period. A
// Python ResNet-50 loop (tests/preload/auto_resnet50), whose start-up fills the history
// with 4,405 watched allocations, was found 25-86 allocations into its fifth inference,
// after its anchor, and recorded the sixth. So a search also says when a candidate that
// already holds over two periods (and moves min_period_bytes) will hold over enough, if
// the stream goes on repeating it (`due`: allocations from now), and the next search
// runs then: the period is found at the allocation that completes it.
template <class Value>
std::size_t period_detector::best_period(std::size_t n, Value value, std::size_t periods,
                                         std::size_t probe, int* matches, std::size_t* due) const {
  std::size_t best_p = 0, best_run = 0;
  int candidates = 0;
  // How far back from the newest value the stream keeps period d (value(i) ==
  // value(i - d)), up to `cap`: a candidate p is a multiple of d when that reaches 2p.
  // Measured once per search for d up to trail_d (a stream of one size has every
  // candidate a multiple of 1), directly, up to 2p, above.
  constexpr std::size_t trail_d = 64;
  constexpr std::size_t unknown = ~std::size_t{0};
  std::size_t trail[trail_d + 1];
  std::fill(trail, trail + trail_d + 1, unknown);
  // Note [A run of one value walked once] (auto_detect.h): the newest same + 1 values
  // are one value (trail[1], once measured); every walk starts past the comparisons
  // inside them.
  std::size_t same = 0;
  const auto inside = [&](std::size_t d) { return same >= d ? same - d + 1 : 0; };
  const auto trailing = [&](std::size_t d, std::size_t cap) {
    std::size_t k = std::min(cap, inside(d));
    while (k < cap && k + d < n && value(n - 1 - k) == value(n - 1 - k - d)) ++k;
    return k;
  };
  // A stream of one value over every candidate's reach: each candidate (p up to
  // n / periods) is a multiple of 1, so none is taken, and each q matches; answered
  // without walking them (a stream of 4 KiB pairs searched 256 candidates every time).
  if (probe >= 1 && n > probe) {
    trail[1] = trailing(1, 2 * (n / periods));
    same = trail[1];
    if (trail[1] >= 2 * (n / periods)) {
      const std::size_t reach = std::min(n / periods, n - probe);
      if (matches != nullptr) *matches = static_cast<int>(std::min<std::size_t>(reach, 256));
      return 0;
    }
  }
  for (std::size_t q = n - 1; q-- > probe - 1 && candidates < most_candidates && periods * (n - 1 - q) <= n;) {
    bool same = true;
    for (std::size_t k = 0; k < probe && same; ++k) same = value(q - k) == value(n - 1 - k);
    if (!same) continue;
    ++candidates;
    const std::size_t p = n - 1 - q;
    if (p < 2 || rejected(p)) continue;
    // A candidate whose run cannot reach one period is neither taken nor due (both ask a
    // run of at least p, below): one comparison, at that period's far end, before its
    // divisors (ONNX Runtime's loop under Node.js: most candidates, ~1,000 instructions a
    // watched allocation in their divisors).
    if (2 * p > n || value(n - p) != value(n - 2 * p)) continue;
    // A multiple first: its test reads at most the last 2p values (once per search for
    // small divisors), the run below up to the whole history; in a stream of one size
    // every candidate is a multiple of 1, and measuring each one's run first, and each
    // one's 2p values, cost ~140,000 instructions per watched allocation (256 candidates
    // of a 16,384-value run every 256 allocations; bench/micro/preload_callgrind.cc
    // 4096 unmarked: 143,772 per pair).
    const bool multiple = any_divisor(p, [&](std::size_t d) {
      if (d > trail_d) return trailing(d, 2 * p) >= 2 * p;
      if (trail[d] == unknown) trail[d] = trailing(d, 2 * (n / periods));
      return trail[d] >= 2 * p;
    });
    if (multiple) continue;
    std::size_t run = inside(p);
    while (run + p < n && value(n - 1 - run) == value(n - 1 - run - p)) ++run;
    const std::size_t need = std::max<std::size_t>((periods - 1) * p, 64);
    // Note [A period found on time]: short of `need` by how many.
    const bool soon = run < need && run >= p && due != nullptr && (*due == 0 || need - run < *due);
    if (!soon && (run < need || run <= best_run)) continue;
    std::uint64_t bytes = 0;
    for (std::size_t k = n - p; k < n; ++k) bytes += sizes_[k];
    if (bytes < min_period_bytes) continue;
    if (soon) {
      *due = need - run;
      continue;
    }
    best_run = run;
    best_p = p;
  }
  if (matches != nullptr) *matches = candidates;
  return best_p;
}

// A period of sizes: three periods alike.
bool period_detector::detect() {
  const std::size_t n = sizes_.size();
  // One size over every candidate's reach (a third of the history): each candidate is a
  // multiple of 1, so best_period would take none, after walking that run once per
  // search (a stream of 4 KiB pairs: ~170 instructions per watched allocation); the
  // sizes recur when it would have counted two candidates.
  if (n >= 3 && same_run_ - 1 >= 2 * (n / 3)) {
    if (std::min(n / 3, n - 1) >= 2) sizes_recur_ = true;
    return false;
  }
  // Note [A size never seen before]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The search takes as candidates the earlier places of the newest size (probe 1), and
  // walks a third of the history back to find them: where the newest size is not among
  // the sizes observed since the last reset (seen_, one bit per hash, set for every
  // allocation observed; the history is a part of them), it has none, and its answer is
  // known: no period, no match, none due. A stream of random sizes has a size never seen
  // before at most of its searches (threaded_stress rptest: best_period was 42% of the
  // watcher's instructions). A hash's collision says "seen", and the search runs.
  if (!newest_seen_) return false;
  int matches = 0;
  std::size_t due = 0;
  const std::size_t p = best_period(n, [this](std::size_t i) { return sizes_[i]; }, 3, 1, &matches, &due);
  if (matches >= 2) sizes_recur_ = true;
  if (p == 0) {
    // Note [A period found on time]
    if (due != 0) next_detect_ = std::min<std::uint64_t>(next_detect_, count_ + due);
    return false;
  }
  found_at(p, n, false);
  return true;
}

// The period `p` holds over the stream up to (not including) index `end`: the
// boundary where the fewest bytes were live over its last period, and the key's name
// from the sizes (or, for a period of structure, the lifetimes) of one period.
// Note [Anchored iterations]: whether the allocation at j has a size that recurs
// exactly once a period: the same size one and two periods before, none between.
bool period_detector::anchors(std::size_t j, std::size_t p) const {
  if (j < 2 * p) return false;
  const std::uint64_t s = sizes_[j];
  if (sizes_[j - p] != s || sizes_[j - 2 * p] != s) return false;
  for (std::size_t k = j - p + 1; k < j; ++k) {
    if (sizes_[k] == s) return false;
  }
  return true;
}

// Note [Anchored iterations]: a step with an anchor most of whose blocks die within
// it (at most a third outlive it), counted from its anchor in the last full period
// below n. Steps of a request that hands its caches on from step to step (a Python
// loop's `past`) do not stand alone: their request is the iteration to find (the
// GPT-2 loop of tests/preload/auto_generation.py: 11 of 18 outlive their step; ONNX
// Runtime's under Node.js: 10 of 35, its outputs freed once copied out).
bool period_detector::steps_stand_alone(std::size_t p, std::size_t n) const {
  if (n < 3 * p) return false;
  for (std::size_t j = n - 2 * p; j < n - p; ++j) {
    if (!anchors(j, p)) continue;
    std::size_t outlive = 0;
    for (std::size_t i = j; i < j + p; ++i) outlive += life_[i] == 0 || i + life_[i] >= j + p;
    return 3 * outlive <= p;
  }
  return false;
}

void period_detector::found_at(std::size_t p, std::size_t end, bool by_shape) {
  std::size_t best = end - p;
  for (std::size_t j = end - p; j < end; ++j) {
    if (live_[j] < live_[best]) best = j;
  }
  // Note [Anchored iterations]: the boundary's size, when it recurs once a period;
  // a period of structure whose boundary's does not begins at the allocation of
  // least live bytes among those whose size does.
  anchor_ = 0;
  if (!anchors(best, p) && by_shape) {
    std::size_t anchored = end;
    for (std::size_t j = end - p; j < end; ++j) {
      if (anchors(j, p) && (anchored == end || live_[j] < live_[anchored])) anchored = j;
    }
    if (anchored != end) best = anchored;
  }
  if (anchors(best, p)) anchor_ = sizes_[best];
  period_ = static_cast<std::uint32_t>(p);
  by_shape_ = by_shape;
  boundary_ = base_ + best;
  std::uint64_t h = by_shape ? fnv1a(fnv_offset, 0x5a4e) : fnv_offset;
  for (std::size_t k = 0; k < p; ++k) h = fnv1a(h, by_shape ? symbol(best - p + k) : sizes_[best - p + k]);
  signature_ = fnv1a(h, p);
}

// Note [Periods whose sizes change]: the same search over the lifetimes of the
// allocations at least max_life old, filtered by the newest 8 symbols, and eight
// periods alike, not three: a program whose structure changes with some shapes
// (tensors crossing REPLAYALLOC_MIN_SIZE, kernels that allocate per chunk) matches
// itself for a few requests in a row by chance, and a period taken there drifts off
// the requests at the first other shape.
bool period_detector::detect_shape() {
  if (sizes_.size() <= max_life + 64) return false;
  const std::size_t n = sizes_.size() - max_life;  // symbols known below n
  const std::size_t p = best_period(n, [this](std::size_t i) { return symbol(i); }, shape_periods, 8);
  if (p == 0) return false;
  step_ = static_cast<std::uint32_t>(p);
  // Note [Requests of repeated steps]: the requests this step makes; or, while the
  // watch is younger than a history, none yet when fewer than 4 of them are in it or
  // the step's sizes grow. Steps that grow where no quiet point shows a request (a
  // host language holds the caches: Note [Anchored iterations]) are taken after
  // history / anchored_wait.
  const requests_seen seen = detect_requests(p);
  if (seen == requests_seen::found) return true;
  const std::uint64_t watched = count_ - watched_from_;
  if (seen == requests_seen::too_few && watched < history_) return false;
  if (grows(p, n) && watched < history_ &&
      (seen != requests_seen::none || watched < history_ / anchored_wait || !steps_stand_alone(p, n))) {
    return false;
  }
  found_at(p, n, true);
  return true;
}

// See Note [Iterations between quiet points].
bool period_detector::detect_quiet() {
  if (quiet_rejections_ >= 2) return false;
  // A step of structure found before (and given up: its iterations kept deviating)
  // may be that of requests that only now fill enough of the history.
  if (detect_requests(step_) == requests_seen::found) return true;
  // The newest 512, 1,024, .. quiet_window allocations: the least count over a longer
  // window may be one of the program's start (weights not yet made).
  for (std::size_t window = 512; window <= quiet_window; window *= 2) {
    if (detect_quiet(window)) return true;
    if (window >= sizes_.size()) break;
  }
  return false;
}

// The cuts between the pieces of stream positions [from, n): the least count of live
// watched blocks there (`level`), and the last allocation of each run at that count,
// runs as long as most are (`run`). A request's first allocation may follow the last
// one's epilogue (its output serialized: made and freed at that count), so the cut is
// the last allocation of each run. Returns the number of cuts (at most `capacity`).
std::size_t period_detector::quiet_cuts(std::size_t from, std::size_t n, std::uint32_t* cuts, std::size_t capacity,
                                        std::uint32_t& level, std::uint32_t& run) const {
  level = UINT32_MAX;
  for (std::size_t i = from; i < n; ++i) level = std::min(level, blocks_[i]);
  std::uint32_t runs[max_quiet_cuts];
  std::size_t k = 0;
  capacity = std::min(capacity, max_quiet_cuts);
  for (std::size_t i = from + 1; i < n && k < capacity; ++i) {
    if (blocks_[i] != level || blocks_[i - 1] == level) continue;
    std::uint32_t r = 1;
    while (i + r < n && blocks_[i + r] == level && r < 8) ++r;
    if (i + r >= n) break;  // the newest run may not be over
    cuts[k] = static_cast<std::uint32_t>(i);
    runs[k++] = r;
  }
  if (k == 0) return 0;
  std::uint32_t tally[9] = {};
  for (std::size_t j = 0; j < k; ++j) ++tally[runs[j]];
  run = static_cast<std::uint32_t>(std::max_element(tally + 1, tally + 9) - tally);
  for (std::size_t j = 0; j < k; ++j) cuts[j] += std::min(run, runs[j]) - 1;
  return k;
}

bool period_detector::detect_quiet(std::size_t window) {
  const std::size_t n = sizes_.size();
  if (n < 8 * min_quiet_piece) return false;
  const std::size_t from = n > window ? n - window : 0;
  std::uint32_t cuts[quiet_window / min_quiet_piece + 2];
  std::uint32_t level = 0, run = 0;
  const std::size_t k = quiet_cuts(from, n, cuts, std::size(cuts), level, run);
  if (k < 9) return false;
  std::size_t shortest = SIZE_MAX, longest = 0;
  for (std::size_t j = 0; j + 1 < k; ++j) {
    const std::size_t len = cuts[j + 1] - cuts[j];
    if (len < min_quiet_piece) return false;
    std::uint64_t bytes = 0;
    for (std::size_t i = cuts[j]; i < cuts[j + 1]; ++i) bytes += sizes_[i];
    if (bytes < min_period_bytes) return false;
    shortest = std::min(shortest, len);
    longest = std::max(longest, len);
  }
  if (longest > 4 * shortest) return false;
  // Pieces no longer than a step of structure found before are that step, between its
  // own quiet points (the key/value caches of the steps before are live there): the
  // requests are made of them (Note [Requests of repeated steps]).
  if (step_ != 0 && longest <= step_) return false;
  std::size_t lengths[8];
  int distinct = 0;
  for (std::size_t j = k - 9; j + 1 < k; ++j) {
    const std::size_t len = cuts[j + 1] - cuts[j];
    if (std::find(lengths, lengths + distinct, len) == lengths + distinct) lengths[distinct++] = len;
  }
  if (distinct > quiet_lengths) return false;
  take_quiet(cuts, k, level, run);
  return true;
}

// Note [Requests of repeated steps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// LLM generation: a request is a prefill and then a number of decode steps nobody
// knows in advance, each the same structure (a period of lifetimes, Note [Periods
// whose sizes change]) with sizes that grow by the position, and the key/value caches
// handed from step to step. The period of structure found is then the decode step,
// and iterations of one step can never serve the caches (each outlives its step) nor
// stay within a plan (the sizes grow every step); the request is the iteration (Note
// [Periodic iterations], trace/period.h, serves it: a prefix for a shorter one, the
// step extended for a longer one). So, before a period of structure `step` is taken,
// the stream is cut at its quiet points (the least count of live watched blocks over
// the history, or over its newest half, quarter, .., down to 8 steps) as between
// requests (Note [Iterations between quiet points]), and the pieces are taken for the
// requests when they are made of that step: at least 4 pieces, each of at least
// min_quiet_piece allocations, min_period_bytes on average, at least three in four
// holding a run of at least 3 steps alike in structure, and those runs at least half
// of all their allocations. Their lengths may then differ without bound (the number of
// steps is the request's), unlike those of other quiet pieces. While the watch is
// younger than one history and its pieces are such requests but fewer than 4, or some
// allocation of the step grew in each of its last 8 periods (a cache one token longer
// per step: requests are likely, but none may have ended yet), the step is not taken:
// more of the stream is awaited. The key's iterations begin and end at that count, as
// between other quiet points. Where it can be wrong: a model whose layers repeat (the
// step) and whose requests return to one count of live blocks is taken by the request
// too, which is what it is; a stream whose step is not inside quiet pieces (a loop
// with no requests) keeps the step, one history later when its sizes grow; requests
// longer than a quarter of the history are never seen 4 at a time (mark them); and
// requests whose step's structure depends on the batch (blocks crossing the minimum
// size at larger batches) share no step, and are not found this way.
period_detector::requests_seen period_detector::detect_requests(std::size_t step) {
  if (step == 0 || sizes_.size() <= max_life) return requests_seen::none;
  const std::size_t n = sizes_.size() - max_life;  // symbols known below n
  requests_seen seen = requests_seen::none;
  for (std::size_t window = n; window >= 8 * step && window >= 8 * min_quiet_piece; window /= 2) {
    std::uint32_t cuts[max_quiet_cuts];
    std::uint32_t level = 0, run = 0;
    const std::size_t k = quiet_cuts(n - window, n, cuts, std::size(cuts), level, run);
    if (k < 2) continue;
    std::uint64_t bytes = 0, total = 0, stepped = 0;
    std::size_t with_steps = 0;
    bool short_piece = false;
    for (std::size_t j = 0; j + 1 < k && !short_piece; ++j) {
      const std::size_t a = cuts[j], b = cuts[j + 1];
      short_piece = b - a < min_quiet_piece;
      std::size_t best = 0, alike = 0;
      for (std::size_t i = a; i < b; ++i) {
        bytes += sizes_[i];
        alike = i >= a + step && symbol(i) == symbol(i - step) ? alike + 1 : 0;
        best = std::max(best, alike);
      }
      total += b - a;
      if (best >= 2 * step) {
        ++with_steps;
        stepped += best + step;
      }
    }
    const std::size_t pieces = k - 1;
    if (short_piece || bytes < min_period_bytes * pieces || 4 * with_steps < 3 * pieces || 2 * stepped < total) {
      continue;
    }
    if (k < 5) {  // requests of that step, but too few of them to take
      seen = requests_seen::too_few;
      continue;
    }
    take_quiet(cuts, k, level, run);
    return requests_seen::found;
  }
  return seen;
}

// Whether some allocation of the period `p` ending at n grew in each of its last
// shape_periods periods: a decode step's key/value caches, one token longer each step.
bool period_detector::grows(std::size_t p, std::size_t n) const {
  if (n < (shape_periods + 1) * p) return false;
  for (std::size_t c = 1; c <= p; ++c) {
    bool rising = true;
    for (std::size_t k = 0; k < shape_periods && rising; ++k) rising = sizes_[n - c - k * p] > sizes_[n - c - (k + 1) * p];
    if (rising) return true;
  }
  return false;
}

// Iterations begin where `level` watched blocks are live: the k cuts of the stream
// (positions in sizes_) are where pieces begin, `run` allocations in a row at that
// count the last of which begins one.
void period_detector::take_quiet(const std::uint32_t* cuts, std::size_t k, std::uint32_t level, std::uint32_t run) {
  std::size_t shortest = SIZE_MAX, longest = 0;
  for (std::size_t j = 0; j + 1 < k; ++j) {
    shortest = std::min<std::size_t>(shortest, cuts[j + 1] - cuts[j]);
    longest = std::max<std::size_t>(longest, cuts[j + 1] - cuts[j]);
  }
  quiet_ = true;
  anchor_ = 0;
  quiet_level_ = level;
  quiet_run_ = run;
  by_shape_ = false;
  period_ = static_cast<std::uint32_t>(longest);
  boundary_ = base_ + cuts[k - 1];
  // Named after the count and the structure of the shortest piece's start (its first
  // symbols are known: they are at least max_life old), so one program finds the same
  // key from run to run whichever shapes it saw first.
  std::uint64_t h = fnv1a(fnv_offset, 0x9a1e7);
  h = fnv1a(h, level);
  for (std::size_t j = 0; j + 1 < k; ++j) {
    if (cuts[j + 1] - cuts[j] != shortest) continue;
    for (std::size_t i = cuts[j]; i < cuts[j] + std::min<std::size_t>(8, shortest); ++i) h = fnv1a(h, symbol(i));
    break;
  }
  signature_ = h;
}

bool period_detector::rejected(std::size_t p) const {
  for (std::uint32_t r : rejected_) {
    if (r == p) return true;
  }
  return false;
}

void period_detector::reject_current() {
  if (quiet_) {
    ++quiet_rejections_;
  } else if (period_ != 0 && rejected_.size() < 64) {
    rejected_.push_back(period_);
  }
  reset();
}

std::uint64_t period_detector::next_boundary() const {
  if (period_ == 0) return UINT64_MAX;
  if (count_ <= boundary_) return boundary_;
  const std::uint64_t k = (count_ - boundary_ + period_ - 1) / period_;
  return boundary_ + k * period_;
}

}  // namespace replayalloc::detail
