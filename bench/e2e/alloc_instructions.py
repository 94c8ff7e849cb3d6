#!/usr/bin/python3
"""bench/e2e/alloc_instructions.py: instructions spent inside the allocator per inference
(issue 34, part 5: "cycles spent in the allocator", counted, not timed).

  alloc_instructions.py --build BUILD_DIR --out RUNS.jsonl [--cells SPEC] [--allocators a,b,...]
                        [--jobs N]

Each cell (MODEL:1:WARMUP:ITERATIONS; one thread: callgrind runs a process's threads
one at a time) runs once per allocator under `valgrind --tool=callgrind
--instr-atstart=no`, the driver instrumenting only its timed inferences
(e2e_driver --callgrind-timed), so the counts are ITERATIONS steady-state inferences'
and nothing of the start-up, the model's loading or the warm-up. From the callgrind
file: the self cost (user-space instructions) of every function in the allocator's own
objects, over the timed inferences:
  glibc            libc.so.6's malloc (functions in its malloc/ sources)
  jemalloc         libjemalloc.so.2
  tcmalloc         libtcmalloc_minimal.so.4
  mimalloc         libmimalloc.so.2
  replay-auto,     libreplayalloc_preload.so (jemalloc inside it: Note [The LD_PRELOAD
                   library's own runtime]; or the libjemalloc.so.2 a build without it links)
  replay-explicit
  replay-torch     libreplayalloc_torch.so and libc.so.6's malloc (its fallback, and the
                   rest of the process's allocator)
C++'s operator new and delete are the allocator's where it defines them (tcmalloc,
replayalloc's preload library); elsewhere libstdc++'s, a few instructions each, not
counted. Counts are deterministic (the threads of one inference run one at a time);
the program's total is printed beside them. One JSON line per run goes to RUNS.jsonl.
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run_e2e", os.path.join(HERE, "run_e2e.py"))
run_e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_e2e)

# MobileNetV3 only by default: a run is ~3 minutes of callgrind on this machine (libtorch's
# start-up and the warm-up, uninstrumented, are most of it); a ResNet-50 run had not
# finished after 15 minutes of CPU (its arithmetic under valgrind), nor would BERT's and
# the LSTM's within an hour for all allocators. Other cells: --cells.
DEFAULT_CELLS = "mobilenet_v3_large:1:10:4"
ALLOCATORS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-explicit", "replay-torch"]
OBJECTS = {
    "glibc": ["libc.so.6"],
    "jemalloc": ["libjemalloc.so.2"],
    "tcmalloc": ["libtcmalloc_minimal.so.4"],
    "mimalloc": ["libmimalloc.so.2"],
    "replay-auto": ["libreplayalloc_preload.so", "libjemalloc.so.2"],
    "replay-explicit": ["libreplayalloc_preload.so", "libjemalloc.so.2"],
    "replay-torch": ["libreplayalloc_torch.so", "libc.so.6"],
}


def self_costs(path):
    """{(object basename, file, function): self Ir} from a callgrind output file."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    costs = {}
    ob = fl = fn = ""
    skip = False

    def named(kind, rest):
        rest = rest.strip()
        if rest.startswith("("):
            close = rest.index(")")
            key, name = rest[1:close], rest[close + 1:].strip()
            if name:
                names[kind][key] = name
            return names[kind].get(key, "?")
        return rest

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                ob = os.path.basename(named("ob", line[3:]))
            elif line.startswith(("fl=", "fi=", "fe=")):
                fl = named("fl", line[3:])
            elif line.startswith("fn="):
                fn = named("fn", line[3:])
            elif line.startswith("cob="):
                named("ob", line[4:])
            elif line.startswith(("cfi=", "cfl=")):
                named("fl", line[4:])
            elif line.startswith("cfn="):
                named("fn", line[4:])
            elif line.startswith("calls="):
                skip = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip:
                    skip = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    costs[(ob, fl, fn)] = costs.get((ob, fl, fn), 0) + int(parts[1])
    return costs


# Entry points of an allocator, by name: callgrind names the object of tcmalloc's malloc
# and free "???" (gperftools' minimal library; preload_callgrind under it: all of both
# there), so for tcmalloc those functions of an unknown object count too.
ENTRY_NAMES = ("malloc", "free", "calloc", "realloc", "memalign", "aligned_alloc", "valloc", "operator new",
               "operator delete", "tc_", "cfree", "sdallocx", "mallocx")


def in_allocator(allocator, ob, fl, fn=""):
    if allocator == "tcmalloc" and ob == "???" and fn.startswith(ENTRY_NAMES):
        return True
    # The object's file name, as the loader resolved it: libtcmalloc_minimal.so.4.5.9 for
    # libtcmalloc_minimal.so.4, libmimalloc.so.2.0 for libmimalloc.so.2.
    if not any(ob == o or ob.startswith(o + ".") for o in OBJECTS[allocator]):
        return False
    if ob == "libc.so.6":  # glibc's malloc: its malloc/ sources (malloc.c, arena.c, hooks.c, ...)
        return "/malloc/" in fl or fl.startswith("malloc/")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", default=DEFAULT_CELLS)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    root = os.path.dirname(os.path.dirname(HERE))
    cells = run_e2e.parse_cells(a.cells)
    allocators = [x for x in a.allocators.split(",") if x]
    for x in allocators:
        if x not in OBJECTS:
            sys.exit(f"alloc_instructions.py: unknown allocator '{x}'")
    for c in cells:
        if c["threads"] != 1:
            sys.exit("alloc_instructions.py: cells of one thread only (callgrind serializes threads)")
    driver = os.path.join(build, "bench", "e2e", "e2e_driver")
    models_dir = os.path.join(build, "models")
    python = sys.executable if importlib.util.find_spec("torch") else "/usr/bin/python3"
    subprocess.run([python, os.path.join(root, "scripts", "make_models.py"), models_dir]
                   + sorted({c["model"] for c in cells}), check=True)
    ref_dir = os.path.join(build, "e2e-refs")
    os.makedirs(ref_dir, exist_ok=True)
    env0 = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env0.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "REPLAYALLOC_BACKGROUND_PLANNING": "0"})
    # References first (glibc, natively), so that every callgrind run checks its outputs.
    for c in cells:
        ref = os.path.join(ref_dir, run_e2e.reference_name(c))
        if not os.path.exists(ref):
            subprocess.run([driver, "--model", os.path.join(models_dir, f"{c['model']}.pt"),
                            "--input", os.path.join(models_dir, f"{c['model']}.input.pt"), "--reference", ref,
                            "--write-reference", "--threads", "1", "--warmup", "1", "--iterations", "1"],
                           env=env0, check=True, capture_output=True)
    scratch = tempfile.mkdtemp(prefix="alloc_instructions.")

    def one(c, x):
        extra, args = run_e2e.allocator_setup(x, build)
        out = os.path.join(scratch, f"{c['model']}.{x}.cg")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        cmd += run_e2e.driver_command(driver, models_dir, os.path.join(ref_dir, run_e2e.reference_name(c)), c, x,
                                      args + ["--callgrind-timed"])
        p = subprocess.run(cmd, env=dict(env0, **extra), capture_output=True, text=True)
        rec = {"cell": f"{c['model']}/T1", "model": c["model"], "allocator": x, "rc": p.returncode,
               "inferences": c["iterations"]}
        try:
            run = json.loads(p.stdout.strip().splitlines()[-1])
            rec["outputs_wrong"] = run.get("outputs_wrong")
            ra = run.get("replayalloc") or {}
            rec["slab_hits"] = ra.get("slab_hits")
        except (IndexError, json.JSONDecodeError):
            rec["error"] = p.stderr.strip().splitlines()[-3:]
            return rec
        costs = self_costs(out)
        total = sum(costs.values())
        mine = sum(v for (ob, fl, fn), v in costs.items() if in_allocator(x, ob, fl, fn))
        rec["program_ir"] = total
        rec["allocator_ir"] = mine
        rec["unknown_object_ir"] = sum(v for (ob, fl, fn), v in costs.items() if ob == "???")
        rec["by_object"] = {}
        for (ob, fl, fn), v in costs.items():
            if in_allocator(x, ob, fl, fn):
                rec["by_object"][ob] = rec["by_object"].get(ob, 0) + v
        if not rec["by_object"]:
            rec["error"] = [f"none of {OBJECTS[x]} in the callgrind file {out} (kept)"]
            return rec
        os.remove(out)
        return rec

    jobs = [(c, x) for c in cells for x in allocators]
    failures = 0
    with open(a.out, "w") as f, concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for rec in pool.map(lambda j: one(*j), jobs):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            bad = rec["rc"] != 0 or rec.get("outputs_wrong") or "error" in rec
            failures += bool(bad)
            per = rec.get("allocator_ir", 0) / max(1, rec["inferences"])
            print(f"{rec['cell']:<24} {rec['allocator']:<16} {per:>14,.0f} instructions per inference in the allocator"
                  f"{' FAILED' if bad else ''}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
