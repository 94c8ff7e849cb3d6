// A training step's memory by part (training.h; Note [Training memory]).
#include "cli/training.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cli.h"

namespace replayalloc::cli {

const char* training_part_name(training_part p) {
  switch (p) {
    case training_part::parameters: return "parameters";
    case training_part::gradients: return "gradients";
    case training_part::optimizer_state: return "optimizer state";
    case training_part::saved_activations: return "saved activations";
    case training_part::outputs: return "outputs";
    case training_part::workspace: return "workspace";
    case training_part::temporaries: return "temporaries";
  }
  return "?";
}

const char* training_part_key(training_part p) {
  switch (p) {
    case training_part::parameters: return "parameters";
    case training_part::gradients: return "gradients";
    case training_part::optimizer_state: return "optimizer_state";
    case training_part::saved_activations: return "saved_activations";
    case training_part::outputs: return "outputs";
    case training_part::workspace: return "workspace";
    case training_part::temporaries: return "temporaries";
  }
  return "?";
}

const char* training_phase_name(training_phase p) {
  switch (p) {
    case training_phase::forward: return "forward";
    case training_phase::backward: return "backward";
    case training_phase::optimizer: return "optimizer";
  }
  return "?";
}

// This Abseil's string_view is its own type, not std::string_view: names are copied.
bool is_backward_op(std::string_view name) {
  const std::string s(name);
  return absl::StrContains(absl::AsciiStrToLower(s), "backward") || absl::StartsWith(s, "autograd::");
}

bool is_optimizer_op(std::string_view name) {
  return absl::StrContains(absl::AsciiStrToLower(std::string(name)), "optimizer");
}

std::optional<training_split> split_training(const trace& t, const trace_analysis& r,
                                             const planner_options& o,
                                             std::uint64_t parameters_given_bytes) {
  const std::size_t n = t.allocations.size();
  // Which ops mark a phase, decided once per op name, not per allocation.
  std::vector<bool> backward_op(t.ops.size()), optimizer_op(t.ops.size());
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    backward_op[i] = is_backward_op(t.ops[i]);
    optimizer_op[i] = is_optimizer_op(t.ops[i]);
  }
  const auto op_is = [&](const std::vector<bool>& marks, const trace_allocation& a) {
    return a.op < marks.size() && marks[a.op];
  };
  // Allocations are in alloc_at order: the first marked one starts the phase.
  std::size_t b = 0;
  while (b < n && !op_is(backward_op, t.allocations[b])) ++b;
  if (b == n) return std::nullopt;  // no backward op: not a training step

  training_split s;
  s.end = r.events;
  s.backward_at = t.allocations[b].alloc_at;
  s.optimizer_at = s.end;
  std::uint64_t optimizer_last = s.end;  // the last optimizer op's allocation
  for (std::size_t i = b; i < n; ++i) {
    if (!op_is(optimizer_op, t.allocations[i])) continue;
    if (!s.has_optimizer) s.optimizer_at = t.allocations[i].alloc_at;
    s.has_optimizer = true;
    optimizer_last = t.allocations[i].alloc_at;
  }
  // The step starts computing at its first allocation that dies inside it; outliving
  // allocations made before that are parameters (a model built inside the step).
  std::uint64_t computes_at = s.end;
  for (const trace_allocation& a : t.allocations) {
    if (!a.outlives()) {
      computes_at = a.alloc_at;
      break;
    }
  }

  s.parts.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    const training_phase phase = s.phase_of(a.alloc_at);
    training_part& p = s.parts[i];
    if (a.outlives()) {
      switch (phase) {
        case training_phase::forward:
          p = a.alloc_at < computes_at ? training_part::parameters : training_part::outputs;
          break;
        case training_phase::backward: p = training_part::gradients; break;
        case training_phase::optimizer: p = training_part::optimizer_state; break;
      }
    } else if (phase == training_phase::backward && a.free_at > optimizer_last) {
      p = training_part::gradients;  // zero_grad(set_to_none=True) frees them at the end
    } else if (phase == training_phase::forward && a.free_at > s.backward_at) {
      p = training_part::saved_activations;
    } else if (r.kinds[i] == memory_kind::workspace) {
      p = training_part::workspace;
    } else {
      p = training_part::temporaries;
    }
  }

  s.parameters_given_bytes = parameters_given_bytes;
  s.peak_bytes = r.peak_live_bytes + parameters_given_bytes;
  s.peak_at = r.peak_live_at;
  s.peak_phase = s.phase_of(s.peak_at);
  // The peak is met right after an allocation at peak_at: the last one made there.
  const auto after = std::upper_bound(t.allocations.begin(), t.allocations.end(), s.peak_at,
                                      [](std::uint64_t at, const trace_allocation& a) { return at < a.alloc_at; });
  if (after != t.allocations.begin() && std::prev(after)->alloc_at == s.peak_at) {
    const std::uint32_t op = std::prev(after)->op;
    s.peak_op = op < t.ops.size() ? t.ops[op] : "unknown";
  }

  training_row& params = s.by_part[static_cast<int>(training_part::parameters)];
  params.total_bytes = params.at_peak_bytes = parameters_given_bytes;
  s.held_after_bytes = parameters_given_bytes;
  for (std::size_t i = 0; i < n; ++i) {
    const trace_allocation& a = t.allocations[i];
    training_row& row = s.by_part[static_cast<int>(s.parts[i])];
    row.count += 1;
    row.total_bytes += a.size;
    row.largest_bytes = std::max(row.largest_bytes, a.size);
    if (a.alloc_at <= s.peak_at && (a.outlives() || s.peak_at < a.free_at)) row.at_peak_bytes += a.size;
    // As analyze()'s at_peak_bytes: slab-eligible allocations live at the lower bound's peak.
    if (!a.outlives() && r.lower_bound_bytes > 0 && a.alloc_at <= r.peak_at && r.peak_at < a.free_at) {
      row.at_slab_peak_bytes += slot_footprint(a, o);
    }
    if (a.outlives()) s.held_after_bytes += a.size;
  }
  return s;
}

std::optional<std::uint64_t> parse_parameters_bytes(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(std::string(s), &v) || v >= (std::uint64_t{1} << 62)) {
    return std::nullopt;
  }
  return v;
}

std::string training_json(const training_split& s) {
  std::vector<std::string> parts;
  for (int k = 0; k < training_part_count; ++k) {
    const training_row& row = s.by_part[k];
    json_object j;
    j.add("name", training_part_key(training_part(k)))
        .add("count", row.count)
        .add("total_bytes", row.total_bytes)
        .add("at_peak_bytes", row.at_peak_bytes)
        .add("at_slab_peak_bytes", row.at_slab_peak_bytes)
        .add("largest_bytes", row.largest_bytes);
    parts.push_back(j.str());
  }
  json_object j;
  j.add("backward_at", s.backward_at)
      .add("optimizer_at", s.optimizer_at)
      .add("end", s.end)
      .add("has_optimizer", s.has_optimizer)
      .add("parameters_given_bytes", s.parameters_given_bytes)
      .add("peak_bytes", s.peak_bytes)
      .add("peak_at", s.peak_at)
      .add("peak_phase", training_phase_name(s.peak_phase))
      .add("peak_op", s.peak_op)
      .add("held_after_bytes", s.held_after_bytes)
      .add_raw("parts", absl::StrCat("[", absl::StrJoin(parts, ","), "]"));
  return j.str();
}

}  // namespace replayalloc::cli
