#!/usr/bin/python3
"""bench/e2e/run_e2e.py: the end-to-end benchmark: real models under every allocator.

  run_e2e.py --build BUILD_DIR --out RUNS.jsonl [--quick] [--rounds R] [--cells SPEC]
             [--allocators a,b,...] [--libdir DIR]

For each round, for each cell (model x threads), every allocator runs the cell in a
process of its own (bench/e2e/e2e_driver), the allocators' order rotated by one each
round so none always runs first or last. One JSON line per run goes to RUNS.jsonl
(the driver's line plus allocator, round, cell and exit status); bench/update_results.py
e2e turns it into the RESULTS.md section.

Allocators:
  glibc            nothing preloaded (its first run of each model writes the reference)
  jemalloc         LD_PRELOAD libjemalloc.so.2
  tcmalloc         LD_PRELOAD libtcmalloc_minimal.so.4 (gperftools)
  mimalloc         LD_PRELOAD libmimalloc.so.2
  replay-auto      LD_PRELOAD libreplayalloc_preload.so, its default auto mode
  replay-explicit  LD_PRELOAD libreplayalloc_preload.so, the driver calls
                   replayalloc_iteration_begin/end (dlsym) around each inference
  replay-torch     libreplayalloc_torch.so dlopen'ed and installed as libtorch's CPU
                   allocator, an iteration around each inference; the rest on glibc

Cells: MODEL:THREADS[:WARMUP:ITERATIONS], comma-separated; models are made by
scripts/make_models.py into BUILD_DIR/models on first use. Every output is compared
with the glibc reference; a run whose outputs differ (or that fails) makes this script
exit 1 after all runs (its line says why).

Training cells: a model of TRAIN (make_models.py's train_* files), e.g.
train_resnet18:1:10:20, runs WARMUP + ITERATIONS training steps instead of inferences
(e2e_driver --train, Note [Training cells]): each of the THREADS threads trains its own
copy; an iteration of replayalloc per step. Its reference is the losses of every step
(one reference per model and step count); its record carries "mode": "train".
bench/run_training.sh runs them.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

LIBDIR = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-explicit", "replay-torch"]

# Cells are sized for a 2-core machine whose libtorch computes with OpenBLAS (one
# thread; scripts/setup.sh installs it). CPU per inference measured there: MobileNetV3
# ~27 ms, LSTM ~75 ms, BERT-like b1 ~47 ms, b8 ~320 ms, ResNet-50 ~110 ms; starting a
# process (libtorch, the model) ~2-3 s. Every timed phase is 1-3 s, and every cell has
# at least 8 warm-up inferences per thread, so that auto mode (3 periods to find the
# iteration, 2 identical recordings) replays before the timed phase begins.
# QUICK: 3 cells x 7 allocators x 2 rounds, about 3 minutes.
QUICK_CELLS = "mobilenet_v3_large:1:8:16,resnet50:2:8:4,bert_b1:1:8:12"
# Full: 13 cells x 7 allocators x 3 rounds, about 20 minutes.
FULL_CELLS = ("mobilenet_v3_large:1:10:40,mobilenet_v3_large:2:10:30,mobilenet_v3_large:4:8:16,"
              "lstm:1:8:16,lstm:2:8:12,lstm:4:8:8,"
              "resnet50:1:8:12,resnet50:2:8:10,resnet50:4:8:6,"
              "bert_b1:1:8:24,bert_b1:2:8:16,bert_b1:4:8:10,"
              "bert_b8:1:8:6")


# Models whose cells change shape per inference: the driver's --lengths (a prefix of
# the input's token ids, drawn per inference from these lengths).
VARLEN = {"bert_varlen": ",".join(str(16 * k) for k in range(1, 17))}  # 16..256

# Models whose cells are training steps (e2e_driver --train, beside MODEL.pt the
# MODEL.target.pt that make_models.py writes): the optimizer of each.
TRAIN = {"train_resnet18": "sgd", "train_mobilenet_v3_small": "sgd", "train_bert": "adam"}


def reference_name(cell):
    """The reference file of a cell: per model; a training cell's per model and step count."""
    if cell["model"] in TRAIN:
        return f"{cell['model']}.steps{cell['warmup'] + cell['iterations']}.ref"
    return f"{cell['model']}.ref"


def parse_cells(spec):
    cells = []
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) not in (2, 4):
            sys.exit(f"run_e2e.py: bad cell '{item}' (MODEL:THREADS[:WARMUP:ITERATIONS])")
        try:
            nums = [int(p) for p in parts[1:]]
        except ValueError:
            sys.exit(f"run_e2e.py: bad cell '{item}': threads, warm-up and iterations are integers")
        warmup, iters = (nums[1], nums[2]) if len(nums) == 3 else (6, 8)
        if nums[0] < 1 or iters < 1 or warmup < 0:
            sys.exit(f"run_e2e.py: bad cell '{item}': threads and iterations must be positive")
        cells.append({"model": parts[0], "threads": nums[0], "warmup": warmup, "iterations": iters})
    return cells


def driver_command(driver, models_dir, ref, c, label, args, iterations=None):
    """e2e_driver's command line for one run of cell `c` under allocator `label` (its
    driver arguments `args`): model, input, reference, threads, warm-up and iterations
    (`iterations` instead of the cell's when given), --lengths for a model whose shapes
    change, --train for a training model. The caller adds --write-reference and the
    like."""
    cmd = [driver, "--model", os.path.join(models_dir, f"{c['model']}.pt"),
           "--input", os.path.join(models_dir, f"{c['model']}.input.pt"),
           "--reference", ref, "--threads", str(c["threads"]), "--warmup", str(c["warmup"]),
           "--iterations", str(c["iterations"] if iterations is None else iterations), "--label", label] + args
    if c["model"] in VARLEN:
        cmd += ["--lengths", VARLEN[c["model"]]]
    if c["model"] in TRAIN:
        cmd += ["--train", "--target", os.path.join(models_dir, f"{c['model']}.target.pt"),
                "--optimizer", TRAIN[c["model"]]]
    return cmd


def allocator_setup(name, build, libdir=LIBDIR, extra_conf=None):
    """(extra environment, driver arguments) for one allocator. extra_conf: NAME -> CONF,
    replay-auto run with MALLOC_CONF=CONF under NAME (its fallback's jemalloc settings)."""
    preload = os.path.join(build, "hooks", "libreplayalloc_preload.so")
    torch_lib = os.path.join(build, "integrations", "pytorch", "libreplayalloc_torch.so")
    table = {
        "glibc": ({}, []),
        "jemalloc": ({"LD_PRELOAD": f"{libdir}/libjemalloc.so.2"}, []),
        "tcmalloc": ({"LD_PRELOAD": f"{libdir}/libtcmalloc_minimal.so.4"}, []),
        "mimalloc": ({"LD_PRELOAD": f"{libdir}/libmimalloc.so.2"}, []),
        "replay-auto": ({"LD_PRELOAD": preload}, []),
        "replay-explicit": ({"LD_PRELOAD": preload}, ["--iterations-api", "explicit"]),
        "replay-torch": ({}, ["--iterations-api", "torch", "--torch-lib", torch_lib]),
    }
    for extra, conf in (extra_conf or {}).items():
        if conf.startswith("env:"):  # env:VAR=VALUE;VAR=VALUE: replayalloc's own settings
            table[extra] = ({"LD_PRELOAD": preload, **dict(v.split("=", 1) for v in conf[4:].split(";") if v)}, [])
        else:
            table[extra] = ({"LD_PRELOAD": preload, "MALLOC_CONF": conf}, [])
    env, args = table[name]
    for path in [env.get("LD_PRELOAD")] + [a for a in args if a.endswith(".so")]:
        if path and not os.path.exists(path):
            sys.exit(f"run_e2e.py: {name} needs {path}, which does not exist (build it, or scripts/setup.sh)")
    return env, args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--cells")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--extra-conf", action="append", default=[], metavar="NAME=CONF",
                    help="adds allocator NAME: replay-auto with MALLOC_CONF=CONF (e.g. its fallback's "
                         "settings before a change), or with the environment variables of "
                         "CONF=env:VAR=VALUE;VAR=VALUE; repeatable")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run before it is killed")
    ap.add_argument("--libdir", default=LIBDIR,
                    help="where jemalloc, tcmalloc and mimalloc are (bench/gpu/run_manycore.sh carries them)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rounds = a.rounds or (2 if a.quick else 3)
    cells = parse_cells(a.cells or (QUICK_CELLS if a.quick else FULL_CELLS))
    allocators = [x for x in a.allocators.split(",") if x]
    extra_conf = dict(e.split("=", 1) for e in a.extra_conf)
    allocators += [x for x in extra_conf if x not in allocators]
    for x in allocators:
        if x not in ALLOCATORS and x not in extra_conf:
            sys.exit(f"run_e2e.py: unknown allocator '{x}' (one of {', '.join(ALLOCATORS)})")
    if "glibc" not in allocators:
        sys.exit("run_e2e.py: glibc must be among the allocators (its runs write the reference)")
    allocators = ["glibc"] + [x for x in allocators if x != "glibc"]
    driver = os.path.join(build, "bench", "e2e", "e2e_driver")
    if not os.access(driver, os.X_OK):
        sys.exit(f"run_e2e.py: {driver} not built (ninja -C {build} e2e_driver)")
    setups = {x: allocator_setup(x, build, a.libdir, extra_conf) for x in allocators}

    models_dir = os.path.join(build, "models")
    models = sorted({c["model"] for c in cells})
    # make_models.py needs torch: this interpreter when it has it (bench/run_all.sh runs
    # this script with bench/lib.sh's torch_python), else Debian's.
    python = sys.executable if importlib.util.find_spec("torch") else "/usr/bin/python3"
    subprocess.run([python, os.path.join(root, "scripts", "make_models.py"), models_dir] + models, check=True)
    ref_dir = os.path.join(build, "e2e-refs")
    os.makedirs(ref_dir, exist_ok=True)
    for name in sorted({reference_name(c) for c in cells}):  # fresh, from this build's glibc run
        ref = os.path.join(ref_dir, name)
        if os.path.exists(ref):
            os.remove(ref)

    failures = 0
    started = time.time()
    base_env = dict(os.environ)
    for var in ("LD_PRELOAD", "MALLOC_CONF", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        base_env.pop(var, None)
    # One thread of arithmetic per inference thread: T is the parallelism (the driver
    # sets libtorch's intra-op threads to 1; OpenBLAS keeps a pool of its own).
    base_env["OMP_NUM_THREADS"] = "1"
    base_env["OPENBLAS_NUM_THREADS"] = "1"
    total = rounds * len(cells) * len(allocators)
    done = 0
    with open(a.out, "w") as out:
        for r in range(rounds):
            order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
            for c in cells:
                ref = os.path.join(ref_dir, reference_name(c))
                for x in order:
                    env_extra, args = setups[x]
                    cmd = driver_command(driver, models_dir, ref, c, x, args)
                    if x == "glibc" and not os.path.exists(ref):
                        cmd.append("--write-reference")
                    env = dict(base_env, **env_extra)
                    t0 = time.time()
                    try:
                        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
                        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
                    except subprocess.TimeoutExpired as e:
                        rc, stdout, stderr = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
                    line = None
                    for l in stdout.splitlines():
                        if l.startswith("{"):
                            try:
                                line = json.loads(l)
                            except json.JSONDecodeError:
                                pass
                    rec = {"allocator": x, "round": r + 1, "cell": f"{c['model']}/T{c['threads']}",
                           "model": c["model"], "threads": c["threads"], "rc": rc, "run": line,
                           "seconds": round(time.time() - t0, 2)}
                    if c["model"] in TRAIN:
                        rec["mode"] = "train"
                    if rc != 0 or line is None:
                        failures += 1
                        rec["error"] = stderr.strip().splitlines()[-3:] if stderr.strip() else ["no output"]
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    done += 1
                    status = "ok" if rc == 0 and line else f"FAILED rc={rc}: {' / '.join(rec.get('error', []))}"
                    thr = f"{line['throughput']:.3g}/s p50 {line['p50_ms']:.1f} ms" if line else ""
                    print(f"[{done}/{total} {time.time() - started:.0f}s] round {r + 1} {rec['cell']:<24} "
                          f"{x:<16} {thr} ({rec['seconds']:.1f} s) {status}", flush=True)
    print(f"run_e2e.py: {total} runs in {time.time() - started:.0f} s, {failures} failed; raw runs in {a.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
