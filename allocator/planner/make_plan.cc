// make_plan(): the planners by name.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/planner.h"

namespace replayalloc {

const std::vector<std::string>& planner_names() {
  static const auto* names = new std::vector<std::string>{"best", "greedy_by_size"};
  return *names;
}

absl::StatusOr<placement> make_plan(const trace& t, std::string_view algorithm,
                                    const planner_options& o) {
  if (algorithm == "best" || algorithm == "greedy_by_size") {
    absl::StatusOr<placement> p = plan_greedy_by_size(t, o);
    if (p.ok() && algorithm == "best") p->algorithm = "best(greedy_by_size)";
    return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown planner '", std::string(algorithm),
                                                 "'; known: ", absl::StrJoin(planner_names(), ", ")));
}

}  // namespace replayalloc
