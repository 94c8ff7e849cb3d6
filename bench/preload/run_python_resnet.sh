#!/usr/bin/env bash
# The Python ResNet-50 loop (Debian's python3, torchvision, random weights) under
# glibc, jemalloc, tcmalloc, mimalloc and replayalloc (LD_PRELOAD, auto mode), each in
# its own process, alternated round by round; medians over rounds. Writes the table
# to stdout. Usage: run_python_resnet.sh PRELOAD_LIBRARY [ROUNDS] [ITERATIONS]
set -uo pipefail
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { sed -n '2,5p' "$0"; exit 2; }
lib=$1
rounds=${2:-3}
iters=${3:-20}
py=$(torch_python) || exit 1
declare -A preload=(
  [glibc]=""
  [jemalloc]="$(allocator_library jemalloc)"
  [tcmalloc]="$(allocator_library tcmalloc)"
  [mimalloc]="$(allocator_library mimalloc)"
  [replayalloc]="$lib"
)
order=(glibc jemalloc tcmalloc mimalloc replayalloc)
scratch_dir
out=$tmp/runs.jsonl
for r in $(seq 1 "$rounds"); do
  [ $((r % 2)) -eq 0 ] && order=(replayalloc mimalloc tcmalloc jemalloc glibc) || order=(glibc jemalloc tcmalloc mimalloc replayalloc)
  for a in "${order[@]}"; do
    p=${preload[$a]}
    if [ -n "$p" ] && [ ! -e "$p" ]; then echo "missing $p" >&2; continue; fi
    line=$(LD_PRELOAD=$p "$py" "$root/bench/preload/python_resnet.py" "$iters" 6) || line='{"error": true}'
    echo "{\"allocator\": \"$a\", \"round\": $r, \"run\": $line}" >> "$out"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    if "error" not in r["run"]:
        by[r["allocator"]].append(r["run"])
med = lambda a, k: statistics.median(x[k] for x in by[a])
base = med("glibc", "p50_ms")
best = min((a for a in by if a not in ("glibc", "replayalloc")), key=lambda a: med(a, "p50_ms"))
digests = {x["digest"] for a in by for x in by[a]}
print("| allocator | p50 ms | p99 ms | vs glibc | vs best general-purpose (%s) | minor faults / inference | peak RSS MiB |" % best)
print("|---|---|---|---|---|---|---|")
for a in ("glibc", "jemalloc", "tcmalloc", "mimalloc", "replayalloc"):
    if a not in by: continue
    print(f"| {a} | {med(a,'p50_ms'):.1f} | {med(a,'p99_ms'):.1f} | {med(a,'p50_ms')/base:.3f}x | "
          f"{med(a,'p50_ms')/med(best,'p50_ms'):.3f}x | {med(a,'faults_per_inference'):.0f} | {med(a,'peak_rss_mib'):.0f} |")
print(f"\n{len(rows)} runs; outputs {'bit-identical across all runs' if len(digests) == 1 else 'DIFFER: ' + str(digests)}")
PY
