// The front cache's depot swept of its idle lists (Note [Idle lists given back],
// backend/front_idle.cc) on its own, with the test's clock and lists: a list no thread
// took for a whole 250 ms goes back, a list put or taken within them stays, a sweep comes
// at most every 250 ms and from put and take themselves, and what follows a sweep (the
// arenas' decay) is called once per sweep; a window (the threads' own sweeps, the
// budgets' count of threads) begins at most once a second (Note [Idle lists given back,
// a quarter second]); the budget of the classes of 4-64 KiB follows the most threads with
// a cache open in the last windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/front_depot.h"

namespace {

namespace front = replayalloc::detail::backend::front;
namespace backend = replayalloc::detail::backend;

std::uint64_t g_ms = 0;  // the test's clock
std::uint64_t clock_ms() noexcept { return g_ms; }
std::vector<void*> g_released;  // the heads of the lists given back, in order
void release(void* head) noexcept { g_released.push_back(head); }
int g_swept = 0;
int g_swept_windows = 0;  // the sweeps that began a window
void swept(bool window) noexcept {
  ++g_swept;
  g_swept_windows += window ? 1 : 0;
}

// Lists of one block each (a block's first word links it), at distinct addresses.
struct blocks {
  alignas(16) unsigned char bytes[16][4096];
  void* at(int i) {
    void* p = bytes[i];
    *static_cast<void**>(p) = nullptr;
    return p;
  }
};

constexpr unsigned kClass = 3;  // of 4 KiB, a medium class: the depot's budget of 1 MiB and up

// The depot configured with the test's clock at `now`, empty, with the records reset.
void fresh_depot(std::uint64_t now, bool with_clock = true) {
  std::uint32_t class_size[front::max_classes] = {};
  std::uint8_t part[front::max_classes] = {};
  class_size[kClass] = 4096;
  part[kClass] = front::part_medium;
  g_ms = now;
  front::configure_depot(class_size, part, &release, with_clock ? &clock_ms : nullptr, &swept);
  front::release_depot();
  g_released.clear();
  g_swept = 0;
  g_swept_windows = 0;
}

std::uint64_t idle_lists() {
  backend::front_cache_counts c;
  front::depot_counts(&c, true);
  return c.depot_idle;
}

TEST(FrontDepot, AListNoThreadTookForAQuarterSecondGoesBackAndOnePutWithinItStays) {
  blocks b;
  fresh_depot(10'000);
  const std::uint64_t idle_before = idle_lists();
  front::put(kClass, b.at(0), 1);
  front::put(kClass, b.at(1), 1);
  front::put(kClass, b.at(2), 1);
  // The first sweep, 250 ms after the depot's first use (the first put, at 10'000):
  // nothing was held all through the quarter before it (the lists came within it).
  EXPECT_FALSE(front::sweep_depot(10'249)) << "a sweep before its 250 ms were up";
  EXPECT_TRUE(front::sweep_depot(10'250));
  EXPECT_TRUE(g_released.empty()) << "lists put within the quarter were swept";
  EXPECT_EQ(g_swept, 1) << "the arenas' decay did not follow the sweep";
  // Within the next quarter a thread takes one (the top: b[2]) and puts another (b[3]).
  g_ms = 10'400;
  const front::free_list l = front::take(kClass);
  EXPECT_EQ(l.head, b.at(2));
  front::put(kClass, b.at(3), 1);
  EXPECT_TRUE(g_released.empty()) << "put and take swept before the quarter was up";
  // The next sweep: b[0] and b[1] were held all through; b[3] came within the quarter.
  EXPECT_TRUE(front::sweep_depot(10'500));
  ASSERT_EQ(g_released.size(), 2u);
  EXPECT_EQ(g_released[0], b.at(0));
  EXPECT_EQ(g_released[1], b.at(1));
  EXPECT_EQ(idle_lists() - idle_before, 2u);
  EXPECT_EQ(g_swept, 2);
  // b[3] is still the depot's, and its bytes are counted.
  backend::front_cache_counts c;
  front::depot_counts(&c, true);
  EXPECT_EQ(c.depot_bytes[front::part_medium], 4096u);
  const front::free_list kept = front::take(kClass);
  EXPECT_EQ(kept.head, b.at(3));
  EXPECT_EQ(front::take(kClass).head, nullptr);
}

TEST(FrontDepot, ListsHandedOnEveryQuarterSecondAreNeverSwept) {
  blocks b;
  fresh_depot(0);
  for (int i = 0; i < 4; ++i) front::put(kClass, b.at(i), 1);
  // Each quarter the threads take every list and put them back: the low mark is 0 at
  // every sweep.
  for (std::uint64_t q = 1; q <= 5; ++q) {
    g_ms = q * 250 - 125;
    std::vector<front::free_list> taken;
    for (front::free_list l; (l = front::take(kClass)).head != nullptr;) taken.push_back(l);
    ASSERT_EQ(taken.size(), 4u) << "quarter " << q;
    for (const front::free_list& l : taken) front::put(kClass, l.head, l.count);
    EXPECT_TRUE(front::sweep_depot(q * 250)) << "quarter " << q;
  }
  EXPECT_TRUE(g_released.empty()) << "lists handed on every quarter were swept";
  EXPECT_EQ(g_swept, 5);
}

TEST(FrontDepot, PutAndTakeSweepEveryQuarterSecondWithTheirClock) {
  blocks b;
  fresh_depot(0);
  front::put(kClass, b.at(0), 1);
  g_ms = 250;  // the first sweep, at this put, before b[1] goes in: b[0] came within its quarter
  front::put(kClass, b.at(1), 1);
  EXPECT_EQ(g_swept, 1);
  EXPECT_TRUE(g_released.empty());
  g_ms = 499;
  (void)front::take(kClass + 1);  // another class's take, its depot empty: no sweep yet
  EXPECT_EQ(g_swept, 1);
  g_ms = 500;  // b[0] was held all through the quarter before; b[1] came after its sweep
  (void)front::take(kClass + 1);
  EXPECT_EQ(g_swept, 2);
  ASSERT_EQ(g_released.size(), 1u);
  EXPECT_EQ(g_released[0], b.at(0));
  g_ms = 750;  // and b[1] a quarter later
  (void)front::take(kClass + 1);
  ASSERT_EQ(g_released.size(), 2u);
  EXPECT_EQ(g_released[1], b.at(1));
  // A clock that runs back (another thread's read a moment earlier) sweeps nothing.
  g_ms = 600;
  front::put(kClass, b.at(2), 1);
  EXPECT_EQ(g_swept, 3);
}

// Note [Idle lists given back, a quarter second]: the depot's sweeps come every 250 ms,
// but a window (the threads' sweeps of their own lists, counted by g_sweeps) at most
// once a second: a thread's lists of a class it asks for once in 600 ms stay its own.
TEST(FrontDepot, AWindowBeginsAtMostOnceASecond) {
  fresh_depot(20'000);
  ASSERT_FALSE(front::sweep_depot(20'000));  // the clock starts
  const std::uint32_t before = front::g_sweeps.load();
  ASSERT_TRUE(front::sweep_depot(20'250));  // the first sweep begins the first window
  EXPECT_EQ(front::g_sweeps.load(), before + 1);
  EXPECT_EQ(g_swept_windows, 1) << "the decay after the sweep was not told it began a window";
  for (std::uint64_t t : {20'500, 20'750, 21'000}) {
    ASSERT_TRUE(front::sweep_depot(t)) << t;
    EXPECT_EQ(front::g_sweeps.load(), before + 1) << "a window began at " << t << ", within the second";
  }
  EXPECT_EQ(g_swept, 4) << "the arenas' decay did not follow every sweep";
  // Note [An idle arena 0 decays]: arena 0's decay (where idle) once a window, the front
  // arenas' at every sweep.
  EXPECT_EQ(g_swept_windows, 1) << "a sweep within the window was told it began one";
  ASSERT_TRUE(front::sweep_depot(21'250));  // a second after the window began
  EXPECT_EQ(front::g_sweeps.load(), before + 2);
  EXPECT_EQ(g_swept_windows, 2);
  // Sweeps that come late (nothing put or taken meanwhile) begin a window each, a second apart.
  ASSERT_TRUE(front::sweep_depot(23'000));
  EXPECT_EQ(front::g_sweeps.load(), before + 3);
  ASSERT_TRUE(front::sweep_depot(23'250));
  EXPECT_EQ(front::g_sweeps.load(), before + 3);
  EXPECT_EQ(g_swept_windows, 3);
}

std::size_t medium_budget() {
  backend::front_cache_counts c;
  front::depot_counts(&c, true);
  return c.depot_budget[front::part_medium];
}

// Note [The depot's budget follows the threads] (backend/front_depot.cc): the classes of
// 4-64 KiB may hold 1 MiB and 2 MiB for each thread beyond the first of the most that had
// a cache open at once in the last one to two seconds (32 MiB at most), so that the lists
// threads hand on as they end (a pool's round, larson's successors) wait for the threads
// that follow, and go back once the threads have been fewer for a whole sweep.
TEST(FrontDepot, TheBudgetFollowsTheMostThreadsOpenInTheLastSeconds) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const auto budget_for = [&](std::size_t threads) {
    return std::min(32 * kMiB, kMiB + 2 * kMiB * (threads > 1 ? threads - 1 : 0));
  };
  blocks b;
  fresh_depot(50'000);
  // The depot's first use starts its clock: no sweep then.
  ASSERT_FALSE(front::sweep_depot(50'000));
  // Two sweeps with no thread opening: both windows hold the threads open now.
  ASSERT_TRUE(front::sweep_depot(51'000));
  ASSERT_TRUE(front::sweep_depot(52'000));
  const std::size_t open = front::g_open_caches.load();
  EXPECT_EQ(medium_budget(), budget_for(open));
  for (int i = 0; i < 4; ++i) front::thread_opened();
  EXPECT_EQ(medium_budget(), budget_for(open + 4));
  // The four end: the budget stays theirs through this second.
  for (int i = 0; i < 4; ++i) front::thread_closed();
  EXPECT_EQ(medium_budget(), budget_for(open + 4));
  // Lists of 1 MiB (256 blocks of 4 KiB counted; only their heads are real) up to it stay
  // in the depot; the next goes back.
  const std::size_t kept = budget_for(open + 4) / kMiB;
  ASSERT_LT(kept, 16u) << "the test's blocks are fewer than the lists the budget allows";
  g_ms = 52'500;
  for (std::size_t i = 0; i < kept; ++i) front::put(kClass, b.at(static_cast<int>(i)), 256);
  EXPECT_TRUE(g_released.empty()) << "a list within the budget went back";
  front::put(kClass, b.at(static_cast<int>(kept)), 256);
  ASSERT_EQ(g_released.size(), 1u) << "a list beyond the budget stayed";
  EXPECT_EQ(g_released[0], b.at(static_cast<int>(kept)));
  // A sweep later the window before still had the four; two sweeps later neither has.
  ASSERT_TRUE(front::sweep_depot(53'000));
  EXPECT_EQ(medium_budget(), budget_for(open + 4));
  ASSERT_TRUE(front::sweep_depot(54'000));
  EXPECT_EQ(medium_budget(), budget_for(open));
  // More threads than the budget's most: 32 MiB.
  for (int i = 0; i < 40; ++i) front::thread_opened();
  EXPECT_EQ(medium_budget(), 32 * kMiB);
  for (int i = 0; i < 40; ++i) front::thread_closed();
  ASSERT_TRUE(front::sweep_depot(55'000));
  ASSERT_TRUE(front::sweep_depot(56'000));
  EXPECT_EQ(medium_budget(), budget_for(open));
  front::release_depot();
}

TEST(FrontDepot, WithoutAClockNothingIsSwept) {
  blocks b;
  fresh_depot(0, false);
  front::put(kClass, b.at(0), 1);
  g_ms = 100'000;
  front::put(kClass, b.at(1), 1);
  (void)front::take(kClass);
  EXPECT_EQ(g_swept, 0);
  EXPECT_TRUE(g_released.empty());
  EXPECT_EQ(front::take(kClass).head, b.at(0));
}

}  // namespace
