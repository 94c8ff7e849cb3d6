// `replayalloc convert IN OUT [--to FORMAT]`: a trace or a plan between its forms: the
// trace's CSV and binary files, the .raplan plan file, and MiniMalloc's CSV
// (cli/minimalloc_csv.h), problem or solution.
#include <bit>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/minimalloc_csv.h"
#include "planner/plan_file.h"
#include "support/status.h"
#include "trace/trace_io.h"

namespace replayalloc::cli {
namespace {

constexpr char usage[] =
    "usage: replayalloc convert IN OUT [--to FORMAT]\n"
    "\n"
    "Reads IN: a trace (binary, or CSV id,size,align,alloc_at,free_at,op), a .raplan plan\n"
    "file, or MiniMalloc's CSV (id,lower,upper,size: a problem; with an offset column: a\n"
    "solution, checked with validate() at slot alignment 1), and writes OUT as FORMAT:\n"
    "  trace-csv    the trace as CSV (the default when OUT ends in .csv; \"-\" is stdout)\n"
    "  trace        the binary trace (the default for any other name)\n"
    "  minimalloc   MiniMalloc's CSV: id,lower,upper,size, and the offset column when IN\n"
    "               holds a plan (a .raplan or a MiniMalloc solution); allocations that\n"
    "               outlive the iteration have no interval there and are left out\n"
    "  raplan       a plan file (the default when OUT ends in .raplan): IN must hold a plan\n"
    "\n"
    "Plan a MiniMalloc problem with `replayalloc plan X.csv --slot-align 1 -o OUT`: its sizes\n"
    "are bytes with no alignment, as MiniMalloc takes them.\n";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// IN as a plan, when it holds one (a .raplan, a MiniMalloc solution), else as a trace.
struct input {
  trace tr;
  std::optional<placement> p;
  std::uint64_t slot_align = 64;
};

absl::StatusOr<input> read_input(const std::string& path) {
  absl::StatusOr<std::string> bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  input in;
  const bool minimalloc_solution = is_minimalloc_csv(*bytes) &&
                                   bytes->substr(0, bytes->find('\n')).find("offset") != std::string::npos;
  if (bytes->starts_with("RPLYPLAN") || minimalloc_solution) {
    absl::StatusOr<planned_input> pi = load_planned(path, "best");
    if (!pi.ok()) return pi.status();
    in.tr = std::move(pi->tr);
    in.p = std::move(pi->p);
    in.slot_align = pi->o.slot_align;
    return in;
  }
  absl::StatusOr<trace> t = load_trace(path);
  if (!t.ok()) return t.status();
  in.tr = *std::move(t);
  return in;
}

}  // namespace

int run_convert(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a = parse_args(args, {{"--to", ""}, {"--help", "-h", false}});
  if (!a.ok()) return usage_error("convert", usage, a.status());
  if (a->has("--help")) return print_help(usage);
  if (a->positional.size() != 2) return usage_error("convert", usage, "expected IN and OUT");
  const std::string& out = a->positional[1];
  std::string to = a->get("--to").value_or(
      out == "-" || ends_with(out, ".csv") ? "trace-csv" : ends_with(out, ".raplan") ? "raplan" : "trace");
  if (to != "trace-csv" && to != "trace" && to != "minimalloc" && to != "raplan") {
    return usage_error("convert", usage, absl::StrCat("unknown --to '", to, "'"));
  }
  if (to == "raplan" && out == "-") return usage_error("convert", usage, "a .raplan cannot go to stdout");
  absl::StatusOr<input> in = read_input(a->positional[0]);
  if (!in.ok()) return fail("convert", in.status());
  std::string bytes;
  if (to == "trace-csv") {
    bytes = encode_trace_csv(in->tr);
  } else if (to == "trace") {
    bytes = encode_trace_binary(in->tr);
  } else if (to == "minimalloc") {
    bytes = encode_minimalloc_csv(in->tr, in->p ? &in->p->offsets : nullptr);
  } else {
    if (!in->p) {
      return fail("convert", absl::InvalidArgumentError(absl::StrCat(
                                 a->positional[0], " holds no plan (a trace, or a MiniMalloc problem without ",
                                 "offsets); plan it with `replayalloc plan`")));
    }
    planner_options o;
    o.slot_align = in->slot_align;
    bytes = encode_plan(make_plan_file(in->tr, *in->p, o));
  }
  if (absl::Status s = write_output(out, bytes); !s.ok()) return fail("convert", s);
  if (out != "-") {
    std::fprintf(stderr, "%zu allocations written to %s (%s%s)\n", in->tr.allocations.size(), out.c_str(),
                 to.c_str(), to == "minimalloc" && in->p ? ", with offsets" : "");
  }
  return exit_ok;
}

}  // namespace replayalloc::cli
