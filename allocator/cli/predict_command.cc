// `replayalloc predict --trace B=TRACE --trace B=TRACE --at B`: the peak and the slab
// at a batch size never recorded (predict.h, Note [Footprint prediction]).
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/predict.h"
#include "cli/training.h"

namespace replayalloc::cli {
namespace {

constexpr char usage[] =
    "usage: replayalloc predict --trace B=TRACE --trace B=TRACE [...] --at B [--at B ...]\n"
    "                           [--algo NAME] [--method auto|per_allocation|linear_peak]\n"
    "                           [--parameters-bytes N] [--json]\n"
    "\n"
    "From recordings of one model at two or more batch sizes (--trace 1=b1.csv --trace\n"
    "8=b8.csv), estimates the peak, the lower bound and the planned slab at batch --at.\n"
    "  per_allocation  fits every allocation's size as a line in the batch size and plans\n"
    "                  the predicted trace (needs recordings with the same allocations in\n"
    "                  the same order, as the same model at another batch size has)\n"
    "  linear_peak     fits the recordings' peak, lower bound and slab as lines\n"
    "  auto            per_allocation where it applies, else linear_peak (the default)\n"
    "Training steps (recordings with a backward op) are also split, measured and predicted,\n"
    "into parameters, gradients, optimizer state, saved activations, outputs, workspace\n"
    "and temporaries, with the step's peak (Note [Training memory]; per_allocation only).\n"
    "  --parameters-bytes N  parameters made before the recorded step (not in the traces)\n"
    "Prints a table, or one JSON object per --at with --json.\n";

std::string footprint_json(const footprint& f) {
  json_object j;
  j.add("peak_live_bytes", static_cast<std::uint64_t>(f.peak_live_bytes))
      .add("lower_bound_bytes", static_cast<std::uint64_t>(f.lower_bound_bytes))
      .add("slab_bytes", static_cast<std::uint64_t>(f.slab_bytes))
      .add("persistent_bytes", static_cast<std::uint64_t>(f.persistent_bytes))
      .add_raw("training", f.training ? training_json(*f.training) : "null");
  return j.str();
}

std::string batch_label(double b) { return absl::StrFormat("%g", b); }

// Note [Training memory]: each column's split, when every recording is a training step.
void append_training(std::string* out, const std::vector<batch_trace>& recordings,
                     const std::vector<footprint>& measured, const std::vector<prediction>& results) {
  for (const footprint& f : measured) {
    if (!f.training) return;
  }
  std::vector<std::pair<std::string, const training_split*>> columns;
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    columns.push_back({"batch " + batch_label(recordings[i].batch), &*measured[i].training});
  }
  for (const prediction& p : results) {
    columns.push_back({"batch " + batch_label(p.at) + "*", p.predicted.training ? &*p.predicted.training : nullptr});
  }
  std::string header = absl::StrFormat("\n  %-18s", "training step");
  for (const auto& [label, s] : columns) absl::StrAppend(&header, absl::StrFormat(" %12s", label));
  absl::StrAppend(out, header, "\n");
  const auto row = [&](const char* name, auto bytes) {
    std::string line = absl::StrFormat("  %-18s", name);
    for (const auto& [label, s] : columns) {
      absl::StrAppend(&line, absl::StrFormat(" %12s", s ? format_bytes(bytes(*s)) : std::string("-")));
    }
    absl::StrAppend(out, line, "\n");
  };
  for (int k = 0; k < training_part_count; ++k) {
    row(training_part_name(training_part(k)), [k](const training_split& s) { return s.by_part[k].at_peak_bytes; });
  }
  row("step peak", [](const training_split& s) { return s.peak_bytes; });
  row("held after", [](const training_split& s) { return s.held_after_bytes; });
  absl::StrAppend(out, "  (each part: requested bytes live at the step's peak; held after: what outlives the\n"
                       "  step, which a later step starts with; Note [Training memory])\n");
  for (const auto& [label, s] : columns) {
    if (s == nullptr) continue;
    absl::StrAppend(out, absl::StrFormat("  peak at %s: event %d (%s), set by %s\n", label, s->peak_at,
                                         training_phase_name(s->peak_phase), s->peak_op.empty() ? "?" : s->peak_op));
  }
  if (!results.empty() && !results.front().predicted.training) {
    absl::StrAppend(out, "  (the predicted split needs the per-allocation fit)\n");
  }
}

}  // namespace

int run_predict(const std::vector<std::string>& args) {
  absl::StatusOr<parsed_args> a = parse_args(args, {{"--trace", ""},
                                                    {"--at", ""},
                                                    {"--algo", ""},
                                                    {"--method", ""},
                                                    {"--parameters-bytes", ""},
                                                    {"--json", "", false},
                                                    {"--help", "-h", false}});
  if (!a.ok()) return usage_error("predict", usage, a.status());
  if (a->has("--help")) return print_help(usage);
  if (!a->positional.empty()) {
    return usage_error("predict", usage, absl::StrCat("unexpected argument '", a->positional[0],
                                                      "'; give traces as --trace BATCH=PATH"));
  }
  const std::vector<std::string> specs = a->get_all("--trace");
  const std::vector<std::string> ats = a->get_all("--at");
  if (specs.size() < 2) return usage_error("predict", usage, "need at least two --trace BATCH=PATH");
  if (ats.empty()) return usage_error("predict", usage, "missing --at BATCH");
  const std::string method = a->get("--method").value_or("auto");
  if (method != "auto" && method != "per_allocation" && method != "linear_peak") {
    return usage_error("predict", usage, absl::StrCat("unknown --method '", method, "'"));
  }
  const std::string algo = a->get("--algo").value_or("best");
  std::uint64_t parameters_bytes = 0;
  if (const std::optional<std::string> s = a->get("--parameters-bytes")) {
    const std::optional<std::uint64_t> v = parse_parameters_bytes(*s);
    if (!v) return usage_error("predict", usage, absl::StrCat("--parameters-bytes '", *s, "' is not a byte count"));
    parameters_bytes = *v;
  }

  std::vector<double> targets;
  for (const std::string& s : ats) {
    const std::optional<double> v = parse_number(s);
    if (!v || *v <= 0 || *v > 1e9) {
      return usage_error("predict", usage, absl::StrCat("--at '", s, "' is not a batch size"));
    }
    targets.push_back(*v);
  }
  std::vector<batch_trace> recordings;
  std::vector<std::string> paths;
  for (const std::string& s : specs) {
    const std::size_t eq = s.find('=');
    const std::optional<double> b = eq == std::string::npos ? std::nullopt : parse_number(s.substr(0, eq));
    if (!b || *b <= 0 || *b > 1e9 || eq + 1 == s.size()) {
      return usage_error("predict", usage, absl::StrCat("--trace '", s, "' is not BATCH=PATH"));
    }
    for (const batch_trace& r : recordings) {
      if (r.batch == *b) {
        return usage_error("predict", usage, absl::StrCat("batch size ", batch_label(*b), " is given twice"));
      }
    }
    recordings.push_back({*b, {}});
    paths.push_back(s.substr(eq + 1));
  }
  std::vector<footprint> measured;
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    absl::StatusOr<trace> t = load_trace(paths[i]);
    if (!t.ok()) return fail("predict", t.status());
    recordings[i].tr = *std::move(t);
    absl::StatusOr<footprint> f = measure(recordings[i].tr, algo, nullptr, parameters_bytes);
    if (!f.ok()) return fail("predict", f.status());
    measured.push_back(*f);
  }

  std::vector<prediction> results;
  for (const double at : targets) {
    absl::StatusOr<prediction> p = predict(recordings, measured, at, algo, parameters_bytes);
    if (!p.ok()) return fail("predict", p.status());
    if (method == "per_allocation" && p->method != "per_allocation") {
      return fail("predict", absl::FailedPreconditionError(absl::StrCat(
                                 "the per-allocation fit does not apply: ", p->why_not_per_allocation)));
    }
    if (method == "linear_peak") p->method = "linear_peak", p->predicted = p->linear;
    results.push_back(*std::move(p));
  }

  if (a->has("--json")) {
    std::vector<std::string> inputs;
    for (std::size_t i = 0; i < recordings.size(); ++i) {
      json_object j;
      j.add("batch", recordings[i].batch).add("path", paths[i]).add_raw("measured", footprint_json(measured[i]));
      inputs.push_back(j.str());
    }
    for (const prediction& p : results) {
      json_object j;
      j.add("at", p.at)
          .add("method", p.method)
          .add_raw("predicted", footprint_json(p.predicted))
          .add_raw("linear_peak", footprint_json(p.linear))
          .add("allocations", static_cast<std::uint64_t>(p.allocations))
          .add("scaling", static_cast<std::uint64_t>(p.scaling))
          .add("constant", static_cast<std::uint64_t>(p.constant));
      if (!p.why_not_per_allocation.empty()) j.add("why_not_per_allocation", p.why_not_per_allocation);
      j.add_raw("inputs", absl::StrCat("[", absl::StrJoin(inputs, ","), "]"));
      std::printf("%s\n", j.str().c_str());
    }
    return exit_ok;
  }

  std::string out = "replayalloc predict\n";
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    absl::StrAppend(&out, "  batch ", batch_label(recordings[i].batch), ": ", paths[i], " (",
                    recordings[i].tr.allocations.size(), " allocations)\n");
  }
  const prediction& first = results.front();
  if (first.method == "per_allocation") {
    absl::StrAppend(&out, absl::StrFormat("  method: per-allocation fit: %d allocations, %d grow with the batch, %d keep their size\n",
                                          first.allocations, first.scaling, first.constant));
  } else if (!first.why_not_per_allocation.empty()) {
    absl::StrAppend(&out, "  method: linear peak (the per-allocation fit does not apply: ",
                    first.why_not_per_allocation, ")\n");
  } else {
    absl::StrAppend(&out, "  method: linear peak\n");
  }
  std::string header = absl::StrFormat("\n  %-14s", "");
  for (const batch_trace& r : recordings) absl::StrAppend(&header, absl::StrFormat(" %12s", "batch " + batch_label(r.batch)));
  for (const prediction& p : results) absl::StrAppend(&header, absl::StrFormat(" %12s", "batch " + batch_label(p.at) + "*"));
  absl::StrAppend(&out, header, "\n");
  const auto row = [&](const char* name, double footprint::*field) {
    std::string line = absl::StrFormat("  %-14s", name);
    for (const footprint& f : measured) absl::StrAppend(&line, absl::StrFormat(" %12s", format_bytes(static_cast<std::uint64_t>(f.*field))));
    for (const prediction& p : results) absl::StrAppend(&line, absl::StrFormat(" %12s", format_bytes(static_cast<std::uint64_t>(p.predicted.*field))));
    absl::StrAppend(&out, line, "\n");
  };
  row("peak live", &footprint::peak_live_bytes);
  row("lower bound", &footprint::lower_bound_bytes);
  row("slab", &footprint::slab_bytes);
  row("persistent", &footprint::persistent_bytes);
  absl::StrAppend(&out, "  (* predicted; slab + persistent is what the iteration needs)\n");
  append_training(&out, recordings, measured, results);
  double largest = 0;
  for (const batch_trace& r : recordings) largest = std::max(largest, r.batch);
  for (const prediction& p : results) {
    if (p.at > largest) {
      absl::StrAppend(&out, "  Beyond the largest recorded batch size the framework may choose other kernels\n"
                            "  (libtorch's CPU convolutions do, between batch 8 and 16), which no fit can\n"
                            "  foresee: record as close to the target as you can (bench/RESULTS.md, predict).\n");
      break;
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return exit_ok;
}

}  // namespace replayalloc::cli
