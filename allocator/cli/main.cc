// replayalloc: the command-line tool over trace and plan files.
//
//   replayalloc plan TRACE -o PLAN [--algo NAME]      plan a trace, write the plan
//   replayalloc report TRACE|PLAN                     peak, lower bound, slab, by kind/op
//   replayalloc viz TRACE|PLAN -o plan.html           the plan as a picture
//   replayalloc predict --trace B=T ... --at B        the footprint at another batch size
//   replayalloc convert IN OUT                        trace CSV <-> binary
//   replayalloc plans [verify|prune] DIR              a plan directory: list, check, clean
//
// Layer: cli. One file per command; cli.h holds what they share.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"

namespace {

constexpr char usage[] =
    "usage: replayalloc COMMAND [ARGS]\n"
    "\n"
    "  plan TRACE -o PLAN [--algo NAME]    plan a trace; PLAN is CSV (id,offset,size) or .raplan\n"
    "  report TRACE|PLAN [--json]          peak, lower bound, slab, memory by kind and by op\n"
    "  viz TRACE|PLAN -o PLAN.html         the plan as a self-contained HTML/SVG picture\n"
    "  predict --trace B=TRACE --trace B=TRACE --at B\n"
    "                                      the peak and slab at another batch size\n"
    "  convert IN OUT [--to F]             a trace or plan: CSV, binary, .raplan, MiniMalloc CSV\n"
    "  plans DIR [--json]                  the plan files in a plan directory (REPLAYALLOC_PLAN_DIR)\n"
    "  plans verify DIR                    whether the engine would load each file there\n"
    "  plans prune DIR [--dry-run]         remove the stale and foreign plans, old temporary files\n"
    "  plans optimize DIR [--time-limit S] search each plan for a smaller slab, rewrite it when found\n"
    "  version                             the library version\n"
    "\n"
    "TRACE is a trace file: binary, or CSV with the header id,size,align,alloc_at,free_at,op\n"
    "(free_at empty when the allocation outlives the iteration). 'replayalloc COMMAND --help'\n"
    "says more.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace replayalloc::cli;
  if (argc < 2) {
    std::fputs(usage, stderr);
    return exit_usage;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "plan") return run_plan(args);
    if (command == "report") return run_report(args);
    if (command == "viz") return run_viz(args);
    if (command == "predict") return run_predict(args);
    if (command == "convert") return run_convert(args);
    if (command == "plans") return run_plans(args);
    if (command == "version" || command == "--version") {
      std::printf("replayalloc %s\n", REPLAYALLOC_VERSION_STRING);
      return exit_ok;
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(usage, stdout);
      return exit_ok;
    }
  } catch (const std::bad_alloc&) {
    // The only exception the commands can meet: an input too big for this machine.
    std::fprintf(stderr, "replayalloc %s: error: out of memory\n", command.c_str());
    return exit_failed;
  }
  std::fprintf(stderr, "replayalloc: unknown command '%s'\n\n%s", command.c_str(), usage);
  return exit_usage;
}
