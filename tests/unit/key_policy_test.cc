// Note [Key policy]: the per-key decisions walked transition by transition with a
// key_policy_state of the test's own and no engine (no slab, no plan made, no lock but the
// entry's), in the manner of TFLite's arena planner tests. A "plan" here is a
// plan_version the test makes and installs through the policy's own decide_install and
// on_plan_done, as the engine's install_plan and run_plan_job do.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "replay/slab_pool.h"
#include "runtime/key_policy.h"
#include "trace/period.h"

namespace replayalloc::detail {

// Readable failures: the action's name.
void PrintTo(begin_decision::action a, std::ostream* os) {
  static const char* const names[] = {"pass", "set_aside", "awaiting", "record", "replay"};
  *os << (static_cast<unsigned>(a) < 5 ? names[a] : "?");
}

namespace {

// A recording of `n` allocations of `size` bytes, each freed before the next (one
// structure); `variant` adds that many allocations (another structure).
std::shared_ptr<const trace> recording(std::uint64_t size, int n = 4, int variant = 0) {
  auto t = std::make_shared<trace>();
  t->key = "k";
  t->ops = {"unknown"};
  std::uint64_t clock = 0;
  for (int i = 0; i < n + variant; ++i) {
    trace_allocation a;
    a.id = static_cast<std::uint64_t>(i);
    a.size = size;
    a.alloc_at = clock++;
    a.free_at = clock++;
    t->allocations.push_back(a);
  }
  t->events = clock;
  return t;
}

class KeyPolicy : public ::testing::Test {
 protected:
  ~KeyPolicy() override {
    for (plan_version* v : made_) delete v;
  }
  // What the engine does with a decision to plan: a version for the envelope's regime.
  void install(const recording_decision& d) {
    ASSERT_NE(d.to_plan, nullptr);
    auto* v = new plan_version;
    made_.push_back(v);
    v->id = ++next_id_;
    v->plan.planned_slots = static_cast<std::uint32_t>(d.to_plan->tr.allocations.size());
    // What the policy reads of a plan: each slot's capacity and least request.
    const std::vector<std::uint64_t> least = least_served(*d.to_plan);
    for (std::size_t i = 0; i < d.to_plan->tr.allocations.size(); ++i) {
      slot sl{};
      sl.size = d.to_plan->tr.allocations[i].size;
      sl.least = least[i];
      v->plan.slots.push_back(sl);
    }
    plan_to_install in;
    in.version = v;
    in.shape = regime_signature(d.to_plan->tr);
    in.replace_id = d.replace_id;
    const int r = e_.find_regime(in.shape);
    ASSERT_GE(r, 0);
    regime& g = e_.regimes[r];
    EXPECT_EQ(g.planning, d.to_plan.get()) << "a plan to make is on the way until installed";
    const plan_version* before = g.version;
    const install_decision done = decide_install(e_, in);
    ASSERT_TRUE(done.installed);
    EXPECT_EQ(done.regime, r);
    EXPECT_EQ(done.old, before);
    EXPECT_EQ(g.version, v);
    on_plan_done(e_, d.to_plan.get());
    EXPECT_EQ(g.planning, nullptr);
  }
  begin_decision begin(std::uint64_t first_size = 0) { return decide_begin(e_, first_size, true, s_); }
  recording_decision record(const std::shared_ptr<const trace>& t, const begin_decision& b) {
    EXPECT_EQ(b.what, begin_decision::record);
    const recording_intent in{b.regime, b.probing, b.growing, b.sizing, {b.marked[0], b.marked[1]}};
    return decide_after_recording(e_, t, in, s_, n_);
  }
  // A replay of regime r's plan that handed out `handed` of its slots, `misses` missed.
  replay_verdict replay(const begin_decision& b, std::uint32_t handed, std::uint64_t misses = 0,
                        std::uint32_t grown = 0, std::uint32_t first_miss_at = 2) {
    return decide_after_replay(e_, summary(b, handed, misses, grown, first_miss_at), s_);
  }
  // What such a replay reports (its outgrown request 1 MiB).
  replay_summary summary(const begin_decision& b, std::uint32_t handed, std::uint64_t misses = 0,
                         std::uint32_t grown = 0, std::uint32_t first_miss_at = 2) {
    EXPECT_EQ(b.what, begin_decision::replay);
    const plan_version* v = e_.regimes[b.regime].version;
    replay_summary rs;
    rs.version = v;
    rs.version_id = v->id;
    rs.regime = b.regime;
    rs.planned = v->plan.planned_slots;
    rs.handed = handed;
    rs.misses = misses;
    rs.grown = grown;
    rs.first_miss_at = misses > 0 || grown > 0 ? first_miss_at : 0;
    rs.first_too_large_at = grown > 0 ? first_miss_at : 0;
    rs.first_miss_size = rs.first_too_large_size = grown > 0 ? 1 << 20 : 0;
    return rs;
  }

  key_policy_state e_;
  policy_settings s_;
  policy_counts n_;
  std::vector<plan_version*> made_;
  std::uint64_t next_id_ = 0;
};

// no plan --record x2--> planned (REPLAYALLOC_RECORD_ITERATIONS=2) --> replay.
TEST_F(KeyPolicy, TwoRecordingsOfOneStructurePlanItAndTheNextIterationReplays) {
  begin_decision b = begin();
  ASSERT_EQ(b.what, begin_decision::record);
  EXPECT_TRUE(e_.recording);
  EXPECT_EQ(record(recording(4096), b).to_plan, nullptr) << "one recording is not enough";
  EXPECT_FALSE(e_.recording);
  b = begin();
  const recording_decision d = record(recording(4096), b);
  ASSERT_NE(d.to_plan, nullptr);
  EXPECT_EQ(d.replace_id, 0u);
  // The plan is on the way (Note [Background planning]): the key waits, not records.
  const begin_decision waits = begin();
  EXPECT_EQ(waits.what, begin_decision::awaiting);
  EXPECT_STREQ(waits.why, "its plan is being made");
  EXPECT_FALSE(e_.recording);
  install(d);
  b = begin();
  EXPECT_EQ(b.what, begin_decision::replay);
  const replay_verdict v = replay(b, 4);
  EXPECT_FALSE(v.deviated);
  EXPECT_FALSE(v.counted);
  EXPECT_TRUE(e_.regimes[b.regime].confirmed);
}

// Note [A recording equal to the last]: the second recording of a program that repeats
// itself is not merged (the regime keeps the envelope the first one made, the same
// object); one with other sizes, of the same structure, is (each capacity the larger).
TEST_F(KeyPolicy, ARecordingEqualToTheLastKeepsItsRegimesEnvelopeAndOneWithOtherSizesMergesIt) {
  begin_decision b = begin();
  ASSERT_EQ(record(recording(4096), b).to_plan, nullptr);
  const int r = e_.last_trace_regime;
  ASSERT_GE(r, 0);
  const envelope* first = e_.regimes[r].env.get();
  b = begin();
  const recording_decision same = record(recording(4096), b);
  ASSERT_NE(same.to_plan, nullptr);
  EXPECT_EQ(same.to_plan.get(), first) << "merged into a copy";
  EXPECT_EQ(same.to_plan->tr.allocations[0].size, 4096u);
  EXPECT_EQ(e_.regimes[r].recordings, 2u);

  key_policy_state fresh;
  e_ = std::move(fresh);
  b = begin();
  ASSERT_EQ(record(recording(4096), b).to_plan, nullptr);
  const envelope* small = e_.regimes[e_.last_trace_regime].env.get();
  b = begin();
  const recording_decision larger = record(recording(8192), b);
  ASSERT_NE(larger.to_plan, nullptr);
  EXPECT_NE(larger.to_plan.get(), small);
  for (const trace_allocation& a : larger.to_plan->tr.allocations) EXPECT_EQ(a.size, 8192u);
}

// One thread records a key at a time: another begins meanwhile and passes through.
TEST_F(KeyPolicy, WhileOneThreadRecordsAnotherPassesThrough) {
  const begin_decision first = begin();
  ASSERT_EQ(first.what, begin_decision::record);
  const begin_decision second = begin();
  EXPECT_EQ(second.what, begin_decision::pass);
  EXPECT_STREQ(second.why, "another thread records the key") << "the iteration log's reason";
  record(recording(4096), first);
  EXPECT_EQ(begin().what, begin_decision::record);
}

// A recording that will not end (no memory for it or for its plan, or its thread not
// in a fork's child) is abandoned: the next thread to begin records the key, and the
// abandoned one counts as no recording.
TEST_F(KeyPolicy, AnAbandonedRecordingLetsTheNextBeginRecord) {
  const begin_decision first = begin();
  ASSERT_EQ(first.what, begin_decision::record);
  ASSERT_EQ(begin().what, begin_decision::pass);
  abandon_recording(e_);
  const begin_decision next = begin();
  EXPECT_EQ(next.what, begin_decision::record);
  EXPECT_EQ(record(recording(4096), next).to_plan, nullptr) << "the first recording: the abandoned one was none";
  EXPECT_NE(record(recording(4096), begin()).to_plan, nullptr) << "the second plans";
}

// A key auto mode names has shown its period three times already (Note [Auto mode]):
// its first recording is planned; a marked key waits for REPLAYALLOC_RECORD_ITERATIONS.
TEST_F(KeyPolicy, AKeyAutoModeFoundIsPlannedAfterItsFirstRecording) {
  ASSERT_GT(s_.record_iterations, 1u);
  EXPECT_EQ(record(recording(4096), begin()).to_plan, nullptr) << "a marked key's first recording";
  key_policy_state automatic;
  on_auto_period(automatic, false, false);
  const begin_decision b = decide_begin(automatic, 0, true, s_);
  ASSERT_EQ(b.what, begin_decision::record);
  const recording_intent in{b.regime, b.probing, b.growing, b.sizing, {b.marked[0], b.marked[1]}};
  EXPECT_NE(decide_after_recording(automatic, recording(4096), in, s_, n_).to_plan, nullptr);
}

// Without slabs (the range could not be reserved) a planned key passes through.
TEST_F(KeyPolicy, APlannedKeyWithoutSlabsPassesThrough) {
  record(recording(4096), begin());
  install(record(recording(4096), begin()));
  const begin_decision b = decide_begin(e_, 0, false, s_);
  EXPECT_EQ(b.what, begin_decision::pass);
  // Its reason is the decision's own: the engine's log once read it off the key's state
  // and said "another thread records the key" here.
  EXPECT_STREQ(b.why, "no slab can be made (the slab range was not reserved)");
  EXPECT_EQ(begin().what, begin_decision::replay);
  on_plan_failed(e_);
  EXPECT_STREQ(begin().why, "planning the key failed");
}

// Recordings that never agree (a new structure each time): planned anyway at the
// REPLAYALLOC_RECORD_LIMIT-th, and the key counts a failure (Note [Setting aside]).
TEST_F(KeyPolicy, RecordingsThatNeverAgreeArePlannedAtTheLimitAndCountAFailure) {
  for (std::uint32_t i = 0; i + 1 < s_.record_limit; ++i) {
    EXPECT_EQ(record(recording(4096, 4, static_cast<int>(i)), begin()).to_plan, nullptr) << i;
  }
  EXPECT_EQ(e_.failures, 0u);
  const recording_decision d = record(recording(4096, 4, static_cast<int>(s_.record_limit)), begin());
  EXPECT_NE(d.to_plan, nullptr);
  EXPECT_EQ(e_.failures, 1u);
}

// Note [Key policy]: probation reaches the engine in its decisions, never read off the
// state without the key's mutex. The plan of recordings that never agreed is queued on
// probation (one greedy ordering, slabs not pre-faulted); the iterations that replay it
// begin on probation (their recordings would take no call-stack tags); a replay that
// holds clears it, and says so, and so do the decisions after it.
TEST_F(KeyPolicy, ProbationIsCarriedByEachDecisionAndAReplayThatHoldsEndsIt) {
  begin_decision b = begin();
  EXPECT_FALSE(b.probation);
  for (std::uint32_t i = 0; i + 1 < s_.record_limit; ++i) {
    const recording_decision d = record(recording(4096, 4, static_cast<int>(i)), i == 0 ? b : begin());
    EXPECT_FALSE(d.probation) << i;
  }
  const recording_decision d = record(recording(4096, 4, static_cast<int>(s_.record_limit)), begin());
  ASSERT_NE(d.to_plan, nullptr);
  EXPECT_TRUE(d.probation) << "a plan made because the recordings never agreed is not on probation";
  install(d);
  b = begin();
  ASSERT_EQ(b.what, begin_decision::replay);
  EXPECT_TRUE(b.probation);
  const replay_verdict v = replay(b, static_cast<std::uint32_t>(d.to_plan->tr.allocations.size()));
  EXPECT_FALSE(v.deviated);
  EXPECT_FALSE(v.probation) << "a replay that held did not end the probation";
  EXPECT_FALSE(begin().probation);
}

// Deviating replays: REPLAYALLOC_REPLAN_AFTER counted deviations in a row retire the
// plan; the key is set aside for longer with each failure (Note [Setting aside]).
TEST_F(KeyPolicy, DeviationsInARowRetireThePlanAndSetTheKeyAside) {
  record(recording(4096), begin());
  install(record(recording(4096), begin()));
  deviation_streak streak;
  bool retire = false;
  for (std::uint32_t i = 0; i < s_.replan_after && !retire; ++i) {
    // 3 of 4 slots missed, each time leaving the plan at another slot (noise, not a
    // structure to probe for: Note [Regimes]). The verdict carries the retirement.
    const replay_verdict v = decide_after_replay(e_, summary(begin(), 1, 3, 0, i + 1), s_, &streak);
    EXPECT_TRUE(v.deviated) << i;
    EXPECT_TRUE(v.counted) << i;
    retire = v.retire;
    EXPECT_EQ(retire, i + 1 == s_.replan_after) << i;
  }
  ASSERT_TRUE(retire);
  // The first failure costs nothing; the second sets the key aside for 8 iterations.
  plan_version* old = drop_plan(e_, 0, s_, n_, "test");
  EXPECT_NE(old, nullptr);
  EXPECT_EQ(e_.regimes[0].version, nullptr);
  EXPECT_EQ(n_.set_asides, 0u);
  EXPECT_EQ(record(recording(4096), begin()).to_plan, nullptr) << "records again at once";
  set_aside(e_, s_, n_, "test");
  EXPECT_EQ(n_.set_asides, 1u);
  for (int i = 0; i < 7; ++i) {
    const begin_decision b = begin();
    EXPECT_EQ(b.what, begin_decision::set_aside) << i;
    EXPECT_STREQ(b.why, "the key is set aside");
  }
  EXPECT_EQ(begin().what, begin_decision::record);
  // A fifth failure gives the key up for 4,096 iterations.
  for (int i = 0; i < 3; ++i) set_aside(e_, s_, n_, "test");
  EXPECT_EQ(n_.keys_given_up, 1u);
  EXPECT_EQ(e_.resume_at - e_.uses, 4096u);
}

// A plan from a file that deviates once is retired at once (Note [Plan files]).
TEST_F(KeyPolicy, APlanFromAFileThatDeviatesIsRetiredAtOnce) {
  deviation_streak streak;
  EXPECT_TRUE(streak_retires(streak, &e_, true, true, s_));
  EXPECT_FALSE(streak_retires(streak, &e_, false, true, s_));
}

// A deviation now and then does not retire: the streak is of deviations in a row, and
// of one key.
TEST_F(KeyPolicy, TheStreakCountsDeviationsInARowOfOneKey) {
  deviation_streak streak;
  key_policy_state other;
  EXPECT_FALSE(streak_retires(streak, &e_, true, false, s_));
  EXPECT_FALSE(streak_retires(streak, &e_, true, false, s_));
  EXPECT_FALSE(streak_retires(streak, &e_, false, false, s_));
  EXPECT_FALSE(streak_retires(streak, &e_, true, false, s_));
  EXPECT_FALSE(streak_retires(streak, &other, true, false, s_));
  EXPECT_FALSE(streak_retires(streak, &other, true, false, s_));
  EXPECT_TRUE(streak_retires(streak, &other, true, false, s_));
}

// A larger shape (two slots or more outgrown) is not a deviation: the next iteration of
// the regime records, its envelope grows, and the grown plan replaces the old one,
// which serves meanwhile.
TEST_F(KeyPolicy, ALargerShapeGrowsThePlanWhichServesUntilItsSuccessorIsInstalled) {
  record(recording(4096), begin());
  install(record(recording(4096), begin()));
  const replay_verdict v = replay(begin(), 4, 2, 2);
  EXPECT_TRUE(v.grew);
  EXPECT_FALSE(v.deviated);
  EXPECT_TRUE(v.grow_wanted);
  EXPECT_FALSE(v.counted);
  const begin_decision b = begin();
  ASSERT_EQ(b.what, begin_decision::record);
  EXPECT_TRUE(b.growing);
  const recording_decision d = record(recording(8192), b);
  ASSERT_NE(d.to_plan, nullptr);
  EXPECT_EQ(d.replace_id, e_.regimes[0].version->id);
  // On the way: the old plan replays, and outgrowing it is explained, not counted.
  const begin_decision meanwhile = begin();
  EXPECT_EQ(meanwhile.what, begin_decision::replay);
  const replay_verdict w = replay(meanwhile, 4, 2, 2);
  EXPECT_TRUE(w.explained);
  EXPECT_FALSE(w.counted);
  EXPECT_FALSE(w.grow_wanted);
  install(d);
  EXPECT_GE(e_.regimes[0].env->tr.allocations[0].size, 8192u);
}

// Predicted A, the iteration was B: A's slots served B's first allocations, then B
// asked beyond A's plan. B's slots up to there are A's and B's next slot fits: the
// iteration was B's, learned for the prediction and not counted as a deviation. Without
// B planned, the same replay is a counted deviation.
TEST_F(KeyPolicy, AWrongPredictionExplainedByAnotherRegimeIsNotADeviation) {
  const auto a = recording(4096, 4, 0);
  const auto bt = recording(4096, 4, 2);
  // Two finished recordings of each structure (as probes would make them): both planned.
  for (const auto& t : {a, a, bt, bt}) {
    const recording_decision d = decide_after_recording(e_, t, recording_intent{}, s_, n_);
    if (d.to_plan != nullptr) install(d);
  }
  const int ra = e_.find_regime(a->shape_signature());
  const int rb = e_.find_regime(bt->shape_signature());
  ASSERT_GE(ra, 0);
  ASSERT_GE(rb, 0);
  ASSERT_NE(ra, rb);
  ASSERT_NE(e_.regimes[ra].version, nullptr);
  ASSERT_NE(e_.regimes[rb].version, nullptr);
  // The last two iterations B then A: A is predicted (what followed A: A).
  e_.history[0] = static_cast<std::int8_t>(rb);
  e_.history[1] = static_cast<std::int8_t>(ra);
  const begin_decision b = begin();
  ASSERT_EQ(b.what, begin_decision::replay);
  ASSERT_EQ(b.regime, ra);
  replay_summary rs;
  rs.version = e_.regimes[ra].version;
  rs.version_id = rs.version->id;
  rs.regime = ra;
  rs.planned = 4;
  rs.handed = 4;
  rs.misses = 2;         // B's two allocations beyond A's plan
  rs.first_miss_at = 5;  // slot index 4, + 1
  rs.first_miss_size = 4096;
  const replay_verdict v = decide_after_replay(e_, rs, s_);
  EXPECT_TRUE(v.deviated);
  EXPECT_TRUE(v.explained);
  EXPECT_FALSE(v.counted);
  EXPECT_EQ(e_.history[1], rb) << "learned: the iteration followed B";
  // B's plan gone: nothing explains the same replay, a counted deviation.
  plan_version* b_plan = e_.regimes[rb].version;
  e_.regimes[rb].version = nullptr;
  e_.history[0] = static_cast<std::int8_t>(rb);
  e_.history[1] = static_cast<std::int8_t>(ra);
  const replay_verdict w = decide_after_replay(e_, rs, s_);
  EXPECT_FALSE(w.explained);
  EXPECT_TRUE(w.counted);
  e_.regimes[rb].version = b_plan;
}

// A generation request (Note [Periodic iterations]): a prefill of `prompt` tokens at
// `batch`, then `steps` decode steps whose caches grow by one token each.
std::shared_ptr<const trace> generation(std::uint64_t prompt, int steps, std::uint64_t batch = 1) {
  auto t = std::make_shared<trace>();
  t->key = "k";
  t->ops = {"unknown"};
  std::uint64_t clock = 0;
  auto alloc = [&](std::uint64_t size) {
    trace_allocation a;
    a.id = t->allocations.size();
    a.size = size;
    a.alloc_at = clock++;
    t->allocations.push_back(a);
    return t->allocations.size() - 1;
  };
  auto release = [&](std::size_t i) { t->allocations[i].free_at = clock++; };
  std::size_t cache = alloc(batch * prompt * 4096);
  release(alloc(batch * prompt * prompt * 64));  // attention scores: the prompt squared
  for (int s = 1; s <= steps; ++s) {
    const std::size_t next = alloc(batch * (prompt + s) * 4096);
    release(cache);
    cache = next;
    release(alloc(batch * 8192));
  }
  release(cache);
  t->events = clock;
  return t;
}

// Note [Periodic iterations], key_policy.cc: a request whose prompt or batch outgrew
// the plan by at most max_scaled_growth is planned at once from the envelope scaled to
// it; a larger jump (a batch several times any recorded) is recorded instead, so that
// one slot's ratio does not raise every slot that varies (the slab of a Python loop
// batching 1..8 went 8 -> 51 MiB that way).
TEST_F(KeyPolicy, APeriodicPlanScalesToASomewhatLargerRequestAndRecordsAMuchLargerOne) {
  record(generation(20, 12), begin());
  install(record(generation(30, 16), begin()));
  ASSERT_TRUE(e_.regimes[0].env->lines.periodic());
  const std::uint64_t first = e_.regimes[0].env->tr.allocations[0].size;
  auto outgrown = [&](std::uint64_t size) {
    replay_summary rs = summary(begin(), 1, 20, 20, 1);
    rs.first_miss_size = rs.first_too_large_size = size;
    rs.period = 2;
    rs.tail_from = rs.planned - 1;
    return decide_after_replay(e_, rs, s_);
  };
  const replay_verdict larger = outgrown(first * 3 / 2);
  EXPECT_TRUE(larger.grew);
  ASSERT_NE(larger.predicted, nullptr) << "a prompt half as long again: scaled at once";
  EXPECT_GE(larger.predicted->tr.allocations[0].size, first * 3 / 2);
  install({.to_plan = larger.predicted, .replace_id = e_.regimes[0].version->id});
  const std::uint64_t scaled = e_.regimes[0].env->tr.allocations[0].size;
  const replay_verdict much = outgrown(scaled * 4);
  EXPECT_TRUE(much.grew);
  EXPECT_EQ(much.predicted, nullptr) << "a batch 4 times larger: recorded, not scaled";
  EXPECT_TRUE(much.grow_wanted);
  EXPECT_TRUE(begin().growing);
}

// Note [Anchored iterations], key_policy.cc (scaled_envelope's guess): a key auto mode
// found by shape (a decode step whose sizes grow, under a runtime whose host language
// holds the caches) whose recordings show no slot varying has every capacity scaled
// when a request outgrows its slot by at most max_scaled_growth, as a periodic key's
// varied slots are; a larger jump is recorded instead.
TEST_F(KeyPolicy, AByShapeKeyWhoseRecordingsShowNoVariationScalesEveryCapacity) {
  on_auto_period(e_, false, true);  // its first recording planned (Note [Auto mode])
  install(record(recording(64 << 10), begin()));
  auto outgrown = [&](std::uint64_t size) {
    replay_summary rs = summary(begin(), 1, 3, 3, 2);
    rs.first_miss_size = rs.first_too_large_size = size;
    return decide_after_replay(e_, rs, s_);
  };
  const replay_verdict v = outgrown(80 << 10);
  EXPECT_TRUE(v.grew);
  ASSERT_NE(v.predicted, nullptr) << "a step a quarter larger: scaled at once, not recorded";
  ASSERT_EQ(v.predicted->tr.allocations.size(), 4u);
  for (const trace_allocation& a : v.predicted->tr.allocations) {
    EXPECT_EQ(a.size, std::uint64_t{100} << 10) << "every slot by 80/64 and a quarter";
  }
  EXPECT_TRUE(v.grow_wanted);
  install({.to_plan = v.predicted, .replace_id = e_.regimes[0].version->id});
  const replay_verdict much = outgrown(std::uint64_t{300} << 10);
  EXPECT_TRUE(much.grew);
  EXPECT_EQ(much.predicted, nullptr) << "three times the slot: recorded, not scaled";
}

// The same replay of a key not found by shape (marked, or a period of sizes): a slot of
// one fixed size outgrown is another structure's, recorded as before.
TEST_F(KeyPolicy, AKeyNotFoundByShapeRecordsAFixedSlotOutgrown) {
  record(recording(64 << 10), begin());
  install(record(recording(64 << 10), begin()));
  replay_summary rs = summary(begin(), 1, 3, 3, 2);
  rs.first_miss_size = rs.first_too_large_size = 80 << 10;
  const replay_verdict v = decide_after_replay(e_, rs, s_);
  EXPECT_TRUE(v.grew);
  EXPECT_EQ(v.predicted, nullptr);
}

// What a replay's figures say before the key is asked (read_replay), at the edges of
// REPLAYALLOC_DEVIATION_PERCENT (10) and of a periodic plan's tail.
TEST(ReadReplay, MissesAndMissingSlotsDeviateAboveThePercentAndOutgrownSlotsAreALargerShape) {
  policy_settings s;
  replay_summary rs;
  rs.planned = 100;
  rs.handed = 100;
  EXPECT_FALSE(read_replay(rs, s).deviated) << "a clean replay";
  rs.misses = 10;
  EXPECT_FALSE(read_replay(rs, s).deviated) << "10 misses in 100 slots: at the percent, not above";
  rs.misses = 11;
  EXPECT_TRUE(read_replay(rs, s).deviated);
  rs.misses = 0;
  rs.handed = 89;
  EXPECT_TRUE(read_replay(rs, s).deviated) << "11 slots never reached";
  rs.handed = 90;
  EXPECT_FALSE(read_replay(rs, s).deviated);
  // Two slots outgrown: a larger shape, which is not also a deviation.
  rs.handed = 100;
  rs.misses = 50;
  rs.grown = 1;
  EXPECT_FALSE(read_replay(rs, s).grew) << "one larger block is a deviation";
  EXPECT_TRUE(read_replay(rs, s).deviated);
  rs.grown = 2;
  EXPECT_TRUE(read_replay(rs, s).grew);
  EXPECT_FALSE(read_replay(rs, s).deviated);
  // A plan of no slots never deviates.
  EXPECT_FALSE(read_replay(replay_summary{}, s).deviated);
  s.deviation_percent = 60;
  rs.grown = 0;
  EXPECT_FALSE(read_replay(rs, s).deviated) << "50 misses in 100 under a 60% setting";
}

// What a replay of a periodic plan reports: 40 slots, a prefill and 9 steps of 4, the
// tail from slot 36 (Note [Periodic iterations]).
replay_summary periodic_replay(std::uint32_t handed, std::uint64_t misses, std::uint32_t first_miss_at,
                               std::uint32_t grown = 0) {
  replay_summary rs;
  rs.planned = 40;
  rs.period = 4;
  rs.tail_from = 36;
  rs.handed = handed;
  rs.misses = misses;
  rs.first_miss_at = first_miss_at;
  rs.grown = grown;
  return rs;
}

TEST(ReadReplay, APeriodicPlanOverrunPastItsTailIsALongerRequestAndAShortOneIsAPrefix) {
  const policy_settings s;
  const replay_reading in_tail = read_replay(periodic_replay(40, 2, 37, 3), s);
  EXPECT_TRUE(in_tail.overran) << "half a step's requests past the tail";
  EXPECT_FALSE(in_tail.grew) << "an overrun is not a larger shape";
  EXPECT_FALSE(in_tail.deviated);
  EXPECT_FALSE(read_replay(periodic_replay(40, 1, 37, 3), s).overran) << "less than half a step";
  const replay_reading before_tail = read_replay(periodic_replay(40, 2, 36, 3), s);
  EXPECT_FALSE(before_tail.overran) << "the first miss before the tail";
  EXPECT_TRUE(before_tail.grew);
  // A shorter request: 12 slots reached, none missing, 1 miss in 13 asked.
  EXPECT_FALSE(read_replay(periodic_replay(12, 1, 5), s).deviated) << "the slots not reached are not missing";
  EXPECT_TRUE(read_replay(periodic_replay(12, 2, 5), s).deviated) << "2 misses in 14 asked";
}

// Note [One verdict for auto mode]: the slots half of the reading, which auto mode
// counts, against the fewer of the plan's slots and what the period made.
TEST(ReadReplay, AutoModeCountsAReplayThatFellShortOfTheFewerOfTheSlotsAndThePeriod) {
  const policy_settings s;
  // A replay of a plan of `planned` slots whose client expected `expected` allocations.
  const auto read = [&s](std::uint64_t expected, std::uint32_t planned, std::uint32_t handed, std::uint64_t misses = 0,
                         std::uint32_t grown = 0) {
    replay_summary rs;
    rs.expected = expected;
    rs.planned = planned;
    rs.handed = handed;
    rs.misses = misses;
    rs.grown = grown;
    return read_replay(rs, s);
  };
  // A decode step of 35 allocations, 5 of them outliving it (no slot), and 5 of the
  // host language's objects beside it.
  replay_reading r = read(35, 30, 30, 5);
  EXPECT_FALSE(r.fell_short) << "every slot handed out: the blocks without one are not a shortfall";
  EXPECT_TRUE(r.deviated) << "5 misses in 30 slots: the key's half, which auto mode does not count";
  EXPECT_FALSE(read(35, 30, 27).fell_short) << "27 of 30: at the percent";
  EXPECT_TRUE(read(35, 30, 26).fell_short);
  // A period shorter than the plan (a plan of a longer recording): against the period.
  EXPECT_FALSE(read(20, 30, 18).fell_short);
  EXPECT_TRUE(read(20, 30, 17).fell_short);
  // Between quiet points the period is what the piece made, blocks without a slot
  // included: against the plan's slots, the fewer.
  EXPECT_FALSE(read(180, 92, 91, 2).fell_short);
  // Without a client's count, the plan's slots: the same test as the key's missing slots.
  r = read(0, 100, 89);
  EXPECT_TRUE(r.fell_short);
  EXPECT_TRUE(r.deviated);
  EXPECT_FALSE(read(0, 100, 90).fell_short);
  // A larger shape is not a deviation, but a replay that handed out a third of its slots
  // still fell short.
  r = read(30, 30, 10, 24, 2);
  EXPECT_TRUE(r.grew);
  EXPECT_FALSE(r.deviated);
  EXPECT_TRUE(r.fell_short);
  // A plan with no slot in the slab falls short of a period it hands nothing of.
  EXPECT_TRUE(read(35, 0, 0).fell_short);
  EXPECT_FALSE(read(0, 0, 0).fell_short) << "nothing expected, nothing planned";
  // A periodic plan's prefix is not short unless its client bounded it.
  replay_summary prefix = periodic_replay(12, 1, 5);
  EXPECT_FALSE(read_replay(prefix, s).fell_short);
  prefix.expected = 20;
  EXPECT_TRUE(read_replay(prefix, s).fell_short) << "12 of a 20-allocation period";
  policy_settings loose;
  loose.deviation_percent = 60;
  EXPECT_FALSE(read_replay(prefix, loose).fell_short) << "12 of 20 under a 60% setting";
}

// Note [Regimes]: a plan installs only over the version it was made to replace; one made
// for a version since replaced (a recording finished first) is not installed.
TEST_F(KeyPolicy, APlanForAVersionSinceReplacedIsNotInstalled) {
  record(recording(4096), begin());
  const recording_decision d = record(recording(4096), begin());
  install(d);
  const int r = e_.find_regime(regime_signature(d.to_plan->tr));
  ASSERT_GE(r, 0);
  plan_version* current = e_.regimes[r].version;
  plan_version stale;
  plan_to_install in;
  in.version = &stale;
  in.shape = e_.regimes[r].shape;
  in.replace_id = current->id + 100;  // not the installed one
  const install_decision no = decide_install(e_, in);
  EXPECT_FALSE(no.installed);
  EXPECT_EQ(e_.regimes[r].version, current);
  in.replace_id = 0;  // made as a first plan, but the regime has one now
  EXPECT_FALSE(decide_install(e_, in).installed);
  EXPECT_EQ(e_.regimes[r].version, current);
  // Over the right version: installed, the old one handed back to retire, the counts of
  // recordings begun afresh.
  in.replace_id = current->id;
  in.slab_bytes = 8192;
  in.lower_bound_bytes = 4096;
  const install_decision yes = decide_install(e_, in);
  EXPECT_TRUE(yes.installed);
  EXPECT_EQ(yes.old, current);
  EXPECT_EQ(e_.regimes[r].version, &stale);
  EXPECT_EQ(e_.regimes[r].recordings, 0u);
  EXPECT_EQ(e_.regimes[r].slab_bytes, 8192u);
  EXPECT_EQ(e_.recordings, 0u);
  e_.regimes[r].version = current;  // the test's own version is freed by the fixture
}

// A plan loaded from a file starts the regime of its structure, with that structure's
// envelope, and the key's next iteration replays it without recording.
TEST_F(KeyPolicy, APlanFromAFileStartsItsRegimeAndReplays) {
  const std::shared_ptr<const trace> t = recording(4096);
  plan_version* v = new plan_version;
  made_.push_back(v);
  v->id = ++next_id_;
  v->from_file = true;
  v->plan.planned_slots = 4;
  for (int i = 0; i < 4; ++i) v->plan.slots.push_back(slot{.size = 4096, .least = 4096});
  plan_to_install in;
  in.version = v;
  in.shape = regime_signature(*t);
  in.from_file = true;
  in.tr = t.get();
  const install_decision d = decide_install(e_, in);
  ASSERT_TRUE(d.installed);
  EXPECT_EQ(d.old, nullptr);
  ASSERT_NE(e_.regimes[d.regime].env, nullptr);
  EXPECT_EQ(e_.regimes[d.regime].env->tr.allocations.size(), 4u);
  const begin_decision b = begin();
  EXPECT_EQ(b.what, begin_decision::replay);
  EXPECT_EQ(b.regime, d.regime);
  // The same plan loaded again (another file of the key): its regime's version is kept.
  plan_version again;
  in.version = &again;
  EXPECT_FALSE(decide_install(e_, in).installed);
  EXPECT_EQ(e_.regimes[d.regime].version, v);
}

// Planning failed: the key's iterations pass through from then on, and a key whose plans
// failed is on probation (Note [Probation slabs]).
TEST_F(KeyPolicy, AFailedPlanPassesThroughAndAKeySetAsideIsOnProbation) {
  record(recording(4096), begin());
  const recording_decision d = record(recording(4096), begin());
  EXPECT_FALSE(on_probation(e_));
  on_plan_failed(e_);
  on_plan_done(e_, d.to_plan.get());
  EXPECT_EQ(begin().what, begin_decision::pass);
  key_policy_state other;
  other.key = "other";
  set_aside(other, s_, n_, "a test");
  EXPECT_TRUE(on_probation(other));
}

}  // namespace
}  // namespace replayalloc::detail
