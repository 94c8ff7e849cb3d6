// The helpers every command shares (cli.h).
#include "cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/minimalloc_csv.h"
#include "planner/plan_file.h"
#include "planner/search.h"
#include "support/status.h"
#include "trace/trace_io.h"
#ifdef REPLAYALLOC_CLI_HAVE_EXACT
#include "planner/exact.h"
#endif

namespace replayalloc::cli {

// ---- Arguments

bool parsed_args::has(std::string_view name) const {
  for (const auto& [n, v] : options) {
    if (n == name) return true;
  }
  return false;
}

std::optional<std::string> parsed_args::get(std::string_view name) const {
  std::optional<std::string> out;
  for (const auto& [n, v] : options) {
    if (n == name) out = v;
  }
  return out;
}

std::vector<std::string> parsed_args::get_all(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [n, v] : options) {
    if (n == name) out.push_back(v);
  }
  return out;
}

absl::StatusOr<parsed_args> parse_args(const std::vector<std::string>& args,
                                       const std::vector<option_spec>& specs) {
  parsed_args out;
  bool options_done = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);  // "-" alone is a file name (stdout)
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (const std::size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    const option_spec* spec = nullptr;
    for (const option_spec& s : specs) {
      if (name == s.name || (!s.alias.empty() && name == s.alias)) spec = &s;
    }
    REPLAYALLOC_EXPECTS(spec != nullptr, "unknown option '", name, "'");
    if (spec->takes_value && !inline_value) {
      REPLAYALLOC_EXPECTS(i + 1 < args.size(), "option ", std::string(spec->name), " needs a value");
      value = args[++i];
    }
    REPLAYALLOC_EXPECTS(spec->takes_value || !inline_value, "option ", std::string(spec->name),
                        " takes no value");
    out.options.emplace_back(std::string(spec->name), std::move(value));
  }
  return out;
}

int usage_error(std::string_view command, std::string_view usage, std::string_view message) {
  std::fprintf(stderr, "replayalloc %.*s: %.*s\n\n%.*s", static_cast<int>(command.size()),
               command.data(), static_cast<int>(message.size()), message.data(),
               static_cast<int>(usage.size()), usage.data());
  return exit_usage;
}

int usage_error(std::string_view command, std::string_view usage, const absl::Status& s) {
  return usage_error(command, usage, std::string(s.message()));
}

int print_help(std::string_view usage) {
  std::fwrite(usage.data(), 1, usage.size(), stdout);
  return exit_ok;
}

int fail(std::string_view command, const absl::Status& s) {
  // Messages quote the input; control bytes from a binary file must not reach a terminal.
  std::string m(s.message());
  for (char& c : m) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  std::fprintf(stderr, "replayalloc %.*s: error: %.*s\n", static_cast<int>(command.size()),
               command.data(), static_cast<int>(m.size()), m.data());
  return exit_failed;
}

std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  if (s.empty() || s[0] == '-' || s[0] == '+' || !absl::SimpleAtod(std::string(s), &v) ||
      !std::isfinite(v) || v < 0) {
    return std::nullopt;
  }
  return v;
}

// ---- Inputs

namespace {

bool starts_with(std::string_view bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && bytes.substr(0, prefix.size()) == prefix;
}

absl::Status with_path(const std::string& path, const absl::Status& s) {
  if (s.ok() || absl::StrContains(s.message(), path)) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

// Each size is at most 2^47, but a trace may hold millions of them.
absl::Status check_plannable(const trace& t) {
  const planner_options o;
  std::uint64_t sum = 0;
  for (const trace_allocation& a : t.allocations) {
    sum += slot_footprint(a, o);
    REPLAYALLOC_EXPECTS(sum < (std::uint64_t{1} << 62), "the trace's allocations add up to more than ",
                        "2^62 bytes; no slab could hold them");
  }
  return absl::OkStatus();
}

absl::StatusOr<trace> load_trace(const std::string& path, bool* was_plan) {
  absl::StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  if (was_plan != nullptr) *was_plan = false;
  absl::StatusOr<trace> t;
  if (starts_with(*bytes, "RPLYPLAN")) {
    absl::StatusOr<plan_file> f = decode_plan(*bytes);
    if (!f.ok()) return with_path(path, f.status());
    if (was_plan != nullptr) *was_plan = true;
    t = std::move(f->tr);
  } else if (starts_with(*bytes, "RPLYTRCE")) {
    t = decode_trace_binary(*bytes);
  } else if (is_minimalloc_csv(*bytes)) {
    absl::StatusOr<minimalloc_problem> m = decode_minimalloc_csv(*bytes);
    if (!m.ok()) return with_path(path, m.status());
    t = std::move(m->tr);
  } else if (starts_with(*bytes, "id,offset,size")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a plan CSV (id,offset,size) holds no lifetimes; give its trace or a .raplan"));
  } else {
    t = decode_trace_csv(*bytes);
  }
  if (!t.ok()) return with_path(path, t.status());
  REPLAYALLOC_RETURN_IF_ERROR(with_path(path, check_plannable(*t)));
  return t;
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names = planner_names();
  names.push_back("search");
#ifdef REPLAYALLOC_CLI_HAVE_EXACT
  if (std::find(names.begin(), names.end(), "exact") == names.end()) names.push_back("exact");
#endif
  return names;
}

absl::StatusOr<placement> plan_trace(const trace& t, std::string_view algorithm,
                                     const planner_options& o, double* ms) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<placement> p;
  if (algorithm == "search") {
    absl::StatusOr<search_result> r = search_plan(t, o);
    p = r.ok() ? absl::StatusOr<placement>(std::move(r->plan)) : absl::StatusOr<placement>(r.status());
  } else
#ifdef REPLAYALLOC_CLI_HAVE_EXACT
  if (algorithm == "exact") {
    p = plan_exact(t, o);
  } else
#endif
  {
    p = make_plan(t, algorithm, o);
  }
  const auto stop = std::chrono::steady_clock::now();
  if (ms != nullptr) *ms = std::chrono::duration<double, std::milli>(stop - start).count();
  if (!p.ok()) {
    if (p.status().code() == absl::StatusCode::kInvalidArgument &&
        absl::StrContains(p.status().message(), "unknown planner")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown --algo '", std::string(algorithm),
                                                     "'; known: ",
                                                     absl::StrJoin(algorithm_names(), ", ")));
    }
    return p.status();
  }
  // A planner bug must never reach a plan file or a picture.
  if (absl::Status v = validate(t, *p, o); !v.ok()) {
    return absl::InternalError(absl::StrCat("planner '", p->algorithm,
                                            "' made an invalid plan: ", v.message()));
  }
  return p;
}

absl::StatusOr<planned_input> load_planned(const std::string& path, std::string_view algorithm) {
  absl::StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  planned_input in;
  if (starts_with(*bytes, "RPLYPLAN")) {
    absl::StatusOr<plan_file> f = decode_plan(*bytes);  // validated inside
    if (!f.ok()) return with_path(path, f.status());
    in.tr = std::move(f->tr);
    in.p = std::move(f->p);
    in.o.slot_align = f->slot_align;
    in.from_plan_file = true;
    REPLAYALLOC_RETURN_IF_ERROR(with_path(path, check_plannable(in.tr)));
    return in;
  }
  if (is_minimalloc_csv(*bytes)) {
    absl::StatusOr<minimalloc_problem> m = decode_minimalloc_csv(*bytes);
    if (!m.ok()) return with_path(path, m.status());
    if (!m->offsets.empty()) {  // a solution: its own placement, bytes as they are
      in.o.slot_align = 1;
      absl::StatusOr<placement> p = placement_from_offsets(m->tr, std::move(m->offsets), in.o, "minimalloc_csv");
      if (!p.ok()) return with_path(path, p.status());
      in.tr = std::move(m->tr);
      in.p = *std::move(p);
      in.from_plan_file = true;
      REPLAYALLOC_RETURN_IF_ERROR(with_path(path, check_plannable(in.tr)));
      return in;
    }
  }
  absl::StatusOr<trace> t = load_trace(path);
  if (!t.ok()) return t.status();
  in.tr = *std::move(t);
  absl::StatusOr<placement> p = plan_trace(in.tr, algorithm, in.o, &in.plan_ms);
  if (!p.ok()) return p.status();
  in.p = *std::move(p);
  return in;
}

absl::StatusOr<placement> placement_from_offsets(const trace& t, std::vector<std::uint64_t> offsets,
                                                 const planner_options& o, std::string algorithm) {
  REPLAYALLOC_EXPECTS(offsets.size() == t.allocations.size(), offsets.size(), " offsets for ",
                      t.allocations.size(), " allocations");
  REPLAYALLOC_RETURN_IF_ERROR(check_plannable(t));
  placement p;
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (t.allocations[i].outlives()) {
      offsets[i] = not_in_slab;
      continue;
    }
    REPLAYALLOC_EXPECTS(offsets[i] <= (std::uint64_t{1} << 62), "allocation ", t.allocations[i].id,
                        ": offset ", offsets[i], " is beyond 2^62");
    p.slab_bytes = std::max(p.slab_bytes, offsets[i] + slot_footprint(t.allocations[i], o));
  }
  p.offsets = std::move(offsets);
  p.lower_bound_bytes = lower_bound(t, o);
  p.algorithm = std::move(algorithm);
  REPLAYALLOC_RETURN_IF_ERROR(validate(t, p, o));
  return p;
}

absl::Status write_output(const std::string& path, std::string_view bytes) {
  if (path == "-") {
    if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0) {
      return absl::DataLossError("cannot write to stdout");
    }
    return absl::OkStatus();
  }
  return write_file_atomic(path, bytes);
}

// ---- Output helpers

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

void json_object::key(std::string_view k) {
  if (!body_.empty()) body_.push_back(',');
  absl::StrAppend(&body_, json_quote(k), ":");
}

json_object& json_object::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += json_quote(value);
  return *this;
}

json_object& json_object::add(std::string_view k, std::uint64_t value) {
  key(k);
  absl::StrAppend(&body_, value);
  return *this;
}

json_object& json_object::add(std::string_view k, double value) {
  key(k);
  body_ += std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null";
  return *this;
}

json_object& json_object::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

json_object& json_object::add_raw(std::string_view k, std::string_view json) {
  key(k);
  body_ += std::string(json);
  return *this;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  // Each format a constant (absl checks it at compile time where the compiler can: clang).
  return v < 10 ? absl::StrFormat("%.2f %s", v, units[u]) : absl::StrFormat("%.1f %s", v, units[u]);
}

double efficiency(std::uint64_t lower_bound_bytes, std::uint64_t slab_bytes) {
  return slab_bytes == 0 ? 1.0 : static_cast<double>(lower_bound_bytes) / static_cast<double>(slab_bytes);
}

}  // namespace replayalloc::cli
