#!/usr/bin/env bash
# bench/run_alloc_instructions.sh: instructions spent inside the allocator per
# steady-state inference (issue 34, part 5), e2e models at T = 1 (MobileNetV3 by
# default: see alloc_instructions.py) under every allocator, counted by callgrind over
# the timed inferences only
# (bench/e2e/alloc_instructions.py says how). Writes the "Counting: instructions inside
# the allocator" section of RESULTS.md.
# Usage: bench/run_alloc_instructions.sh [CELLS [JOBS]]   (default: MobileNetV3; 2 jobs
#   at once: callgrind counts do not depend on the machine's load)
# Environment: BUILD_DIR (default <repo>/build). About 12 minutes with 2 jobs on 2 cores.
# shellcheck source=lib.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
command -v valgrind > /dev/null || die "valgrind is not installed (scripts/setup.sh installs it)"
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
machine_meta "$build" > "$tmp/meta"
cells=${1:-}
jobs=${2:-2}
status=0
(cd "$root" && "$py" bench/e2e/alloc_instructions.py --build "$build" --out "$tmp/runs.jsonl" --jobs "$jobs" \
  ${cells:+--cells "$cells"}) || status=$?
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$tmp/runs.jsonl" "$tmp/meta" "bench/run_alloc_instructions.sh${1:+ $1}${2:+ $2}" > "$tmp/section" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
GP = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
print("## Counting: instructions inside the allocator per inference")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"commit {meta.get('commit')}")
print(f"- Command: `{sys.argv[3]}`: each model at T = 1 under each allocator, once, under `valgrind --tool=callgrind "
      "--instr-atstart=no` with `e2e_driver --callgrind-timed` (only the timed inferences instrumented: nothing of "
      "start-up, loading or warm-up; 10 warm-up inferences before, so auto mode replays). **In the allocator**: the self "
      "instructions of every function in the allocator's objects over the timed inferences, per inference: glibc's "
      "malloc sources in libc.so.6; libjemalloc.so.2; libtcmalloc_minimal.so.4; libmimalloc.so.2; for replayalloc "
      "preloaded, libreplayalloc_preload.so and the libjemalloc.so.2 it falls back on (below REPLAYALLOC_MIN_SIZE "
      "and for what no plan serves); for replay-torch, libreplayalloc_torch.so and glibc's malloc (its fallback, and "
      "the rest of the process's allocator). User-space instructions, deterministic; page faults and system calls are "
      "in the section above. operator new/delete are counted where the allocator defines them (tcmalloc, "
      "replayalloc's preload library), elsewhere libstdc++'s few instructions each are not.")
print()
print("| cell | allocator | in the allocator per inference | ÷ the fewest of the four | share of the program's | program per inference |")
print("|---|---|---:|---:|---:|---:|")
by = collections.defaultdict(dict)
for r in rows:
    by[r["cell"]][r["allocator"]] = r
for cell, rs in by.items():
    per = {a: r["allocator_ir"] / r["inferences"] for a, r in rs.items() if "allocator_ir" in r}
    best = min((per[a] for a in GP if a in per), default=0)
    for a, r in rs.items():
        if "allocator_ir" not in r:
            print(f"| {cell} | {a} | failed | | | |")
            continue
        prog = r["program_ir"] / r["inferences"]
        split = ""
        if len(r.get("by_object", {})) > 1:
            split = " (" + ", ".join(f"{'its malloc and free, in an object callgrind could not name' if ob == '???' else ob} "
                                     f"{v / r['inferences'] / 1e6:.2f} M" for ob, v in r["by_object"].items()) + ")"
        print(f"| {cell} | {a} | {per[a]:,.0f}{split} | {per[a] / best:.2f} | {100 * per[a] / prog:.2f}% | {prog / 1e6:.1f} M |")
wrong = sum(1 for r in rows if r.get("outputs_wrong") or r.get("rc"))
print()
print(f"{len(rows)} runs; outputs {'identical to glibc in every run' if not wrong else f'WRONG or failed in {wrong}'}.")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name alloc-instructions --body "$tmp/section"
exit $status
