#!/usr/bin/env bash
# bench/run_generation.sh: LLM generation (bench/torch/generation.py, a GPT-2-shaped
# decoder, prompts and generations of 8..64 tokens) under glibc, jemalloc, tcmalloc,
# mimalloc, replayalloc's LD_PRELOAD library (auto mode, nothing marked) and replayalloc
# as libtorch's CPU allocator, with one iteration per model call (replay-torch: a key
# for the prefill, one for the decode steps) and with one iteration per request
# (replay-request: one key, Note [Periodic iterations]), each in a process of its own,
# the order rotated every round; medians over rounds, ratios to the best
# general-purpose allocator. Cells (CELLS, default "1:1 2:1 1:8"): THREADS:BATCH_MAX,
# T threads generating at once, and batches of 1..BATCH_MAX drawn per request (dynamic
# batching). Writes the "Generation" section of RESULTS.md.
# Usage: bench/run_generation.sh [ROUNDS] [REQUESTS]   (default 3 rounds of 36 requests
# per thread, the first 12 untimed)
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
requests=${2:-36}
warmup=12
cells=${CELLS:-1:1 2:1 1:8}
build=$root/build
cmake --build "$build" --target replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
declare -A preload=(
  [glibc]="" [jemalloc]="$(allocator_library jemalloc)" [tcmalloc]="$(allocator_library tcmalloc)"
  [mimalloc]="$(allocator_library mimalloc)" [replay-auto]="$(preload_library "$build")" [replay-torch]=""
  [replay-request]=""
)
all=(glibc jemalloc tcmalloc mimalloc replay-auto replay-torch replay-request)
machine_meta "$build" > "$tmp/meta"
out=$tmp/runs.jsonl
for r in $(seq 1 "$rounds"); do
  mapfile -t order < <(rotated "$r" "${all[@]}")
  for cell in $cells; do
    threads=${cell%%:*} batch=${cell##*:}
    for a in "${order[@]}"; do
      args=(--threads "$threads" --batch-max "$batch")
      [ "$a" = replay-torch ] && args+=(--replay-torch "$(torch_library "$build")")
      [ "$a" = replay-request ] && args+=(--replay-torch "$(torch_library "$build")" --per-request)
      line=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 LD_PRELOAD=${preload[$a]} \
             "$py" "$root/bench/torch/generation.py" "$requests" "$warmup" "${args[@]}" 2>/dev/null | tail -n 1)
      [ -n "$line" ] || line='{"error": true}'
      echo "{\"allocator\": \"$a\", \"cell\": \"$cell\", \"round\": $r, \"run\": $line}" >> "$out"
      echo "round $r $cell $a: ${line:0:120}" >&2
    done
  done
done
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$out" "$tmp/meta" "$rounds" "$requests" "$warmup" "$cells" > "$tmp/section" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
rounds, requests, warmup, cells = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6].split()
names = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-torch", "replay-request")
print("## Generation")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `bench/run_generation.sh {rounds} {requests}` ({rounds} rounds, one process per allocator, cell and "
      f"round, order rotated; {requests} requests per thread, the first {warmup} untimed). Model: scripts/models.py gpt2, "
      "4 layers, width 256, 4 heads, vocabulary 8,000, random weights; prompts and generations of 8..64 tokens, greedy; "
      "one intra-op thread per generating thread. Cells T/B: T threads generating at once (each its own requests), "
      "batches of 1..B drawn per request.")
print("- replay-auto: the LD_PRELOAD library, nothing marked; replay-torch: libtorch's CPU allocator, one iteration per "
      "model call (keys gen/prefill and gen/decode); replay-request: libtorch's CPU allocator, one iteration per request "
      "(one key; Note [Periodic iterations]). p50/p99: of each timed request's time per generated token; from slab: "
      "the timed phase's allocations of at least the minimum size served from a slab (replayalloc's own statistics).")
print()
print("| cell | allocator | tokens/s | ÷ best | p50 ms/token | p99 ms/token | CPU ms/token | faults/token | peak RSS MiB | RSS ÷ leanest | from slab |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
digests = collections.defaultdict(set)
notes = []
for cell in cells:
    by = collections.defaultdict(list)
    for r in rows:
        if r["cell"] == cell and "error" not in r["run"]:
            by[r["allocator"]].append(r["run"])
            digests[cell].add(r["run"]["digest"])
    med = lambda a, k: statistics.median(x[k] for x in by[a])
    general = [a for a in names[:4] if a in by]
    if not general:
        continue
    best = max(general, key=lambda a: med(a, "tokens_per_s"))
    lean = min(general, key=lambda a: med(a, "peak_rss_mib"))
    t, b = cell.split(":")
    for a in names:
        if a not in by:
            continue
        slab = ""
        s = by[a][-1].get("replayalloc")
        if s:
            slab = f"{100 * s['slab_hits'] / max(1, s['allocations'] - s['below_min_size']):.1f}%"
        tps = med(a, "tokens_per_s")
        print(f"| T{t}/B{b} | {a} | {tps:.0f} | {tps / med(best, 'tokens_per_s'):.3f} | {med(a, 'p50_ms_per_token'):.2f} | "
              f"{med(a, 'p99_ms_per_token'):.2f} | {med(a, 'cpu_ms_per_token'):.2f} | {med(a, 'faults_per_token'):.2f} | "
              f"{med(a, 'peak_rss_mib'):.0f} | {med(a, 'peak_rss_mib') / med(lean, 'peak_rss_mib'):.3f} | {slab} |")
    notes.append(f"T{t}/B{b}: best general-purpose {best}, leanest {lean}")
print()
same = all(len(d) == 1 for d in digests.values())
print(f"{len(rows)} runs; generated tokens {'identical in every run of each cell' if same else 'DIFFER within a cell'}; "
      + "; ".join(notes) + ".")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name generation --body "$tmp/section"
