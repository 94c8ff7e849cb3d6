// `replayalloc report TRACE|PLAN`: what the memory of one iteration is made of.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/analysis.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/training.h"

namespace replayalloc::cli {
namespace {

std::string usage() {
  return absl::StrCat(
      "usage: replayalloc report TRACE|PLAN [--algo NAME] [--top N] [--parameters-bytes N] [--json]\n"
      "\n"
      "Peak, lower bound, slab and efficiency of one recorded iteration, and what its\n"
      "memory is made of: by kind and by op. A trace is planned first (--algo, default\n"
      "best); a .raplan plan file is reported as it was planned.\n"
      "\n"
      "  peak live     the most requested bytes live at once, every allocation counted\n"
      "  lower bound   the most slot footprints live at once, over the allocations a slab\n"
      "                can hold (no plan can use less)\n"
      "  slab          the plan's slab; efficiency = lower bound / slab\n"
      "  persistent    outlives the iteration (outputs, caches): served outside the slab\n"
      "  workspace     freed before any other op allocates (one op's scratch memory)\n"
      "  activations   the rest: made by one op, still live when a later op allocates\n"
      "  at peak       slot footprints live at the moment the lower bound is reached\n"
      "\n"
      "A training step (a trace with a backward op) is also split into parameters,\n"
      "gradients, optimizer state, activations saved for backward, outputs (the loss),\n"
      "workspace and temporaries, from its op tags and lifetimes, with the step's peak\n"
      "(every allocation counted) and the op that sets it (Note [Training memory],\n"
      "allocator/cli/training.h). A trace with no backward op gets no split.\n"
      "\n"
      "  --algo NAME   planner for a trace: ",
      absl::StrJoin(algorithm_names(), ", "),
      "\n"
      "  --top N       ops to list (default 10; 0 for all)\n"
      "  --parameters-bytes N\n"
      "                a training step's parameters made before the recorded iteration\n"
      "                (not in the trace): counted in its split and peak\n"
      "  --json        one JSON object instead of the tables\n");
}

std::string row_json(const usage_row& r) {
  json_object j;
  j.add("name", r.name)
      .add("count", r.count)
      .add("total_bytes", r.total_bytes)
      .add("at_peak_bytes", r.at_peak_bytes)
      .add("largest_bytes", r.largest_bytes);
  return j.str();
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

void append_row(std::string* out, const usage_row& r, std::uint64_t peak, std::size_t name_width) {
  std::string name = r.name;
  if (name.size() > name_width) name = name.substr(0, name_width - 3) + "...";
  absl::StrAppend(out, absl::StrFormat("  %-*s %7d %12s %12s %7s %12s\n", static_cast<int>(name_width), name,
                                       r.count, format_bytes(r.total_bytes), format_bytes(r.at_peak_bytes),
                                       percent(r.at_peak_bytes, peak), format_bytes(r.largest_bytes)));
}

// Note [Training memory]: the phases, the step's peak and the split.
void append_training(std::string* out, const training_split& s, std::size_t width) {
  absl::StrAppend(out, absl::StrFormat("\n  training step  forward [0, %d), backward [%d, %d), optimizer [%d, %d)%s\n",
                                       s.backward_at, s.backward_at, s.optimizer_at, s.optimizer_at, s.end,
                                       s.has_optimizer ? "" : " (no optimizer op)"));
  absl::StrAppend(out, absl::StrFormat("  step peak      %12s  at event %d (%s), set by %s\n", format_bytes(s.peak_bytes),
                                       s.peak_at, training_phase_name(s.peak_phase),
                                       s.peak_op.empty() ? std::string("?") : s.peak_op));
  absl::StrAppend(out, absl::StrFormat("  held after     %12s  outlives the step, parameters given included: a later step\n"
                                       "                               starts with it live\n",
                                       format_bytes(s.held_after_bytes)));
  absl::StrAppend(out, absl::StrFormat("\n  %-*s %7s %12s %12s %7s %14s\n", static_cast<int>(width), "training split",
                                       "count", "total", "at peak", "share", "at slab peak"));
  for (int k = 0; k < training_part_count; ++k) {
    const training_row& row = s.by_part[k];
    absl::StrAppend(out, absl::StrFormat("  %-*s %7d %12s %12s %7s %14s\n", static_cast<int>(width),
                                         training_part_name(training_part(k)), row.count,
                                         format_bytes(row.total_bytes), format_bytes(row.at_peak_bytes),
                                         percent(row.at_peak_bytes, s.peak_bytes),
                                         format_bytes(row.at_slab_peak_bytes)));
  }
  const training_row& params = s.by_part[static_cast<int>(training_part::parameters)];
  if (s.parameters_given_bytes > 0) {
    absl::StrAppend(out, absl::StrFormat("  (parameters: %s given with --parameters-bytes, live all along)\n",
                                         format_bytes(s.parameters_given_bytes)));
  } else if (params.count == 0) {
    absl::StrAppend(out, "  (parameters made before the recorded iteration are not in the trace: give their\n"
                         "  bytes with --parameters-bytes N)\n");
  }
  if (s.by_part[static_cast<int>(training_part::gradients)].count == 0 &&
      s.by_part[static_cast<int>(training_part::optimizer_state)].count == 0) {
    absl::StrAppend(out, "  (no gradients or optimizer state made in this step: a later step than the first\n"
                         "  finds them made before its iteration, and they are not in its trace)\n");
  }
  absl::StrAppend(out, "  (at peak: requested bytes live at the step's peak; at slab peak: slot footprints\n"
                       "  live at the lower bound's)\n");
}

}  // namespace

int run_report(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a =
      parse_args(args, {{"--algo", ""},
                        {"--top", ""},
                        {"--parameters-bytes", ""},
                        {"--json", "", false},
                        {"--help", "-h", false}});
  if (!a.ok()) return usage_error("report", usage(), a.status());
  if (a->has("--help")) return print_help(usage());
  if (a->positional.size() != 1) return usage_error("report", usage(), "expected one TRACE or PLAN");
  std::size_t top = 10;
  if (const std::optional<std::string> s = a->get("--top")) {
    const std::optional<double> v = parse_number(*s);
    if (!v || *v != static_cast<double>(static_cast<std::size_t>(*v)) || *v > 1e9) {
      return usage_error("report", usage(), absl::StrCat("--top '", *s, "' is not a count"));
    }
    top = static_cast<std::size_t>(*v);
  }
  std::uint64_t parameters_bytes = 0;
  if (const std::optional<std::string> s = a->get("--parameters-bytes")) {
    const std::optional<std::uint64_t> v = parse_parameters_bytes(*s);
    if (!v) return usage_error("report", usage(), absl::StrCat("--parameters-bytes '", *s, "' is not a byte count"));
    parameters_bytes = *v;
  }
  const std::string& path = a->positional[0];
  absl::StatusOr<planned_input> in = load_planned(path, a->get("--algo").value_or("best"));
  if (!in.ok()) return fail("report", in.status());
  const trace_analysis r = analyze(in->tr, in->o);
  const std::optional<training_split> training = split_training(in->tr, r, in->o, parameters_bytes);
  const placement& p = in->p;
  std::uint64_t planned = 0;
  for (const std::uint64_t off : p.offsets) planned += off != not_in_slab;
  const std::size_t shown = top == 0 ? r.by_op.size() : std::min(top, r.by_op.size());

  if (a->has("--json")) {
    std::vector<std::string> kinds, ops;
    for (const usage_row& k : r.by_kind) kinds.push_back(row_json(k));
    for (std::size_t i = 0; i < shown; ++i) ops.push_back(row_json(r.by_op[i]));
    json_object j;
    j.add("input", path)
        .add("source", in->from_plan_file ? "plan" : "trace")
        .add("key", in->tr.key)
        .add("algorithm", p.algorithm)
        .add("allocations", static_cast<std::uint64_t>(in->tr.allocations.size()))
        .add("planned", planned)
        .add("events", r.events)
        .add("peak_live_bytes", r.peak_live_bytes)
        .add("lower_bound_bytes", r.lower_bound_bytes)
        .add("slab_bytes", p.slab_bytes)
        .add("efficiency", efficiency(r.lower_bound_bytes, p.slab_bytes))
        .add("persistent_bytes", r.persistent_bytes)
        .add("peak_at", r.peak_at)
        .add("slot_align", in->o.slot_align)
        .add_raw("kinds", absl::StrCat("[", absl::StrJoin(kinds, ","), "]"))
        .add("ops", static_cast<std::uint64_t>(r.by_op.size()))
        .add_raw("top_ops", absl::StrCat("[", absl::StrJoin(ops, ","), "]"))
        .add_raw("training", training ? training_json(*training) : "null");
    std::printf("%s\n", j.str().c_str());
    return exit_ok;
  }

  std::string out = absl::StrCat("replayalloc report: ", path, " (",
                                 in->from_plan_file ? "plan file" : "trace", ")\n");
  if (!in->tr.key.empty()) absl::StrAppend(&out, "  key            ", in->tr.key, "\n");
  absl::StrAppend(&out, absl::StrFormat("  allocations    %d (%d in the slab, %d outlive the iteration), %d ops, %d events\n",
                                        in->tr.allocations.size(), planned,
                                        in->tr.allocations.size() - planned, r.by_op.size(), r.events));
  absl::StrAppend(&out, absl::StrFormat("  peak live      %12s  requested bytes live at once, all allocations\n",
                                        format_bytes(r.peak_live_bytes)));
  absl::StrAppend(&out, absl::StrFormat("  lower bound    %12s  slot footprints live at once (at event %d)\n",
                                        format_bytes(r.lower_bound_bytes), r.peak_at));
  absl::StrAppend(&out, absl::StrFormat("  slab           %12s  %s%s\n", format_bytes(p.slab_bytes), p.algorithm,
                                        in->from_plan_file ? "" : absl::StrFormat(", planned in %.2f ms", in->plan_ms)));
  absl::StrAppend(&out, absl::StrFormat("  efficiency     %11.2f%%  lower bound / slab\n",
                                        100.0 * efficiency(r.lower_bound_bytes, p.slab_bytes)));
  absl::StrAppend(&out, absl::StrFormat("  persistent     %12s  outlives the iteration, served outside the slab\n",
                                        format_bytes(r.persistent_bytes)));

  constexpr std::size_t kind_width = 24;
  absl::StrAppend(&out, absl::StrFormat("\n  %-*s %7s %12s %12s %7s %12s\n", static_cast<int>(kind_width), "by kind",
                                        "count", "total", "at peak", "share", "largest"));
  for (const usage_row& k : r.by_kind) append_row(&out, k, r.lower_bound_bytes, kind_width);
  if (training) append_training(&out, *training, kind_width);

  std::size_t name_width = 24;
  for (std::size_t i = 0; i < shown; ++i) name_width = std::max(name_width, r.by_op[i].name.size());
  name_width = std::min<std::size_t>(name_width, 48);
  absl::StrAppend(&out, absl::StrFormat("\n  %-*s %7s %12s %12s %7s %12s\n", static_cast<int>(name_width),
                                        shown < r.by_op.size() ? absl::StrFormat("top %d of %d ops", shown, r.by_op.size())
                                                               : std::string("ops"),
                                        "count", "total", "at peak", "share", "largest"));
  for (std::size_t i = 0; i < shown; ++i) append_row(&out, r.by_op[i], r.lower_bound_bytes, name_width);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return exit_ok;
}

}  // namespace replayalloc::cli
