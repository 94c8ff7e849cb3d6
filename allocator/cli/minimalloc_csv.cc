// MiniMalloc's CSV (minimalloc_csv.h).
#include "cli/minimalloc_csv.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "planner/planner.h"
#include "support/status.h"

namespace replayalloc::cli {
namespace {

constexpr char header[] = "id,lower,upper,size";
constexpr std::size_t header_size = sizeof(header) - 1;
constexpr std::uint64_t max_size = std::uint64_t{1} << 47;  // as trace files (check_trace)

bool parse_u64(const std::string& s, std::uint64_t* v) {
  return !s.empty() && s[0] != '-' && s[0] != '+' && absl::SimpleAtoi(s, v);
}

std::string trim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// The fields of one line, each trimmed (MiniMalloc's files hold no quotes).
std::vector<std::string> fields_of(std::string_view line) {
  std::vector<std::string> out;
  for (std::size_t at = 0;;) {
    const std::size_t comma = line.find(',', at);
    out.push_back(trim(line.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at)));
    if (comma == std::string_view::npos) return out;
    at = comma + 1;
  }
}

struct row {
  std::string id;
  std::uint64_t lower = 0, upper = 0, size = 0, offset = 0;
  std::size_t line = 0;
};

}  // namespace

bool is_minimalloc_csv(std::string_view text) {
  return text.substr(0, header_size) == std::string_view(header, header_size);
}

absl::StatusOr<minimalloc_problem> decode_minimalloc_csv(std::string_view text) {
  std::vector<row> rows;
  bool with_offsets = false, seen_header = false;
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string line = trim(text.substr(at, nl - at));
    at = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string> f = fields_of(line);
    if (!seen_header) {
      seen_header = true;
      with_offsets = f.size() == 5 && f[4] == "offset";
      REPLAYALLOC_EXPECTS(f.size() >= 4 && f[0] == "id" && f[1] == "lower" && f[2] == "upper" &&
                              f[3] == "size" && (f.size() == 4 || with_offsets),
                          "line ", line_no, ": expected MiniMalloc's header id,lower,upper,size[,offset]");
      continue;
    }
    REPLAYALLOC_EXPECTS(f.size() == (with_offsets ? 5u : 4u), "line ", line_no, ": expected ",
                        with_offsets ? 5 : 4, " fields, found ", f.size());
    row r;
    r.line = line_no;
    r.id = f[0];
    REPLAYALLOC_EXPECTS(!r.id.empty(), "line ", line_no, ": empty id");
    REPLAYALLOC_EXPECTS(parse_u64(f[1], &r.lower), "line ", line_no, ": lower '", f[1],
                        "' is not a non-negative integer");
    REPLAYALLOC_EXPECTS(parse_u64(f[2], &r.upper) && r.upper != never_freed, "line ", line_no,
                        ": upper '", f[2], "' is not a non-negative integer");
    REPLAYALLOC_EXPECTS(r.upper > r.lower, "line ", line_no, ": buffer ", r.id, " ends (", r.upper,
                        ") before it starts (", r.lower, ")");
    REPLAYALLOC_EXPECTS(parse_u64(f[3], &r.size) && r.size >= 1 && r.size <= max_size, "line ",
                        line_no, ": size '", f[3], "' is not an integer in [1, 2^47]");
    if (with_offsets) {
      REPLAYALLOC_EXPECTS(parse_u64(f[4], &r.offset) && r.offset <= (std::uint64_t{1} << 62), "line ",
                          line_no, ": offset '", f[4], "' is not a non-negative integer below 2^62");
    }
    rows.push_back(std::move(r));
  }
  REPLAYALLOC_EXPECTS(seen_header, "empty file: expected MiniMalloc's header id,lower,upper,size");

  // Integer ids stay; otherwise every row is numbered and keeps its name as an op tag.
  bool numeric = true;
  std::vector<std::uint64_t> ids(rows.size());
  for (std::size_t k = 0; k < rows.size() && numeric; ++k) numeric = parse_u64(rows[k].id, &ids[k]);
  minimalloc_problem out;
  trace& t = out.tr;
  t.key = "minimalloc";
  t.ops = {"unknown"};
  absl::flat_hash_map<std::uint64_t, std::size_t> line_of;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (!numeric) {
      ids[k] = k;
      t.ops.push_back(rows[k].id);
    }
    const auto [it, fresh] = line_of.emplace(ids[k], rows[k].line);
    REPLAYALLOC_EXPECTS(fresh, "line ", rows[k].line, ": id ", rows[k].id, " already used on line ",
                        it->second);
  }
  // Trace order: by lower, rows of one lower in file order.
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return rows[x].lower < rows[y].lower; });
  for (const std::size_t k : order) {
    trace_allocation a;
    a.id = ids[k];
    a.size = rows[k].size;
    a.align = 1;
    a.op = numeric ? 0 : static_cast<std::uint32_t>(k + 1);
    a.alloc_at = rows[k].lower;
    a.free_at = rows[k].upper;
    t.allocations.push_back(a);
    t.events = std::max(t.events, rows[k].upper);
    if (with_offsets) out.offsets.push_back(rows[k].offset);
  }
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  return out;
}

std::string encode_minimalloc_csv(const trace& t, const std::vector<std::uint64_t>* offsets) {
  std::string out = absl::StrCat(header, offsets != nullptr ? ",offset\n" : "\n");
  for (std::size_t i = 0; i < t.allocations.size(); ++i) {
    const trace_allocation& a = t.allocations[i];
    if (a.outlives()) continue;
    absl::StrAppend(&out, a.id, ",", a.alloc_at, ",", a.free_at, ",", a.size);
    if (offsets != nullptr) absl::StrAppend(&out, ",", (*offsets)[i]);
    out.push_back('\n');
  }
  return out;
}

}  // namespace replayalloc::cli
