#!/bin/bash
# bench/run_planner_vs_minimalloc.sh: replayalloc's search beside MiniMalloc itself on
# MiniMalloc's 11 challenging instances, side by side in one run; writes the
# "planner-minimalloc" section of bench/RESULTS.md (issue 44, item 2).
#
#   bash bench/run_planner_vs_minimalloc.sh [BUILD_DIR] [RUNS]
#
# MiniMalloc is built offline from MINIMALLOC_SRC (default ../shared/peers/minimalloc
# beside the repository: its source at a fixed commit, with the shims Debian's Abseil
# needs; its README says what was changed) into BUILD_DIR/minimalloc-peer. Per
# instance (bench/planner/minimalloc/*.csv), RUNS rounds (default 3), the order of the
# programs rotated each round:
#   minimalloc  `minimalloc --capacity=1048576`: its solver's time ("Elapsed time");
#   search      `replayalloc plan X --slot-align 1 --algo search --goal 1048576
#               --time-limit 60`: the same question (a placement under 1,048,576
#               bytes), its plan_ms;
#   before      the same with the CLI named by BEFORE (optional: another build);
#   default     `replayalloc plan X --slot-align 1`: what a user gets (best, then the
#               search within its 5 s budget): slab / capacity and whether proven.
# Every plan is checked by the CLI (validate()) and MiniMalloc's by its own validator.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=$(cd "${1:-$root/build}" && pwd)
RUNS=${2:-3}
CLI=$BUILD/allocator/cli/replayalloc
[ -x "$CLI" ] || die "$CLI not built (ninja -C $BUILD replayalloc_cli)"
SRC=${MINIMALLOC_SRC:-$root/../shared/peers/minimalloc}
[ -f "$SRC/CMakeLists.txt" ] || die "MiniMalloc's source not found at $SRC (set MINIMALLOC_SRC)"
PEER=$BUILD/minimalloc-peer
if [ ! -x "$PEER/minimalloc" ]; then
  cmake -S "$SRC" -B "$PEER" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$PEER" > /dev/null
fi
BEFORE=${BEFORE:-}
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || die "BEFORE=$BEFORE is not an executable CLI"
CAPACITY=1048576
scratch_dir

programs=(minimalloc search default)
[ -z "$BEFORE" ] || programs=(minimalloc search before default)
load_before=$(load_average)
for f in "$root"/bench/planner/minimalloc/*.csv; do
  name=$(basename "$f" .1048576.csv)
  for ((r = 0; r < RUNS; r++)); do
    for p in $(rotated $((r + 1)) "${programs[@]}"); do
      case $p in
        minimalloc)
          err=$("$PEER/minimalloc" --capacity=$CAPACITY --input="$f" --output="$tmp/mm.csv" --validate 2>&1 >/dev/null) ||
            die "minimalloc failed on $name: $err"
          secs=$(sed -n 's/.*Elapsed time \([0-9.]*\).*/\1/p' <<< "$err" | head -n1)
          [ -n "$secs" ] || die "no elapsed time from minimalloc on $name: $err"
          echo "$name minimalloc $secs" >> "$tmp/runs" ;;
        search|before)
          exe=$CLI
          [ "$p" = before ] && exe=$BEFORE
          out=$("$exe" plan "$f" --slot-align 1 --algo search --goal $CAPACITY --time-limit 60 -o "$tmp/out.csv")
          python3 -c 'import json,sys; d=json.loads(sys.argv[3]); print(sys.argv[1], sys.argv[2], d["plan_ms"]/1000, d["slab_bytes"], d["search_nodes"])' \
            "$name" "$p" "$out" >> "$tmp/runs" ;;
        default)
          out=$("$CLI" plan "$f" --slot-align 1 -o "$tmp/out.csv")
          python3 -c 'import json,sys; d=json.loads(sys.argv[2]); print(sys.argv[1], "default", d["plan_ms"]/1000, d["slab_bytes"], int(d["proven_optimal"]))' \
            "$name" "$out" >> "$tmp/runs" ;;
      esac
    done
  done
done

python3 - "$tmp/runs" "$CAPACITY" "${BEFORE:+1}" > "$tmp/table" <<'PY'
import collections, math, statistics, sys
runs, cap, with_before = sys.argv[1], int(sys.argv[2]), bool(sys.argv[3:] and sys.argv[3])
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(runs):
    name, prog, *vals = line.split()
    rows[name][prog].append(vals)
med = lambda xs: statistics.median(float(x[0]) for x in xs)
head = "| instance | MiniMalloc s | search s | search ÷ MiniMalloc |"
if with_before:
    head += " before s | before ÷ MiniMalloc |"
head += " default plan: slab / capacity (s, proven) |"
print(head)
print("|---|" + "---:|" * (head.count("|") - 2))
ratios, before_ratios = [], []
for name in sorted(rows):
    r = rows[name]
    mm, se = med(r["minimalloc"]), med(r["search"])
    assert all(int(x[1]) <= cap for x in r["search"]), f"{name}: the search missed the capacity"
    ratios.append(se / mm)
    line = f"| {name} | {mm:.2f} | {se:.2f} | {se / mm:.2f} |"
    if with_before:
        be = med(r["before"])
        before_ratios.append(be / mm)
        line += f" {be:.2f} | {be / mm:.2f} |"
    d = r["default"]
    slabs = sorted({int(x[1]) / cap for x in d})
    line += (" " + " / ".join(f"{s:.4f}" for s in slabs) +
             f" ({statistics.median(float(x[0]) for x in d):.2f}, {sum(int(x[2]) for x in d)}/{len(d)} proven) |")
    print(line)
geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print()
print(f"Geometric mean of search ÷ MiniMalloc: {geo(ratios):.2f} (instances faster than MiniMalloc: "
      f"{sum(x < 1 for x in ratios)} of {len(ratios)})" +
      (f"; before: {geo(before_ratios):.2f} ({sum(x < 1 for x in before_ratios)} of {len(before_ratios)})"
       if with_before else "") + ".")
PY
cat "$tmp/table" >&2

{
  echo "## Planner: the search beside MiniMalloc, side by side"
  echo
  echo "$(utc_now), commit $(source_commit), $(cpu_model) ($(nproc) CPUs, shared). 1-minute load before: $load_before; after: $(load_average)."
  echo "Command: \`${BEFORE:+BEFORE=$BEFORE }bash bench/run_planner_vs_minimalloc.sh $(rel "$BUILD") $RUNS\` (MiniMalloc built from $(rel "$SRC"))."
  echo
  cat <<TEXT
Both answer MiniMalloc's question on its 11 challenging instances (bench/planner/minimalloc): a
placement under 1,048,576 bytes, byte for byte. **MiniMalloc s**: its solver's time at
\`--capacity=1048576\` (its defaults: the three preorders round robin); **search s**:
\`replayalloc plan X --slot-align 1 --algo search --goal 1048576\`, the CLI's plan_ms;
medians of $RUNS rounds, the programs' order rotated each round. **default plan**: what
\`replayalloc plan X --slot-align 1\` gives (best, then the search within 5 s; Note [Rounds
of the search]), the slabs of the rounds over the capacity. Goal (issue 44): the search's
time at most MiniMalloc's on every instance; the default plan at 1.000x the capacity.

TEXT
  cat "$tmp/table"
} > "$tmp/section"
update_results text "$results" --name planner-minimalloc --body "$tmp/section"
echo "run_planner_vs_minimalloc.sh: wrote the planner-minimalloc section of $(rel "$results")" >&2
