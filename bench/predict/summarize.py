#!/usr/bin/python3
"""bench/predict/summarize.py OUT_DIR MODEL...: the table bench/predict/run.sh prints.

Reads OUT_DIR/MODEL.predict.{per_allocation,linear_peak}.jsonl (replayalloc predict
--json, one line per target batch) and OUT_DIR/MODEL_bB.report.json (replayalloc
report --json of the recording at batch B), and prints one Markdown row per model and
target batch: recorded lower bound and slab, each method's predictions and errors.
"""
import json
import os
import sys


def mib(b):
    return f"{b / 2**20:.1f}"


def err(pred, true):
    return f"{100.0 * (pred - true) / true:+.1f}%" if true else "-"


def main():
    out, models = sys.argv[1], sys.argv[2:]
    print("| model | batch | recorded lower bound (MiB) | recorded slab (MiB) "
          "| per-allocation: slab (MiB) | error lower bound | error slab "
          "| linear peak: slab (MiB) | error lower bound | error slab |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errors = {"per_allocation": [], "linear_peak": []}
    for m in models:
        preds = {}
        for method in errors:
            with open(os.path.join(out, f"{m}.predict.{method}.jsonl")) as f:
                for line in f:
                    p = json.loads(line)
                    preds[(method, int(p["at"]))] = p
        for (method, at) in sorted({k for k in preds if k[0] == "per_allocation"}, key=lambda k: k[1]):
            with open(os.path.join(out, f"{m}_b{at}.report.json")) as f:
                r = json.load(f)
            cells = [m, str(at), mib(r["lower_bound_bytes"]), mib(r["slab_bytes"])]
            for method in ("per_allocation", "linear_peak"):
                p = preds[(method, at)]
                if p["method"] != method:
                    cells += ["n/a", "-", "-"]
                    continue
                q = p["predicted"]
                cells += [mib(q["slab_bytes"]), err(q["lower_bound_bytes"], r["lower_bound_bytes"]),
                          err(q["slab_bytes"], r["slab_bytes"])]
                errors[method].append(abs(q["slab_bytes"] - r["slab_bytes"]) / r["slab_bytes"])
            print("| " + " | ".join(cells) + " |")
    print()
    for method, e in errors.items():
        if e:
            e.sort()
            print(f"- {method.replace('_', ' ')}: slab error |median| {100 * e[len(e) // 2]:.1f}%, "
                  f"|worst| {100 * e[-1]:.1f}% over {len(e)} predictions")


if __name__ == "__main__":
    main()
