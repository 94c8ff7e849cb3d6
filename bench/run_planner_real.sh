#!/bin/bash
# bench/run_planner_real.sh: the planners on real traces with many buffers live at once
# (issue 44, item 3); writes the "planner-real" section of bench/RESULTS.md.
#
#   bash bench/run_planner_real.sh [BUILD_DIR] [RUNS]
#
# BUILD_DIR (default build) must have the replayalloc CLI (ninja -C BUILD replayalloc_cli).
# Per instance (bench/planner/iopddl/*.csv, each also two and four times over in time as
# X.x2.csv and X.x4.csv: the same buffers again after the last one is freed, for a trace
# of two or four times the buffers with as many live at once; and the files named in
# TRACES) and planner
# (best, then each ordering alone and first fit): `replayalloc plan X --slot-align 1
# --algo A`, RUNS times (default 5): the median of plan_ms (the CLI's own timer: the
# planner alone, not reading the file) and the slab over the lower bound. BEFORE=PATH
# names another build of the CLI (an earlier commit's): each of its runs then goes right
# before the same run of this one, so both see the same load, and the table gives both
# and their ratio. The machine is shared: the 1-minute load is written down before and
# after.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=$(cd "${1:-$root/build}" && pwd)
RUNS=${2:-5}
CLI=$BUILD/allocator/cli/replayalloc
[ -x "$CLI" ] || die "$CLI not built (ninja -C $BUILD replayalloc_cli)"
BEFORE=${BEFORE:-}
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || die "BEFORE=$BEFORE is not an executable"
scratch_dir
ALGOS="best greedy_by_size greedy_by_size_class greedy_by_breadth greedy_by_lifetime greedy_by_arrival first_fit"
load_before=$(load_average)

# run_one CLI FILE ALGO: one JSON line (the CLI's).
run_one() { "$1" plan "$2" --slot-align 1 --algo "$3" -o "$tmp/out.csv"; }

: > "$tmp/rows"
# times_over K FILE OUT: FILE (id,lower,upper,size) K times, each copy shifted past the
# end of the one before.
times_over() {
  awk -F, -v times="$1" 'NR == 1 { print; next } { n++; lo[n] = $2; up[n] = $3; sz[n] = $4; if ($3 > end) end = $3 }
           END { for (k = 0; k < times; k++) for (i = 1; i <= n; i++) print k * n + i - 1 "," lo[i] + k * end "," up[i] + k * end "," sz[i] }' "$2" > "$3"
}
corpus=()
for f in "$root"/bench/planner/iopddl/*.csv; do
  corpus+=("$f")
  for k in 2 4; do
    times_over "$k" "$f" "$tmp/$(basename "$f" .csv).x$k.csv"
    corpus+=("$tmp/$(basename "$f" .csv).x$k.csv")
  done
done
for f in "${corpus[@]}" ${TRACES:-}; do
  name=$(basename "$f")
  for algo in $ALGOS; do
    for ((r = 0; r < RUNS; r++)); do
      # A planner the earlier CLI does not have is run by this build only ("-" before).
      if [ -n "$BEFORE" ] && "$BEFORE" plan --help 2>&1 | grep -qw -- "$algo"; then
        echo "$name $algo before $(run_one "$BEFORE" "$f" "$algo")" >> "$tmp/rows"
      fi
      echo "$name $algo after $(run_one "$CLI" "$f" "$algo")" >> "$tmp/rows"
    done
  done
done
python3 - "$tmp/rows" "${BEFORE:+yes}" > "$tmp/table" <<'PY'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, algo, which, js = line.split(" ", 3)
    rows[(name, algo, which)].append(json.loads(js))
before = sys.argv[2] == "yes"
if before:
    print("| trace | buffers | planner | before: ms | slab / lower bound | after: ms | slab / lower bound | after / before (time) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
else:
    print("| trace | buffers | planner | ms | slab / lower bound |")
    print("|---|---:|---|---:|---:|")
seen = []
for (name, algo, which) in rows:
    if (name, algo) not in seen:
        seen.append((name, algo))
def cell(runs):
    ms = statistics.median(r["plan_ms"] for r in runs)
    ratios = {r["slab_bytes"] / max(1, r["lower_bound_bytes"]) for r in runs}
    assert len(ratios) == 1, "a planner gave two slabs for one trace"
    return ms, ratios.pop(), runs[0]
for name, algo in seen:
    a_ms, a_ratio, a = cell(rows[(name, algo, "after")])
    if before:
        if rows.get((name, algo, "before")):
            b_ms, b_ratio, b = cell(rows[(name, algo, "before")])
            b_cells = f"{b_ms:.0f} | {b_ratio:.4f}"
            b_cells += f" ({b['algorithm']})" if b["algorithm"] != a["algorithm"] else ""
            ratio = f"{a_ms / b_ms:.2f}"
        else:
            b_cells, ratio = "- | -", "-"
        print(f"| {name} | {a['planned']} | {a['algorithm']} | {b_cells} | {a_ms:.0f} | {a_ratio:.4f} | {ratio} |")
    else:
        print(f"| {name} | {a['planned']} | {a['algorithm']} | {a_ms:.0f} | {a_ratio:.4f} |")
PY
cat "$tmp/table" >&2
before_line=""
[ -z "$BEFORE" ] || before_line="Before: the CLI named by BEFORE, each of its runs right before the same run of this build's."
{
  echo "## Planner: real traces with many buffers live at once"
  echo
  echo "$(utc_now), commit $(source_commit), $(cpu_model) ($(nproc) CPUs, shared with other builds). 1-minute load"
  echo "before: $load_before; after: $(load_average)."
  echo "Command: \`${BEFORE:+BEFORE=$(rel "$BEFORE") }bash bench/run_planner_real.sh $(rel "$BUILD") $RUNS\`."
  echo
  cat <<TEXT
Each planner on real traces (bench/planner/iopddl: 28,526 buffers, about 3,000 live at any
moment; X.x2, X.x4: the trace two and four times over in time, as many buffers live at once${TRACES:+; and
$(for t in $TRACES; do basename "$t"; done | paste -sd, -)}), byte for byte (\`--slot-align 1\`): the median of $RUNS runs of the CLI's plan_ms (the
planner alone), the slab over the lower bound (the peak of live bytes; no optimum known).
$before_line
Goal (issue 44): \`best\` under 1 s and within 1.01x of the lower bound.

TEXT
  cat "$tmp/table"
} > "$tmp/section"
update_results text "$results" --name planner-real --body "$tmp/section"
echo "run_planner_real.sh: wrote the planner-real section of $(rel "$results")" >&2
