// The fallback's start deferred (Note [The fallback made when first needed],
// backend/fallback_start.cc) in the LD_PRELOAD library's build: until a process has made
// REPLAYALLOC_FALLBACK_AFTER requests, or one of 1 MiB or more, the fallback is
// jemalloc's own malloc with its defaults; then the front cache and the settings are
// made while the program's threads go on allocating and freeing. What a user relies on:
// a short process never makes them; a long one gets them; and no block is lost,
// corrupted or handed out twice across the switch, whichever thread frees a block made
// before it. Each case runs in a fresh process (this binary again, whose constructor
// below runs the case and exits), so that the start has not been made yet.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/front_cache.h"
#include "gtest/gtest.h"
#include "replayalloc/replayalloc.hpp"

extern char** environ;

namespace replayalloc::contract {
namespace {

namespace be = detail::backend;
constexpr const char* kCaseVariable = "FALLBACK_START_TEST_CASE";

int g_failures = 0;
#define CHILD_EXPECT(cond, ...)                          \
  do {                                                   \
    if (!(cond)) {                                       \
      std::fprintf(stderr, "child: failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                 \
      std::fputc('\n', stderr);                          \
      ++g_failures;                                      \
    }                                                    \
  } while (0)

// The front cache is expected on once started unless the environment turned it off.
bool front_wanted() {
  const char* off = std::getenv("REPLAYALLOC_FRONT_CACHE");
  const char* check = std::getenv("REPLAYALLOC_CHECK");
  return !(off != nullptr && std::strcmp(off, "0") == 0) && !(check != nullptr && std::strcmp(check, "0") != 0);
}

bool in_front_range(const void* p) {
  const be::front_cache_counts c = be::front_cache_stats();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return c.span != 0 && a - c.base < c.span;
}

// The cache says it is on, and serves a small block, unless the environment turned it off.
void expect_served_as_wanted(const char* when) {
  const bool front = be::front_cache_stats().largest != 0;
  CHILD_EXPECT(front == front_wanted(), "the front cache is %s %s", front ? "on" : "off", when);
  void* p = std::malloc(64);
  CHILD_EXPECT(in_front_range(p) == front_wanted(), "a small block %s %s the front cache's", when,
               in_front_range(p) ? "is" : "is not");
  std::free(p);
}

// Live blocks of every thread, checked for overlap as they are made.
std::mutex g_live_mu;
std::map<std::uintptr_t, std::size_t>* g_live = nullptr;

struct block {
  unsigned char* p = nullptr;
  std::size_t n = 0;
  unsigned char tag = 0;
};

block made(void* p, std::size_t n, unsigned char tag) {
  CHILD_EXPECT(p != nullptr, "no block of %zu bytes", n);
  if (p == nullptr) return {};
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    auto next = g_live->lower_bound(a);
    CHILD_EXPECT(next == g_live->end() || next->first >= a + n, "a block of %zu bytes overlaps a live one", n);
    if (next != g_live->begin()) {
      auto prev = std::prev(next);
      CHILD_EXPECT(prev->first + prev->second <= a, "a block of %zu bytes overlaps a live one", n);
    }
    (*g_live)[a] = n;
  }
  std::memset(p, tag, n);
  return {static_cast<unsigned char*>(p), n, tag};
}

void release(const block& b) {
  if (b.p == nullptr) return;
  for (std::size_t i = 0; i < b.n; i += 61) {
    if (b.p[i] != b.tag) {
      CHILD_EXPECT(false, "a block of %zu bytes was overwritten at byte %zu", b.n, i);
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    g_live->erase(reinterpret_cast<std::uintptr_t>(b.p));
  }
  std::free(b.p);
}

// 16 B-384 KiB, most of them small, through malloc, calloc and realloc; callocs under
// 16 KiB before the start (one of 16 KiB or more would make it).
block any_block(std::mt19937& rng, unsigned char tag) {
  const std::size_t n = std::size_t{16} << (rng() % 15);
  const std::size_t size = n / 2 + rng() % n;
  switch (rng() % 4) {
    case 0: {
      const std::size_t c = be::fallback_started() ? size : size % (std::size_t{16} << 10);
      return made(std::calloc(1, c), c, tag);
    }
    case 1: {
      void* p = std::malloc(size / 2 + 1);
      return made(std::realloc(p, size), size, tag);
    }
    default: return made(std::malloc(size), size, tag);
  }
}

// Four threads allocate and free through the start, each handing a share of its live
// blocks, some made before it, to the next thread to free after it.
void case_threads() {
  g_live = new std::map<std::uintptr_t, std::size_t>();
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  void* before = std::malloc(64);
  CHILD_EXPECT(!in_front_range(before), "the front cache served before the start");
  std::free(before);
  if (front_wanted()) {
    CHILD_EXPECT(be::thread_cache_max() == (std::size_t{128} << 10), "auto mode's rule sees %zu bytes kept, not the cache's",
                 be::thread_cache_max());
  }
  constexpr int kThreads = 4;
  constexpr int kRounds = 6000;
  std::vector<std::vector<block>> handed(kThreads);
  std::mutex handed_mu;
  std::atomic<int> past_half{0};
  std::atomic<bool> started{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<block> live;
      for (int r = 0; r < kRounds; ++r) {
        if (r == kRounds / 2) {
          past_half.fetch_add(1);
          while (!started.load()) std::this_thread::yield();  // every thread holds blocks made before
          std::lock_guard<std::mutex> lock(handed_mu);
          auto& next = handed[(t + 1) % kThreads];
          for (std::size_t i = 0; i < live.size(); i += 2) next.push_back(live[i]);
          std::vector<block> kept;
          for (std::size_t i = 1; i < live.size(); i += 2) kept.push_back(live[i]);
          live.swap(kept);
        }
        live.push_back(any_block(rng, static_cast<unsigned char>(t * 50 + r % 50)));
        if (live.size() > 48) {
          const std::size_t i = rng() % live.size();
          release(live[i]);
          live[i] = live.back();
          live.pop_back();
        }
      }
      for (const block& b : live) release(b);
    });
  }
  while (past_half.load() < kThreads) std::this_thread::yield();
  CHILD_EXPECT(!be::fallback_started(), "the start was made before the request that makes it");
  // A request of 1 MiB starts it at once (a block jemalloc would purge at its free).
  const block big = made(std::malloc(std::size_t{1} << 20), std::size_t{1} << 20, 0xab);
  CHILD_EXPECT(be::fallback_started(), "a request of 1 MiB did not make the start");
  started.store(true);
  for (std::thread& th : threads) th.join();
  for (const auto& list : handed) {
    for (const block& b : list) release(b);  // made before the start, freed after, on another thread
  }
  release(big);
  CHILD_EXPECT(g_live->empty(), "%zu blocks were never freed", g_live->size());
  expect_served_as_wanted("after the start");
  if (front_wanted()) {
    CHILD_EXPECT(be::thread_cache_max() == (std::size_t{128} << 10), "auto mode's rule changed at the start");
  }
}

// Small requests on the inline path count, one at a time, and the start comes within
// REPLAYALLOC_FALLBACK_AFTER of them; none before this case's first (the process's own
// start made far fewer).
void case_count() {
  CHILD_EXPECT(!be::fallback_started(), "the start was made before its requests");
  const long after = std::strtol(std::getenv("REPLAYALLOC_FALLBACK_AFTER"), nullptr, 10);
  long made_here = 0;
  void* volatile sink = nullptr;  // the compiler may not drop a pair
  while (!be::fallback_started() && made_here <= after) {
    sink = std::malloc(48);
    std::free(sink);
    ++made_here;
  }
  CHILD_EXPECT(be::fallback_started(), "no start after %ld requests", made_here);
  CHILD_EXPECT(made_here > after / 2, "the start came after %ld of %ld requests", made_here, after);
  expect_served_as_wanted("after the start");
}

// REPLAYALLOC_FALLBACK_AFTER=0: made with the engine, as before the deferral.
void case_at_once() {
  CHILD_EXPECT(be::fallback_started(), "REPLAYALLOC_FALLBACK_AFTER=0 deferred the start");
  expect_served_as_wanted("at start-up");
}

// The case named in the environment, in this fresh process, before main.
[[gnu::constructor]] void run_case() {
  const char* which = std::getenv(kCaseVariable);
  if (which == nullptr) return;
  (void)replayalloc::stats();  // the engine made
  if (std::strcmp(which, "threads") == 0) case_threads();
  else if (std::strcmp(which, "count") == 0) case_count();
  else if (std::strcmp(which, "at_once") == 0) case_at_once();
  else CHILD_EXPECT(false, "no case %s", which);
  std::fflush(stderr);
  _exit(g_failures == 0 ? 0 : 1);
}

// Runs this binary again with the case and REPLAYALLOC_FALLBACK_AFTER set; its exit status.
int run_in_fresh_process(const char* which, const char* after) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "REPLAYALLOC_FALLBACK_AFTER=", 27) != 0) env.emplace_back(*e);
  }
  env.push_back(std::string(kCaseVariable) + "=" + which);
  env.push_back(std::string("REPLAYALLOC_FALLBACK_AFTER=") + after);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char filter[] = "--gtest_filter=-*";
  char* argv[] = {self, filter, nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    execve(self, argv, envp.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(FallbackStart, ThreadsAllocatingThroughTheStartNeverShareOrLoseABlock) {
  EXPECT_EQ(run_in_fresh_process("threads", "1000000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, ComesAfterItsRequestsAndNotBefore) {
  EXPECT_EQ(run_in_fresh_process("count", "20000"), 0) << "the child's messages above say what failed";
}

TEST(FallbackStart, ZeroMakesItWithTheEngine) {
  EXPECT_EQ(run_in_fresh_process("at_once", "0"), 0) << "the child's messages above say what failed";
}

}  // namespace
}  // namespace replayalloc::contract
