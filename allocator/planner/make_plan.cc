// make_plan(): the planners by name.
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/planner.h"

namespace replayalloc {
namespace {

using planner_fn = absl::StatusOr<placement> (*)(const trace&, const planner_options&);

constexpr std::array<std::pair<std::string_view, planner_fn>, 7> planners = {{
    {"best", plan_best},
    {"greedy_by_size", plan_greedy_by_size},
    {"greedy_by_size_class", plan_greedy_by_size_class},
    {"greedy_by_breadth", plan_greedy_by_breadth},
    {"greedy_by_lifetime", plan_greedy_by_lifetime},
    {"greedy_by_arrival", plan_greedy_by_arrival},
    {"first_fit", plan_first_fit},
}};

}  // namespace

const std::vector<std::string>& planner_names() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const auto& [name, fn] : planners) v->emplace_back(name);
    return v;
  }();
  return *names;
}

absl::StatusOr<placement> make_plan(const trace& t, std::string_view algorithm,
                                    const planner_options& o) {
  for (const auto& [name, fn] : planners) {
    if (name == algorithm) return fn(t, o);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown planner '", std::string(algorithm),
                                                 "'; known: ", absl::StrJoin(planner_names(), ", ")));
}

}  // namespace replayalloc
