#!/usr/bin/env bash
# bench/run_onnx_instructions.sh: the ONNX Runtime generation loop of
# bench/run_onnx_generation.sh (issue 41), counted instead of timed: each allocator runs
# it once per cell under `valgrind --tool=callgrind --instr-atstart=no`, generate.js
# --callgrind instrumenting only the timed requests (after the warm-up), one session
# (callgrind runs a process's threads one at a time). Counts are user-space instructions,
# deterministic up to what the host language's JIT does: they settle what this host's
# timing (+-10% from run to run) cannot, and say nothing of caches, page faults or
# system calls (the timed benchmark's faults and system CPU columns do).
# Per generated token:
#   in the allocator   self instructions of the allocator's objects, as
#                      bench/e2e/alloc_instructions.py counts them (replayalloc: its
#                      LD_PRELOAD library and the jemalloc it falls back on)
#   native             every native object but Node.js's own and the JIT's code (the
#                      allocator, ONNX Runtime, libc's memcpy/memset, libstdc++): what the
#                      allocator changes; the JIT's code and node's builtins are left out,
#                      since generate.js spins there while callgrind_control's request is
#                      taken
# Usage: bench/run_onnx_instructions.sh [REQUESTS] [WARMUP]   (default 5 20; CELLS as
#   run_onnx_generation.sh's ARENA values, default "off on"; ALLOCATORS, default all five;
#   JOBS, default 2: callgrind's counts do not depend on the load). Writes the section "onnx-instructions" of
#   RESULTS.md (NO_RESULTS=1: prints it only). About 25 minutes with 2 jobs on 2 cores.
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
requests=${1:-5}
warmup=${2:-20}
cells=${CELLS:-off on}
jobs=${JOBS:-2}
build=${BUILD_DIR:-$root/build}
onnx=$root/build-onnx
command -v valgrind > /dev/null || die "valgrind is not installed (scripts/setup.sh installs it)"
command -v callgrind_control > /dev/null || die "callgrind_control is not installed (valgrind's package)"
[[ -d $onnx/node_modules/onnxruntime-node && -f $onnx/decoder.onnx ]] ||
  die "ONNX Runtime or the model missing: run bench/run_onnx_generation.sh once"
build_targets "$build" replayalloc_preload || die "build failed"
scratch_dir
machine_meta "$build" > "$tmp/meta"
declare -A preload=(
  [glibc]="" [jemalloc]="$(allocator_library jemalloc)" [tcmalloc]="$(allocator_library tcmalloc)"
  [mimalloc]="$(allocator_library mimalloc)" [replay-auto]="$(preload_library "$build")"
)
# shellcheck disable=SC2206
all=(${ALLOCATORS:-glibc jemalloc tcmalloc mimalloc replay-auto})
one() {  # one ARENA ALLOCATOR: a JSON line
  local arena=$1 a=$2 out=$tmp/$1.$2
  (cd "$onnx" && NODE_PATH=$onnx/node_modules LD_PRELOAD=${preload[$a]} \
     REPLAYALLOC_STATS=$out.stats REPLAYALLOC_STATS_IDLE=1 \
     valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out.cg" \
     node "$root/bench/onnx/generate.js" "$onnx/decoder.onnx" --sessions 1 --arena "$arena" \
     --warmup "$warmup" --requests "$requests" --callgrind > "$out.stdout" 2> "$out.stderr")
  python3 - "$root" "$out" "$a" "$arena" <<'PY'
import importlib.util, json, os, sys
root, out, allocator, arena = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("ai", os.path.join(root, "bench/e2e/alloc_instructions.py"))
ai = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ai)
rec = {"allocator": allocator, "arena": arena}
try:
    run = json.loads(open(out + ".stdout").read().strip().splitlines()[-1])
    costs = ai.self_costs(out + ".cg")
except (IndexError, ValueError, OSError) as e:
    rec["error"] = str(e)
    print(json.dumps(rec))
    sys.exit()
mine = {k: v for k, v in costs.items() if ai.in_allocator(allocator, *k)}
native = sum(v for k, v in costs.items() if k in mine or k[0] not in ("???", "node"))
rec.update(tokens=run["tokens"], checksum=run["checksum"], program_ir=sum(costs.values()),
           allocator_ir=sum(mine.values()), native_ir=native)
try:
    stats = json.load(open(out + ".stats"))
    rec["from_slab"] = stats.get("slab_hits", 0) / max(1, stats.get("allocations", 0))
except (OSError, ValueError):
    pass
print(json.dumps(rec))
PY
}
running=0
if [ -n "${FROM_RUNS:-}" ]; then  # no runs: the section from the kept ones, their cells
  all=()
  # shellcheck disable=SC2086
  cat $FROM_RUNS > "$tmp/runs.jsonl"
  cells=$(python3 -c 'import json, sys; print(" ".join(sorted({json.loads(l)["arena"] for l in open(sys.argv[1])})))' "$tmp/runs.jsonl")
fi
for arena in $cells; do
  for a in "${all[@]}"; do
    one "$arena" "$a" >> "$tmp/runs.jsonl" &
    running=$((running + 1))
    if ((running >= jobs)); then
      wait -n
      running=$((running - 1))
    fi
  done
done
wait
[ -z "${RUNS_OUT:-}" ] || cp "$tmp/runs.jsonl" "$RUNS_OUT"
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$tmp/runs.jsonl" "$tmp/meta" "$requests" "$warmup" "$cells" > "$tmp/section" <<'PY' ||
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
requests, warmup, cells = sys.argv[3], sys.argv[4], sys.argv[5].split()
GP = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
ORDER = GP + ("replay-auto",)
if not any("error" not in r for r in rows):
    sys.exit("every run failed: no section written")
print("## Generation in a second framework, counted: instructions per token under callgrind")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"commit {meta.get('commit')}")
print(f"- Command: `bench/run_onnx_instructions.sh {requests} {warmup}`: the loop of \"Generation in a second "
      f"framework\" (ONNX Runtime 1.30 under Node.js, one session, nothing marked), each allocator once per cell under "
      f"`valgrind --tool=callgrind --instr-atstart=no`, {warmup} warm-up requests uninstrumented, then {requests} "
      "instrumented (generate.js --callgrind). Arena off: every tensor a malloc; on: ONNX Runtime's defaults.")
print("- **In the allocator**: the self instructions of the allocator's objects per generated token (replayalloc: "
      "libreplayalloc_preload.so and the libjemalloc.so.2 it falls back on). **Native**: every object but Node.js's and "
      "the JIT's code (ONNX Runtime, libc's memcpy and memset, libstdc++, the allocator), per token: what an allocator "
      "changes of the program's own work. ÷ fewest: over the fewest of the general-purpose allocators (for one of "
      "them, of the others). User space only: a calloc served from fresh pages costs no memset here, their zeroing "
      "being the kernel's (page faults, the timed section's faults and system CPU columns).")
print()
print("| arena | allocator | tokens | in the allocator per token | ÷ fewest | native per token | ÷ fewest | from slab |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
notes = []
for cell in cells:
    by = {r["allocator"]: r for r in rows if r["arena"] == cell and "error" not in r}
    sums = {r.get("checksum") for r in by.values()}
    if len(sums) > 1:
        notes.append(f"arena {cell}: generated tokens DIFFER between allocators ({sorted(sums)})")
    per = {a: (r["allocator_ir"] / r["tokens"], r["native_ir"] / r["tokens"]) for a, r in by.items()}
    for a in ORDER:
        if a not in per:
            if any(r["allocator"] == a and r["arena"] == cell for r in rows):
                print(f"| {cell} | {a} | failed | | | | | |")
            continue
        others = [per[g] for g in GP if g in per and g != a]
        ratio = lambda i: f"{per[a][i] / min(o[i] for o in others):.3f}" if others else ""
        slab = f"{by[a]['from_slab'] * 100:.1f}%" if "from_slab" in by[a] and a.startswith("replay") else ""
        print(f"| {cell} | {a} | {by[a]['tokens']} | {per[a][0]:,.0f} | {ratio(0)} | {per[a][1]:,.0f} | {ratio(1)} "
              f"| {slab} |")
print()
print(f"{len(rows)} runs; " + ("; ".join(notes) if notes else "generated tokens identical under every allocator in each cell") + ".")
PY
  die "no section written"
cat "$tmp/section"
[[ ${NO_RESULTS:-0} == 1 ]] || update_results text "$root/bench/RESULTS.md" --name onnx-instructions --body "$tmp/section"
