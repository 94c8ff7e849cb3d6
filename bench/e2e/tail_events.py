#!/usr/bin/python3
"""bench/e2e/tail_events.py: what the slowest inferences were (issue 34, part 2).

  tail_events.py --build BUILD_DIR --out RUNS.jsonl [--rounds R] [--cells SPEC]
                 [--allocators a,b,...]

Runs the end-to-end cells as bench/e2e/run_e2e.py does (the same driver, allocators,
models and references), each run with REPLAYALLOC_VERBOSE=3 and the driver's
--mark-timed, and reads from its stderr:
  - the timed inferences' latencies ("e2e_driver: timed_ms ...");
  - every iteration replayalloc ended after the warm-up ("e2e_driver: timed phase"),
    one line each (Note [The iteration log]): how long it took and what it was
    (replayed from its slab; recorded; passed through and why; a new slab made; a
    deviation) and every other message replayalloc wrote then (auto mode's watcher
    resting or waking, plans made, keys set aside).
One JSON line per run goes to RUNS.jsonl, as run_e2e.py writes them (so that
bench/update_results.py e2e makes the usual matrix of them too) with the log's
iterations, messages and latencies added. The general-purpose allocators run too
(REPLAYALLOC_VERBOSE is not theirs: they log nothing), for their latencies beside.
An iteration is "clean" when it was replayed from a slab it already had and nothing
else happened in it; anything else is an event of the allocator's own making. When
the slowest timed inferences of a cell coincide with no event, the tail is not the
allocator's doing (the machine, the other threads, the model).
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run_e2e", os.path.join(HERE, "run_e2e.py"))
run_e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_e2e)

ITERATION = re.compile(r"replayalloc: debug: iteration of '(?P<key>[^']*)' \(thread (?P<thread>\d+)\): "
                       r"(?P<ms>[0-9.]+) ms, (?P<what>.*); its end (?P<end_ms>[0-9.]+) ms$")
DEFAULT_CELLS = run_e2e.FULL_CELLS  # the fixed-shape matrix's


def classify(what):
    """The kind of one logged iteration: clean, or the event that made it otherwise."""
    if what.startswith("passed through"):
        return "passed: " + what.split(": ", 1)[1] if ": " in what else "passed"
    if what.startswith("recorded"):
        return "recorded"
    kinds = []
    if "a new slab" in what:
        kinds.append("new slab")
    if "deviated" in what or "outgrew" in what:
        kinds.append("deviated")
    m = re.search(r"(\d+) misses", what)
    if m and int(m.group(1)) > 0 and "deviated" not in kinds:
        kinds.append("misses")
    return "+".join(kinds) if kinds else "clean"


def parse_stderr(text):
    timed = False
    iterations, messages, timed_ms = [], [], []
    for line in text.splitlines():
        if line.startswith("e2e_driver: timed phase"):
            timed = True
            continue
        if line.startswith("e2e_driver: timed_ms"):
            timed_ms = [float(v) for v in line.split()[2:]]
            continue
        if not timed or not line.startswith("replayalloc:"):
            continue
        m = ITERATION.match(line)
        if m:
            iterations.append({"thread": int(m["thread"]), "ms": float(m["ms"]), "end_ms": float(m["end_ms"]),
                               "kind": classify(m["what"]), "what": m["what"]})
        else:
            messages.append(line[len("replayalloc: "):])
    return iterations, messages, timed_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cells", default=DEFAULT_CELLS)
    ap.add_argument("--allocators", default=",".join(run_e2e.ALLOCATORS))
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    root = os.path.dirname(os.path.dirname(HERE))
    cells = run_e2e.parse_cells(a.cells)
    allocators = [x for x in a.allocators.split(",") if x]
    for x in allocators:
        if x not in run_e2e.ALLOCATORS:
            sys.exit(f"tail_events.py: unknown allocator '{x}'")
    allocators = ["glibc"] + [x for x in allocators if x != "glibc"]  # glibc writes the references
    driver = os.path.join(build, "bench", "e2e", "e2e_driver")
    setups = {x: run_e2e.allocator_setup(x, build) for x in allocators}
    models_dir = os.path.join(build, "models")
    python = sys.executable if importlib.util.find_spec("torch") else "/usr/bin/python3"
    subprocess.run([python, os.path.join(root, "scripts", "make_models.py"), models_dir]
                   + sorted({c["model"] for c in cells}), check=True)
    ref_dir = os.path.join(build, "e2e-refs")
    os.makedirs(ref_dir, exist_ok=True)
    for c in cells:
        ref = os.path.join(ref_dir, run_e2e.reference_name(c))
        if os.path.exists(ref):
            os.remove(ref)
    env0 = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "REPLAYALLOC_VERBOSE")}
    env0.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "REPLAYALLOC_VERBOSE": "3"})
    failures = 0
    total = a.rounds * len(cells) * len(allocators)
    done = 0
    started = time.time()
    with open(a.out, "w") as out:
        for r in range(a.rounds):
            order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
            if "glibc" in order and r == 0:
                order = ["glibc"] + [x for x in order if x != "glibc"]
            for c in cells:
                ref = os.path.join(ref_dir, run_e2e.reference_name(c))
                for x in order:
                    extra, args = setups[x]
                    cmd = run_e2e.driver_command(driver, models_dir, ref, c, x, args + ["--mark-timed"])
                    if x == "glibc" and not os.path.exists(ref):
                        cmd.append("--write-reference")
                    p = subprocess.run(cmd, env=dict(env0, **extra), capture_output=True, text=True,
                                       timeout=a.timeout)
                    rec = {"allocator": x, "round": r + 1, "cell": f"{c['model']}/T{c['threads']}",
                           "model": c["model"], "threads": c["threads"], "rc": p.returncode}
                    try:
                        rec["run"] = json.loads(p.stdout.strip().splitlines()[-1])
                    except (IndexError, json.JSONDecodeError):
                        rec["error"] = p.stderr.strip().splitlines()[-3:]
                    its, msgs, timed_ms = parse_stderr(p.stderr)
                    rec.update({"iterations": its, "messages": msgs[:50], "messages_total": len(msgs),
                                "timed_ms": timed_ms})
                    wrong = rec.get("run", {}).get("outputs_wrong", 0)
                    if p.returncode != 0 or wrong:
                        failures += 1
                    done += 1
                    events = sum(1 for i in its if i["kind"] != "clean")
                    print(f"[{done}/{total} {time.time() - started:.0f}s] round {r + 1} {rec['cell']:<24} {x:<16} "
                          f"{len(timed_ms)} timed, {len(its)} iterations logged, {events} with events, "
                          f"{len(msgs)} messages{' FAILED' if p.returncode else ''}", file=sys.stderr)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
