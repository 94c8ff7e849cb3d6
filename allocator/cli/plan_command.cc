// `replayalloc plan TRACE -o PLAN [--algo NAME]`: plan a trace, write the plan.
#include <bit>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "planner/plan_file.h"

namespace replayalloc::cli {
namespace {

std::string usage() {
  return absl::StrCat(
      "usage: replayalloc plan TRACE -o PLAN [--algo NAME] [--slot-align N]\n"
      "\n"
      "Plans TRACE (a trace file, binary or CSV id,size,align,alloc_at,free_at,op) and\n"
      "writes PLAN: CSV with the header id,offset,size (one row per allocation placed in\n"
      "the slab) unless PLAN ends in .raplan, which writes the binary plan file the engine\n"
      "loads. Prints one JSON line: algorithm, allocations, planned, outliving, slab_bytes,\n"
      "lower_bound_bytes, efficiency (lower bound / slab), plan_ms, output.\n"
      "\n"
      "  -o, --output PLAN   the plan to write (\"-\" for stdout, CSV)\n"
      "  --algo NAME         planner: ",
      absl::StrJoin(algorithm_names(), ", "),
      " (default best)\n"
      "  --slot-align N      slot alignment in bytes, a power of two (default 64)\n");
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int run_plan(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a = parse_args(
      args, {{"--output", "-o"}, {"--algo", ""}, {"--slot-align", ""}, {"--help", "-h", false}});
  if (!a.ok()) return usage_error("plan", usage(), a.status());
  if (a->has("--help")) return print_help(usage());
  if (a->positional.size() != 1) return usage_error("plan", usage(), "expected one TRACE");
  const std::optional<std::string> out = a->get("--output");
  if (!out || out->empty()) return usage_error("plan", usage(), "missing -o PLAN");
  planner_options o;
  if (const std::optional<std::string> s = a->get("--slot-align")) {
    const std::optional<double> v = parse_number(*s);
    if (!v || *v < 1 || *v > (1 << 21) || *v != static_cast<double>(static_cast<std::uint64_t>(*v)) ||
        !std::has_single_bit(static_cast<std::uint64_t>(*v))) {
      return usage_error("plan", usage(), absl::StrCat("--slot-align '", *s,
                                                       "' is not a power of two up to 2 MiB"));
    }
    o.slot_align = static_cast<std::uint64_t>(*v);
  }
  const std::string algo = a->get("--algo").value_or("best");

  absl::StatusOr<trace> t = load_trace(a->positional[0]);
  if (!t.ok()) return fail("plan", t.status());
  double ms = 0;
  absl::StatusOr<placement> p = plan_trace(*t, algo, o, &ms);
  if (!p.ok()) return fail("plan", p.status());

  std::uint64_t planned = 0;
  for (const std::uint64_t off : p->offsets) planned += off != not_in_slab;
  json_object j;
  j.add("algorithm", p->algorithm)
      .add("allocations", static_cast<std::uint64_t>(t->allocations.size()))
      .add("planned", planned)
      .add("outliving", static_cast<std::uint64_t>(t->allocations.size()) - planned)
      .add("slab_bytes", p->slab_bytes)
      .add("lower_bound_bytes", p->lower_bound_bytes)
      .add("efficiency", efficiency(p->lower_bound_bytes, p->slab_bytes))
      .add("plan_ms", ms)
      .add("output", *out);
  const std::string summary = j.str();
  const plan_file f = make_plan_file(*std::move(t), *std::move(p), o);
  const bool binary = ends_with(*out, ".raplan");
  if (binary && *out == "-") return usage_error("plan", usage(), "a .raplan cannot go to stdout");
  if (absl::Status s = write_output(*out, binary ? encode_plan(f) : encode_plan_csv(f)); !s.ok()) {
    return fail("plan", s);
  }
  // With the plan on stdout, the summary goes to stderr so the CSV stays clean.
  std::fprintf(*out == "-" ? stderr : stdout, "%s\n", summary.c_str());
  return exit_ok;
}

}  // namespace replayalloc::cli
