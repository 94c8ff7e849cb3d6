#!/usr/bin/env bash
# bench/run_generation.sh: LLM generation (bench/torch/generation.py, a GPT-2-shaped
# decoder, prompts and generations of 8..64 tokens) under glibc, jemalloc, tcmalloc,
# mimalloc, replayalloc's LD_PRELOAD library (auto mode) and replayalloc as libtorch's
# CPU allocator (one key for the prefill, one for the decode steps), each in a process
# of its own, the order rotated every round; medians over rounds, ratios to glibc and to
# the best general-purpose allocator. Writes the "Generation" section of RESULTS.md.
# Usage: bench/run_generation.sh [ROUNDS] [REQUESTS]   (default 5 rounds of 60 requests)
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-5}
requests=${2:-60}
build=$root/build
cmake --build "$build" --target replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
declare -A preload=(
  [glibc]="" [jemalloc]="$(allocator_library jemalloc)" [tcmalloc]="$(allocator_library tcmalloc)"
  [mimalloc]="$(allocator_library mimalloc)" [replay-auto]="$(preload_library "$build")" [replay-torch]=""
)
all=(glibc jemalloc tcmalloc mimalloc replay-auto replay-torch)
machine_meta "$build" > "$tmp/meta"
out=$tmp/runs.jsonl
for r in $(seq 1 "$rounds"); do
  k=$(( (r - 1) % ${#all[@]} ))
  order=("${all[@]:k}" "${all[@]:0:k}")
  for a in "${order[@]}"; do
    args=()
    [ "$a" = replay-torch ] && args=(--replay-torch "$(torch_library "$build")")
    line=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 LD_PRELOAD=${preload[$a]} \
           "$py" "$root/bench/torch/generation.py" "$requests" 10 "${args[@]}" 2>/dev/null | tail -n 1)
    [ -n "$line" ] || line='{"error": true}'
    echo "{\"allocator\": \"$a\", \"round\": $r, \"run\": $line}" >> "$out"
    echo "round $r $a: ${line:0:120}" >&2
  done
done
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$out" "$tmp/meta" "$rounds" "$requests" > "$tmp/section" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
rounds, requests = sys.argv[3], sys.argv[4]
by = collections.defaultdict(list)
for r in rows:
    if "error" not in r["run"]:
        by[r["allocator"]].append(r["run"])
med = lambda a, k: statistics.median(x[k] for x in by[a])
general = [a for a in ("glibc", "jemalloc", "tcmalloc", "mimalloc") if a in by]
best = max(general, key=lambda a: med(a, "tokens_per_s"))
digests = {x["digest"] for a in by for x in by[a]}
print("## Generation")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `bench/run_generation.sh {rounds} {requests}` ({rounds} rounds, one process per allocator and round, "
      f"order rotated; {requests} requests per process, the first 10 untimed). Model: scripts/models.py gpt2, 4 layers, "
      "width 256, 4 heads, vocabulary 8,000, random weights; prompts and generations of 8..64 tokens, greedy; "
      "one intra-op thread.")
print()
print(f"| allocator | tokens/s | vs glibc | vs best general-purpose ({best}) | CPU ms/token | faults/token | peak RSS MiB | from slab |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
base = med("glibc", "tokens_per_s") if "glibc" in by else None
for a in ("glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-torch"):
    if a not in by:
        continue
    slab = ""
    s = by[a][-1].get("replayalloc")
    if s:
        planned = s["slab_hits"] + s["fallbacks"]
        slab = f"{100 * s['slab_hits'] / max(1, s['allocations'] - s['below_min_size']):.0f}% of all, " \
               f"{100 * s['slab_hits'] / max(1, planned):.0f}% of planned"
    tps = med(a, "tokens_per_s")
    print(f"| {a} | {tps:.0f} | {tps / base:.3f}x | {tps / med(best, 'tokens_per_s'):.3f}x | "
          f"{med(a, 'cpu_ms_per_token'):.2f} | {med(a, 'faults_per_token'):.1f} | {med(a, 'peak_rss_mib'):.0f} | {slab} |")
spread = {a: (max(x["tokens_per_s"] for x in by[a]) - min(x["tokens_per_s"] for x in by[a])) / med(a, "tokens_per_s")
          for a in by}
print()
print(f"{len(rows)} runs; generated tokens {'identical in every run' if len(digests) == 1 else 'DIFFER: ' + str(len(digests)) + ' digests'}; "
      f"spread (max-min)/median of tokens/s: " + ", ".join(f"{a} {100 * v:.0f}%" for a, v in spread.items()) + ".")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name generation --body "$tmp/section"
