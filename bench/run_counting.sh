#!/usr/bin/env bash
# bench/run_counting.sh: the counting table (issue 34, part 5): per steady-state
# inference of each e2e model at T = 1, 2, 4, the system calls each allocator makes
# (mmap, munmap, madvise, brk, mremap, mprotect, futex), the pthread mutex calls and
# the minor page faults,
# counted in runs of their own under `strace -f -c` (bench/e2e/count_syscalls.py says
# how: two runs per cell and allocator, the difference over the extra inferences).
# Writes the "Counting" section of RESULTS.md.
# Usage: bench/run_counting.sh [CELLS]   (default: count_syscalls.py's 12 cells)
# Environment: BUILD_DIR (default <repo>/build); EXTRA (default 24): the extra timed
# inferences per thread of the longer run (futex counts vary by tens from run to run
# with threads starting and joining; 8 extra left them within +-10 per inference).
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
build=${BUILD_DIR:-$root/build}
command -v strace > /dev/null || die "strace is not installed (scripts/setup.sh installs it)"
cmake --build "$build" --target e2e_driver mutex_count replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
scratch_dir
machine_meta "$build" > "$tmp/meta"
cells_args=()
[ $# -ge 1 ] && cells_args=(--cells "$1")
extra=${EXTRA:-24}
python3 "$root/bench/e2e/count_syscalls.py" --build "$build" --out "$tmp/runs.jsonl" --extra "$extra" "${cells_args[@]}"
status=$?
echo "load_after=$(load_average)" >> "$tmp/meta"
python3 - "$tmp/runs.jsonl" "$tmp/meta" "${EXTRA:+EXTRA=$EXTRA }bench/run_counting.sh${1:+ $1}" "$extra" > "$tmp/section" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
calls = ("mmap", "munmap", "madvise", "brk", "mremap", "mprotect", "futex", "mutex_lock", "mutex_trylock")
print("## Counting: what each allocator asks of the kernel per inference")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `{sys.argv[3]}`. Each cell and allocator ran twice under `strace -f -c` (every thread), the second "
      "time with " + sys.argv[4] + " more timed inferences per thread; the table is the difference of the two runs' counts over those "
      "extra inferences: one steady-state inference's system calls (start-up, loading, warm-up and exit cancel out). "
      "Faults: the longer run's minor page faults per timed inference (getrusage). Counts, not times: strace slows "
      "every call it stops at, so futex counts (threads meeting a held lock or waiting for work) are upper bounds, to "
      "compare within a cell. mutex_lock, mutex_trylock: calls of pthread_mutex_lock and pthread_mutex_trylock seen by a "
      "counting shim preloaded first (bench/e2e/mutex_count.c), differenced the same way: jemalloc's and replayalloc's "
      "mutexes are pthread mutexes, and so are libtorch's own (the same under every allocator: read them against "
      "glibc's, whose malloc locks, as tcmalloc's spin locks and mimalloc's atomics, are not seen). Outputs checked "
      "against glibc's in every run.")
print()
print("| cell | allocator | " + " | ".join(calls) + " | faults |")
print("|---|---|" + "---:|" * (len(calls) + 1))
for r in rows:
    pi = r["per_inference"]
    f = r["faults_per_inference"]
    err = " (failed)" if "error" in r else ""
    print(f"| {r['cell']} | {r['allocator']}{err} | " + " | ".join(f"{pi[c]:.1f}" for c in calls)
          + f" | {f:.1f} |" if f is not None else " | - |")
print()
wrong = sum(1 for r in rows if r.get("outputs_wrong"))
print(f"{len(rows)} cells x allocators; outputs {'identical to glibc in every run' if not wrong else f'WRONG in {wrong}'}.")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name counting --body "$tmp/section"
exit $status
