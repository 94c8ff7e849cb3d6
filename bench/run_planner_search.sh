#!/bin/bash
# bench/run_planner_search.sh: the search planner on MiniMalloc's 11 challenging
# instances, and the fast tier's planning time against the number of allocations;
# writes the "planner-search" section of bench/RESULTS.md.
#
#   bash bench/run_planner_search.sh [BUILD_DIR] [RUNS] [TIME_LIMIT_S]
#
# BUILD_DIR (default build) must have the replayalloc CLI and planner_scaling
# (ninja -C BUILD replayalloc_cli planner_scaling). Per instance
# (bench/planner/minimalloc/*.csv): `replayalloc plan X --slot-align 1 --algo search
# --goal 1048576 --time-limit TIME_LIMIT_S` (default 60), RUNS times (default 3): the
# slab / MiniMalloc's capacity (1,048,576 bytes) and the median wall time to reach it
# (the search stops at the goal), beside best's slab; then without --goal, whether the
# search proves its slab optimal within the limit. Then planner_scaling (1k .. 1M
# synthetic allocations, and the corpus's recorded traces given as extra arguments in
# TRACES). The machine is shared: before each instance's runs and the scaling runs the
# 1-minute load average must be at most 1.5 (else wait 60 s, up to WAIT_TRIES times,
# default 10; the load is written down either way).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=$(cd "${1:-$root/build}" && pwd)
RUNS=${2:-3}
LIMIT=${3:-60}
CLI=$BUILD/allocator/cli/replayalloc
SCALING=$BUILD/bench/planner/planner_scaling
[ -x "$CLI" ] || die "$CLI not built (ninja -C $BUILD replayalloc_cli)"
[ -x "$SCALING" ] || die "$SCALING not built (ninja -C $BUILD planner_scaling)"
CAPACITY=1048576
scratch_dir

# wait_for_quiet: until the 1-minute load is at most 1.5 (WAIT_TRIES waits of 60 s,
# default 10); prints the load it ran at.
wait_for_quiet() {
  local tries=0 load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" 'BEGIN { exit !(l <= 1.5) }' || (( tries >= ${WAIT_TRIES:-10} )); then break; fi
    tries=$((tries + 1))
    sleep 60
  done
  echo "$load"
}

LOADS=()
{
  echo "| instance | buffers | best / capacity | search / capacity | time to reach (s, median of $RUNS) | runs | proven optimal within ${LIMIT} s (slab / capacity, s) |"
  echo "|---|---:|---:|---:|---:|---|---|"
} > "$tmp/search"
for f in "$root"/bench/planner/minimalloc/*.csv; do
  name=$(basename "$f" .1048576.csv)
  best=$("$CLI" plan "$f" --slot-align 1 --algo best -o "$tmp/out.csv")
  times=()
  LOADS+=("$name:$(wait_for_quiet)")
  for ((r = 0; r < RUNS; r++)); do
    out=$("$CLI" plan "$f" --slot-align 1 --algo search --goal $CAPACITY --time-limit "$LIMIT" -o "$tmp/out.csv")
    times+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["plan_ms"] / 1000)' "$out")")
  done
  proof=$("$CLI" plan "$f" --slot-align 1 --algo search --time-limit "$LIMIT" -o "$tmp/out.csv")
  python3 - "$name" "$best" "$out" "$proof" "$CAPACITY" "${times[@]}" >> "$tmp/search" <<'PY'
import json, statistics, sys
name, best, out, proof, cap = sys.argv[1], *map(json.loads, sys.argv[2:5]), int(sys.argv[5])
times = [float(x) for x in sys.argv[6:]]
reached = out["slab_bytes"] <= cap
print(f"| {name} | {out['planned']} | {best['slab_bytes'] / cap:.4f} | {out['slab_bytes'] / cap:.4f} | "
      f"{statistics.median(times):.2f}{'' if reached else ' (not reached)'} | {' '.join(f'{t:.2f}' for t in times)} | "
      f"{'yes' if proof['proven_optimal'] else 'no'} ({proof['slab_bytes'] / cap:.4f}, {proof['plan_ms'] / 1000:.1f}) |")
PY
done
LOADS+=("scaling:$(wait_for_quiet)")
"$SCALING" --runs 5 ${TRACES:-} > "$tmp/scaling"
cat "$tmp/search" "$tmp/scaling" >&2

{
  echo "## Planner: the search on MiniMalloc's instances, and planning time against size"
  echo
  echo "$(utc_now), commit $(source_commit), $(cpu_model) ($(nproc) CPUs, shared with other builds). 1-minute load"
  echo "before each instance's runs and before the scaling runs (goal <= 1.5; when above, the script waited"
  echo "60 s, up to ${WAIT_TRIES:-10} times, then ran anyway):"
  echo "${LOADS[*]}; at the end $(load_average)."
  echo "Command: \`bash bench/run_planner_search.sh $(rel "$BUILD") $RUNS $LIMIT\`."
  echo
  cat <<TEXT
**The search** (\`--algo search\`, planner/search.h, Note [Search for the smallest slab]) on
MiniMalloc's 11 challenging instances (bench/planner/minimalloc, planned byte for byte with
\`--slot-align 1\`): slab / MiniMalloc's capacity (1,048,576 bytes, the lower bound for 8 of
them), wall time until the slab is at most that capacity (\`--goal 1048576\`: the search
stops there), median of $RUNS runs; then one run without a goal: whether the search proves
its slab optimal within $LIMIT s. Every plan passed \`validate()\`. Goal (issue 32): every
instance at 1.000x within 60 s.

TEXT
  cat "$tmp/search"
  echo
  cat <<TEXT
**Planning time against the number of allocations** (\`bench/planner/planner_scaling.cc\`,
synthetic traces of \`bench/planner/synthetic.h\`): \`best\` (above 4096 allocations only its
first stage runs: the four greedy orderings and first fit) and each ordering alone, this
thread's CPU time, median of 5 runs (2 at 1M), slab / lower bound in brackets. Goal
(issue 32): 100 ms at 100,000 allocations for \`best\`'s first stage.

TEXT
  cat "$tmp/scaling"
} > "$tmp/section"
update_results text "$results" --name planner-search --body "$tmp/section"
echo "run_planner_search.sh: wrote the planner-search section of $(rel "$results")" >&2
