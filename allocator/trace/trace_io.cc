#include "trace/trace_io.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "support/byte_io.h"
#include "support/config.h"
#include "support/hash.h"
#include "support/status.h"

namespace replayalloc {
namespace {

constexpr char magic[8] = {'R', 'P', 'L', 'Y', 'T', 'R', 'C', 'E'};
constexpr std::size_t record_bytes = 48;

// Splits one CSV line into fields, honouring RFC 4180 quotes. False on a bad quote.
bool split_csv(std::string_view line, std::vector<std::string>* fields) {
  fields->clear();
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur.push_back('"');
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur.push_back(c);
      }
    } else if (c == '"') {
      if (!cur.empty() || was_quoted) return false;
      quoted = was_quoted = true;
    } else if (c == ',') {
      fields->push_back(std::move(cur));
      cur.clear();
      was_quoted = false;
    } else {
      if (was_quoted) return false;
      cur.push_back(c);
    }
  }
  if (quoted) return false;
  fields->push_back(std::move(cur));
  return true;
}

std::string csv_quote(std::string_view s) {
  if (s.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out.push_back('"');
    // A quoted carriage return reads back as written; a newline cannot (the reader
    // splits lines first), so it becomes a space.
    out.push_back(c == '\n' ? ' ' : c);
  }
  out.push_back('"');
  return out;
}

void sort_by_alloc_at(trace& t) {
  std::stable_sort(t.allocations.begin(), t.allocations.end(),
                   [](const trace_allocation& a, const trace_allocation& b) {
                     return a.alloc_at != b.alloc_at ? a.alloc_at < b.alloc_at : a.id < b.id;
                   });
}

}  // namespace

std::string encode_trace_binary(const trace& t) {
  std::string out;
  out.reserve(64 + t.key.size() + t.allocations.size() * record_bytes);
  out.append(magic, sizeof magic);
  detail::put<std::uint32_t>(out, trace_format_version);
  detail::put<std::uint32_t>(out, 0);  // flags, reserved
  detail::put<std::uint64_t>(out, t.allocations.size());
  detail::put<std::uint64_t>(out, t.ops.size());
  // The event counter must cover every position; a trace built by hand may leave it 0.
  std::uint64_t events = t.events;
  for (const trace_allocation& a : t.allocations) {
    events = std::max(events, a.outlives() ? a.alloc_at + 1 : a.free_at);
  }
  detail::put<std::uint64_t>(out, events);
  detail::put<std::uint64_t>(out, t.signature());
  detail::put<std::uint32_t>(out, static_cast<std::uint32_t>(t.key.size()));
  out.append(t.key);
  for (const trace_allocation& a : t.allocations) {
    detail::put(out, a.id);
    detail::put(out, a.size);
    detail::put(out, a.alloc_at);
    detail::put(out, a.free_at);
    detail::put(out, a.align);
    detail::put(out, a.op);
    detail::put(out, a.thread);
    detail::put<std::uint32_t>(out, 0);
  }
  for (const std::string& op : t.ops) {
    detail::put<std::uint32_t>(out, static_cast<std::uint32_t>(op.size()));
    out.append(op);
  }
  detail::put<std::uint32_t>(out, detail::crc32c(0, out.data(), out.size()));
  return out;
}

absl::StatusOr<trace> decode_trace_binary(std::string_view bytes) {
  REPLAYALLOC_EXPECTS(bytes.size() >= sizeof magic + 4 &&
                          std::memcmp(bytes.data(), magic, sizeof magic) == 0,
                      "not a replayalloc trace file (bad magic)");
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  detail::byte_reader r(body);
  std::string skipped;
  r.get_bytes(sizeof magic, &skipped);  // the magic, checked above
  std::uint32_t version = 0, flags = 0;
  REPLAYALLOC_EXPECTS(r.get(&version), "trace file truncated in its header");
  REPLAYALLOC_EXPECTS(version == trace_format_version, "trace file has format version ", version,
                      "; this build reads version ", trace_format_version);
  REPLAYALLOC_EXPECTS(detail::crc32c(0, body.data(), body.size()) == stored_crc,
                      "trace file checksum mismatch (corrupt or truncated file)");
  std::uint64_t n_alloc = 0, n_ops = 0, events = 0, signature = 0;
  std::uint32_t key_len = 0;
  REPLAYALLOC_EXPECTS(r.get(&flags) && r.get(&n_alloc) && r.get(&n_ops) && r.get(&events) &&
                          r.get(&signature) && r.get(&key_len),
                      "trace file truncated in its header");
  trace t;
  REPLAYALLOC_EXPECTS(r.get_bytes(key_len, &t.key), "trace file truncated in its key");
  REPLAYALLOC_EXPECTS(n_alloc <= r.left() / record_bytes, "trace file claims ", n_alloc,
                      " allocations but holds at most ", r.left() / record_bytes);
  t.allocations.resize(n_alloc);
  for (trace_allocation& a : t.allocations) {
    std::uint32_t pad;
    r.get(&a.id), r.get(&a.size), r.get(&a.alloc_at), r.get(&a.free_at);
    r.get(&a.align), r.get(&a.op), r.get(&a.thread), r.get(&pad);
  }
  REPLAYALLOC_EXPECTS(n_ops >= 1 && n_ops <= r.left() / 4, "trace file claims ", n_ops,
                      " ops, which its size cannot hold");
  t.ops.resize(n_ops);
  for (std::string& op : t.ops) {
    std::uint32_t len = 0;
    REPLAYALLOC_EXPECTS(r.get(&len) && r.get_bytes(len, &op), "trace file truncated in its op names");
  }
  REPLAYALLOC_EXPECTS(r.left() == 0, "trace file has ", r.left(), " unexpected bytes at its end");
  t.events = events;
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  for (const trace_allocation& a : t.allocations) {
    REPLAYALLOC_EXPECTS(a.alloc_at < events && (a.outlives() || a.free_at <= events),
                        "allocation ", a.id, " lies past the trace's end at event ", events);
  }
  REPLAYALLOC_EXPECTS(t.signature() == signature, "trace file signature mismatch");
  return t;
}

std::string encode_trace_csv(const trace& t) {
  std::string out = "id,size,align,alloc_at,free_at,op\n";
  for (const trace_allocation& a : t.allocations) {
    absl::StrAppend(&out, a.id, ",", a.size, ",", a.align, ",", a.alloc_at, ",");
    if (!a.outlives()) absl::StrAppend(&out, a.free_at);
    absl::StrAppend(&out, ",", csv_quote(a.op < t.ops.size() ? t.ops[a.op] : "unknown"), "\n");
  }
  return out;
}

absl::StatusOr<trace> decode_trace_csv(std::string_view text) {
  trace t;
  t.ops.push_back("unknown");
  absl::flat_hash_map<std::string, std::uint32_t> op_index{{"unknown", 0}};
  absl::flat_hash_map<std::uint64_t, std::size_t> id_line;
  std::vector<std::string> f;
  std::size_t line_no = 0;
  bool header_seen = false;
  std::uint64_t last_event = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    REPLAYALLOC_EXPECTS(split_csv(line, &f), "line ", line_no, ": unbalanced quotes");
    if (!header_seen) {
      REPLAYALLOC_EXPECTS(line == "id,size,align,alloc_at,free_at,op", "line ", line_no,
                          ": expected the header 'id,size,align,alloc_at,free_at,op'");
      header_seen = true;
      continue;
    }
    REPLAYALLOC_EXPECTS(f.size() == 6, "line ", line_no, ": expected 6 fields, found ", f.size());
    trace_allocation a;
    std::uint64_t align = 0;
    REPLAYALLOC_EXPECTS(absl::SimpleAtoi(f[0], &a.id) && f[0][0] != '-', "line ", line_no,
                        ": id '", f[0], "' is not a non-negative integer");
    REPLAYALLOC_EXPECTS(absl::SimpleAtoi(f[1], &a.size) && f[1][0] != '-' && a.size > 0 &&
                            a.size <= detail::max_request_bytes,
                        "line ", line_no, ": size '", f[1], "' is not an integer in [1, 2^47]");
    REPLAYALLOC_EXPECTS(absl::SimpleAtoi(f[2], &align) && f[2][0] != '-' &&
                            std::has_single_bit(align) && align <= detail::max_slot_align,
                        "line ", line_no, ": align '", f[2], "' is not a power of two in [1, 2 MiB]");
    a.align = static_cast<std::uint32_t>(align);
    REPLAYALLOC_EXPECTS(absl::SimpleAtoi(f[3], &a.alloc_at) && f[3][0] != '-' &&
                            a.alloc_at < never_freed - 1,
                        "line ", line_no, ": alloc_at '", f[3], "' is not a non-negative integer");
    if (!f[4].empty()) {
      REPLAYALLOC_EXPECTS(absl::SimpleAtoi(f[4], &a.free_at) && f[4][0] != '-' &&
                              a.free_at < never_freed,
                          "line ", line_no, ": free_at '", f[4], "' is not a non-negative integer");
      REPLAYALLOC_EXPECTS(a.free_at > a.alloc_at, "line ", line_no, ": allocation ", a.id,
                          " is freed at ", a.free_at, ", not after its allocation at ", a.alloc_at);
    }
    const auto [it, fresh] = id_line.emplace(a.id, line_no);
    REPLAYALLOC_EXPECTS(fresh, "line ", line_no, ": id ", a.id, " already used on line ",
                        it->second);
    const std::string op = f[5].empty() ? "unknown" : f[5];
    const auto [op_it, new_op] = op_index.emplace(op, static_cast<std::uint32_t>(t.ops.size()));
    if (new_op) t.ops.push_back(op);
    a.op = op_it->second;
    last_event = std::max(last_event, (a.outlives() ? a.alloc_at : a.free_at) + 1);
    t.allocations.push_back(a);
  }
  REPLAYALLOC_EXPECTS(header_seen, "empty input: expected the header 'id,size,align,alloc_at,free_at,op'");
  t.events = last_event;
  sort_by_alloc_at(t);
  REPLAYALLOC_RETURN_IF_ERROR(check_trace(t));
  return t;
}

absl::StatusOr<trace> read_trace_file(const std::string& path) {
  absl::StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<trace> t = bytes->size() >= sizeof magic &&
                                    std::memcmp(bytes->data(), magic, sizeof magic) == 0
                                ? decode_trace_binary(*bytes)
                                : decode_trace_csv(*bytes);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return t;
}

absl::Status write_trace_file(const trace& t, const std::string& path) {
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  return write_file_atomic(path, csv ? encode_trace_csv(t) : encode_trace_binary(t));
}

}  // namespace replayalloc
