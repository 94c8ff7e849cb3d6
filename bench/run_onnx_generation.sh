#!/usr/bin/env bash
# bench/run_onnx_generation.sh: LLM generation in a second framework (issue 41): ONNX
# Runtime (onnxruntime-node, CPU, from the npm registry) runs a GPT-2-shaped decoder
# exported from PyTorch with its key/value cache as inputs and outputs
# (bench/onnx/export_decoder.py: 4 layers, width 256, vocabulary 8,000, random weights),
# greedily, feeding the cache back each step (bench/onnx/generate.js), prompts and
# generations of 8..64 tokens drawn per request. Nothing is marked. Allocators: glibc,
# jemalloc, tcmalloc, mimalloc and replayalloc's LD_PRELOAD library (auto mode), each in
# a process of its own, the order rotated every round; medians over rounds, ratios to
# the best general-purpose allocator (a general-purpose allocator's own ratio is to the
# best of the others). Cells (CELLS, default "1:off 2:off 1:on 2:on"): SESSIONS:ARENA,
# T ONNX Runtime sessions generating at once, ONNX Runtime's CPU arena and memory
# pattern off (every tensor a malloc) or on (its defaults).
# EXTRA="NAME=LIBRARY ..." adds preloaded libraries (a build of another commit, to
# compare before and after); EXTRA_CONF="NAME=CONF ..." adds replayalloc's library run
# with MALLOC_CONF=CONF (its fallback's jemalloc settings: e.g. those before a change);
# EXTRA_ENV="NAME=VAR=VALUE;VAR=VALUE ..." one run with replayalloc's own settings.
# Writes the "Generation in a second framework" section of RESULTS.md (NO_RESULTS=1:
# prints it only; RUNS_OUT=FILE also keeps every run's line and statistics there).
# Node.js and npm: scripts/setup.sh --onnx installs Debian's; onnxruntime-node is
# installed into build-onnx/ (its postinstall's download of CUDA binaries skipped).
# Usage: bench/run_onnx_generation.sh [ROUNDS] [REQUESTS] [WARMUP]   (default 3 30 10:
# per session, the warm-up requests untimed)
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
requests=${2:-30}
warmup=${3:-10}
cells=${CELLS:-1:off 2:off 1:on 2:on}
build=${BUILD_DIR:-$root/build}
onnx=$root/build-onnx
command -v node > /dev/null && command -v npm > /dev/null || die "node and npm missing (scripts/setup.sh --onnx)"
build_targets "$build" replayalloc_preload || die "build failed"
py=$(torch_python) || exit 1
mkdir -p "$onnx"
if [[ ! -d $onnx/node_modules/onnxruntime-node ]]; then
  (cd "$onnx" && [[ -f package.json ]] || echo '{"private": true}' > package.json
   cd "$onnx" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund onnxruntime-node@1.30.0 > npm.log 2>&1) ||
    die "npm install onnxruntime-node failed ($onnx/npm.log)"
fi
model=$onnx/decoder.onnx
[[ -f $model ]] || "$py" "$root/bench/onnx/export_decoder.py" "$model" > /dev/null 2>&1 || die "export failed"
scratch_dir
declare -A preload=(
  [glibc]="" [jemalloc]="$(allocator_library jemalloc)" [tcmalloc]="$(allocator_library tcmalloc)"
  [mimalloc]="$(allocator_library mimalloc)" [replay-auto]="$(preload_library "$build")"
)
all=(glibc jemalloc tcmalloc mimalloc replay-auto)
declare -A conf=()
for e in ${EXTRA:-}; do
  preload[${e%%=*}]=${e#*=}
  all+=("${e%%=*}")
done
for e in ${EXTRA_CONF:-}; do
  preload[${e%%=*}]=${preload[replay-auto]}
  conf[${e%%=*}]=${e#*=}
  all+=("${e%%=*}")
done
declare -A more=()
for e in ${EXTRA_ENV:-}; do  # NAME=VAR=VALUE;VAR=VALUE: replayalloc's library with those settings
  preload[${e%%=*}]=${preload[replay-auto]}
  more[${e%%=*}]=${e#*=}
  all+=("${e%%=*}")
done
machine_meta "$build" > "$tmp/meta"
out=$tmp/runs.jsonl
for r in $(seq 1 "$rounds"); do
  mapfile -t order < <(rotated "$r" "${all[@]}")
  for cell in $cells; do
    sessions=${cell%%:*} arena=${cell##*:}
    for a in "${order[@]}"; do
      rm -f "$tmp/stats.json"
      # shellcheck disable=SC2086
      line=$(cd "$onnx" && env ${conf[$a]:+MALLOC_CONF=${conf[$a]}} ${more[$a]:+${more[$a]//;/ }} \
             NODE_PATH=$onnx/node_modules LD_PRELOAD=${preload[$a]} REPLAYALLOC_STATS=$tmp/stats.json REPLAYALLOC_STATS_IDLE=1 \
             node "$root/bench/onnx/generate.js" "$model" --sessions "$sessions" --arena "$arena" \
             --warmup "$warmup" --requests "$requests" 2> /dev/null | tail -n 1)
      [ -n "$line" ] || line='{"error": true}'
      stats=$(cat "$tmp/stats.json" 2> /dev/null || echo null)
      echo "{\"allocator\": \"$a\", \"cell\": \"$cell\", \"round\": $r, \"run\": $line, \"stats\": ${stats:-null}}" >> "$out"
      echo "round $r $cell $a: ${line:0:150}" >&2
    done
  done
done
echo "load_after=$(load_average)" >> "$tmp/meta"
[ -z "${RUNS_OUT:-}" ] || cp "$out" "$RUNS_OUT"  # every run's line and statistics, kept
prefix="${EXTRA:+EXTRA=\"$EXTRA\" }${EXTRA_CONF:+EXTRA_CONF=\"$EXTRA_CONF\" }${EXTRA_ENV:+EXTRA_ENV=\"$EXTRA_ENV\" }"
python3 - "$out" "$tmp/meta" "$rounds" "$requests" "$warmup" "$cells" "${all[*]}" "$prefix" > "$tmp/section" <<'PY' ||
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
rounds, requests, warmup, cells, names = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6].split(), sys.argv[7].split()
prefix = sys.argv[8]
general = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
if not any("error" not in r["run"] for r in rows):
    sys.exit("every run failed: no section written")
print("## Generation in a second framework: ONNX Runtime under Node.js")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `{prefix}bench/run_onnx_generation.sh {rounds} {requests} {warmup}` ({rounds} rounds, one process per "
      f"allocator, cell and round, order rotated; per session {warmup} warm-up requests, then {requests} timed). "
      "ONNX Runtime 1.30 (onnxruntime-node, CPU, one intra-op thread per session); model: bench/onnx/export_decoder.py "
      "(scripts/models.py gpt2: 4 layers, width 256, 4 heads, vocabulary 8,000, random weights, key/value cache fed back "
      "each step); prompts and generations of 8..64 tokens, greedy. Cells T/arena: T sessions generating at once; "
      "ONNX Runtime's CPU arena and memory pattern off (every tensor a malloc) or on (its defaults). Nothing is marked.")
print("- ÷ best: tokens/s over the best general-purpose allocator's (for a general-purpose allocator, the best of the "
      "others); RSS ÷ leanest likewise. p50/p99: of each timed request's time per token. faults and system CPU: per "
      "token over the timed phase. from slab: replayalloc's allocations of at least the minimum size served from a "
      "slab, whole run (its statistics at exit), the median of the rounds and their range. RSS at end: resident as the "
      "timed phase ends (what a process that goes on serving holds; absent from runs before it was measured).")
print()
print("| cell | allocator | tokens/s | ÷ best | p50 ms/token | p99 ms/token | user CPU ms/token | system CPU ms/token "
      "| faults/token | peak RSS MiB | RSS ÷ leanest | RSS at end MiB | from slab |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
sums = collections.defaultdict(set)
notes = []
for cell in cells:
    by = collections.defaultdict(list)
    slab = collections.defaultdict(list)
    for r in rows:
        if r["cell"] == cell and "error" not in r["run"]:
            by[r["allocator"]].append(r["run"])
            sums[cell].add(r["run"]["checksum"])
            s = r.get("stats")
            if s:
                slab[r["allocator"]].append(
                    100 * s.get("slab_hits", 0) / max(1, s.get("allocations", 0) - s.get("below_min_size", 0)))
    med = lambda a, k: statistics.median(x[k] for x in by[a])
    present = [a for a in general if a in by]
    if not present:
        continue
    def best_of(a, key, pick):
        others = [g for g in present if g != a] or present
        return pick(others, key=lambda g: med(g, key))
    t, arena = cell.split(":")
    for a in names:
        if a not in by:
            continue
        tps, rss = med(a, "tokens_per_s"), med(a, "peak_rss_kib") / 1024
        best = best_of(a, "tokens_per_s", max)
        lean = best_of(a, "peak_rss_kib", min)
        sl = ""
        if a in slab:  # the median of the rounds, and their range
            lo, hi = min(slab[a]), max(slab[a])
            sl = f"{statistics.median(slab[a]):.1f}%" + (f" ({lo:.1f}-{hi:.1f})" if hi - lo >= 0.05 else "")
        ends = [x["end_rss_kib"] / 1024 for x in by[a] if "end_rss_kib" in x]
        end = f"{statistics.median(ends):.0f}" if ends else ""
        print(f"| T{t}/arena {arena} | {a} | {tps:.0f} | {tps / med(best, 'tokens_per_s'):.3f} | "
              f"{med(a, 'p50_us_per_token') / 1000:.2f} | {med(a, 'p99_us_per_token') / 1000:.2f} | "
              f"{med(a, 'user_us_per_token') / 1000:.2f} | {med(a, 'sys_us_per_token') / 1000:.2f} | "
              f"{med(a, 'faults_per_token'):.1f} | {rss:.0f} | {rss / (med(lean, 'peak_rss_kib') / 1024):.3f} | {end} | {sl} |")
    bestg = max(present, key=lambda g: med(g, "tokens_per_s"))
    leang = min(present, key=lambda g: med(g, "peak_rss_kib"))
    notes.append(f"T{t}/arena {arena}: fastest general-purpose {bestg}, leanest {leang}")
print()
same = all(len(d) == 1 for d in sums.values())
print(f"{len(rows)} runs; generated tokens {'identical in every run of each cell' if same else 'DIFFER within a cell'}; "
      + "; ".join(notes) + ".")
PY
  die "no results: every run failed (round lines above)"
cat "$tmp/section"
[[ ${NO_RESULTS:-0} == 1 ]] || update_results text "$root/bench/RESULTS.md" --name onnx-generation --body "$tmp/section"
