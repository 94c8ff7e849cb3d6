// `replayalloc convert IN OUT`: a trace between its CSV and binary forms.
#include <cstdio>

#include "cli/cli.h"
#include "cli/commands.h"
#include "trace/trace_io.h"

namespace replayalloc::cli {
namespace {

constexpr char usage[] =
    "usage: replayalloc convert IN OUT\n"
    "\n"
    "Reads the trace IN (binary, CSV, or the trace inside a .raplan plan file) and\n"
    "writes it to OUT: CSV (id,size,align,alloc_at,free_at,op) when OUT ends in .csv,\n"
    "the binary trace format otherwise. \"-\" as OUT writes CSV to stdout.\n";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int run_convert(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a = parse_args(args, {{"--help", "-h", false}});
  if (!a.ok()) return usage_error("convert", usage, a.status());
  if (a->has("--help")) return print_help(usage);
  if (a->positional.size() != 2) return usage_error("convert", usage, "expected IN and OUT");
  absl::StatusOr<trace> t = load_trace(a->positional[0]);
  if (!t.ok()) return fail("convert", t.status());
  const std::string& out = a->positional[1];
  const bool csv = out == "-" || ends_with(out, ".csv");
  if (absl::Status s = write_output(out, csv ? encode_trace_csv(*t) : encode_trace_binary(*t)); !s.ok()) {
    return fail("convert", s);
  }
  if (out != "-") {
    std::fprintf(stderr, "%zu allocations written to %s (%s)\n", t->allocations.size(), out.c_str(),
                 csv ? "CSV" : "binary");
  }
  return exit_ok;
}

}  // namespace replayalloc::cli
