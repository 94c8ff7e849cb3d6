// `replayalloc plans optimize DIR [--time-limit S]`: shipped plan files improved
// offline by the search (planner/search.h).
//
// Layer: cli. Each file the engine would load (verdict ok, cli/plan_dir.h) is searched
// for a smaller slab under the same trace and slot alignment; a file is rewritten only
// when the search found one, atomically (write_file_atomic: a reader never sees half a
// file), with every field but the placement as it was (key, signature, library
// version, least sizes, when made), so the engine loads it as before. Files it would
// not load are left alone and listed as skipped.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/plan_dir.h"
#include "planner/plan_file.h"
#include "planner/search.h"
#include "support/file_io.h"

namespace replayalloc::cli {

int run_plans_optimize(const parsed_args& a, std::uint64_t slot_align, double time_limit_s) {
  const std::string& dir = a.positional[0];
  absl::StatusOr<std::vector<entry>> entries = judge_dir(dir, slot_align);
  if (!entries.ok()) return fail("plans optimize", entries.status());
  if (absl::Status s = check_private_dir(dir); !s.ok()) return fail("plans optimize", s);
  const bool json = a.has("--json");
  std::string rows;
  int rewritten = 0, failed = 0, skipped = 0, optimal = 0;
  if (!json) {
    std::printf("replayalloc plans optimize: %s (search up to %g s per file)\n", dir.c_str(), time_limit_s);
    std::printf("  %-40s %14s %14s %14s %9s %8s  %s\n", "file", "slab before", "slab after", "lower bound",
                "after/LB", "optimal", "action");
  }
  for (const entry& e : *entries) {
    if (!is_plan_name(e.name)) continue;
    if (e.v != verdict::ok || !e.plan) {
      ++skipped;
      if (!json) std::printf("  %-40s skipped: %s\n", e.name.c_str(), verdict_name(e.v));
      continue;
    }
    const plan_file& f = *e.plan;
    planner_options o;
    o.slot_align = f.slot_align;
    search_options so;
    so.time_limit_s = time_limit_s;
    absl::StatusOr<search_result> r = search_plan(f.tr, o, so);
    std::string action = "kept";
    std::uint64_t after = f.p.slab_bytes, bound = f.p.lower_bound_bytes;
    bool proven = f.p.slab_bytes <= f.p.lower_bound_bytes;
    if (!r.ok()) {
      action = absl::StrCat("failed: ", r.status().message());
      ++failed;
    } else {
      if (r->plan.slab_bytes < f.p.slab_bytes && validate(f.tr, r->plan, o).ok()) {
        plan_file g = f;
        g.p = r->plan;
        const std::string path = absl::StrCat(dir, "/", e.name);
        if (absl::Status s = write_file_atomic(path, encode_plan(g)); s.ok()) {
          after = g.p.slab_bytes;
          action = "rewritten";
          ++rewritten;
        } else {
          action = absl::StrCat("failed: ", s.message());
          ++failed;
        }
      }
      proven = after <= r->lower_bound || (r->proven_optimal && after == r->plan.slab_bytes);
    }
    optimal += proven;
    const double ratio = bound == 0 ? 1.0 : static_cast<double>(after) / static_cast<double>(bound);
    if (json) {
      json_object j;
      j.add("file", e.name)
          .add("key", f.tr.key)
          .add("slab_before", f.p.slab_bytes)
          .add("slab_after", after)
          .add("lower_bound", bound)
          .add("ratio_to_lower_bound", ratio)
          .add("proven_optimal", proven)
          .add("action", action);
      absl::StrAppend(&rows, rows.empty() ? "" : ",", j.str());
    } else {
      std::printf("  %-40s %14s %14s %14s %9.4f %8s  %s\n", e.name.c_str(), format_bytes(f.p.slab_bytes).c_str(),
                  format_bytes(after).c_str(), format_bytes(bound).c_str(), ratio, proven ? "yes" : "no",
                  action.c_str());
    }
  }
  if (json) {
    std::printf("{\"dir\":%s,\"files\":[%s],\"rewritten\":%d,\"proven_optimal\":%d,\"skipped\":%d,\"failed\":%d}\n",
                json_quote(dir).c_str(), rows.c_str(), rewritten, optimal, skipped, failed);
  } else {
    std::printf("%d rewritten, %d proven optimal, %d skipped, %d failed\n", rewritten, optimal, skipped, failed);
  }
  return failed == 0 ? exit_ok : exit_failed;
}

}  // namespace replayalloc::cli
