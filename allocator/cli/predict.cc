// Footprint prediction (predict.h; Note [Footprint prediction]).
#include "cli/predict.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/analysis.h"
#include "cli/cli.h"
#include "support/config.h"
#include "support/status.h"

namespace replayalloc::cli {
namespace {

// Least-squares line through (x[i], y[i]), evaluated at `at`.
double fit_line(const std::vector<double>& x, const std::vector<double>& y, double at) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i];
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  const double k = sxx == 0 ? 0 : sxy / sxx;
  return my + k * (at - mx);
}

// Op tags that name no op of the model.
bool tagged(std::string_view op) { return op != "unknown" && op != "(outside ops)" && !op.empty(); }

struct op_share {
  std::size_t tagged = 0;  // allocations of `a` with an op tag
  std::size_t shared = 0;  // of which with an op `b` also has
  std::vector<std::string> only;  // a few ops of `a` that `b` never ran, most allocations first
};

op_share share_ops(const trace& a, const trace& b) {
  std::set<std::string_view> theirs;
  for (const trace_allocation& x : b.allocations) {
    if (tagged(b.ops[x.op])) theirs.insert(b.ops[x.op]);
  }
  op_share out;
  std::map<std::string_view, std::size_t> missing;
  for (const trace_allocation& x : a.allocations) {
    const std::string_view op = a.ops[x.op];
    if (!tagged(op)) continue;
    ++out.tagged;
    if (theirs.count(op) != 0) {
      ++out.shared;
    } else {
      ++missing[op];
    }
  }
  std::vector<std::pair<std::size_t, std::string_view>> by_count;
  for (const auto& [op, n] : missing) by_count.push_back({n, op});
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t i = 0; i < by_count.size() && i < 3; ++i) out.only.emplace_back(by_count[i].second);
  return out;
}

std::string quoted_list(const std::vector<std::string>& ops) {
  std::string out;
  for (const std::string& op : ops) absl::StrAppend(&out, out.empty() ? "" : ", ", "'", op, "'");
  return out;
}

}  // namespace

absl::Status one_model(const std::vector<batch_trace>& recordings) {
  constexpr char not_one[] = "the recordings are not of one model: ";
  const batch_trace& first = recordings[0];
  for (std::size_t i = 1; i < recordings.size(); ++i) {
    const batch_trace& r = recordings[i];
    const op_share ab = share_ops(first.tr, r.tr), ba = share_ops(r.tr, first.tr);
    if (ab.tagged != 0 && ba.tagged != 0) {
      // Each way, at least half of the tagged allocations run an op the other ran too.
      if (2 * ab.shared < ab.tagged || 2 * ba.shared < ba.tagged) {
        return absl::FailedPreconditionError(absl::StrCat(
            not_one, ab.shared * 100 / ab.tagged, "% of the allocations at batch ", absl::StrFormat("%g", first.batch),
            " come from an op that batch ", absl::StrFormat("%g", r.batch), " also ran, and ",
            ba.shared * 100 / ba.tagged, "% the other way (ops only at batch ", absl::StrFormat("%g", first.batch),
            ": ", ab.only.empty() ? "none" : quoted_list(ab.only), "; only at batch ", absl::StrFormat("%g", r.batch),
            ": ", ba.only.empty() ? "none" : quoted_list(ba.only),
            "); predict fits recordings of the same model at different batch sizes"));
      }
      continue;
    }
    const std::size_t n = first.tr.allocations.size(), m = r.tr.allocations.size();
    if (n > 2 * m || m > 2 * n) {
      return absl::FailedPreconditionError(absl::StrCat(
          not_one, n, " allocations at batch ", absl::StrFormat("%g", first.batch), " and ", m, " at batch ",
          absl::StrFormat("%g", r.batch), ", more than twice as many (without op tags nothing else tells); "
          "predict fits recordings of the same model at different batch sizes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<footprint> measure(const trace& t, std::string_view algorithm, double* plan_ms,
                                  std::uint64_t parameters_given_bytes) {
  const trace_analysis r = analyze(t);
  absl::StatusOr<placement> p = plan_trace(t, algorithm, planner_options{}, plan_ms);
  if (!p.ok()) return p.status();
  footprint f;
  f.peak_live_bytes = static_cast<double>(r.peak_live_bytes);
  f.lower_bound_bytes = static_cast<double>(r.lower_bound_bytes);
  f.slab_bytes = static_cast<double>(p->slab_bytes);
  f.persistent_bytes = static_cast<double>(r.persistent_bytes);
  f.training = split_training(t, r, planner_options{}, parameters_given_bytes);
  return f;
}

absl::StatusOr<trace> predict_trace(const std::vector<batch_trace>& recordings, double at) {
  REPLAYALLOC_EXPECTS(recordings.size() >= 2, "need recordings at two batch sizes");
  const trace& first = recordings[0].tr;
  for (const batch_trace& r : recordings) {
    REPLAYALLOC_EXPECTS(r.tr.allocations.size() == first.allocations.size(), "the recordings differ in ",
                        "their number of allocations (", first.allocations.size(), " at batch ",
                        recordings[0].batch, ", ", r.tr.allocations.size(), " at batch ", r.batch, ")");
    for (std::size_t i = 0; i < first.allocations.size(); ++i) {
      const trace_allocation& a = first.allocations[i];
      const trace_allocation& b = r.tr.allocations[i];
      REPLAYALLOC_EXPECTS(first.ops[a.op] == r.tr.ops[b.op] && a.outlives() == b.outlives(),
                          "allocation ", i, " differs between batch ", recordings[0].batch, " ('",
                          first.ops[a.op], "') and batch ", r.batch, " ('", r.tr.ops[b.op], "')");
    }
  }
  // Lifetimes (and ids, alignments, ops) come from the recording nearest in batch size.
  const batch_trace* nearest = &recordings[0];
  for (const batch_trace& r : recordings) {
    if (std::abs(r.batch - at) < std::abs(nearest->batch - at)) nearest = &r;
  }
  trace out = nearest->tr;
  std::vector<double> x, y;
  for (const batch_trace& r : recordings) x.push_back(r.batch);
  for (std::size_t i = 0; i < out.allocations.size(); ++i) {
    y.clear();
    for (const batch_trace& r : recordings) y.push_back(static_cast<double>(r.tr.allocations[i].size));
    const double s = std::round(fit_line(x, y, at));
    REPLAYALLOC_EXPECTS(s <= static_cast<double>(detail::max_request_bytes), "allocation ", i,
                        " would need ", s, " bytes at batch ", at, ", above the limit of 2^47");
    // A size that shrinks towards batch 0 may cross zero there; one byte stands for it.
    out.allocations[i].size = s < 1 ? 1 : static_cast<std::uint64_t>(s);
  }
  REPLAYALLOC_RETURN_IF_ERROR(check_plannable(out));
  return out;
}

absl::StatusOr<prediction> predict(const std::vector<batch_trace>& recordings,
                                   const std::vector<footprint>& measured, double at,
                                   std::string_view algorithm, std::uint64_t parameters_given_bytes) {
  REPLAYALLOC_EXPECTS(recordings.size() >= 2 && measured.size() == recordings.size(),
                      "need recordings at two batch sizes");
  REPLAYALLOC_RETURN_IF_ERROR(one_model(recordings));
  prediction out;
  out.at = at;
  std::vector<double> x;
  for (const batch_trace& r : recordings) x.push_back(r.batch);
  const auto line = [&](double footprint::*field) {
    std::vector<double> y;
    for (const footprint& f : measured) y.push_back(f.*field);
    return std::max(0.0, fit_line(x, y, at));
  };
  out.linear.peak_live_bytes = line(&footprint::peak_live_bytes);
  out.linear.lower_bound_bytes = line(&footprint::lower_bound_bytes);
  out.linear.slab_bytes = std::max(out.linear.lower_bound_bytes, line(&footprint::slab_bytes));
  out.linear.persistent_bytes = line(&footprint::persistent_bytes);

  absl::StatusOr<trace> t = predict_trace(recordings, at);
  if (!t.ok()) {
    if (t.status().code() != absl::StatusCode::kInvalidArgument) return t.status();
    out.method = "linear_peak";
    out.why_not_per_allocation = std::string(t.status().message());
    out.predicted = out.linear;
    return out;
  }
  absl::StatusOr<footprint> f = measure(*t, algorithm, &out.plan_ms, parameters_given_bytes);
  if (!f.ok()) return f.status();
  out.method = "per_allocation";
  out.predicted = *f;
  out.allocations = t->allocations.size();
  for (std::size_t i = 0; i < t->allocations.size(); ++i) {
    bool same = true;
    for (const batch_trace& r : recordings) same &= r.tr.allocations[i].size == recordings[0].tr.allocations[i].size;
    (same ? out.constant : out.scaling) += 1;
  }
  return out;
}

}  // namespace replayalloc::cli
