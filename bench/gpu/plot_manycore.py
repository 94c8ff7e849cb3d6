#!/usr/bin/env python3
"""Plots the many-core study (bench/gpu/run_manycore.sh): for each model, throughput
and p99 latency against the number of inference threads T, one line per allocator,
medians over the rounds. Usage: plot_manycore.py RUNS.jsonl OUT.png"""
import collections
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
cells = collections.defaultdict(list)  # (model, allocator, threads) -> runs
for r in runs:
    if r.get("rc") == 0 and r.get("run"):
        cells[(r["model"], r["allocator"], r["threads"])].append(r["run"])
models = sorted({m for m, _, _ in cells})
allocators = sorted({a for _, a, _ in cells}, key=lambda a: (a.startswith("replay"), a))
fig, axes = plt.subplots(2, len(models), figsize=(5 * len(models), 8), squeeze=False)
for col, model in enumerate(models):
    for alloc in allocators:
        ts = sorted(t for m, a, t in cells if m == model and a == alloc)
        thr = [statistics.median(r["throughput"] for r in cells[(model, alloc, t)]) for t in ts]
        p99 = [statistics.median(r["p99_ms"] for r in cells[(model, alloc, t)]) for t in ts]
        style = "-" if alloc.startswith("replay") else "--"
        axes[0][col].plot(ts, thr, style, marker="o", label=alloc)
        axes[1][col].plot(ts, p99, style, marker="o", label=alloc)
    axes[0][col].set_title(f"{model}: throughput")
    axes[0][col].set_ylabel("inferences / s")
    axes[1][col].set_title(f"{model}: p99 latency")
    axes[1][col].set_ylabel("ms")
    for row in (0, 1):
        axes[row][col].set_xlabel("inference threads T")
        axes[row][col].set_xscale("log", base=2)
        axes[row][col].grid(True, alpha=0.3)
axes[0][0].legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print(f"wrote {sys.argv[2]}")
