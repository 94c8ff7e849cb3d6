// Plan files: see plan_file.h for the layout. Every read is bounds-checked; the
// checksum is checked before anything else is trusted, and the decoded plan must pass
// check_trace() and validate() before it is returned.
#include "planner/plan_file.h"

#include <bit>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "support/byte_io.h"
#include "support/config.h"
#include "support/hash.h"
#include "support/status.h"
#include "trace/trace_io.h"

namespace replayalloc {
namespace {

constexpr char magic[8] = {'R', 'P', 'L', 'Y', 'P', 'L', 'A', 'N'};
// A plan file's strings (version, algorithm) are short; anything longer is corrupt.
constexpr std::uint32_t max_string = 4096;
constexpr std::uint32_t flag_least = 1;  // least request per slot follows the offsets
constexpr std::uint32_t flag_made = 2;   // u64 made_at follows (the least requests)
constexpr std::uint32_t known_flags = flag_least | flag_made;

}  // namespace

plan_file make_plan_file(trace t, placement p, const planner_options& o) {
  plan_file f;
  f.signature = t.signature();
  f.tr = std::move(t);
  f.p = std::move(p);
  f.slot_align = o.slot_align;
  f.library_version = REPLAYALLOC_VERSION_STRING;
  const std::time_t now = ::time(nullptr);
  f.made_at = now > 0 ? static_cast<std::uint64_t>(now) : 0;
  return f;
}

std::string encode_plan(const plan_file& f) {
  const std::string tr = encode_trace_binary(f.tr);
  std::string out;
  out.reserve(128 + tr.size() + 8 * f.p.offsets.size());
  out.append(magic, sizeof magic);
  detail::put<std::uint32_t>(out, plan_format_version);
  const bool has_least = !f.least.empty();
  const bool has_made = f.made_at != 0;
  detail::put<std::uint32_t>(out, (has_least ? flag_least : 0) | (has_made ? flag_made : 0));
  detail::put_string(out, f.library_version);
  detail::put_string(out, f.p.algorithm);
  detail::put<std::uint64_t>(out, f.slot_align);
  detail::put<std::uint64_t>(out, f.p.slab_bytes);
  detail::put<std::uint64_t>(out, f.p.lower_bound_bytes);
  detail::put<std::uint64_t>(out, f.signature);
  detail::put<std::uint64_t>(out, tr.size());
  out.append(tr);
  detail::put<std::uint64_t>(out, f.p.offsets.size());
  for (const std::uint64_t off : f.p.offsets) detail::put(out, off);
  if (has_least) {
    for (const std::uint64_t l : f.least) detail::put(out, l);
  }
  if (has_made) detail::put<std::uint64_t>(out, f.made_at);
  detail::put<std::uint32_t>(out, detail::crc32c(0, out.data(), out.size()));
  return out;
}

absl::StatusOr<plan_file> decode_plan(std::string_view bytes) {
  REPLAYALLOC_EXPECTS(!plan_file_cut_short(bytes), "plan file truncated: its ", bytes.size(),
                      " bytes end before its header says it ends");
  REPLAYALLOC_EXPECTS(bytes.size() >= sizeof magic + 12 &&
                          std::memcmp(bytes.data(), magic, sizeof magic) == 0,
                      "not a replayalloc plan file (bad magic)");
  detail::byte_reader r(bytes.substr(sizeof magic));
  std::uint32_t version = 0, flags = 0;
  r.get(&version);
  REPLAYALLOC_EXPECTS(version == plan_format_version, "plan file has format version ", version,
                      "; this build reads version ", plan_format_version);
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const std::string_view body = bytes.substr(0, bytes.size() - 4);
  REPLAYALLOC_EXPECTS(detail::crc32c(0, body.data(), body.size()) == stored_crc,
                      "plan file checksum mismatch (corrupt or truncated file)");
  r = detail::byte_reader(body.substr(sizeof magic + 4));
  plan_file f;
  std::uint64_t trace_len = 0, n_offsets = 0;
  std::string_view trace_bytes;
  REPLAYALLOC_EXPECTS(r.get(&flags) && r.get_string(&f.library_version, max_string) &&
                          r.get_string(&f.p.algorithm, max_string) && r.get(&f.slot_align) &&
                          r.get(&f.p.slab_bytes) && r.get(&f.p.lower_bound_bytes) &&
                          r.get(&f.signature) && r.get(&trace_len) &&
                          r.get_view(trace_len, &trace_bytes),
                      "plan file truncated in its header");
  REPLAYALLOC_EXPECTS((flags & ~known_flags) == 0, "plan file has unknown flags ", flags);
  REPLAYALLOC_EXPECTS(std::has_single_bit(f.slot_align) && f.slot_align <= detail::max_slot_align,
                      "plan file's slot alignment ", f.slot_align,
                      " is not a power of two up to 2 MiB");
  absl::StatusOr<trace> t = decode_trace_binary(trace_bytes);
  if (!t.ok()) {
    return absl::DataLossError(absl::StrCat("plan file's trace: ", t.status().message()));
  }
  f.tr = *std::move(t);
  const std::uint64_t per_allocation = (flags & flag_least) != 0 ? 16 : 8;
  const std::uint64_t trailer = (flags & flag_made) != 0 ? 8 : 0;
  REPLAYALLOC_EXPECTS(r.get(&n_offsets) && n_offsets == f.tr.allocations.size() &&
                          r.left() == per_allocation * n_offsets + trailer,
                      "plan file has ", n_offsets, " offsets for ", f.tr.allocations.size(),
                      " allocations, or a wrong size");
  f.p.offsets.resize(n_offsets);
  for (std::uint64_t& off : f.p.offsets) r.get(&off);
  if ((flags & flag_least) != 0) {
    f.least.resize(n_offsets);
    for (std::size_t i = 0; i < n_offsets; ++i) {
      r.get(&f.least[i]);
      REPLAYALLOC_EXPECTS(f.least[i] >= 1 && f.least[i] <= f.tr.allocations[i].size,
                          "plan file says allocation ", f.tr.allocations[i].id, " serves requests from ",
                          f.least[i], " bytes, outside [1, ", f.tr.allocations[i].size, "]");
    }
  }
  if ((flags & flag_made) != 0) r.get(&f.made_at);
  REPLAYALLOC_EXPECTS(f.signature == f.tr.signature(),
                      "plan file's signature does not match its trace");
  planner_options o;
  o.slot_align = f.slot_align;
  const std::uint64_t lb = lower_bound(f.tr, o);
  REPLAYALLOC_EXPECTS(f.p.lower_bound_bytes == lb, "plan file says the lower bound is ",
                      f.p.lower_bound_bytes, " bytes; its trace's is ", lb);
  const absl::Status valid = validate(f.tr, f.p, o);
  if (!valid.ok()) {
    return absl::DataLossError(absl::StrCat("plan file's placement is invalid: ", valid.message()));
  }
  return f;
}

bool plan_file_cut_short(std::string_view bytes) {
  if (bytes.size() < sizeof magic) {
    return bytes.empty() || std::memcmp(bytes.data(), magic, bytes.size()) == 0;
  }
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) return false;
  detail::byte_reader r(bytes.substr(sizeof magic));
  std::uint32_t version = 0, flags = 0;
  if (!r.get(&version)) return true;
  if (version != plan_format_version) return false;  // another format: not ours to measure
  if (!r.get(&flags)) return true;
  std::string_view skip;
  for (int i = 0; i < 2; ++i) {  // library version, algorithm
    std::uint32_t len = 0;
    if (!r.get(&len)) return true;
    if (len > max_string) return false;  // a corrupt length, not a short file
    if (!r.get_view(len, &skip)) return true;
  }
  std::uint64_t field = 0;
  for (int i = 0; i < 4; ++i) {  // slot_align, slab_bytes, lower_bound_bytes, signature
    if (!r.get(&field)) return true;
  }
  std::uint64_t trace_len = 0, n_offsets = 0;
  if (!r.get(&trace_len) || !r.get_view(trace_len, &skip) || !r.get(&n_offsets)) return true;
  const std::uint64_t per_allocation = (flags & flag_least) != 0 ? 16 : 8;
  const std::uint64_t tail = ((flags & flag_made) != 0 ? 8 : 0) + 4;  // made_at, CRC
  if (n_offsets > r.left() / per_allocation) return true;
  return r.left() - n_offsets * per_allocation < tail;
}

absl::Status check_plan_key(const plan_file& f, std::string_view key, std::uint64_t slot_align) {
  if (f.tr.key != key) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan is for key '", f.tr.key, "', not '", std::string(key), "'"));
  }
  if (f.library_version != REPLAYALLOC_VERSION_STRING) {
    return absl::FailedPreconditionError(absl::StrCat("the plan was made by replayalloc ",
                                                      f.library_version, ", this is ",
                                                      REPLAYALLOC_VERSION_STRING));
  }
  if (f.slot_align != slot_align) {
    return absl::FailedPreconditionError(absl::StrCat("the plan has slot alignment ", f.slot_align,
                                                      ", this process uses ", slot_align));
  }
  return absl::OkStatus();
}

absl::StatusOr<plan_file> read_plan_file(const std::string& path) {
  absl::StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<plan_file> f = decode_plan(*bytes);
  if (!f.ok()) return absl::Status(f.status().code(), absl::StrCat(path, ": ", f.status().message()));
  return f;
}

absl::Status write_plan_file(const plan_file& f, const std::string& path) {
  return write_file_atomic(path, encode_plan(f));
}

std::string encode_plan_csv(const plan_file& f) {
  std::string out = "id,offset,size\n";
  for (std::size_t i = 0; i < f.tr.allocations.size() && i < f.p.offsets.size(); ++i) {
    if (f.p.offsets[i] == not_in_slab) continue;
    absl::StrAppend(&out, f.tr.allocations[i].id, ",", f.p.offsets[i], ",",
                    f.tr.allocations[i].size, "\n");
  }
  return out;
}

std::string plan_file_name(std::string_view key) {
  std::string name;
  for (const char c : key.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    name.push_back(ok ? c : '_');
  }
  std::uint64_t h = detail::fnv_offset;
  for (const char c : key) h = detail::fnv1a(h, static_cast<unsigned char>(c));
  return absl::StrCat(name, "-", absl::Hex(h, absl::kZeroPad16), ".raplan");
}

}  // namespace replayalloc
