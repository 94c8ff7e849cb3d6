// The fuzz targets (fuzz_targets.h). Checksums: most mutations of a file break its
// CRC-32C, and a reader that checks the CRC first would keep the fuzzer out of
// everything behind it; so the binary targets decode each input twice, as given and
// with its checksums recomputed, which lets mutations reach the parsers behind them.
#include "fuzz/fuzz_targets.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "planner/plan_file.h"
#include "planner/planner.h"
#include "support/hash.h"
#include "trace/trace_io.h"

namespace replayalloc::fuzz {
namespace {

// A broken promise: say which, and abort (libFuzzer saves the input).
[[noreturn]] void broken(const char* target, const char* what, absl::string_view detail = {}) {
  std::fprintf(stderr, "fuzz %s: %s %.*s\n", target, what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

void require(bool ok, const char* target, const char* what, absl::string_view detail = {}) {
  if (!ok) broken(target, what, detail);
}

// A rejected input must say why.
void require_message(const absl::Status& s, const char* target) {
  require(!s.ok() && !s.message().empty(), target, "an error without a message");
}

// The same trace up to the numbering of its op table (CSV numbers ops in the order
// its rows name them, which encoding in alloc_at order may change).
bool same_but_op_numbers(const trace& a, const trace& b) {
  if (a.key != b.key || a.events != b.events || a.allocations.size() != b.allocations.size()) return false;
  for (std::size_t i = 0; i < a.allocations.size(); ++i) {
    trace_allocation x = a.allocations[i], y = b.allocations[i];
    if (x.op >= a.ops.size() || y.op >= b.ops.size() || a.ops[x.op] != b.ops[y.op]) return false;
    x.op = y.op = 0;
    if (!(x == y)) return false;
  }
  return true;
}

// What every consumer of a decoded trace relies on, and that it plans: a small
// accepted trace goes through the planner, whose placement must validate.
void check_accepted_trace(const trace& t, const char* target) {
  const absl::Status ok = check_trace(t);
  require(ok.ok(), target, "check_trace refused a decoded trace:", ok.message());
  // Binary round trip: exact.
  const std::string bin = encode_trace_binary(t);
  absl::StatusOr<trace> back = decode_trace_binary(bin);
  require(back.ok(), target, "the binary encoding of a decoded trace does not decode:",
          back.ok() ? "" : back.status().message());
  require(*back == t, target, "binary round trip changed the trace");
  require(encode_trace_binary(*back) == bin, target, "binary encoding is not stable");
  if (t.allocations.size() <= 256) {
    planner_options o;
    absl::StatusOr<placement> p = plan_greedy_by_size(t, o);
    require(p.ok(), target, "the planner refused a valid trace:", p.ok() ? "" : p.status().message());
    const absl::Status v = validate(t, *p, o);
    require(v.ok(), target, "the planner's placement does not validate:", v.message());
  }
}

// Recomputes the CRC-32C that closes [begin, begin + n) (its last 4 bytes).
void fix_crc(std::string& s, std::size_t begin, std::size_t n) {
  if (n < 4 || begin > s.size() || n > s.size() - begin) return;
  const std::uint32_t crc = detail::crc32c(0, s.data() + begin, n - 4);
  std::memcpy(&s[begin + n - 4], &crc, 4);
}

// A plan file's inner trace starts after magic, version, flags, two length-prefixed
// strings and five u64 (the last its length). Fixes its CRC, then the file's.
void fix_plan_crcs(std::string& s) {
  std::size_t pos = 16;
  for (int i = 0; i < 2; ++i) {
    std::uint32_t len = 0;
    if (s.size() < pos + 4) return fix_crc(s, 0, s.size());
    std::memcpy(&len, s.data() + pos, 4);
    pos += 4 + static_cast<std::size_t>(len);
  }
  pos += 32;
  std::uint64_t trace_len = 0;
  if (s.size() >= pos + 8) {
    std::memcpy(&trace_len, s.data() + pos, 8);
    fix_crc(s, pos + 8, static_cast<std::size_t>(trace_len));
  }
  fix_crc(s, 0, s.size());
}

void decode_binary_once(std::string_view bytes) {
  absl::StatusOr<trace> t = decode_trace_binary(bytes);
  if (!t.ok()) return require_message(t.status(), "trace_binary");
  check_accepted_trace(*t, "trace_binary");
}

void decode_plan_once(std::string_view bytes) {
  constexpr const char* target = "plan";
  absl::StatusOr<plan_file> f = decode_plan(bytes);
  if (!f.ok()) return require_message(f.status(), target);
  const absl::Status tr = check_trace(f->tr);
  require(tr.ok(), target, "check_trace refused a decoded plan's trace:", tr.message());
  planner_options o;
  o.slot_align = f->slot_align;
  const absl::Status v = validate(f->tr, f->p, o);
  require(v.ok(), target, "validate refused a decoded plan:", v.message());
  require(f->signature == f->tr.signature(), target, "a plan whose signature is not its trace's");
  // Whether it may be used here: an answer, never a crash.
  (void)check_plan_key(*f, f->tr.key, f->slot_align);
  (void)check_plan_key(*f, "another key", 64);
  const std::string again = encode_plan(*f);
  absl::StatusOr<plan_file> g = decode_plan(again);
  require(g.ok(), target, "the encoding of a decoded plan does not decode:",
          g.ok() ? "" : g.status().message());
  require(g->tr == f->tr && g->p.offsets == f->p.offsets && g->p.slab_bytes == f->p.slab_bytes &&
              g->p.lower_bound_bytes == f->p.lower_bound_bytes && g->p.algorithm == f->p.algorithm &&
              g->slot_align == f->slot_align && g->signature == f->signature &&
              g->library_version == f->library_version,
          target, "plan round trip changed the plan");
  require(encode_plan(*g) == again, target, "plan encoding is not stable");
  (void)encode_plan_csv(*f);
}

}  // namespace

int trace_csv(const std::uint8_t* data, std::size_t size) {
  constexpr const char* target = "trace_csv";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<trace> t = decode_trace_csv(text);
  if (!t.ok()) {
    require_message(t.status(), target);
    return 0;
  }
  check_accepted_trace(*t, target);
  const std::string csv = encode_trace_csv(*t);
  absl::StatusOr<trace> back = decode_trace_csv(csv);
  require(back.ok(), target, "the CSV encoding of a decoded trace does not decode:",
          back.ok() ? "" : back.status().message());
  require(same_but_op_numbers(*back, *t), target, "CSV round trip changed the trace");
  require(encode_trace_csv(*back) == csv, target, "CSV encoding is not stable");
  return 0;
}

int trace_binary(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  decode_binary_once(bytes);
  fix_crc(bytes, 0, bytes.size());
  decode_binary_once(bytes);
  return 0;
}

int plan(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  decode_plan_once(bytes);
  fix_plan_crcs(bytes);
  decode_plan_once(bytes);
  return 0;
}

}  // namespace replayalloc::fuzz
