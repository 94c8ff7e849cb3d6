// replayalloc/planner/exact.h: the optimal placement of a small trace, by a MIP solver.
//
// Layer: planner, offline only: it runs an external program (GLPK's glpsol, Debian's
// glpk-utils) and is never part of the core library or the engine; the CLI links it
// for `--algo exact` (library replayalloc_planner_exact). Slower than the greedy
// planners by orders of magnitude: for tens of allocations, to measure how far the
// heuristics are from the optimum and to plan a small, important trace once.
//
// Note [Exact model]
// ~~~~~~~~~~~~~~~~~~
// In units of slot_align, allocation i has a footprint s_i and an alignment a_i; its
// offset is a_i * k_i for an integer k_i >= 0. The slab H is minimised subject to
// a_i k_i + s_i <= H, and, for every pair whose lifetimes intersect, one binary z_ij
// choosing which of the two lies below the other (big M = an upper bound on H: the
// "best" planner's slab). H is bounded below by lower_bound(): when "best" already
// reaches it, that plan is optimal and no solver runs (unless
// exact_options::always_solve).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "planner/planner.h"
#include "trace/trace.h"

namespace replayalloc {

struct exact_options {
  std::string solver = "glpsol";   // a path, or a name looked up on PATH
  int time_limit_s = 10;           // the solver's own limit (glpsol --tmlim)
  std::size_t max_allocations = 64;  // larger traces are refused (pairs grow as n^2)
  bool always_solve = false;       // run the solver even when "best" is at the bound
  bool keep_files = false;         // leave the model and the solver's log in the temp dir
};

// The optimal placement of `t` (algorithm "exact"; "exact(lower bound)" when "best"
// reached the bound and no solver ran). When the solver stops at its time limit, the
// better of its incumbent and the "best" planner's plan, named "exact(time limit)":
// valid, but not proven optimal. Errors, never crashes:
//   InvalidArgument     a bad trace or options (as every planner);
//   FailedPrecondition  more than max_allocations allocations to place;
//   NotFound            the solver is not installed (says which package has it);
//   Internal            the solver failed, or its answer was unreadable or invalid.
absl::StatusOr<placement> plan_exact(const trace& t, const planner_options& o = {},
                                     const exact_options& x = {});

}  // namespace replayalloc
