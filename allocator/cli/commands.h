// replayalloc/cli/commands.h: the commands of the `replayalloc` tool, one file each.
//
// Layer: cli. Each takes the arguments after its name and returns the exit code
// (cli.h); each prints its usage on --help and on a wrong command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replayalloc::cli {

int run_plan(const std::vector<std::string>& args);     // plan_command.cc
int run_convert(const std::vector<std::string>& args);  // convert_command.cc
int run_report(const std::vector<std::string>& args);   // report_command.cc
int run_viz(const std::vector<std::string>& args);      // viz_command.cc
int run_predict(const std::vector<std::string>& args);  // predict_command.cc
int run_plans(const std::vector<std::string>& args);    // plans_command.cc: plans, plans verify, plans prune

// `plans optimize DIR` (plans_optimize.cc), called by run_plans with its parsed arguments.
struct parsed_args;
int run_plans_optimize(const parsed_args& a, std::uint64_t slot_align, double time_limit_s);

}  // namespace replayalloc::cli
