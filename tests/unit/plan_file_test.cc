// Tests for planner/plan_file.h: a plan survives the round trip through bytes and
// files exactly; every corrupt, truncated, other-version or other-program plan is
// refused with a message saying why, and never crashes the reader.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <string>

#include "planner/plan_file.h"
#include "planner/planner.h"
#include "support/config.h"
#include "support/hash.h"
#include "trace/trace.h"

namespace replayalloc {
namespace {

using ::testing::HasSubstr;

trace make_trace() {
  trace t;
  t.key = "resnet50/batch=1";
  t.ops = {"unknown", "aten::conv2d", "aten::relu"};
  std::mt19937_64 rng(7);
  std::uint64_t at = 0;
  for (std::uint64_t id = 0; id < 200; ++id) {
    trace_allocation a;
    a.id = id;
    a.size = 1 + rng() % 100000;
    a.align = 16u << (rng() % 3);
    a.op = static_cast<std::uint32_t>(rng() % 3);
    a.alloc_at = at++;
    a.free_at = id % 50 == 49 ? never_freed : a.alloc_at + 1 + rng() % 40;
    t.allocations.push_back(a);
  }
  t.events = at + 64;
  return t;
}

plan_file make_file() {
  trace t = make_trace();
  absl::StatusOr<placement> p = make_plan(t);
  EXPECT_TRUE(p.ok()) << p.status();
  return make_plan_file(std::move(t), *std::move(p), planner_options{});
}

TEST(PlanFile, RoundTripIsExact) {
  const plan_file f = make_file();
  absl::StatusOr<plan_file> g = decode_plan(encode_plan(f));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tr, f.tr);
  EXPECT_EQ(g->p.offsets, f.p.offsets);
  EXPECT_EQ(g->p.slab_bytes, f.p.slab_bytes);
  EXPECT_EQ(g->p.lower_bound_bytes, f.p.lower_bound_bytes);
  EXPECT_EQ(g->p.algorithm, f.p.algorithm);
  EXPECT_EQ(g->signature, f.tr.signature());
  EXPECT_EQ(g->library_version, REPLAYALLOC_VERSION_STRING);
  EXPECT_TRUE(check_plan_key(*g, "resnet50/batch=1", 64).ok());
}

TEST(PlanFile, FileRoundTrip) {
  const plan_file f = make_file();
  const std::string path = testing::TempDir() + "/plan_file_test.raplan";
  ASSERT_TRUE(write_plan_file(f, path).ok());
  absl::StatusOr<plan_file> g = read_plan_file(path);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->p.offsets, f.p.offsets);
  ::unlink(path.c_str());
  absl::StatusOr<plan_file> missing = read_plan_file(path);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(path));
}

TEST(PlanFile, EveryFlippedByteIsRefused) {
  const std::string bytes = encode_plan(make_file());
  for (std::size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    EXPECT_FALSE(decode_plan(bad).ok()) << "byte " << i;
  }
}

TEST(PlanFile, EveryTruncationIsRefused) {
  const std::string bytes = encode_plan(make_file());
  for (std::size_t n = 0; n < bytes.size(); n += 5) {
    absl::StatusOr<plan_file> g = decode_plan(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(g.ok()) << n;
    EXPECT_THAT(g.status().message(), HasSubstr("truncated")) << n;
    EXPECT_TRUE(plan_file_cut_short(std::string_view(bytes).substr(0, n))) << n;
  }
  EXPECT_FALSE(plan_file_cut_short(bytes));
}

// Re-seals `bytes` after an edit so the checksum passes and the field check is reached.
std::string reseal(std::string bytes) {
  const std::uint32_t crc = detail::crc32c(0, bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  return bytes;
}

std::uint32_t flags_of(const std::string& bytes) {
  std::uint32_t flags = 0;
  std::memcpy(&flags, bytes.data() + 12, 4);
  return flags;
}

TEST(PlanFile, MadeAtRoundTrips) {
  const std::uint64_t before = static_cast<std::uint64_t>(::time(nullptr));
  plan_file f = make_file();
  EXPECT_GE(f.made_at, before);
  EXPECT_LE(f.made_at, static_cast<std::uint64_t>(::time(nullptr)));
  absl::StatusOr<plan_file> g = decode_plan(encode_plan(f));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->made_at, f.made_at);
  // With the least requests too (flag bits 0 and 1 together).
  f.made_at = 1700000000;
  f.least.resize(f.tr.allocations.size());
  for (std::size_t i = 0; i < f.least.size(); ++i) f.least[i] = i % 2 == 0 ? 1 : f.tr.allocations[i].size;
  const std::string bytes = encode_plan(f);
  EXPECT_EQ(flags_of(bytes), 3u);
  g = decode_plan(bytes);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->made_at, 1700000000u);
  EXPECT_EQ(g->least, f.least);
  EXPECT_EQ(g->p.offsets, f.p.offsets);
}

// A file as written before flag_made existed: no bit 1, no made_at field.
TEST(PlanFile, FileWithoutMadeAtStillDecodes) {
  plan_file f = make_file();
  f.made_at = 0;
  const std::string without = encode_plan(f);
  EXPECT_EQ(flags_of(without), 0u);
  absl::StatusOr<plan_file> g = decode_plan(without);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->made_at, 0u);
  EXPECT_EQ(g->p.offsets, f.p.offsets);
  // The same plan written with made_at, the field taken out by hand: the old layout.
  f.made_at = 1700000000;
  std::string bytes = encode_plan(f);
  ASSERT_EQ(flags_of(bytes), 2u);
  const std::uint32_t none = 0;
  std::memcpy(bytes.data() + 12, &none, 4);
  bytes.erase(bytes.size() - 4 - 8, 8);
  EXPECT_EQ(reseal(bytes), without);
  g = decode_plan(reseal(bytes));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->made_at, 0u);
}

TEST(PlanFile, UnknownFlagIsRefused) {
  std::string bytes = encode_plan(make_file());
  const std::uint32_t flags = flags_of(bytes) | 4;
  std::memcpy(bytes.data() + 12, &flags, 4);
  absl::StatusOr<plan_file> g = decode_plan(reseal(bytes));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("unknown flags"));
}

TEST(PlanFile, OtherFormatVersionIsRefused) {
  std::string bytes = encode_plan(make_file());
  const std::uint32_t v = plan_format_version + 1;
  std::memcpy(bytes.data() + 8, &v, 4);
  absl::StatusOr<plan_file> g = decode_plan(reseal(bytes));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("format version"));
}

TEST(PlanFile, OverlappingOffsetsAreRefusedEvenWithAGoodChecksum) {
  plan_file f = make_file();
  // Two allocations live at once put at the same offset.
  ASSERT_NE(f.p.offsets[0], not_in_slab);
  ASSERT_NE(f.p.offsets[1], not_in_slab);
  f.p.offsets[1] = f.p.offsets[0];
  absl::StatusOr<plan_file> g = decode_plan(encode_plan(f));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("placement is invalid"));
}

TEST(PlanFile, KeyMismatchesSayWhich) {
  plan_file f = make_file();
  EXPECT_THAT(check_plan_key(f, "bert", 64).message(), HasSubstr("for key 'resnet50/batch=1'"));
  EXPECT_THAT(check_plan_key(f, "resnet50/batch=1", 128).message(), HasSubstr("slot alignment"));
  f.library_version = "0.0.1";
  EXPECT_THAT(check_plan_key(f, "resnet50/batch=1", 64).message(), HasSubstr("made by replayalloc 0.0.1"));
}

TEST(PlanFile, CsvHasOneRowPerSlabAllocation) {
  const plan_file f = make_file();
  const std::string csv = encode_plan_csv(f);
  EXPECT_EQ(csv.rfind("id,offset,size\n", 0), 0u);
  std::size_t rows = 0;
  for (const std::uint64_t off : f.p.offsets) rows += off != not_in_slab;
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), rows + 1);
}

TEST(PlanFile, FileNamesAreSafeAndDistinct) {
  EXPECT_EQ(plan_file_name("a/b c").find('/'), std::string::npos);
  EXPECT_NE(plan_file_name("a/b"), plan_file_name("a_b"));
  EXPECT_EQ(plan_file_name("x"), plan_file_name("x"));
  EXPECT_THAT(plan_file_name(std::string(500, 'k')).size(), ::testing::Le(64u + 24u));
}

}  // namespace
}  // namespace replayalloc
