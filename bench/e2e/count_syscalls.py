#!/usr/bin/python3
"""bench/e2e/count_syscalls.py: what each allocator asks of the kernel per steady-state
inference (issue 34, part 5), counted, not timed.

  count_syscalls.py --build BUILD_DIR --out RUNS.jsonl [--cells SPEC] [--allocators a,b,...]
                    [--extra K]

For each cell (MODEL:THREADS:WARMUP:ITERATIONS, as bench/e2e/run_e2e.py takes them) and
each allocator (run_e2e.py's seven), the e2e driver runs twice under `strace -f -c`
(every thread), once with ITERATIONS timed inferences per thread and once with
ITERATIONS + K: the difference of the two runs' counts of mmap, munmap, madvise, brk,
mremap, mprotect and futex, over the THREADS x K extra inferences, is what one
steady-state inference costs in system calls (start-up, model loading, warm-up and
exit cancel out). Minor page faults per inference are the longer run's own figure for
its timed phase (getrusage, the driver's JSON line). Mutex acquisitions: the same
difference of the calls of pthread_mutex_lock and pthread_mutex_trylock that a counting
shim preloaded first sees (bench/e2e/mutex_count.c: jemalloc's mutexes and replayalloc's
are pthread mutexes; glibc malloc's arena locks, tcmalloc's spin locks and mimalloc's
atomics are not, and are not seen; libtorch's own are, the same under every allocator). Outputs are checked against the
glibc reference as in run_e2e.py. One JSON line per cell and allocator goes to RUNS.jsonl;
bench/run_counting.sh makes the RESULTS.md section from it.

strace stops every thread at each traced call, so the runs are slow and their timings
mean nothing; the counts do not depend on it, except futex, whose count is how often
threads met a held lock or waited for work (more often when they run slower): read it
as an upper bound, and compare allocators on the same cell only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_e2e  # noqa: E402  (bench/e2e/run_e2e.py)

CALLS = ("mmap", "munmap", "madvise", "brk", "mremap", "mprotect", "futex")
MUTEXES = ("mutex_lock", "mutex_trylock")  # bench/e2e/mutex_count.c
CELLS = ("mobilenet_v3_large:1:10:8,mobilenet_v3_large:2:10:8,mobilenet_v3_large:4:8:4,"
         "resnet50:1:8:4,resnet50:2:8:4,resnet50:4:8:2,"
         "bert_b1:1:8:8,bert_b1:2:8:8,bert_b1:4:8:4,"
         "lstm:1:8:8,lstm:2:8:8,lstm:4:8:4")


def strace_counts(path):
    """{syscall: calls} from an `strace -c` summary."""
    counts = {}
    for line in open(path):
        fields = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] in CALLS:
            counts[fields[-1]] = int(fields[3])
    return counts


def run_once(cmd, env, timeout, shim):
    """(strace and mutex counts, the driver's JSON line or None, return code, stderr tail)."""
    with tempfile.NamedTemporaryFile(prefix="strace-", suffix=".txt", delete=False) as f:
        summary = f.name
    with tempfile.NamedTemporaryFile(prefix="mutex-", suffix=".txt", delete=False) as f:
        mutexes = f.name
    # The preloads and the shim's output go to the traced program only (strace -E): strace
    # preloaded with the shim would write its own counts over the program's at its exit.
    preload = ":".join(x for x in (shim, env.get("LD_PRELOAD", "")) if x)
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    try:
        p = subprocess.run(["strace", "-f", "-c", "-o", summary, "-e", "trace=" + ",".join(CALLS),
                            "-E", "LD_PRELOAD=" + preload, "-E", "MUTEX_COUNT_OUT=" + mutexes] + cmd,
                           env=env, capture_output=True, text=True, timeout=timeout)
        line = None
        for l in p.stdout.splitlines():
            if l.startswith("{"):
                try:
                    line = json.loads(l)
                except json.JSONDecodeError:
                    pass
        counts = strace_counts(summary)
        for l in open(mutexes):  # "lock N", "trylock N" (bench/e2e/mutex_count.c)
            name, n = l.split()
            counts["mutex_" + name] = int(n)
        return counts, line, p.returncode, p.stderr.strip().splitlines()[-3:]
    finally:
        os.remove(summary)
        os.remove(mutexes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", default=CELLS)
    ap.add_argument("--allocators", default=",".join(run_e2e.ALLOCATORS))
    ap.add_argument("--extra", type=int, default=8, help="K: extra timed inferences per thread of the longer run")
    ap.add_argument("--timeout", type=int, default=900)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cells = run_e2e.parse_cells(a.cells)
    allocators = ["glibc"] + [x for x in a.allocators.split(",") if x and x != "glibc"]
    setups = {x: run_e2e.allocator_setup(x, build) for x in allocators}
    driver = os.path.join(build, "bench", "e2e", "e2e_driver")
    shim = os.path.join(build, "bench", "e2e", "libmutex_count.so")
    if not os.path.exists(shim):
        sys.exit(f"count_syscalls.py: {shim} not built (ninja -C {build} mutex_count)")
    models_dir = os.path.join(build, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts", "make_models.py"), models_dir]
                   + sorted({c["model"] for c in cells}), check=True)
    ref_dir = os.path.join(build, "e2e-refs")
    os.makedirs(ref_dir, exist_ok=True)
    env0 = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env0.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    failures = 0
    with open(a.out, "w") as out:
        for c in cells:
            ref = os.path.join(ref_dir, run_e2e.reference_name(c))
            for x in allocators:
                env_extra, args = setups[x]
                runs = []
                for iterations in (c["iterations"], c["iterations"] + a.extra):
                    cmd = run_e2e.driver_command(driver, models_dir, ref, c, x, args, iterations)
                    if x == "glibc" and not os.path.exists(ref):
                        cmd.append("--write-reference")
                    runs.append(run_once(cmd, dict(env0, **env_extra), a.timeout, shim))
                (short, _, rc1, err1), (long_, line, rc2, err2) = runs
                extra = c["threads"] * a.extra
                rec = {"allocator": x, "cell": f"{c['model']}/T{c['threads']}", "model": c["model"],
                       "threads": c["threads"], "extra_inferences": extra,
                       "per_inference": {k: (long_.get(k, 0) - short.get(k, 0)) / extra for k in CALLS + MUTEXES},
                       "faults_per_inference": line["minor_faults_per_inference"] if line else None,
                       "outputs_wrong": line["outputs_wrong"] if line else None, "rc": [rc1, rc2]}
                if rc1 != 0 or rc2 != 0 or line is None:
                    failures += 1
                    rec["error"] = err2 or err1
                out.write(json.dumps(rec) + "\n")
                out.flush()
                pi = rec["per_inference"]
                print(f"{rec['cell']:<24} {x:<16} " + " ".join(f"{k} {pi[k]:.1f}" for k in CALLS + MUTEXES)
                      + f" faults {rec['faults_per_inference']}" + (" FAILED" if "error" in rec else ""), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
