// The pool of one plan version: a retired version lives exactly as long as its last
// slab, and a claim (the first half of taking a slab, made under the key's mutex)
// counts as one. Without that, a thread that read the key's version and then claimed
// a slab from it could touch a version another thread had just retired and deleted
// (the engine's domain_begin against end_replay's retire).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "replay/fast_path.h"
#include "replay/slab_pool.h"

namespace {

using replayalloc::detail::plan_version;
using replayalloc::detail::plan_versions_alive;
using replayalloc::detail::slab;
using replayalloc::detail::slab_source;
namespace backend = replayalloc::detail::backend;

// Slabs from the heap, counted; map() can be made to fail.
class counting_source final : public slab_source {
 public:
  void* map(std::size_t bytes, const char** why) override {
    if (fail) {
      *why = "test: no memory";
      return nullptr;
    }
    ++mapped;
    return std::calloc(1, bytes);
  }
  void unmap(void* p, std::size_t) override {
    ++unmapped;
    std::free(p);
  }
  void set_owner(void*, std::size_t, slab*) override {}
  bool fail = false;
  int mapped = 0;
  int unmapped = 0;
};

// Made as the engine makes versions (it deletes itself with fallback_free).
plan_version* make_version(slab_source& src) {
  void* mem = backend::fallback_alloc(sizeof(plan_version), alignof(plan_version));
  auto* v = new (mem) plan_version;
  v->source = &src;
  v->plan.slab_bytes = 4096;
  return v;
}

// Takes a slab and gives it back as an iteration whose blocks all died would.
slab* take(plan_version* v) {
  plan_version::slab_claim c;
  const char* why = "";
  if (!v->claim(4, &c, &why)) return nullptr;
  return v->finish(c, nullptr, &why);
}

TEST(SlabPool, AReservedClaimKeepsARetiredVersionAliveUntilItsSlabDrains) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  EXPECT_EQ(plan_versions_alive(), before + 1);
  plan_version::slab_claim c;
  const char* why = "";
  ASSERT_TRUE(v->claim(4, &c, &why));
  EXPECT_EQ(c.s, nullptr);  // no free slab: a place reserved
  v->retire();              // another thread retires the key's plan meanwhile
  EXPECT_EQ(plan_versions_alive(), before + 1) << "a version was deleted under its claim";
  slab* s = v->finish(c, nullptr, &why);
  ASSERT_NE(s, nullptr);
  std::memset(s->base, 0xab, 4096);  // the slab is usable
  EXPECT_EQ(src.mapped, 1);
  v->release(s);  // its last slab: the version goes with it
  EXPECT_EQ(src.unmapped, 1);
  EXPECT_EQ(plan_versions_alive(), before);
}

TEST(SlabPool, AClaimedFreeSlabKeepsARetiredVersionAlive) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  slab* first = take(v);
  ASSERT_NE(first, nullptr);
  v->release(first);  // back in the pool
  plan_version::slab_claim c;
  const char* why = "";
  ASSERT_TRUE(v->claim(4, &c, &why));
  EXPECT_EQ(c.s, first);  // the free slab, taken out of the pool
  v->retire();            // unmaps free slabs only: the claimed one is not free
  EXPECT_EQ(src.unmapped, 0);
  EXPECT_EQ(plan_versions_alive(), before + 1);
  slab* s = v->finish(c, nullptr, &why);
  ASSERT_EQ(s, first);
  v->release(s);
  EXPECT_EQ(src.unmapped, 1);
  EXPECT_EQ(plan_versions_alive(), before);
}

TEST(SlabPool, AFailedFinishOfARetiredVersionDeletesIt) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  plan_version::slab_claim c;
  const char* why = "";
  ASSERT_TRUE(v->claim(4, &c, &why));
  v->retire();
  src.fail = true;
  EXPECT_EQ(v->finish(c, nullptr, &why), nullptr);
  EXPECT_STREQ(why, "test: no memory");
  EXPECT_EQ(plan_versions_alive(), before) << "the dropped claim was the version's last";
}

TEST(SlabPool, ARetiredVersionRefusesClaimsAndTheSlabLimitHolds) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  plan_version::slab_claim c[3];
  const char* why = "";
  ASSERT_TRUE(v->claim(2, &c[0], &why));
  ASSERT_TRUE(v->claim(2, &c[1], &why));
  EXPECT_FALSE(v->claim(2, &c[2], &why));
  EXPECT_STREQ(why, "REPLAYALLOC_MAX_SLABS slabs of this plan are busy");
  slab* a = v->finish(c[0], nullptr, &why);
  slab* b = v->finish(c[1], nullptr, &why);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->base, b->base);
  v->retire();
  EXPECT_FALSE(v->claim(2, &c[2], &why));
  EXPECT_STREQ(why, "plan retired");
  v->release(a);
  EXPECT_EQ(plan_versions_alive(), before + 1);
  v->release(b);
  EXPECT_EQ(plan_versions_alive(), before);
}

// Note [The first slab with the plan] (runtime/plans.cc): the version's first slab,
// made where the plan was, waits in the pool for the first iteration, which takes it
// instead of making one; claim_first claims only a version with no slab at all.
TEST(SlabPool, AFirstSlabMadeWithThePlanIsTheOneTheFirstIterationTakes) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  plan_version::slab_claim c;
  ASSERT_TRUE(v->claim_first(&c));
  plan_version::slab_claim again;
  EXPECT_FALSE(v->claim_first(&again)) << "a second first slab";
  ASSERT_TRUE(v->stock(c));
  EXPECT_EQ(src.mapped, 1);
  EXPECT_EQ(v->slab_count(), 1u);
  EXPECT_FALSE(v->claim_first(&again)) << "the version has its slab";
  slab* s = take(v);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(src.mapped, 1) << "the first iteration made a slab though one waited in the pool";
  std::memset(s->base, 0xab, 4096);
  slab* t = take(v);  // a second iteration at once gets a slab of its own
  ASSERT_NE(t, nullptr);
  EXPECT_NE(t->base, s->base);
  EXPECT_EQ(src.mapped, 2);
  v->release(s);
  v->release(t);
  v->retire();
  EXPECT_EQ(src.unmapped, 2);
  EXPECT_EQ(plan_versions_alive(), before);
}

// The version retired between the claim and the slab (another thread's iteration
// deviated): the slab goes at once, and so does the version; without memory, the claim
// is dropped and the first iteration makes the slab as before.
TEST(SlabPool, AFirstSlabOfARetiredVersionOrWithoutMemoryLeavesNothingBehind) {
  counting_source src;
  const std::size_t before = plan_versions_alive();
  plan_version* v = make_version(src);
  plan_version::slab_claim c;
  ASSERT_TRUE(v->claim_first(&c));
  v->retire();
  EXPECT_TRUE(v->stock(c));
  EXPECT_EQ(src.mapped, 1);
  EXPECT_EQ(src.unmapped, 1);
  EXPECT_EQ(plan_versions_alive(), before) << "the first slab kept a retired version alive";

  plan_version* w = make_version(src);
  ASSERT_TRUE(w->claim_first(&c));
  src.fail = true;
  EXPECT_FALSE(w->stock(c));
  EXPECT_EQ(w->slab_count(), 0u);
  src.fail = false;
  slab* s = take(w);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(src.mapped, 2);
  w->release(s);
  w->retire();
  EXPECT_EQ(plan_versions_alive(), before);
  // A retired version (kept alive by an iteration's claim) gets no first slab.
  plan_version* x = make_version(src);
  plan_version::slab_claim held;
  const char* why = "";
  ASSERT_TRUE(x->claim(4, &held, &why));
  x->retire();
  EXPECT_FALSE(x->claim_first(&c));
  slab* last = x->finish(held, nullptr, &why);
  ASSERT_NE(last, nullptr);
  x->release(last);
  EXPECT_EQ(plan_versions_alive(), before);
}

// A slot smaller than the minimum size (a plan made under a lower REPLAYALLOC_MIN_SIZE,
// loaded under a higher one) has its least raised above its size: the hit must serve
// it nothing, whatever the size asked (its size range would otherwise wrap around and
// take any request, however large, onto 1 KiB of slab).
TEST(SlabPool, ASlotBelowTheMinimumSizeServesNothingFromTheHit) {
  using namespace replayalloc::detail;
  counting_source src;
  plan_version* v = make_version(src);
  compiled_plan& p = v->plan;
  p.slots.push_back(slot{1024, 4096, 0, 0, 0, 0, 0, 0});  // least raised to the minimum
  p.slots.push_back(slot{2048, 2048, 2048, 0, 0, 1, 1, 0});  // an ordinary slot
  p.offset_rows.emplace(0, 0);
  p.offset_rows.emplace(2048, 1);
  p.row_begin = {0, 1, 2};
  p.row_slots = {0, 1};
  p.free_order = {0, 1};
  slab* s = take(v);
  ASSERT_NE(s, nullptr);
  replay_cursor c;
  c.recs = s->recs;
  c.first_frees = s->first_frees();
  c.second_frees = s->second_frees();
  c.free_cur = c.first_frees;
  c.cur = &s->recs[0];
  for (std::size_t size : {std::size_t{16}, std::size_t{1024}, std::size_t{4096}, std::size_t{1} << 20}) {
    EXPECT_EQ(replay_try_hit(c, size, malloc_align), nullptr) << size << " bytes";
  }
  c.cur = &s->recs[1];
  EXPECT_EQ(replay_try_hit(c, 2048, malloc_align), s->base + 2048) << "the ordinary slot still hits";
  v->retire();
  v->release(s);
}

}  // namespace
