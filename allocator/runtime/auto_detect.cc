#include "runtime/auto_detect.h"

#include "support/hash.h"

namespace replayalloc::detail {

void period_detector::reset() {
  sizes_.clear();
  live_.clear();
  base_ = count_;
  period_ = 0;
  boundary_ = 0;
  signature_ = 0;
}

bool period_detector::observe(std::uint64_t size, std::uint64_t live) {
  if (sizes_.size() >= history_) {  // keep the newer half
    const std::size_t drop = sizes_.size() / 2;
    sizes_.erase(sizes_.begin(), sizes_.begin() + static_cast<std::ptrdiff_t>(drop));
    live_.erase(live_.begin(), live_.begin() + static_cast<std::ptrdiff_t>(drop));
    base_ += drop;
  }
  sizes_.push_back(size);
  live_.push_back(live);
  ++count_;
  if (period_ != 0 || (count_ % 16) != 0) return false;
  return detect();
}

bool period_detector::detect() {
  const std::size_t n = sizes_.size();
  const std::uint64_t last = sizes_[n - 1];
  // Candidate periods: distances back to earlier allocations of the last size. Each
  // is scored by how far back the stream keeps that period (its run); the longest run
  // wins, the shorter period on ties: a period's multiples have shorter runs, and a
  // repeated layer inside one inference has a run shorter than the inference's.
  std::size_t best_p = 0, best_run = 0;
  int candidates = 0;
  for (std::size_t q = n - 1; q-- > 0 && candidates < 256;) {
    if (sizes_[q] != last) continue;
    ++candidates;
    const std::size_t p = n - 1 - q;
    if (p < 2 || rejected(p)) continue;
    std::size_t run = 0;
    while (run + p < n && sizes_[n - 1 - run] == sizes_[n - 1 - run - p]) ++run;
    if (run < 2 * p || run < 64 || run <= best_run) continue;  // three periods alike
    // A multiple of a shorter period is that period repeated: it is judged as that one.
    bool multiple = false;
    for (std::size_t d = 1; d <= p / 2 && !multiple; ++d) {
      if (p % d != 0) continue;
      bool periodic = true;
      for (std::size_t i = n - 2 * p; i < n && periodic; ++i) periodic = sizes_[i] == sizes_[i - d];
      multiple = periodic;
    }
    if (multiple) continue;
    // An inference moves far more than this per iteration; interpreters' start-up
    // loops, which also repeat, do not.
    std::uint64_t bytes = 0;
    for (std::size_t k = n - p; k < n; ++k) bytes += sizes_[k];
    if (bytes >= min_period_bytes) {
      best_run = run;
      best_p = p;
    }
  }
  if (best_p == 0) return false;
  const std::size_t p = best_p;
  // The boundary: where the fewest bytes were live over the last period.
  std::size_t best = n - p;
  for (std::size_t j = n - p; j < n; ++j) {
    if (live_[j] < live_[best]) best = j;
  }
  period_ = static_cast<std::uint32_t>(p);
  boundary_ = base_ + best;
  std::uint64_t h = fnv_offset;
  for (std::size_t k = 0; k < p; ++k) h = fnv1a(h, sizes_[best - p + k]);
  signature_ = fnv1a(h, p);
  return true;
}

bool period_detector::rejected(std::size_t p) const {
  for (std::uint32_t r : rejected_) {
    if (r == p) return true;
  }
  return false;
}

void period_detector::reject_current() {
  if (period_ != 0 && rejected_.size() < 64) rejected_.push_back(period_);
  reset();
}

std::uint64_t period_detector::next_boundary() const {
  if (period_ == 0) return UINT64_MAX;
  if (count_ <= boundary_) return boundary_;
  const std::uint64_t k = (count_ - boundary_ + period_ - 1) / period_;
  return boundary_ + k * period_;
}

}  // namespace replayalloc::detail
