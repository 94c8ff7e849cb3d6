// Adversarial replay: a million iterations that deviate from their recordings in every
// way a program can, and not one byte of a live block overwritten.
//
// Each seed makes a script (an iteration: a few allocations through every entry point
// of the C API, each freed after a later one, at the end, or outliving the iteration)
// and runs it over and over under its key, so the engine records, plans and replays
// it. Most iterations then deviate (Deviation below): sizes up and down, extra and
// missing allocations, blocks held past their recorded free (also into later
// iterations) or freed early, frees on other threads, realloc of slab blocks,
// iterations never ended, nested and overlapping iterations, threads that exit
// mid-iteration, fork mid-iteration. Two threads share each script's key, so
// iterations of one plan overlap in time, each on its own slab.
//
// Every block is admitted into its thread's ledger (support/block_ledger.h): not
// null, aligned, sharing no byte with the thread's other live blocks, then filled
// with a pattern that is checked before it is freed (by whichever thread frees it)
// and at every iteration boundary. A forked child checks the blocks it inherited.
//
// ADVERSARIAL_ITERATIONS overrides the number of iterations (CI: 1e6; fewer under the
// sanitizers).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/slab_range.h"
#include "replayalloc/replayalloc.hpp"
#include "support/block_ledger.h"
#include "support/pattern.h"

// The sanitizer builds run fewer (CMakeLists.txt).
#ifndef ADVERSARIAL_DEFAULT_ITERATIONS
#define ADVERSARIAL_DEFAULT_ITERATIONS 1000000
#endif
// The TSan build does not fork: jemalloc's fork handlers hold all of its mutexes at
// once, more than the 64 TSan's deadlock detector can track.
#ifndef ADVERSARIAL_FORK
#define ADVERSARIAL_FORK 1
#endif

namespace {

using replayalloc::detail::backend::in_slab_range;
using replayalloc::testing::block_ledger;
using replayalloc::testing::checked_block;
using replayalloc::testing::intact_fast;

// ---- What happened, process-wide ------------------------------------------------------

enum class deviation : unsigned {
  resized,      // a size up or down
  extra,        // an allocation the recording never made
  missing,      // an allocation the recording made, skipped
  held,         // freed later than recorded (also after the iteration)
  early,        // freed earlier than recorded
  remote,       // freed by another thread (maybe after the iteration ended)
  realloc,      // realloc of a live block (slab or not), to a size up, down or equal
  nested,       // another key begun and ended inside the iteration
  never_ended,  // the iteration is left open; the next ones nest in it
  overlapping,  // begin A, begin B, end, allocate, end: ends close what is innermost
  thread_exit,  // a thread begins an iteration, allocates, hands blocks on and exits
  forked,       // fork() mid-iteration; the child checks, allocates and frees
  shaped,       // the whole iteration at another shape: every size scaled up or down
  count
};
constexpr const char* k_deviation_names[] = {"resized", "extra",       "missing",     "held",
                                             "early",   "remote",      "realloc",     "nested",
                                             "never_ended", "overlapping", "thread_exit", "forked", "shaped"};
static_assert(std::size(k_deviation_names) == static_cast<unsigned>(deviation::count));

struct totals {
  std::atomic<std::uint64_t> iterations{0};
  std::atomic<std::uint64_t> blocks{0};       // blocks handed out to the driver
  std::atomic<std::uint64_t> in_slab{0};      // of which inside the slab range
  std::atomic<std::uint64_t> corruptions{0};  // pattern, overlap, alignment, null
  std::atomic<std::uint64_t> api_errors{0};   // a return code other than the contract's
  std::atomic<std::uint64_t> deviations[static_cast<unsigned>(deviation::count)] = {};
};
totals g_totals;

void count(deviation d, std::uint64_t n = 1) {
  g_totals.deviations[static_cast<unsigned>(d)].fetch_add(n, std::memory_order_relaxed);
}

void api_error(const char* what, long got, long want) {
  if (g_totals.api_errors.fetch_add(1) < 10) {
    std::fprintf(stderr, "adversarial: %s returned %ld, expected %ld\n", what, got, want);
  }
}

// Blocks to be freed by some other thread: whichever drains the box next, maybe long
// after the iteration that allocated them ended.
class mailbox {
 public:
  void put(const checked_block& b) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.push_back(b);
  }
  // Frees, after checking, every block in the box. Returns the corrupted ones.
  std::uint64_t drain() {
    std::vector<checked_block> mine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      mine.swap(blocks_);
    }
    std::uint64_t bad = 0;
    for (const checked_block& b : mine) {
      if (!intact_fast(b.p, b.size, b.tag)) {
        ++bad;
        std::fprintf(stderr, "adversarial: block %p (%zu bytes) freed remotely was overwritten\n", b.p,
                     b.size);
      }
      replayalloc_free(b.p);
    }
    return bad;
  }

 private:
  std::mutex mu_;
  std::vector<checked_block> blocks_;
};
mailbox g_box;

// ---- Scripts --------------------------------------------------------------------------

enum class entry : std::uint8_t { malloc, calloc, aligned_alloc, posix_memalign, realloc_null };

struct script_step {
  std::size_t size;
  std::size_t align;  // asked for (aligned_alloc, posix_memalign); 16 otherwise
  entry how;
  int free_after;  // freed after step free_after (> own index); n: at the end; -1: outlives
};

struct script {
  std::string key;
  std::vector<script_step> steps;
};

// Sizes from a small set make the resync of Note [Replay mismatch] ambiguous; a few
// odd sizes and alignments make slots whose offsets must honour them.
script make_script(std::uint64_t id) {
  std::mt19937_64 rng(id * 7919 + 17);
  constexpr std::size_t k_sizes[] = {16, 48, 64, 64, 64, 128, 200, 256, 1000, 4096};
  script s;
  s.key = "adversarial/" + std::to_string(id);
  const int n = 3 + static_cast<int>(rng() % 14);
  for (int i = 0; i < n; ++i) {
    script_step st;
    st.size = rng() % 8 == 0 ? 1 + rng() % 3000 : k_sizes[rng() % std::size(k_sizes)];
    st.how = static_cast<entry>(rng() % 10 < 6 ? 0 : rng() % 5);
    st.align = 16;
    if (st.how == entry::aligned_alloc || st.how == entry::posix_memalign) {
      constexpr std::size_t k_aligns[] = {8, 16, 32, 64, 256, 4096};
      st.align = k_aligns[rng() % std::size(k_aligns)];
    }
    const int r = static_cast<int>(rng() % 10);
    st.free_after = r == 0 ? -1 : r == 1 ? n : i + 1 + static_cast<int>(rng() % std::min(3, n - i));
    s.steps.push_back(st);
  }
  return s;
}

// ---- One thread running one seed --------------------------------------------------------

struct live_block {
  checked_block b;
  std::size_t align;
  entry how;
  int free_after;  // step after which it is freed; n: at the end; -1: carried
  bool remote;
};

class driver {
 public:
  driver(std::uint64_t seed, const script& s) : rng_(seed), s_(s), tag_(seed << 32) {}

  // Runs `iterations` iterations; returns the corruptions found.
  std::uint64_t run(int iterations, bool may_fork) {
    for (int it = 0; it < iterations; ++it) {
      const int r = static_cast<int>(rng_() % 100);
      // Most iterations run as recorded, so the plan stays worth replaying between the
      // deviating ones; some deviate a little, a few wildly.
      iteration(r < 80 ? 0 : r < 97 ? 10 : 3, may_fork && it == iterations / 2);
      if (it % 997 == 500) spawn_exiting_thread();
      if (rng_() % 4 == 0) bad_ += g_box.drain();
    }
    // Close what was left open, release what was carried.
    while (depth_ > 0) end();
    for (const live_block& c : carried_) release(c);
    carried_.clear();
    ledger_.check_all();
    return bad_ + ledger_.failures();
  }

 private:
  std::uint64_t pick(std::uint64_t n) { return rng_() % n; }
  // True with probability 1/odds; never when odds is 0 (an iteration without deviations).
  bool chance(int odds) { return odds > 0 && pick(static_cast<std::uint64_t>(odds)) == 0; }

  void begin(const char* key) {
    const int rc = replayalloc_iteration_begin(key);
    const int want = depth_ > 0 ? REPLAYALLOC_NESTED : 0;
    if (rc != want) api_error("replayalloc_iteration_begin", rc, want);
    ++depth_;
  }
  void end() {
    const int rc = replayalloc_iteration_end();
    const int want = depth_ > 1 ? REPLAYALLOC_NESTED : 0;
    if (rc != want) api_error("replayalloc_iteration_end", rc, want);
    --depth_;
  }

  void* allocate(entry how, std::size_t size, std::size_t align) {
    switch (how) {
      case entry::malloc: return replayalloc_malloc(size);
      case entry::calloc: {
        // As an array when the size splits evenly, to exercise the multiplication.
        void* p = size % 8 == 0 ? replayalloc_calloc(size / 8, 8) : replayalloc_calloc(1, size);
        if (p != nullptr) {
          for (std::size_t i = 0; i < size; ++i) {
            if (static_cast<unsigned char*>(p)[i] != 0) {
              ++bad_;
              std::fprintf(stderr, "adversarial: calloc(%zu) byte %zu not zero\n", size, i);
              break;
            }
          }
        }
        return p;
      }
      case entry::aligned_alloc: return replayalloc_aligned_alloc(align, size);
      case entry::posix_memalign: {
        void* p = nullptr;
        const int rc = replayalloc_posix_memalign(&p, align, size);
        if (rc != 0) api_error("replayalloc_posix_memalign", rc, 0);
        return p;
      }
      case entry::realloc_null: return replayalloc_realloc(nullptr, size);
    }
    return nullptr;
  }

  // Allocates and admits a block. False when the allocator returned null (counted).
  bool make(live_block& lb, entry how, std::size_t size, std::size_t align) {
    lb.b = {allocate(how, size, align), size, ++tag_};
    lb.align = align;
    lb.how = how;
    lb.remote = false;
    g_totals.blocks.fetch_add(1, std::memory_order_relaxed);
    if (in_slab_range(lb.b.p)) g_totals.in_slab.fetch_add(1, std::memory_order_relaxed);
    ledger_.admit(lb.b, std::max<std::size_t>(align, 16));  // failures: ledger_.failures()
    return lb.b.p != nullptr;
  }

  // Frees a block the thread holds: checked first, then freed through one of the
  // ways the API offers (free, free_sized, realloc to 0), or mailed to another thread.
  void release(const live_block& lb) {
    if (lb.b.p == nullptr) return;
    if (lb.remote) {
      ledger_.take(lb.b);
      g_box.put(lb.b);
      return;
    }
    ledger_.take(lb.b);
    const int way = static_cast<int>(pick(8));
    const bool sized_ok = lb.how == entry::malloc || lb.how == entry::calloc || lb.how == entry::realloc_null;
    if (way == 0 && sized_ok) {
      replayalloc_free_sized(lb.b.p, lb.b.size);
    } else if (way == 1 && lb.b.size > 0) {
      errno = 0;
      void* q = replayalloc_realloc(lb.b.p, 0);  // glibc: frees, returns NULL
      if (q != nullptr) {
        api_error("replayalloc_realloc(p, 0)", 1, 0);
        replayalloc_free(q);
      }
    } else {
      replayalloc_free(lb.b.p);
    }
  }

  // realloc of a live block to a size up, down or the same: the common prefix moves.
  void reallocate(live_block& lb) {
    const std::size_t old = lb.b.size;
    const int r = static_cast<int>(pick(4));
    const std::size_t n = r == 0 ? old + 1 + pick(2000) : r == 1 ? 1 + old / 2 : r == 2 ? old : 64;
    ledger_.take(lb.b);
    void* q = replayalloc_realloc(lb.b.p, n);
    if (q == nullptr) {
      api_error("replayalloc_realloc", 0, 1);
      replayalloc_free(lb.b.p);
      lb.b.p = nullptr;
      return;
    }
    if (!intact_fast(q, std::min(old, n), lb.b.tag)) {
      ++bad_;
      std::fprintf(stderr, "adversarial: realloc(%zu -> %zu) lost the block's bytes\n", old, n);
    }
    lb.b = {q, n, ++tag_};
    lb.how = entry::realloc_null;  // no longer sized-freeable by its first size
    lb.align = 16;
    count(deviation::realloc);
    g_totals.blocks.fetch_add(1, std::memory_order_relaxed);
    if (in_slab_range(q)) g_totals.in_slab.fetch_add(1, std::memory_order_relaxed);
    ledger_.admit(lb.b, 16);
  }

  // One iteration of the script; each step deviates with probability 1/odds.
  void iteration(int odds, bool fork_here) {
    const int n = static_cast<int>(s_.steps.size());
    const bool never_end = chance(odds * 4) && depth_ < 3;
    // Half the iterations that end open and close through the C++ API's scope.
    std::optional<replayalloc::Iteration> scope;
    if (!never_end && pick(2) == 0) {
      scope.emplace(s_.key);
      if (!scope->ok() || scope->nested() != (depth_ > 0)) api_error("replayalloc::Iteration", scope->nested(), depth_ > 0);
      ++depth_;
    } else {
      begin(s_.key.c_str());
    }
    std::vector<live_block> live;  // this iteration's blocks, in no order
    live.reserve(2 * static_cast<std::size_t>(n) + 4);
    const int fork_at = fork_here ? static_cast<int>(pick(static_cast<std::uint64_t>(n))) : -1;
    // One iteration in three runs at another shape (a sequence length, a batch size):
    // every size scaled by the same factor, down to a quarter or up to three times,
    // so slots serve smaller requests than they were planned for, and plans grow.
    constexpr std::size_t k_scales[][2] = {{1, 4}, {1, 2}, {3, 4}, {3, 2}, {2, 1}, {3, 1}};
    const auto* scale = odds > 0 && pick(3) == 0 ? k_scales[pick(std::size(k_scales))] : nullptr;
    if (scale != nullptr) count(deviation::shaped);
    for (int i = 0; i < n; ++i) {
      const script_step& st = s_.steps[i];
      if (chance(odds)) {
        count(deviation::missing);
      } else {
        live_block lb;
        std::size_t size = scale != nullptr ? std::max<std::size_t>(1, st.size * scale[0] / scale[1]) : st.size;
        if (chance(odds)) {
          const int r = static_cast<int>(pick(4));
          size = r == 0 ? size + 16 : r == 1 ? size / 2 : r == 2 ? size * 3 : size - 1;
          count(deviation::resized);
        }
        if (make(lb, st.how, size, st.align)) {
          lb.free_after = st.free_after;
          if (chance(odds)) {  // held: later in the iteration, or into later ones
            lb.free_after = pick(2) == 0 ? n : -1;
            count(deviation::held);
          } else if (chance(odds)) {
            lb.free_after = i;  // right after it was made
            count(deviation::early);
          }
          if (chance(odds)) {
            lb.remote = true;
            count(deviation::remote);
          }
          live.push_back(lb);
        }
      }
      if (chance(odds)) {  // extra: an allocation the recording never made
        live_block lb;
        const std::size_t size = pick(4) == 0 ? st.size : 1 + pick(3000);
        if (make(lb, entry::malloc, size, 16)) {
          lb.free_after = std::min(n, i + static_cast<int>(pick(3)));
          live.push_back(lb);
        }
        count(deviation::extra);
      }
      if (!live.empty() && chance(odds)) reallocate(live[pick(live.size())]);
      if (chance(odds * 2)) nested(i);
      if (chance(odds * 3)) overlapping();
      if (i == fork_at) fork_child();
      if (!carried_.empty() && chance(2)) {  // a block from an earlier iteration dies now
        const std::size_t j = pick(carried_.size());
        release(carried_[j]);
        carried_.erase(carried_.begin() + static_cast<std::ptrdiff_t>(j));
      }
      // Frees due after this step.
      for (std::size_t j = 0; j < live.size();) {
        if (live[j].free_after == i) {
          release(live[j]);
          live[j] = live.back();
          live.pop_back();
        } else {
          ++j;
        }
      }
    }
    for (const live_block& lb : live) {
      if (lb.free_after == -1 && lb.b.p != nullptr) {
        carried_.push_back(lb);  // outlives the iteration
      } else {
        release(lb);
      }
    }
    ledger_.check_all();
    if (never_end) {
      count(deviation::never_ended);
    } else {
      if (scope) {
        scope.reset();
        --depth_;
      } else {
        end();
      }
      // Close iterations left open earlier, now and then.
      while (depth_ > 0 && pick(3) == 0) end();
    }
    // Bound what is carried: the oldest blocks die first.
    while (carried_.size() > 6) {
      release(carried_.front());
      carried_.erase(carried_.begin());
    }
    g_totals.iterations.fetch_add(1, std::memory_order_relaxed);
  }

  // Another key begun and ended inside the iteration: it joins the outer one.
  void nested(int i) {
    begin("adversarial/nested");
    live_block lb;
    if (make(lb, entry::malloc, 64 + 64 * static_cast<std::size_t>(i % 4), 16)) release(lb);
    end();
    count(deviation::nested);
  }

  // begin A, begin B, end (closes B, the innermost), allocate, end (closes A).
  void overlapping() {
    begin("adversarial/overlap-a");
    begin("adversarial/overlap-b");
    live_block a;
    const bool have_a = make(a, entry::malloc, 100, 16);
    end();
    live_block b;
    if (make(b, entry::calloc, 300, 16)) release(b);
    end();
    if (have_a) release(a);
    count(deviation::overlapping);
  }

  // A thread that begins an iteration of the same key, allocates, frees some blocks,
  // mails the others and exits with the iteration open.
  void spawn_exiting_thread() {
    std::thread([this] {
      block_ledger ledger;
      replayalloc_iteration_begin(s_.key.c_str());
      std::uint64_t tag = tag_ + 1000000;
      std::vector<checked_block> mine;
      for (std::size_t i = 0; i < s_.steps.size(); ++i) {
        const checked_block b{replayalloc_malloc(s_.steps[i].size), s_.steps[i].size, ++tag};
        if (!ledger.admit(b, 16)) continue;
        mine.push_back(b);
      }
      for (std::size_t i = 0; i < mine.size(); ++i) {
        if (!ledger.take(mine[i])) continue;
        if (i % 2 == 0) {
          g_box.put(mine[i]);
        } else {
          replayalloc_free(mine[i].p);
        }
      }
      g_totals.corruptions.fetch_add(ledger.failures());
    }).join();
    count(deviation::thread_exit);
  }

  // fork() mid-iteration. The child (one thread, the forking one) checks every block
  // this thread holds, allocates and frees in its abandoned iteration's place, runs a
  // whole iteration of the key, frees what it inherited, and exits 0 only when all
  // was intact. The parent goes on with its blocks untouched.
  void fork_child() {
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
      std::uint64_t bad = ledger_.check_all();
      for (const script_step& st : s_.steps) {
        void* p = replayalloc_malloc(st.size);
        if (p == nullptr) ++bad;
        if (p == nullptr) continue;
        replayalloc::testing::fill_fast(p, st.size, 99);
        bad += !intact_fast(p, st.size, 99);
        replayalloc_free(p);
      }
      bad += ledger_.check_all();
      if (replayalloc_iteration_begin(s_.key.c_str()) != 0) ++bad;
      std::vector<void*> ps;
      for (const script_step& st : s_.steps) ps.push_back(replayalloc_malloc(st.size));
      for (void* p : ps) replayalloc_free(p);
      if (replayalloc_iteration_end() != 0) ++bad;
      bad += ledger_.check_all();
      for (const auto& [addr, b] : ledger_.blocks()) replayalloc_free(b.p);
      _exit(bad == 0 ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++bad_;
      std::fprintf(stderr, "adversarial: the child forked mid-iteration of '%s' failed (status %d)\n",
                   s_.key.c_str(), status);
    }
    count(deviation::forked);
  }

  std::mt19937_64 rng_;
  const script& s_;
  std::uint64_t tag_;
  block_ledger ledger_;
  std::vector<live_block> carried_;  // outliving blocks, freed in later iterations
  int depth_ = 0;                    // iterations this thread has open
  std::uint64_t bad_ = 0;
};

std::uint64_t iterations_wanted() {
  if (const char* v = std::getenv("ADVERSARIAL_ITERATIONS")) {
    const long long n = std::atoll(v);
    if (n > 0) return static_cast<std::uint64_t>(n);
  }
  return ADVERSARIAL_DEFAULT_ITERATIONS;
}

TEST(Adversarial, AMillionDeviatingIterationsOverwriteNoLiveByte) {
  const auto start = std::chrono::steady_clock::now();
  const replayalloc::Stats before = replayalloc::stats();
  constexpr int k_threads = 4;
  constexpr int k_per_seed = 2000;
  const std::uint64_t wanted = iterations_wanted();
  const std::uint64_t seeds = std::max<std::uint64_t>(2, (wanted + k_per_seed - 1) / k_per_seed);
  // Seeds 2k and 2k+1 run the same script under the same key; threads take seeds in
  // order, so the two run at the same time on different threads.
  std::vector<script> scripts;
  for (std::uint64_t i = 0; i < (seeds + 1) / 2; ++i) scripts.push_back(make_script(i));
  std::atomic<std::uint64_t> next_seed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&] {
      for (std::uint64_t seed; (seed = next_seed.fetch_add(1)) < seeds;) {
        driver d(seed + 1, scripts[seed / 2]);
        // Forks are slow (the child copies the page tables): one seed in eight forks.
        g_totals.corruptions.fetch_add(d.run(k_per_seed, ADVERSARIAL_FORK && seed % 8 == 3));
      }
    });
  }
  for (auto& th : threads) th.join();
  g_totals.corruptions.fetch_add(g_box.drain());
  const replayalloc::Stats after = replayalloc::stats();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const std::uint64_t iterations = g_totals.iterations.load();
  const std::uint64_t allocations = after.allocations - before.allocations;
  const std::uint64_t hits = after.slab_hits - before.slab_hits;
  const std::uint64_t fallbacks = after.fallbacks - before.fallbacks;
  std::printf("adversarial: %llu iterations (engine: %llu), %llu allocations, %llu slab hits (%.1f%%), "
              "%llu fallbacks, %llu plans, %llu re-recordings, %llu remote frees, %llu corruptions, "
              "%llu API errors, %.1f s\n",
              static_cast<unsigned long long>(iterations),
              static_cast<unsigned long long>(after.iterations - before.iterations),
              static_cast<unsigned long long>(allocations), static_cast<unsigned long long>(hits),
              allocations ? 100.0 * static_cast<double>(hits) / static_cast<double>(allocations) : 0.0,
              static_cast<unsigned long long>(fallbacks),
              static_cast<unsigned long long>(after.plans - before.plans),
              static_cast<unsigned long long>(after.rerecords - before.rerecords),
              static_cast<unsigned long long>(after.remote_frees - before.remote_frees),
              static_cast<unsigned long long>(g_totals.corruptions.load()),
              static_cast<unsigned long long>(g_totals.api_errors.load()), secs);
  std::printf("adversarial: deviations:");
  for (unsigned d = 0; d < static_cast<unsigned>(deviation::count); ++d) {
    std::printf(" %s=%llu", k_deviation_names[d],
                static_cast<unsigned long long>(g_totals.deviations[d].load()));
  }
  std::printf("\n");

  EXPECT_EQ(g_totals.corruptions.load(), 0u);
  EXPECT_EQ(g_totals.api_errors.load(), 0u);
  EXPECT_GE(iterations, wanted);
  // The driver never frees a block twice nor a pointer it was not given.
  EXPECT_EQ(after.double_frees, before.double_frees);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);
  // The run exercised what it claims: replay from slabs, fallbacks, plans recorded
  // again, every kind of deviation.
  EXPECT_GT(hits, allocations / 5);
  EXPECT_GT(fallbacks, 0u);
  EXPECT_GT(after.rerecords, before.rerecords);
  EXPECT_GT(after.remote_frees, before.remote_frees);
  for (unsigned d = 0; d < static_cast<unsigned>(deviation::count); ++d) {
    if (!ADVERSARIAL_FORK && d == static_cast<unsigned>(deviation::forked)) continue;
    EXPECT_GT(g_totals.deviations[d].load(), 0u) << k_deviation_names[d] << " never happened";
  }
}

}  // namespace
