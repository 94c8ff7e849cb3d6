#!/usr/bin/env bash
# bench/run_serving.sh: the serving benchmark (issue 34, part 6). A thread-pool HTTP
# inference service (bench/serving/server.py: Python's standard library server, a pool of
# 4 worker threads, libtorch through Debian's python3) under a closed-loop load generator
# (bench/serving/load.py) at 1, 2 and 4 connections, every request on a new connection so
# that each client's requests hop between the pool's threads. Models (made by
# scripts/make_models.py): MobileNetV3 (fixed shape) and the BERT-like encoder at a
# sequence length drawn per request (16..256). Allocators: glibc, jemalloc, tcmalloc,
# mimalloc, replayalloc's LD_PRELOAD library (auto mode, nothing marked) and replayalloc
# as libtorch's CPU allocator with one iteration per request (replay-torch); each server
# in a process of its own, the order rotated every round; medians over rounds, ratios to
# the best general-purpose allocator of the cell. Writes the "Serving" section of
# RESULTS.md.
# Usage: bench/run_serving.sh [ROUNDS] [SECONDS]   (default 2 rounds, 6 timed seconds per run)
# Environment: BUILD_DIR (default <repo>/build); WARMUP (default 15 requests per connection).
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-2}
seconds=${2:-6}
warmup=${WARMUP:-15}
build=${BUILD_DIR:-$root/build}
cmake --build "$build" --target replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
"$py" "$root/scripts/make_models.py" "$build/models" mobilenet_v3_large bert_varlen > /dev/null || die "make_models.py failed"
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
  for model in mobilenet_v3_large bert_varlen; do
    extra=()
    [ "$model" = bert_varlen ] && extra=(--varlen)
    for conns in 1 2 4; do
      for a in "${order[@]}"; do
        args=(--model "$build/models/$model.pt" --input "$build/models/$model.input.pt" --workers 4)
        [ "$a" = replay-torch ] && args+=(--replay-torch "$(torch_library "$build")")
        OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 LD_PRELOAD=${preload[$a]} REPLAYALLOC_VERBOSE=0 \
          "$py" "$root/bench/serving/server.py" "${args[@]}" > "$tmp/server.out" 2> "$tmp/server.err" &
        pid=$!
        port=""
        for _ in $(seq 1 600); do
          port=$(awk '/^port/ {print $2}' "$tmp/server.out" 2> /dev/null)
          [ -n "$port" ] && break
          kill -0 "$pid" 2> /dev/null || break
          sleep 0.1
        done
        if [ -z "$port" ]; then
          line='{"error": "the server did not start"}'
          server='{}'
        else
          line=$("$py" "$root/bench/serving/load.py" "$port" "$conns" "$warmup" "$seconds" "${extra[@]}" 2> /dev/null | tail -n 1)
          [ -n "$line" ] || line='{"error": "the load generator failed"}'
        fi
        kill -TERM "$pid" 2> /dev/null
        wait "$pid" 2> /dev/null
        server=$(grep '^{' "$tmp/server.out" | tail -n 1)
        [ -n "$server" ] || server='{}'
        echo "{\"allocator\": \"$a\", \"model\": \"$model\", \"connections\": $conns, \"round\": $r, \"load\": $line, \"server\": $server}" >> "$out"
        echo "round $r $model C$conns $a: ${line:0:110}" >&2
      done
    done
  done
done
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$out" "$tmp/meta" "$rounds" "$seconds" "$warmup" > "$tmp/section" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
rounds, seconds, warmup = sys.argv[3], sys.argv[4], sys.argv[5]
names = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-torch")
print("## Serving: a thread-pool HTTP inference service under load")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `bench/run_serving.sh {rounds} {seconds}` ({rounds} rounds, one server process per allocator, cell and "
      f"round, order rotated; {warmup} untimed requests per connection, then {seconds} s timed). Server: "
      "bench/serving/server.py, Python's standard library HTTP server with a pool of 4 worker threads (one intra-op "
      "thread each), every request on a new connection so that a client's requests hop between the pool's threads. "
      "Load: bench/serving/load.py, C closed-loop clients. Models: TorchScript MobileNetV3 (fixed shape) and the "
      "BERT-like encoder (2 layers) at a sequence length of 16..256 drawn per request.")
print("- replay-auto: the LD_PRELOAD library, nothing marked; replay-torch: libtorch's CPU allocator, one iteration "
      "per request (one key per model). p50/p99: over every timed request of the run (client-side, connection "
      "included); from slab: the server's whole run (warm-up included), replayalloc's statistics at exit.")
print()
print("| cell | allocator | req/s | ÷ best | p50 ms | p99 ms | p99 ÷ best | peak RSS MiB | RSS ÷ leanest | from slab |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
cells = collections.OrderedDict()
for r in rows:
    cells.setdefault((r["model"], r["connections"]), collections.defaultdict(list))[r["allocator"]].append(r)
notes, bad = [], []
for (model, conns), by in cells.items():
    ok = {a: [x for x in v if "error" not in x["load"] and x["load"].get("requests")] for a, v in by.items()}
    def med(a, f):
        return statistics.median(x["load"][f] for x in ok[a])
    def rss(a):
        return statistics.median(x["server"].get("peak_rss_mib", 0) for x in ok[a])
    general = [a for a in names[:4] if ok.get(a)]
    if not general:
        continue
    best = max(general, key=lambda a: med(a, "requests_per_s"))
    flat = min(general, key=lambda a: med(a, "p99_ms"))
    lean = min(general, key=rss)
    outputs = {}
    for a, xs in ok.items():
        for x in xs:
            for length, d in x["load"].get("outputs", {}).items():
                if outputs.setdefault(length, d) != d:
                    bad.append(f"{model}/C{conns}/{a}")
            if x["load"].get("errors"):
                bad.append(f"{model}/C{conns}/{a} ({x['load']['errors']} errors)")
    for a in names:
        if not ok.get(a):
            if a in by:
                print(f"| {model}/C{conns} | {a} | failed | | | | | | | |")
            continue
        slab = ""
        s = ok[a][-1]["server"].get("replayalloc")
        if s and a.startswith("replay"):
            large = s["allocations"] - s.get("below_min_size", 0)
            slab = f"{100 * s['slab_hits'] / max(1, large):.1f}%"
        t = med(a, "requests_per_s")
        print(f"| {model}/C{conns} | {a} | {t:.1f} | {t / med(best, 'requests_per_s'):.3f} | {med(a, 'p50_ms'):.1f} | "
              f"{med(a, 'p99_ms'):.1f} | {med(a, 'p99_ms') / med(flat, 'p99_ms'):.3f} | {rss(a):.0f} | "
              f"{rss(a) / rss(lean):.3f} | {slab} |")
    notes.append(f"{model}/C{conns}: best {best}, flattest {flat}, leanest {lean}")
print()
print(f"{len(rows)} runs; outputs {'identical for every allocator, length by length' if not bad else 'DIFFER or failed: ' + ', '.join(sorted(set(bad)))}; "
      + "; ".join(notes) + ".")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name serving --body "$tmp/section"
