#!/usr/bin/python3
"""bench/e2e/first_replay.py: what the first replayed inference costs against the next.

  first_replay.py --build BUILD_DIR --out TABLE.md [--rounds R] [--models m,...]
                  [--inferences N] [--before-lib PATH] [--libdir DIR]

Issue 45, item 2: the first replayed iteration costs no more than the next. Each model
runs at T = 1 with no warm-up (a fresh process's first N inferences, N = 10 by default)
under jemalloc, tcmalloc, mimalloc and glibc, and under replayalloc preloaded in auto mode
and with explicit iterations (the driver's replayalloc_iteration_begin/end around each
inference), each in a process of its own, the order rotated each round. The driver
(e2e_driver --mark-timed) reports, for each inference of its thread, the thread's CPU
time (CLOCK_THREAD_CPUTIME_ID: other processes on a shared machine do not inflate it),
its minor page faults (RUSAGE_THREAD) and replayalloc's slab hits. Per run:

  first  the first inference with slab hits (replayalloc), or, for a general-purpose
         allocator, the inference at the position of replay-explicit's first (a control:
         what that position costs where nothing is planned);
  ratio  its CPU time over the median of the next three inferences';
  before the same for the inference before it (the last recorded one), and the page
         faults of both.

Medians over the rounds. --before-lib adds replay-auto-before and replay-explicit-before:
the same runs with another build's preload library (a change's side by side). Every
output is compared with a glibc reference, as in run_e2e.py.
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_e2e  # noqa: E402  (driver_command, allocator_setup, LIBDIR)

GENERAL = ["glibc", "jemalloc", "tcmalloc", "mimalloc"]


def parse(stderr):
    """(cpu_ms, faults, slab_hits) lists from the driver's --mark-timed lines."""
    out = {}
    for line in stderr.splitlines():
        for key in ("timed_cpu_ms", "timed_faults", "timed_slab_hits"):
            if line.startswith("e2e_driver: " + key + " ") or line == "e2e_driver: " + key:
                out[key] = [float(v) for v in line.split()[2:]]
    return out.get("timed_cpu_ms", []), out.get("timed_faults", []), out.get("timed_slab_hits", [])


def measure(cpu, faults, at):
    """The figures of inference `at` (None when there are not three after it)."""
    if at is None or at < 1 or at + 3 >= len(cpu):
        return None
    nxt = statistics.median(cpu[at + 1:at + 4])
    return {"at": at, "cpu": cpu[at], "next": nxt, "ratio": cpu[at] / nxt, "before_ratio": cpu[at - 1] / nxt,
            "faults": faults[at], "before_faults": faults[at - 1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="resnet50,bert_b1")
    ap.add_argument("--inferences", type=int, default=10)
    ap.add_argument("--before-lib")
    ap.add_argument("--libdir", default=run_e2e.LIBDIR)
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    models = [m for m in a.models.split(",") if m]
    extra = {}
    names = GENERAL + ["replay-auto", "replay-explicit"]
    if a.before_lib:
        extra["replay-auto-before"] = f"env:LD_PRELOAD={a.before_lib}"
        names += ["replay-auto-before", "replay-explicit-before"]
    setups = {x: run_e2e.allocator_setup(x, build, a.libdir, extra) for x in names if x != "replay-explicit-before"}
    if a.before_lib:
        setups["replay-explicit-before"] = ({"LD_PRELOAD": a.before_lib}, ["--iterations-api", "explicit"])
    driver = os.path.join(build, "bench", "e2e", "e2e_driver")
    models_dir = os.path.join(build, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(root, "scripts", "make_models.py"), models_dir] + models,
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    ref_dir = os.path.join(build, "e2e-refs")
    os.makedirs(ref_dir, exist_ok=True)
    runs = {}  # (model, name) -> [(cpu, faults, hits)]
    failures = 0
    for m in models:
        ref = os.path.join(ref_dir, f"{m}.first_replay.ref")
        cell = {"model": m, "threads": 1, "warmup": 0, "iterations": 2}
        subprocess.run(run_e2e.driver_command(driver, models_dir, ref, cell, "glibc", []) + ["--write-reference"],
                       env=env, check=True, capture_output=True)
        cell["iterations"] = a.inferences
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for x in order:
                extra_env, args = setups[x]
                cmd = run_e2e.driver_command(driver, models_dir, ref, cell, x, args) + ["--mark-timed"]
                p = subprocess.run(cmd, env=dict(env, **extra_env), capture_output=True, text=True, timeout=a.timeout)
                if p.returncode != 0:
                    failures += 1
                    print(f"first_replay.py: {m} {x} round {r}: exit {p.returncode}: {p.stderr[-500:]}",
                          file=sys.stderr)
                    continue
                runs.setdefault((m, x), []).append(parse(p.stderr))
                print(f"first_replay.py: {m} round {r + 1}/{a.rounds} {x} done", file=sys.stderr)

    def cell_rows(m):
        rows = []
        # The control position: replay-explicit's first replayed inference, median over its runs.
        firsts = [next((i for i, h in enumerate(hits) if h > 0), None) for _, _, hits in runs.get((m, "replay-explicit"), [])]
        firsts = [f for f in firsts if f is not None]
        control = int(statistics.median(firsts)) if firsts else None
        for x in names:
            ms = []
            for cpu, faults, hits in runs.get((m, x), []):
                at = control if x in GENERAL else next((i for i, h in enumerate(hits) if h > 0), None)
                f = measure(cpu, faults, at)
                if f is not None:
                    ms.append(f)
            if not ms:
                rows.append(f"| {m} | {x} | - | - | - | - | - | - | - |")
                continue
            med = lambda k: statistics.median(f[k] for f in ms)  # noqa: E731
            ats = "/".join(str(v + 1) for v in sorted({f["at"] for f in ms}))
            lo, hi = min(f["ratio"] for f in ms), max(f["ratio"] for f in ms)
            rows.append(f"| {m} | {x} | {ats} | {med('cpu'):.1f} | {med('next'):.1f} | **{med('ratio'):.3f}** "
                        f"({lo:.3f}-{hi:.3f}) | {med('faults'):.0f} | {med('before_ratio'):.3f} | "
                        f"{med('before_faults'):.0f} |")
        return rows

    with open(a.out, "w") as out:
        out.write("| model | allocator | first replayed inference | its CPU ms | next 3, median CPU ms | "
                  "first ÷ next (range) | its page faults | the one before ÷ next | its page faults |\n")
        out.write("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
        for m in models:
            out.write("\n".join(cell_rows(m)) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
