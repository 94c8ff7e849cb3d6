#!/usr/bin/python3
"""bench/predict/summarize.py OUT_DIR MODEL... [--results RESULTS.md --command CMD]

The table bench/predict/run.sh prints; with --results, also written to the predict
section of bench/RESULTS.md (bench/update_results.py's replace_section: between
`<!-- section: predict -->` and `<!-- end: predict -->`, or `<!-- predict:begin -->`
and `<!-- predict:end -->`, replaced in place or appended; the rest of the file is
kept) with the date, the machine and CMD.

Reads OUT_DIR/MODEL.fromB1_B2.{per_allocation,linear_peak}.jsonl (replayalloc predict
--json from the recordings at batch B1 and B2, one line per target batch) and
OUT_DIR/MODEL_bB.report.json (replayalloc report --json of the recording at batch B),
and prints one Markdown row per model, inputs and target batch: the recorded lower
bound and slab, each method's predicted slab and errors. A method that does not apply
(per-allocation on recordings that differ) shows n/a.
"""
import datetime
import io
import json
import os
import platform
import sys
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from update_results import replace_section  # noqa: E402  (bench/update_results.py)


def mib(b):
    return f"{b / 2**20:.1f}"


def err(pred, true):
    return f"{100.0 * (pred - true) / true:+.1f}%" if true else "-"


def table(out, models):
    print("| model | from batches | batch | recorded lower bound (MiB) | recorded slab (MiB) "
          "| per-allocation: slab (MiB) | error lower bound | error slab "
          "| linear peak: slab (MiB) | error lower bound | error slab |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors = {}
    for m in models:
        preds = {}
        for name in sorted(os.listdir(out)):
            parts = name.split(".")
            if len(parts) != 4 or parts[0] != m or not parts[1].startswith("from") or parts[3] != "jsonl":
                continue
            with open(os.path.join(out, name)) as f:
                for line in f:
                    p = json.loads(line)
                    preds[(parts[1][4:], int(p["at"]), parts[2])] = p
        keys = sorted({(k[0], k[1]) for k in preds}, key=lambda k: ([int(b) for b in k[0].split("_")], k[1]))
        for ins, at in keys:
            with open(os.path.join(out, f"{m}_b{at}.report.json")) as f:
                r = json.load(f)
            cells = [m, ins.replace("_", ", "), str(at), mib(r["lower_bound_bytes"]), mib(r["slab_bytes"])]
            for method in ("per_allocation", "linear_peak"):
                p = preds.get((ins, at, method))
                if p is None or p["method"] != method:
                    cells += ["n/a", "-", "-"]
                    continue
                q = p["predicted"]
                cells += [mib(q["slab_bytes"]), err(q["lower_bound_bytes"], r["lower_bound_bytes"]),
                          err(q["slab_bytes"], r["slab_bytes"])]
                errors.setdefault((ins, method), []).append(
                    abs(q["slab_bytes"] - r["slab_bytes"]) / r["slab_bytes"])
            print("| " + " | ".join(cells) + " |")
    print()
    for (ins, method), e in sorted(errors.items()):
        e.sort()
        print(f"- from batches {ins.replace('_', ' and ')}, {method.replace('_', ' ')}: slab error "
              f"|median| {100 * e[len(e) // 2]:.1f}%, |worst| {100 * e[-1]:.1f}% over {len(e)} predictions")


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        if names:
            cpu = f"{names[0]} ({len(names)} logical CPUs)"
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {cpu}"


def main():
    args = sys.argv[1:]
    results = command = None
    if "--results" in args:
        i = args.index("--results")
        results = args[i + 1]
        del args[i:i + 2]
    if "--command" in args:
        i = args.index("--command")
        command = args[i + 1]
        del args[i:i + 2]
    buf = io.StringIO()
    with redirect_stdout(buf):
        table(args[0], args[1:])
    print(buf.getvalue(), end="")
    if results:
        body = (
            "## Footprint prediction (`replayalloc predict`)\n\n"
            f"{datetime.date.today().isoformat()}, {machine()}; libtorch 1.13 CPU (Debian), one intra-op "
            "thread, random weights. Command: `" + (command or "bench/predict/run.sh") + "`.\n\n"
            "Each model's inference iteration recorded at several batch sizes "
            "(scripts/record_trace.py); the footprint at a larger batch size predicted from the recordings "
            "at two smaller ones (\"from batches\"), then compared with the recording at that batch size "
            "(planned with `best`). Error = (predicted - recorded) / recorded. n/a: the two recordings differ "
            "in their allocations (libtorch chose other kernels), so the per-allocation fit does not apply and "
            "`predict` uses the linear peak.\n\n" + buf.getvalue())
        replace_section(results, "predict", body.rstrip().split("\n"))


if __name__ == "__main__":
    main()
