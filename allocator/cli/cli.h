// replayalloc/cli/cli.h: what the command-line tool's commands share.
//
// Layer: cli (above planner and trace; offline only, never linked into a program that
// allocates through replayalloc). Each command lives in its own file (plan_command.cc,
// report_command.cc, ...) as `int run_<name>(args)`; this header holds the few helpers
// they share: argument parsing, reading a trace or a plan, writing an output file, a
// small JSON writer and byte formatting.
//
// Contract for every command: on any error it prints one message to stderr (naming the
// file and, where the input has lines, the line), returns a non-zero exit code and
// leaves no output file behind (outputs are written last, through a temporary file and
// a rename). It never crashes on any input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc::cli {

// Exit codes: 0 done, 1 the input or the work failed, 2 the command line was wrong.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;
inline constexpr int exit_usage = 2;

// ---- Arguments

struct option_spec {
  std::string_view name;   // "--algo"
  std::string_view alias;  // "-o", or empty
  bool takes_value = true;
};

struct parsed_args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // (name, value) in order

  bool has(std::string_view name) const;
  // The last value given for `name`, if any.
  std::optional<std::string> get(std::string_view name) const;
  std::vector<std::string> get_all(std::string_view name) const;
};

// "--name value", "--name=value" and the alias; "--" ends the options. An unknown
// option or a missing value is an InvalidArgument that says which.
absl::StatusOr<parsed_args> parse_args(const std::vector<std::string>& args,
                                       const std::vector<option_spec>& specs);

// Prints `usage` and returns: to stdout and exit_ok for --help, else `message` and
// usage to stderr and exit_usage.
int usage_error(std::string_view command, std::string_view usage, std::string_view message);
int usage_error(std::string_view command, std::string_view usage, const absl::Status& s);
int print_help(std::string_view usage);
// Prints "replayalloc COMMAND: error: MESSAGE" to stderr; returns exit_failed.
int fail(std::string_view command, const absl::Status& s);

// Parses a non-negative number (integer or decimal) in full.
std::optional<double> parse_number(std::string_view s);

// ---- Inputs

// A trace, and a placement for it: the plan file's own, or one made here.
struct planned_input {
  trace tr;
  placement p;
  planner_options o;
  bool from_plan_file = false;  // p came from a .raplan
  double plan_ms = 0;           // time make_plan() took, when planned here
};

// Reads a trace (binary, CSV, or MiniMalloc's CSV id,lower,upper,size: cli/minimalloc_csv.h;
// by content) or a plan file's trace. A plan CSV
// ("id,offset,size") is refused: it holds no lifetimes. The trace is also checked to be
// plannable without overflow (its slab-eligible footprints sum below 2^62).
absl::StatusOr<trace> load_trace(const std::string& path, bool* was_plan = nullptr);

// OK when the footprints of `t`'s allocations sum below 2^62, so that no planner,
// lower bound or report can overflow.
absl::Status check_plannable(const trace& t);

// Reads a plan file as it is (a .raplan, or a MiniMalloc solution: id,lower,upper,size,
// offset, taken at slot alignment 1), or a trace and plans it with `algorithm`; the
// placement is checked with validate() either way.
absl::StatusOr<planned_input> load_planned(const std::string& path, std::string_view algorithm);

// Runs make_plan() by name (with "search", search_plan() with its default time limit,
// and "exact" where the exact planner is built in), checks
// the result with validate(), and times it.
absl::StatusOr<placement> plan_trace(const trace& t, std::string_view algorithm,
                                     const planner_options& o, double* ms);
// planner_names(), plus "search", and "exact" where it is built in.
std::vector<std::string> algorithm_names();

// A placement of `t` from one offset per allocation (those of outliving allocations are
// ignored): its slab (the end of the highest slot) and lower bound, checked with
// validate(). Offsets below 2^62 (check_plannable() bounds the footprints the same way).
absl::StatusOr<placement> placement_from_offsets(const trace& t, std::vector<std::uint64_t> offsets,
                                                 const planner_options& o, std::string algorithm);

// Writes `bytes` to `path` whole or not at all; "-" is stdout.
absl::Status write_output(const std::string& path, std::string_view bytes);

// ---- Output helpers

// One JSON object on one line, keys in insertion order.
class json_object {
 public:
  json_object& add(std::string_view key, std::string_view value);
  json_object& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  json_object& add(std::string_view key, std::uint64_t value);
  json_object& add(std::string_view key, int value) { return add(key, static_cast<std::uint64_t>(value)); }
  json_object& add(std::string_view key, double value);
  json_object& add(std::string_view key, bool value);
  json_object& add_raw(std::string_view key, std::string_view json);  // an object or array
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};
std::string json_quote(std::string_view s);

// "97.9 MiB", "512 B".
std::string format_bytes(std::uint64_t bytes);
// lower bound / slab, 1 for an empty slab.
double efficiency(std::uint64_t lower_bound_bytes, std::uint64_t slab_bytes);

}  // namespace replayalloc::cli
