// Tests for trace/trace.h (check_trace, signature) and trace/trace_io.h (the binary
// and CSV formats, files). Readers must never trust their input: every malformed
// input gives a non-OK status that says what and where, and nothing crashes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/hash.h"
#include "trace/trace.h"
#include "trace/trace_io.h"

namespace replayalloc {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

trace_allocation alloc(std::uint64_t id, std::uint64_t size, std::uint32_t align,
                       std::uint64_t alloc_at, std::uint64_t free_at, std::uint32_t op = 0,
                       std::uint32_t thread = 0) {
  trace_allocation a;
  a.id = id;
  a.size = size;
  a.align = align;
  a.alloc_at = alloc_at;
  a.free_at = free_at;
  a.op = op;
  a.thread = thread;
  return a;
}

// A trace in the form the CSV reader produces: no key, thread 0, ops "unknown" first
// and then in order of first use, events one past the last position used. Op names
// hold a comma, quotes, and both.
trace csv_shaped_trace() {
  trace t;
  t.ops = {"unknown", "aten::empty", "aten::add, fused", "say \"hi\"", "a \"b\", c"};
  t.allocations = {
      alloc(10, 4096, 64, 0, 3, 1),
      alloc(11, 1, 16, 1, never_freed, 2),
      alloc(12, 1 << 20, 4096, 2, 7, 3),
      alloc(13, 100, 16, 4, 5, 0),
      alloc(14, std::uint64_t{1} << 47, 2 << 20, 6, never_freed, 4),
      alloc(15, 48, 32, 8, 9, 1),
  };
  t.events = 10;
  return t;
}

// A trace that uses every field of the binary format.
trace full_trace() {
  trace t = csv_shaped_trace();
  t.key = "resnet50/batch=32, \"train\"";
  t.allocations[0].thread = 3;
  t.allocations[2].thread = 7;
  t.events = 12;
  return t;
}

std::string patch_u32(std::string bytes, std::size_t at, std::uint32_t v) {
  std::memcpy(bytes.data() + at, &v, 4);
  return bytes;
}

std::string patch_u64(std::string bytes, std::size_t at, std::uint64_t v) {
  std::memcpy(bytes.data() + at, &v, 8);
  return bytes;
}

// Rewrites the trailing CRC-32C so that only the edit under test is wrong.
std::string recrc(std::string bytes) {
  const std::size_t body = bytes.size() - 4;
  const std::uint32_t crc = detail::crc32c(0, bytes.data(), body);
  return patch_u32(std::move(bytes), body, crc);
}

// Byte offsets in the binary header (see encode_trace_binary).
constexpr std::size_t version_at = 8;
constexpr std::size_t n_alloc_at = 16;
constexpr std::size_t events_at = 32;
constexpr std::size_t signature_at = 40;

// ---- check_trace ------------------------------------------------------------------

TEST(CheckTrace, AcceptsValidTraces) {
  EXPECT_TRUE(check_trace(full_trace()).ok());
  trace empty;
  empty.ops = {"unknown"};
  EXPECT_TRUE(check_trace(empty).ok());
}

TEST(CheckTrace, RejectsInvalidTracesNamingTheAllocation) {
  struct bad_case {
    const char* what;
    std::vector<trace_allocation> allocations;
    const char* message;
  };
  const bad_case cases[] = {
      {"duplicate id", {alloc(5, 64, 16, 0, 2), alloc(77, 64, 16, 1, 3), alloc(77, 8, 16, 2, 3)},
       "id 77 appears twice"},
      {"size 0", {alloc(77, 0, 16, 0, 1)}, "77 has size 0"},
      {"size above 2^47", {alloc(77, (std::uint64_t{1} << 47) + 1, 16, 0, 1)}, "2^47"},
      {"align 0", {alloc(77, 64, 0, 0, 1)}, "77 has alignment 0"},
      {"align 24", {alloc(77, 64, 24, 0, 1)}, "not a power of two"},
      {"align 4 MiB", {alloc(77, 64, 4 << 20, 0, 1)}, "above the limit of 2 MiB"},
      {"freed when allocated", {alloc(77, 64, 16, 3, 3)}, "77 is freed at 3"},
      {"freed before allocated", {alloc(77, 64, 16, 3, 2)}, "77 is freed at 2"},
      {"out of order", {alloc(5, 64, 16, 4, 6), alloc(77, 64, 16, 2, 3)}, "77 is out of alloc_at order"},
      {"op out of range", {alloc(77, 64, 16, 0, 1, 5)}, "77 names op 5"},
  };
  for (const bad_case& c : cases) {
    trace t;
    t.ops = {"unknown", "x"};
    t.allocations = c.allocations;
    t.events = 10;
    const absl::Status s = check_trace(t);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.what;
  }
  trace no_ops;
  EXPECT_FALSE(check_trace(no_ops).ok());
  // The largest size and alignment allowed are accepted.
  trace limits;
  limits.ops = {"unknown"};
  limits.allocations = {alloc(1, std::uint64_t{1} << 47, 2 << 20, 0, 1)};
  EXPECT_TRUE(check_trace(limits).ok()) << check_trace(limits);
}

// ---- signature --------------------------------------------------------------------

TEST(TraceSignature, DependsOnSizesAndAlignmentsInOrder) {
  const trace t = full_trace();
  EXPECT_EQ(t.signature(), full_trace().signature());

  // Lifetimes, ids, ops, threads and the key are not part of it.
  trace other = t;
  other.key = "another key";
  for (trace_allocation& a : other.allocations) {
    a.id += 1000;
    a.thread = 1;
    a.op = 0;
  }
  other.allocations[0].free_at = 2;
  EXPECT_EQ(other.signature(), t.signature());

  trace resized = t;
  resized.allocations[3].size += 1;
  EXPECT_NE(resized.signature(), t.signature());
  trace realigned = t;
  realigned.allocations[3].align = 32;
  EXPECT_NE(realigned.signature(), t.signature());
  trace swapped = t;
  std::swap(swapped.allocations[0].size, swapped.allocations[1].size);
  EXPECT_NE(swapped.signature(), t.signature());
  trace longer = t;
  longer.allocations.push_back(alloc(99, 64, 16, 11, 12));
  EXPECT_NE(longer.signature(), t.signature());
  trace empty;
  EXPECT_NE(empty.signature(), t.signature());
}

// ---- binary format ----------------------------------------------------------------

TEST(TraceBinary, RoundTrips) {
  const trace t = full_trace();
  const std::string bytes = encode_trace_binary(t);
  EXPECT_THAT(bytes, StartsWith("RPLYTRCE"));
  const absl::StatusOr<trace> back = decode_trace_binary(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
  // The encoding is a function of the trace.
  EXPECT_EQ(encode_trace_binary(*back), bytes);
}

TEST(TraceBinary, RoundTripsAnEmptyTrace) {
  trace t;
  t.ops = {"unknown"};
  const absl::StatusOr<trace> back = decode_trace_binary(encode_trace_binary(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
}

TEST(TraceBinary, RoundTripsRandomTraces) {
  std::mt19937_64 rng(0x7ace0001);
  for (int iter = 0; iter < 200; ++iter) {
    trace t;
    t.key = std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
    t.ops = {"unknown"};
    for (std::size_t k = rng() % 5; k > 0; --k) t.ops.push_back(std::string(rng() % 300, 'x'));
    std::uint64_t clock = rng() % 3;
    for (std::size_t i = rng() % 40; i > 0; --i) {
      const std::uint64_t at = clock++;
      const std::uint64_t free_at = rng() % 8 == 0 ? never_freed : at + 1 + rng() % 10;
      t.allocations.push_back(alloc(rng(), 1 + rng() % (std::uint64_t{1} << 47),
                                    1u << (rng() % 22), at, free_at,
                                    static_cast<std::uint32_t>(rng() % t.ops.size()),
                                    static_cast<std::uint32_t>(rng())));
      if (free_at != never_freed) t.events = std::max(t.events, free_at);
    }
    t.events = std::max(t.events, clock) + rng() % 3;
    ASSERT_TRUE(check_trace(t).ok()) << iter << ": " << check_trace(t);
    const absl::StatusOr<trace> back = decode_trace_binary(encode_trace_binary(t));
    ASSERT_TRUE(back.ok()) << iter << ": " << back.status();
    ASSERT_EQ(*back, t) << iter;
  }
}

TEST(TraceBinary, RejectsWrongMagic) {
  std::string bytes = encode_trace_binary(full_trace());
  bytes[3] = 'X';
  const absl::StatusOr<trace> t = decode_trace_binary(bytes);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("magic"));
  EXPECT_FALSE(decode_trace_binary("").ok());
  EXPECT_FALSE(decode_trace_binary(encode_trace_csv(full_trace())).ok());
}

// Every proper prefix of a file is refused, whatever the length, without crashing
// (the ASan build checks that nothing is read out of bounds).
TEST(TraceBinary, RejectsEveryTruncation) {
  const std::string bytes = encode_trace_binary(full_trace());
  ASSERT_GT(bytes.size(), 200u);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    // A copy of exactly n bytes, so that reading past it is an ASan error.
    const std::string prefix = bytes.substr(0, n);
    const absl::StatusOr<trace> t = decode_trace_binary(prefix);
    EXPECT_FALSE(t.ok()) << "prefix of " << n << " bytes was accepted";
  }
}

TEST(TraceBinary, RejectsExtraBytes) {
  const std::string bytes = encode_trace_binary(full_trace());
  EXPECT_FALSE(decode_trace_binary(bytes + '\0').ok());
  // Still refused when the checksum covers the extra bytes.
  std::string longer = bytes.substr(0, bytes.size() - 4) + "junk" + "CRC!";
  const absl::StatusOr<trace> t = decode_trace_binary(recrc(longer));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("unexpected bytes"));
}

// Flipping any one bit anywhere is caught: by the magic, the version or the checksum.
TEST(TraceBinary, RejectsEveryFlippedBit) {
  const std::string bytes = encode_trace_binary(full_trace());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const absl::StatusOr<trace> t = decode_trace_binary(bad);
      ASSERT_FALSE(t.ok()) << "byte " << i << " bit " << bit;
      if (i >= 12) {
        EXPECT_THAT(t.status().message(), HasSubstr("checksum")) << i;
      }
    }
  }
}

TEST(TraceBinary, RejectsAnotherFormatVersion) {
  const std::string bytes = encode_trace_binary(full_trace());
  // Recomputing the checksum is a no-op on an untouched file.
  ASSERT_EQ(recrc(bytes), bytes);
  for (const std::uint32_t version : {0u, 2u, 0x01000000u}) {
    const std::string other = recrc(patch_u32(bytes, version_at, version));
    const absl::StatusOr<trace> t = decode_trace_binary(other);
    ASSERT_FALSE(t.ok()) << version;
    EXPECT_THAT(t.status().message(), HasSubstr("format version " + std::to_string(version)));
    EXPECT_THAT(t.status().message(), HasSubstr("reads version 1"));
  }
}

// With a correct checksum, the structural checks after it still fire.
TEST(TraceBinary, RejectsInconsistentContentBehindAValidChecksum) {
  const std::string bytes = encode_trace_binary(full_trace());
  absl::StatusOr<trace> t = decode_trace_binary(recrc(patch_u64(bytes, n_alloc_at, 1u << 30)));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("claims 1073741824 allocations"));

  t = decode_trace_binary(recrc(patch_u64(bytes, signature_at, 12345)));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("signature mismatch"));

  // The trace said to end at event 6, before allocation 12 is freed (at 7).
  t = decode_trace_binary(recrc(patch_u64(bytes, events_at, 6)));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("past the trace's end"));

  // The first allocation's size (after the header and the key) set to 0.
  const std::size_t first_record = 52 + full_trace().key.size();
  t = decode_trace_binary(recrc(patch_u64(bytes, first_record + 8, 0)));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("10 has size 0"));
}

// ---- CSV format -------------------------------------------------------------------

TEST(TraceCsv, RoundTrips) {
  const trace t = csv_shaped_trace();
  const std::string text = encode_trace_csv(t);
  EXPECT_THAT(text, StartsWith("id,size,align,alloc_at,free_at,op\n"));
  // RFC 4180 quoting, and an empty free_at for an outliving allocation.
  EXPECT_THAT(text, HasSubstr("\n11,1,16,1,,\"aten::add, fused\"\n"));
  EXPECT_THAT(text, HasSubstr("\n12,1048576,4096,2,7,\"say \"\"hi\"\"\"\n"));
  EXPECT_THAT(text, HasSubstr("\"a \"\"b\"\", c\""));
  EXPECT_THAT(text, HasSubstr("\n10,4096,64,0,3,aten::empty\n"));
  const absl::StatusOr<trace> back = decode_trace_csv(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
}

TEST(TraceCsv, DropsWhatItCannotHold) {
  // The key and the threads are not in the CSV format; the rest survives.
  const trace t = full_trace();
  const absl::StatusOr<trace> back = decode_trace_csv(encode_trace_csv(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key, "");
  EXPECT_EQ(back->ops, t.ops);
  ASSERT_EQ(back->allocations.size(), t.allocations.size());
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    trace_allocation expected = t.allocations[i];
    expected.thread = 0;
    EXPECT_EQ(back->allocations[i], expected) << i;
  }
}

TEST(TraceCsv, AcceptsCrlfBlankLinesAndRowsOutOfOrder) {
  const absl::StatusOr<trace> t = decode_trace_csv(
      "id,size,align,alloc_at,free_at,op\r\n"
      "\r\n"
      "2,128,16,5,9,\"mm\"\r\n"
      "\n"
      "1,64,32,1,,mm\r\n"
      "3,8,16,2,4,\n");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->allocations.size(), 3u);
  EXPECT_EQ(t->allocations[0], alloc(1, 64, 32, 1, never_freed, 1));
  EXPECT_EQ(t->allocations[1], alloc(3, 8, 16, 2, 4, 0));
  EXPECT_EQ(t->allocations[2], alloc(2, 128, 16, 5, 9, 1));
  EXPECT_EQ(t->ops, (std::vector<std::string>{"unknown", "mm"}));
  EXPECT_EQ(t->events, 10u);
}

TEST(TraceCsv, AcceptsAHeaderAlone) {
  const absl::StatusOr<trace> t = decode_trace_csv("id,size,align,alloc_at,free_at,op\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->allocations.empty());
  EXPECT_EQ(t->ops, std::vector<std::string>{"unknown"});
}

constexpr const char* header = "id,size,align,alloc_at,free_at,op\n";

// Decodes header + rows and expects a failure whose message holds every `expected`.
void expect_csv_error(const std::string& rows, std::initializer_list<const char*> expected,
                      bool with_header = true) {
  const std::string text = with_header ? header + rows : rows;
  const absl::StatusOr<trace> t = decode_trace_csv(text);
  ASSERT_FALSE(t.ok()) << "accepted:\n" << text;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* e : expected) EXPECT_THAT(t.status().message(), HasSubstr(e)) << text;
}

TEST(TraceCsv, RejectsABadHeader) {
  expect_csv_error("id,size,align,alloc_at,free_at\n1,64,16,0,1\n", {"line 1", "header"}, false);
  expect_csv_error("1,64,16,0,1,op\n", {"line 1", "header"}, false);
  expect_csv_error("\nID,SIZE,ALIGN,ALLOC_AT,FREE_AT,OP\n", {"line 2", "header"}, false);
  expect_csv_error("", {"empty input"}, false);
  expect_csv_error("\n\n", {"empty input"}, false);
}

TEST(TraceCsv, RejectsBadRowsWithTheirLineNumber) {
  const std::string good = "1,64,16,0,1,a\n";
  expect_csv_error(good + "2,64,16,1,2\n", {"line 3", "expected 6 fields, found 5"});
  expect_csv_error(good + "2,64,16,1,2,a,b\n", {"line 3", "found 7"});
  expect_csv_error(good + "\n\n2,64,16,1,2,\"a,b\",c\n", {"line 5", "found 7"});
  expect_csv_error(good + "x,64,16,1,2,a\n", {"line 3", "id 'x'"});
  expect_csv_error(good + "-2,64,16,1,2,a\n", {"line 3", "id '-2'"});
  expect_csv_error(good + "2,-64,16,1,2,a\n", {"line 3", "size '-64'"});
  expect_csv_error(good + "2,0,16,1,2,a\n", {"line 3", "size '0'"});
  expect_csv_error(good + "2,,16,1,2,a\n", {"line 3", "size ''"});
  expect_csv_error(good + "2,140737488355329,16,1,2,a\n", {"line 3", "size '140737488355329'"});
  expect_csv_error(good + "2,99999999999999999999999,16,1,2,a\n", {"line 3", "size"});
  expect_csv_error(good + "2,64,48,1,2,a\n", {"line 3", "align '48'"});
  expect_csv_error(good + "2,64,0,1,2,a\n", {"line 3", "align '0'"});
  expect_csv_error(good + "2,64,4194304,1,2,a\n", {"line 3", "align '4194304'"});
  expect_csv_error(good + "2,64,16,-1,2,a\n", {"line 3", "alloc_at '-1'"});
  expect_csv_error(good + "2,64,16,,2,a\n", {"line 3", "alloc_at ''"});
  expect_csv_error(good + "2,64,16,1,x,a\n", {"line 3", "free_at 'x'"});
  expect_csv_error(good + "2,64,16,5,5,a\n", {"line 3", "freed at 5", "allocation at 5"});
  expect_csv_error(good + "2,64,16,5,4,a\n", {"line 3", "freed at 4"});
  // The largest size is accepted.
  EXPECT_TRUE(decode_trace_csv(std::string(header) + "2,140737488355328,16,1,2,a\n").ok());
}

TEST(TraceCsv, RejectsADuplicateIdNamingBothLines) {
  expect_csv_error("7,64,16,0,1,a\n8,64,16,1,2,a\n\n7,32,16,2,3,b\n",
                   {"line 5", "id 7", "line 2"});
}

TEST(TraceCsv, RejectsUnbalancedQuotes) {
  const std::string good = "1,64,16,0,1,a\n";
  expect_csv_error(good + "2,64,16,1,2,\"open\n", {"line 3", "quote"});
  expect_csv_error(good + "2,64,16,1,2,\"a\"b\n", {"line 3", "quote"});
  expect_csv_error(good + "2,64,16,1,2,a\"b\"\n", {"line 3", "quote"});
  expect_csv_error("\"id,size,align,alloc_at,free_at,op\n", {"line 1", "quote"}, false);
}

// Random bytes after a header: refused or accepted, never a crash.
TEST(TraceCsv, SurvivesGarbage) {
  std::mt19937_64 rng(0x7ace0002);
  const std::string alphabet = "0123456789,,,\"\"\n\r-x ";
  int accepted = 0;
  for (int iter = 0; iter < 500; ++iter) {
    std::string text = header;
    for (std::size_t n = rng() % 80; n > 0; --n) text.push_back(alphabet[rng() % alphabet.size()]);
    const absl::StatusOr<trace> t = decode_trace_csv(text);
    if (t.ok()) {
      ++accepted;
      EXPECT_TRUE(check_trace(*t).ok());
    }
  }
  EXPECT_LT(accepted, 500);
}

// ---- files ------------------------------------------------------------------------

class TraceFile : public ::testing::Test {
 protected:
  std::string path(const std::string& name) {
    std::string p = ::testing::TempDir() + "replayalloc_trace_io_test_" +
                    std::to_string(::getpid()) + "_" + name;
    made_.push_back(p);
    return p;
  }
  void TearDown() override {
    for (const std::string& p : made_) ::unlink(p.c_str());
  }

 private:
  std::vector<std::string> made_;
};

TEST_F(TraceFile, BinaryRoundTrip) {
  const trace t = full_trace();
  const std::string p = path("trace.ratrace");
  ASSERT_TRUE(write_trace_file(t, p).ok());
  const absl::StatusOr<std::string> raw = read_file(p);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, encode_trace_binary(t));
  const absl::StatusOr<trace> back = read_trace_file(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
  // No temporary file is left behind.
  EXPECT_NE(::access((p + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), 0);
}

TEST_F(TraceFile, CsvRoundTrip) {
  const trace t = csv_shaped_trace();
  const std::string p = path("trace.csv");
  ASSERT_TRUE(write_trace_file(t, p).ok());
  const absl::StatusOr<std::string> raw = read_file(p);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, encode_trace_csv(t));
  const absl::StatusOr<trace> back = read_trace_file(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, t);
}

TEST_F(TraceFile, OverwritesAnExistingFile) {
  const std::string p = path("over.ratrace");
  trace small;
  small.ops = {"unknown"};
  ASSERT_TRUE(write_trace_file(full_trace(), p).ok());
  ASSERT_TRUE(write_trace_file(small, p).ok());
  const absl::StatusOr<trace> back = read_trace_file(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, small);
}

TEST_F(TraceFile, ReadOfAMissingFileIsNotFound) {
  const std::string p = path("missing.ratrace");
  const absl::StatusOr<trace> t = read_trace_file(p);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr(p));
  EXPECT_EQ(read_file(p).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TraceFile, ReadErrorsNameThePath) {
  const std::string p = path("corrupt.ratrace");
  std::string bytes = encode_trace_binary(full_trace());
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(write_file_atomic(p, bytes).ok());
  absl::StatusOr<trace> t = read_trace_file(p);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(p));
  EXPECT_THAT(t.status().message(), HasSubstr("checksum"));

  const std::string c = path("bad.csv");
  ASSERT_TRUE(write_file_atomic(c, std::string(header) + "1,0,16,0,1,a\n").ok());
  t = read_trace_file(c);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(c));
  EXPECT_THAT(t.status().message(), HasSubstr("line 2"));
}

// Known bug (see the report): the writer accepts any trace, the reader also checks
// that every position lies before `events`. A trace that check_trace() accepts but
// whose events field is too small (here the default, 0) is written without error and
// cannot be read back.
TEST_F(TraceFile, WhatIsWrittenCanBeRead) {
  trace t;
  t.ops = {"unknown"};
  t.allocations = {alloc(1, 64, 16, 0, 1)};
  ASSERT_TRUE(check_trace(t).ok());
  const std::string p = path("events.ratrace");
  const absl::Status w = write_trace_file(t, p);
  if (w.ok()) {
    const absl::StatusOr<trace> back = read_trace_file(p);
    EXPECT_TRUE(back.ok()) << back.status();
  }
}

TEST_F(TraceFile, WriteIntoAMissingDirectoryFails) {
  const std::string p = ::testing::TempDir() + "replayalloc_no_such_dir/x/trace.csv";
  EXPECT_FALSE(write_trace_file(full_trace(), p).ok());
}

}  // namespace
}  // namespace replayalloc
