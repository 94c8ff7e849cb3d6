// `replayalloc plan TRACE -o PLAN [--algo NAME] [--time-limit S] [--format F]`: plan a
// trace, write the plan, say whether it is proven optimal.
#include <bit>
#include <chrono>
#include <optional>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/minimalloc_csv.h"
#include "planner/plan_file.h"
#include "planner/search.h"

namespace replayalloc::cli {
namespace {

std::string usage() {
  return absl::StrCat(
      "usage: replayalloc plan TRACE -o PLAN [--algo NAME] [--time-limit S] [--format F]\n"
      "                        [--slot-align N]\n"
      "\n"
      "Plans TRACE (a trace file, binary or CSV id,size,align,alloc_at,free_at,op, or\n"
      "MiniMalloc's CSV id,lower,upper,size) and writes PLAN. Prints one JSON line:\n"
      "algorithm, allocations, planned, outliving, slab_bytes, lower_bound_bytes,\n"
      "efficiency (lower bound / slab), proven_optimal (no smaller slab exists: the slab is\n"
      "at the lower bound, or the search proved it), plan_ms, output; with anytime and\n"
      "search also proven_lower_bound_bytes (no slab is smaller) and search_nodes.\n"
      "\n"
      "  -o, --output PLAN   the plan to write (\"-\" for stdout, CSV)\n"
      "  --algo NAME         planner: anytime, ",
      absl::StrJoin(algorithm_names(), ", "),
      " (default anytime).\n"
      "                      anytime: best, then, where best is above the\n"
      "                      lower bound, the search until --time-limit; says whether the\n"
      "                      result is proven optimal. search: a branch-and-bound search\n"
      "                      for the smallest slab, exact when it finishes, never worse\n"
      "                      than best (planner/search.h); traces of more than 16,384\n"
      "                      allocations get best's plan\n"
      "  --time-limit S      the search's budget in seconds (anytime: default 5; search:\n"
      "                      default 10)\n"
      "  --goal BYTES        anytime, search: stop once the slab is at most BYTES (a known\n"
      "                      capacity)\n"
      "  --format F          csv (id,offset,size: one row per allocation in the slab),\n"
      "                      raplan (the plan file the engine loads) or minimalloc\n"
      "                      (MiniMalloc's solution: id,lower,upper,size,offset); default:\n"
      "                      raplan when PLAN ends in .raplan, else csv\n"
      "  --slot-align N      slot alignment in bytes, a power of two (default 64; 1 plans\n"
      "                      MiniMalloc's problems byte for byte)\n");
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int run_plan(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a = parse_args(
      args, {{"--output", "-o"},
             {"--algo", ""},
             {"--time-limit", ""},
             {"--goal", ""},
             {"--format", ""},
             {"--slot-align", ""},
             {"--help", "-h", false}});
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
  // The default, anytime (issue 44, item 1): best, then the search within a budget
  // where best is above the lower bound (the search starts from best's plan and returns
  // at once when it is at the bound); the answer says whether it is proven optimal.
  const std::string algo = a->get("--algo").value_or("anytime");
  const bool searches = algo == "search" || algo == "anytime";
  search_options so;
  if (algo == "anytime") so.time_limit_s = 5;
  if (const std::optional<std::string> s = a->get("--time-limit")) {
    const std::optional<double> v = parse_number(*s);
    if (!v || *v <= 0) return usage_error("plan", usage(), absl::StrCat("--time-limit '", *s, "' is not a positive number"));
    if (!searches) return usage_error("plan", usage(), "--time-limit is for --algo anytime and search");
    so.time_limit_s = *v;
  }
  if (const std::optional<std::string> s = a->get("--goal")) {
    const std::optional<double> v = parse_number(*s);
    if (!v || *v != static_cast<double>(static_cast<std::uint64_t>(*v))) {
      return usage_error("plan", usage(), absl::StrCat("--goal '", *s, "' is not a number of bytes"));
    }
    if (!searches) return usage_error("plan", usage(), "--goal is for --algo anytime and search");
    so.goal_bytes = static_cast<std::uint64_t>(*v);
  }
  const std::string format =
      a->get("--format").value_or(ends_with(*out, ".raplan") ? "raplan" : "csv");
  if (format != "csv" && format != "raplan" && format != "minimalloc") {
    return usage_error("plan", usage(), absl::StrCat("unknown --format '", format, "'"));
  }
  if (format == "raplan" && *out == "-") return usage_error("plan", usage(), "a .raplan cannot go to stdout");

  absl::StatusOr<trace> t = load_trace(a->positional[0]);
  if (!t.ok()) return fail("plan", t.status());
  double ms = 0;
  absl::StatusOr<placement> p;
  std::optional<search_result> searched;
  if (searches) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<search_result> r = search_plan(*t, o, so);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) return fail("plan", r.status());
    if (absl::Status v = validate(*t, r->plan, o); !v.ok()) {
      return fail("plan", absl::InternalError(absl::StrCat("the search made an invalid plan: ", v.message())));
    }
    p = r->plan;
    searched = *std::move(r);
  } else {
    p = plan_trace(*t, algo, o, &ms);
  }
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
      .add("proven_optimal", searched ? searched->proven_optimal : p->slab_bytes <= p->lower_bound_bytes);
  if (searched) {
    j.add("proven_lower_bound_bytes", searched->lower_bound).add("search_nodes", searched->nodes);
  }
  j.add("plan_ms", ms).add("output", *out);
  const std::string summary = j.str();
  std::string bytes;
  if (format == "minimalloc") {
    bytes = encode_minimalloc_csv(*t, &p->offsets);
  } else {
    const plan_file f = make_plan_file(*std::move(t), *std::move(p), o);
    bytes = format == "raplan" ? encode_plan(f) : encode_plan_csv(f);
  }
  if (absl::Status s = write_output(*out, bytes); !s.ok()) return fail("plan", s);
  // With the plan on stdout, the summary goes to stderr so the CSV stays clean.
  std::fprintf(*out == "-" ? stderr : stdout, "%s\n", summary.c_str());
  return exit_ok;
}

}  // namespace replayalloc::cli
