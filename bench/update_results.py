#!/usr/bin/python3
"""bench/update_results.py: writes one section of bench/RESULTS.md from raw results.

The one writer of RESULTS.md's sections: called by the bench scripts (through
update_results in bench/lib.sh) and imported by bench/predict/summarize.py; not meant
to be run by hand, but it can be:

  update_results.py micro RESULTS.md --pair-dir D --callgrind-tsv T --meta M
  update_results.py demo  RESULTS.md --demo-output D --meta M
  update_results.py e2e   RESULTS.md --e2e-runs RUNS.jsonl --meta M [--name NAME]
  update_results.py text  RESULTS.md --name NAME --body FILE   (a section a script composed)

A section sits between `<!-- section: NAME -->` and `<!-- end: NAME -->` (or
`<!-- NAME:begin -->` and `<!-- NAME:end -->`, the planner's); it is replaced in place,
or appended when missing. Every other line of the file is kept. Nothing here invents a
number: every figure comes from the files given.
"""
import argparse
import json
import os
import re
import sys

HEADER = """# replayalloc: results

The project's results file. Each section below is written by the script it names
and replaced when that script runs again; the rest of the file is kept. Numbers come
from one machine and one run: compare allocators within a section (they ran side by
side in the same process and minute), not numbers across machines or dates.
"""

CG_ALLOCATORS = ["baseline", "replay", "miss", "jemalloc", "glibc"]


def read_meta(path):
    meta = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    return meta


def size_name(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def fmt_ns(v):
    if v is None:
        return "n/a"
    if v < 100:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    r = a / b
    if r < 0.1:
        return f"{r:.2g}×"  # two significant digits: 0.0031×
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def machine_lines(meta):
    return [
        f"- Date: {meta['date']}",
        f"- Machine: {meta['cpu']}, `nproc` = {meta['nproc']}, kernel {meta['kernel']}",
        f"- Load average (1/5/15 min) before: {meta['load_before']}; after: {meta.get('load_after', 'n/a')}"
        " (the machine is shared: other work running alongside shows up as noise)",
        f"- Source: commit {meta['commit']}; build type {meta['build_type']}, {meta['compiler']}",
    ]


PAIR_ALLOCATORS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replay_hit", "replay_miss"]
GENERAL = ["glibc", "jemalloc", "tcmalloc", "mimalloc"]
GENERAL_E2E = GENERAL


def read_pair_runs(pair_dir):
    """{(allocator, variant, size, threads): [ns per pair, one per round]}, errors, context."""
    runs, errors, ctx = {}, [], {}
    for name in sorted(os.listdir(pair_dir)):
        f = re.match(r"(\w+)\.(\d+)\.failed$", name)
        if f:
            with open(os.path.join(pair_dir, name)) as fh:
                last = fh.read().strip().splitlines()
            errors.append(f"{f.group(1)} round {f.group(2)}: the process died (a crash; no figures from it); "
                          f"its last benchmark line: `{last[-1].split()[0] if last else '?'}`")
            continue
        m = re.match(r"(\w+)\.(\d+)\.json$", name)
        if not m:
            continue
        allocator = m.group(1)
        with open(os.path.join(pair_dir, name)) as f:
            data = json.load(f)
        ctx.setdefault(allocator, data.get("context", {}))
        for b in data["benchmarks"]:
            mm = re.match(r"pair/(\w+)/(\d+)/threads:(\d+)$", b.get("run_name", b.get("name", "")))
            if not mm:
                continue
            key = (allocator, mm.group(1), int(mm.group(2)), int(mm.group(3)))
            if b.get("error_occurred"):
                errors.append(f"{allocator} round {m.group(2)}: {b['name']}: {b.get('error_message', 'error')}")
                continue
            if b.get("per_pair") is not None:
                runs.setdefault(key, []).append(b["per_pair"] * 1e9)
    return runs, errors, ctx


def median(v):
    v = sorted(v)
    n = len(v)
    return None if n == 0 else (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


def micro_section(pair_dir, cg_tsv, meta):
    runs, errors, ctx = read_pair_runs(pair_dir)
    rows = {k: median(v) for k, v in runs.items()}
    sizes = sorted({k[2] for k in rows})
    threads = sorted({k[3] for k in rows})
    out = []
    out.append("## Micro: malloc+free pair")
    out.append("")
    out.append("Written by `bench/run_micro.sh` (`bench/micro/pair_bench.cc`, `bench/micro/hotpath_callgrind.cc`).")
    out.append("")
    out += machine_lines(meta)
    served = "; ".join(f"{a}: `{ctx[a].get('malloc_from', '?')}`" for a in PAIR_ALLOCATORS if a in ctx)
    out.append(f"- `malloc` served by: {served}")
    out.append(f"- Command: `{meta['bench_cmd']}`, {meta.get('rounds', '?')} rounds, the allocators' order "
               "rotated by one each round")
    out.append(f"- Callgrind: `{meta['cg_cmd']}`")
    out.append("")
    out.append(
        "One binary, `pair_bench`, runs once per allocator and round, each in a process of its own "
        "(allocators that replace `malloc` cannot share one). Each benchmark iteration runs pairs "
        "`p = malloc(size); use(p); free(p)` of one size (256 pairs up to 1 MiB, 16 above). The figure is "
        "the **median over the rounds of one thread's CPU time per pair, in ns**; with T threads all T run "
        "the loop at once. The machine is shared with other work (see the load average): compare "
        "allocators within a table, and read single cells with the spread in mind.")
    out.append("")
    out.append("- **glibc**: nothing preloaded. **jemalloc**, **tcmalloc** (gperftools, minimal), "
               "**mimalloc**: `LD_PRELOAD` of the Debian library.")
    out.append(
        "- **replay hit**: `libreplayalloc_preload.so` preloaded (so `malloc`/`free` go through the "
        "preload library and the C API, as in an unmodified program), every benchmark iteration inside "
        "`replayalloc_iteration_begin/end` (found with `dlsym`; included in the time, amortised over the "
        "pairs), the key recorded and planned during the untimed warm-up; every pair a slab hit (checked "
        "before and after the timed loop). `REPLAYALLOC_MIN_SIZE=0` (the preload default of 4 KiB would "
        "send the small sizes to jemalloc).")
    out.append(
        "- **replay miss**: the same, but the plan recorded 16 bytes more than the timed requests ask "
        "for: every request misses (resync scan, then jemalloc) and every free goes to jemalloc; "
        "`REPLAYALLOC_REPLAN_AFTER=0` keeps the plan. This is the cost of a program that no longer "
        "matches its plan.")
    out.append(
        "- **bare**: only the pointer escapes. **touch**: one byte written in every 4 KiB of the block, "
        "so the page faults of freshly mapped memory are paid where an allocator causes them.")
    out.append("- Ratios: replayalloc's time ÷ glibc's, and ÷ the best (fastest) of glibc, jemalloc, tcmalloc "
               "and mimalloc for that row (below 1× replayalloc is faster).")
    out.append("")
    for variant in ("bare", "touch"):
        for t in threads:
            out.append(f"**{variant}, {t} thread{'s' if t > 1 else ''}** (ns per pair)")
            out.append("")
            out.append("| size | glibc | jemalloc | tcmalloc | mimalloc | replay hit | replay miss | hit ÷ glibc"
                       " | hit ÷ best | miss ÷ best |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for sz in sizes:
                v = {a: rows.get((a, variant, sz, t)) for a in PAIR_ALLOCATORS}
                gp = [v[a] for a in GENERAL if v[a] is not None]
                best = min(gp) if gp else None
                out.append(
                    f"| {size_name(sz)} | " + " | ".join(fmt_ns(v[a]) for a in PAIR_ALLOCATORS) + " | "
                    f"{fmt_ratio(v['replay_hit'], v['glibc'])} | {fmt_ratio(v['replay_hit'], best)} | "
                    f"{fmt_ratio(v['replay_miss'], best)} |")
            out.append("")
    spreads = []
    for k, v in runs.items():
        if len(v) >= 2 and median(v):
            spreads.append(((max(v) - min(v)) / median(v), k))
    if spreads:
        spreads.sort(reverse=True)
        over = sum(1 for sp, _ in spreads if sp > 0.2)
        worst = ", ".join(f"{k[0]}/{k[1]}/{size_name(k[2])}/{k[3]}t {sp * 100:.0f}%" for sp, k in spreads[:3])
        out.append(f"Spread (max − min over the rounds, ÷ median): {over} of {len(spreads)} rows above 20%; "
                   f"the largest: {worst}.")
        out.append("")
    if errors:
        out.append("Runs and benchmarks that failed:")
        out.append("")
        out += [f"- {e}" for e in errors]
        out.append("")

    # Callgrind: instructions per pair.
    cg = {}  # (allocator, size, scope) -> (Ir, pairs)
    with open(cg_tsv) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5 and parts[0] != "allocator":
                cg[(parts[0], int(parts[1]), parts[2])] = (int(parts[3]), int(parts[4]))
    if cg:
        cg_sizes = sorted({k[1] for k in cg if k[2] != "preload"})
        per = lambda a, s, sc="pairs": (cg[(a, s, sc)][0] / cg[(a, s, sc)][1]) if (a, s, sc) in cg else None
        out.append("**Instructions per pair** (callgrind, `Ir` collected only around the pairs, divided by "
                   "the pair count; user-space instructions only: time in the kernel, page faults and "
                   "cache misses are not in these counts). Here replayalloc is called through its C API "
                   "(`replayalloc_malloc`), jemalloc through `malloc` in the binary that links it, tcmalloc "
                   "and mimalloc through `malloc` with the library preloaded, glibc through `__libc_malloc`.")
        out.append("")
        out.append("| size | loop baseline | replay hit | replay hit incl. begin/end | replay miss | jemalloc"
                   " | tcmalloc | mimalloc | glibc |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in cg_sizes:
            cells = [per("baseline", s), per("replay", s), per("replay", s, "iteration"), per("miss", s),
                     per("jemalloc", s), per("tcmalloc", s), per("mimalloc", s), per("glibc", s)]
            out.append(f"| {size_name(s)} | " + " | ".join("n/a" if c is None else f"{c:.1f}" for c in cells) + " |")
        out.append("")
        pre_sizes = sorted({k[1] for k in cg if k[2] == "preload"})
        if pre_sizes:
            out.append("**Through `LD_PRELOAD`** (`bench/micro/preload_callgrind.cc`: a program that links no "
                       "allocator calls plain `malloc`/`free`, with each allocator's library preloaded; "
                       "replayalloc's library in its default auto mode, 4 KiB minimum, with the iterations "
                       "marked through the `replayalloc_iteration_begin/end` it exports, outside the collected "
                       "part). Below 4 KiB replayalloc hands the request to jemalloc's thread cache; from "
                       "4 KiB every measured pair is a slab hit (checked). Instructions per pair, loop included:")
            out.append("")
            pre_allocs = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replayalloc"]
            out.append("| size | " + " | ".join(pre_allocs) + " | replayalloc ÷ best other |")
            out.append("|---:|" + "---:|" * (len(pre_allocs) + 1))
            for s in pre_sizes:
                vals = [per(a, s, "preload") for a in pre_allocs]
                others = [v for v in vals[:-1] if v is not None]
                ratio = f"{vals[-1] / min(others):.2f}" if vals[-1] is not None and others else "n/a"
                out.append(f"| {size_name(s)} | " + " | ".join("n/a" if c is None else f"{c:.1f}" for c in vals)
                           + f" | {ratio} |")
            out.append("")
        base = [per("baseline", s) for s in cg_sizes if per("baseline", s) is not None]
        if base:
            out.append(
                f"The loop baseline (the same loop over two empty out-of-line functions: loop, call and "
                f"return) is {base[0]:.1f} instructions per pair and is included in every column; subtract "
                "it for the allocator's own cost. \"incl. begin/end\" collects whole iterations of "
                f"{meta.get('cg_pairs', '?')} pairs, so it adds begin+end divided by that count.")
            out.append("")
    return out


E2E_ALLOCATORS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "replay-auto", "replay-explicit", "replay-torch"]
E2E_REPLAY = ["replay-auto", "replay-explicit", "replay-torch"]


def geomean(v):
    v = [x for x in v if x and x > 0]
    if not v:
        return None
    p = 1.0
    for x in v:
        p *= x
    return p ** (1.0 / len(v))


# The training cells' texts (bench/run_training.sh), where they differ from inference's.
TRAINING_MODELS = (
    "Models: TorchScript traced in training mode by `scripts/make_models.py` (random weights, "
    "parameters that require grad): torchvision ResNet-18 (batch 8, **112×112**: a quarter of "
    "224×224's pixels, so that a step takes about 0.3 s on one core here) and MobileNetV3-Small "
    "(batch 8, 224×224, its classifier's dropout off), each with cross entropy against fixed labels "
    "and SGD (lr 0.01, momentum 0.9); the BERT-like encoder (BERT-base's layer, 2 layers, sequence "
    "128, batch 8) with the MSE of its pooled output against a fixed target and Adam (lr 1e-4). A "
    "step: forward, loss, backward, optimizer step, zero_grad (libtorch's C++ API, gradients zeroed "
    "in place), the same batch every step. A cell is MODEL/T: T threads each train their own copy "
    "of the model, W warm-up then N timed steps (intra-op threads: 1, OpenBLAS threads: 1), started "
    "together. Every allocator runs every cell in a process of its own, one after the other, the "
    "order rotated each round. Every step's loss and the trained parameters' checksum, in every "
    "run, are compared with the first glibc run's; a difference fails the run.")
TRAINING_FIGURES = (
    "Figures are medians over the rounds of each run's figure. **thr** = training steps per second "
    "over the timed phase (all threads); **p50/p99** = step-time percentiles over the run's T×N "
    "timed steps (with few steps p99 is close to the maximum); **CPU ms** = the process's user + "
    "system CPU time per step over the timed phase; **faults** = minor page faults per step; "
    "**RSS** = the process's peak RSS (VmHWM, weights and optimizer state included). **÷best** "
    "compares with the best of glibc/jemalloc/tcmalloc/mimalloc in that cell for that metric "
    "(highest throughput, lowest p99, lowest RSS); above 1 is better for thr, below 1 is better "
    "for p99 and RSS.")


def e2e_section(runs_path, meta):
    recs = [json.loads(l) for l in open(runs_path) if l.strip()]
    # Training cells (run_e2e.py marks their records): the same table, other words.
    training = bool(recs) and all(r.get("mode") == "train" for r in recs)
    per = "step" if training else "inference"
    cells = []
    for r in recs:
        if r["cell"] not in cells:
            cells.append(r["cell"])
    ok = {}
    failed = []
    for r in recs:
        if r.get("rc") == 0 and r.get("run"):
            ok.setdefault((r["cell"], r["allocator"]), []).append(r["run"])
        else:
            failed.append(f"{r['cell']} {r['allocator']} round {r['round']}: rc {r.get('rc')}: "
                          + " / ".join(r.get("error", [])))
    rounds = max((r["round"] for r in recs), default=0)
    metrics = ["throughput", "p50_ms", "p99_ms", "cpu_ms_per_inference", "minor_faults_per_inference", "peak_rss_mib"]
    med = {}
    for key, runs in ok.items():
        med[key] = {m: median([x[m] for x in runs]) for m in metrics}
        med[key]["n"] = len(runs)
        med[key]["bit"] = all(x["outputs_bit_identical"] == x["outputs_checked"] for x in runs)
        med[key]["maxdiff"] = max(x["max_abs_diff"] for x in runs)
    # The script that ran it: the command's first word (run_all.sh, run_e2e_varlen.sh,
    # run_e2e_cells.sh, ...).
    script = meta.get("e2e_cmd", "").split(" ")[0]
    if not re.fullmatch(r"bench/[a-z0-9_]+\.sh", script):
        script = "bench/run_all.sh"
    out = ["## End to end: TorchScript models under every allocator", "",
           "Written by `bench/run_training.sh` (`bench/e2e/run_e2e.py`, `bench/e2e/e2e_driver.cc --train`)."
           if training else
           f"Written by `{script}` (`bench/e2e/run_e2e.py`, `bench/e2e/e2e_driver.cc`).", ""]
    out += machine_lines(meta)
    out.append(f"- Libraries: libtorch {meta.get('torch_version', '?')} (Debian; {meta.get('blas', 'BLAS not recorded')}), glibc, jemalloc 5.3, "
               "tcmalloc (gperftools minimal), mimalloc 2.0 (Debian packages)")
    out.append(f"- Command: `{meta['e2e_cmd']}` ({rounds} rounds)")
    out.append("")
    out.append(TRAINING_MODELS if training else
        "Models: TorchScript traced by `scripts/make_models.py` with random weights: torchvision "
        "MobileNetV3-Large and ResNet-50 (batch 1, 224×224), a BERT-base-like encoder (BERT-base's "
        "layer: width 768, 12 heads, FFN 3072; **2 layers instead of 12**: the layers repeat the same "
        "allocations, and 2 keep the full matrix within 30 minutes here; sequence 128, batch 1 and 8), and a 2-layer LSTM language-model body "
        "(width 512, sequence 64). A cell is MODEL/T: T threads share one module and each runs W "
        "warm-up then N timed inferences (intra-op threads: 1, OpenBLAS threads: 1), started together. Every allocator runs "
        "every cell in a process of its own, one after the other, the order rotated each round. Every "
        "output of every run is compared with the first glibc run's; a difference fails the run.")
    out.append("")
    out.append("Allocators: **glibc** (nothing preloaded), **jemalloc**, **tcmalloc**, **mimalloc** "
               "(`LD_PRELOAD`), **replay-auto** (`libreplayalloc_preload.so`, its default auto mode, 4 KiB "
               "minimum), **replay-explicit** (the same library; the driver calls "
               f"`replayalloc_iteration_begin/end`, found with `dlsym(RTLD_DEFAULT)`, around each {per}), "
               "**replay-torch** (`libreplayalloc_torch.so` as libtorch's CPU allocator, an iteration around "
               f"each {per}; everything else on glibc).")
    out.append("")
    out.append(TRAINING_FIGURES if training else
        "Figures are medians over the rounds of each run's figure. **thr** = inferences per second over "
        "the timed phase (all threads); **p50/p99** = latency percentiles over the run's T×N timed "
        "inferences (with few inferences p99 is close to the maximum); **CPU ms** = the process's user + "
        "system CPU time per inference over the timed phase; **faults** = minor page faults per "
        "inference; **RSS** = the process's peak RSS (VmHWM, weights included). **÷best** compares with "
        "the best of glibc/jemalloc/tcmalloc/mimalloc in that cell for that metric (highest throughput, "
        "lowest p99, lowest RSS); above 1 is better for thr, below 1 is better for p99 and RSS.")
    out.append("")
    out.append(
        "**Noise.** The machine (2 cores) was shared with other engineers' builds during the run, so "
        "wall-clock figures (thr, p50, p99) swing by 2× or more between runs of the same allocator; "
        f"CPU ms per {per}, page faults and RSS are far steadier. Read the ratios and the CPU column, "
        "not single throughput cells.")
    out.append("")
    out.append("| cell | allocator | thr /s | p50 ms | p99 ms | CPU ms | faults | RSS MiB | thr ÷ glibc | thr ÷ best | "
               "p99 ÷ best | RSS ÷ best | CPU ÷ best | runs | outputs |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    goal = {a: {"thr": [], "p99": [], "rss": [], "cpu": []} for a in E2E_REPLAY}
    for c in cells:
        gp = {a: med[(c, a)] for a in GENERAL_E2E if (c, a) in med}
        best_thr = max((v["throughput"] for v in gp.values()), default=None)
        best_p99 = min((v["p99_ms"] for v in gp.values()), default=None)
        best_rss = min((v["peak_rss_mib"] for v in gp.values()), default=None)
        best_cpu = min((v["cpu_ms_per_inference"] for v in gp.values()), default=None)
        glibc = med.get((c, "glibc"))
        for a in E2E_ALLOCATORS:
            v = med.get((c, a))
            if v is None:
                continue
            r_thr = v["throughput"] / best_thr if best_thr else None
            r_p99 = v["p99_ms"] / best_p99 if best_p99 else None
            r_rss = v["peak_rss_mib"] / best_rss if best_rss else None
            r_cpu = v["cpu_ms_per_inference"] / best_cpu if best_cpu else None
            if a in goal:
                goal[a]["thr"].append(r_thr)
                goal[a]["p99"].append(r_p99)
                goal[a]["rss"].append(r_rss)
                goal[a]["cpu"].append(r_cpu)
            f2 = lambda x: "n/a" if x is None else f"{x:.2f}"
            outputs = "bit-identical" if v["bit"] else f"within 1e-4 (max diff {v['maxdiff']:.2g})"
            name = f"**{a}**" if a in E2E_REPLAY else a
            out.append(
                f"| {c} | {name} | {v['throughput']:.3g} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | "
                f"{v['cpu_ms_per_inference']:.1f} | {v['minor_faults_per_inference']:.0f} | {v['peak_rss_mib']:.0f} | "
                f"{f2(v['throughput'] / glibc['throughput']) if glibc else 'n/a'} | {f2(r_thr)} | {f2(r_p99)} | "
                f"{f2(r_rss)} | {f2(r_cpu)} | {v['n']} | {outputs} |")
    out.append("")
    out.append("**Against the bar** (goals from issue 7, reported, not asserted): throughput ≥ 1.15× the best "
               "general-purpose allocator (geometric mean over cells) and ≥ 1.0× in every cell; p99 ≤ 0.8×; "
               "peak RSS ≤ the best's." + (" Issue 7 set them for inference; here the same measures over "
                                           "training steps." if training else ""))
    out.append("")
    out.append("| replayalloc as | thr ÷ best, geomean | cells with thr ≥ 1.0× | p99 ÷ best, geomean | "
               "cells with p99 ≤ 0.8× | cells with RSS ≤ best | CPU ÷ best, geomean |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for a in E2E_REPLAY:
        g = goal[a]
        n = len([x for x in g["thr"] if x])
        if n == 0:
            continue
        gm = lambda k: geomean(g[k])
        out.append(f"| {a} | {gm('thr'):.3f} | {sum(1 for x in g['thr'] if x and x >= 1.0)} of {n} | "
                   f"{gm('p99'):.3f} | {sum(1 for x in g['p99'] if x and x <= 0.8)} of {n} | "
                   f"{sum(1 for x in g['rss'] if x and x <= 1.0)} of {n} | {gm('cpu'):.3f} |")
    out.append("")
    out += paired_table(recs, cells, per)
    out += first_inferences_table(cells, ok)
    if failed:
        out.append("Runs that failed (no figures from them):")
        out.append("")
        out += [f"- {f}" for f in failed]
        out.append("")
    return out


def paired_table(recs, cells, per):
    """Throughput paired by round: each run over the best general-purpose allocator's run of
    the same round and cell (for a general-purpose allocator, the best of the other three),
    median over the rounds; with the rounds it won (at or above that best). A round's runs
    follow one another within seconds, so the machine's slower drifts divide out."""
    by = {}  # (cell, round) -> {allocator: run}
    for r in recs:
        if r.get("rc") == 0 and r.get("run") and r["run"].get("throughput"):
            by.setdefault((r["cell"], r["round"]), {})[r["allocator"]] = r["run"]
    ratios, cpu = {}, {}  # (cell, allocator) -> [ratio per round]
    for (c, _), runs in by.items():
        for a, v in runs.items():
            others = [runs[g] for g in GENERAL_E2E if g in runs and g != a]
            if others:
                ratios.setdefault((c, a), []).append(v["throughput"] / max(o["throughput"] for o in others))
                cpu.setdefault((c, a), []).append(v["cpu_ms_per_inference"] /
                                                  min(o["cpu_ms_per_inference"] for o in others))
    if not ratios:
        return []
    out = [f"**Paired by round** (throughput): each run ÷ the best general-purpose allocator's run of the "
           "same round and cell (for a general-purpose allocator, the best of the other three), median over "
           "the rounds, and the rounds it won (ratio ≥ 1.0). The runs of one round follow one another within "
           "seconds, so the machine's slower drifts divide out; each general-purpose allocator, measured the "
           "same way, is the yardstick: the best of several noisy runs is above any one allocator's typical "
           f"run, so even the fastest general-purpose allocator of a cell stays below 1.0 in some rounds.", ""]
    out.append("| cell | " + " | ".join(E2E_ALLOCATORS) + " |")
    out.append("|---|" + "---:|" * len(E2E_ALLOCATORS))
    for c in cells:
        row = []
        for a in E2E_ALLOCATORS:
            v = ratios.get((c, a))
            row.append("n/a" if not v else f"{median(v):.2f} ({sum(1 for x in v if x >= 1.0)}/{len(v)})")
        out.append(f"| {c} | " + " | ".join(row) + " |")
    row = []
    for a in E2E_ALLOCATORS:
        meds = [median(ratios[(c, a)]) for c in cells if ratios.get((c, a))]
        g = geomean(meds)
        row.append("n/a" if g is None else f"**{g:.3f}** ({sum(1 for m in meds if m >= 1.0)} of {len(meds)} cells ≥ 1.0)")
    out.append("| geomean | " + " | ".join(row) + " |")
    row = []
    for a in E2E_ALLOCATORS:
        g = geomean([median(cpu[(c, a)]) for c in cells if cpu.get((c, a))])
        row.append("n/a" if g is None else f"{g:.3f}")
    out.append(f"| CPU per {per} ÷ the best's, paired, geomean (lower is better) | " + " | ".join(row) + " |")
    out.append("")
    return out


def first_inferences_table(cells, ok):
    """Runs with no warm-up: the first thread's first three timed inferences (e2e_driver's
    first_ms), medians over the rounds, where recording, planning and slab making land."""
    rows = []
    for c in cells:
        first = {}
        for a in E2E_ALLOCATORS:
            runs = [x for x in ok.get((c, a), []) if x.get("warmup") == 0 and len(x.get("first_cpu_ms", [])) >= 3]
            if runs:
                first[a] = [median([x["first_cpu_ms"][i] for x in runs]) for i in range(3)]
        best = [min((first[a][i] for a in GENERAL_E2E if a in first), default=None) for i in range(3)]
        for a, v in first.items():
            name = f"**{a}**" if a in E2E_REPLAY else a
            ratios = " | ".join("n/a" if not best[i] else f"{v[i] / best[i]:.2f}" for i in range(3))
            rows.append(f"| {c} | {name} | {v[0]:.1f} | {v[1]:.1f} | {v[2]:.1f} | {ratios} |")
    if not rows:
        return []
    return ["**The first three inferences**: the first thread's CPU time for each (ms; "
            "CLOCK_THREAD_CPUTIME_ID, which other processes on the shared machine do not inflate as they "
            "do wall time), median over the rounds; ÷best: the lowest of glibc/jemalloc/tcmalloc/mimalloc "
            "for the same inference. Explicit iterations record the first two and replay from the third; "
            "auto mode finds the period first. The first inferences of a TorchScript module also run its "
            "profiling executor, which allocates ~2 million small blocks: every allocator pays for them.",
            "", "| cell | allocator | 1st ms | 2nd ms | 3rd ms | 1st ÷ best | 2nd ÷ best | 3rd ÷ best |",
            "|---|---|---:|---:|---:|---:|---:|---:|"] + rows + [""]


def demo_section(demo_output, meta):
    with open(demo_output) as f:
        text = f.read().rstrip("\n")
    out = ["## Demo (inference-shaped pattern)", "", "Written by `bench/run_micro.sh`.", ""]
    out += machine_lines(meta)
    out.append(f"- Command: `{meta['demo_cmd']}`")
    out.append("")
    out.append("```")
    out.append(text)
    out.append("```")
    out.append("")
    return out


# Sections written before the markers existed, found by their heading and replaced up to
# the next "## " heading, so that the file keeps its look (no markers appear in it).
UNMARKED = {"never-repeats": "## Never repeats:"}


def replace_section(path, name, lines):
    """Writes `lines` (no newlines in them) as section `name` of the results file `path`.

    The section is found by its markers, `<!-- section: NAME -->` ... `<!-- end: NAME -->`
    or `<!-- NAME:begin -->` ... `<!-- NAME:end -->`, and replaced with the same markers;
    a section in UNMARKED by its heading. A missing section is appended (with the first
    kind of markers, or none for UNMARKED); a missing file starts with HEADER. Every other
    line is kept, and the file is replaced whole (written beside it, then renamed)."""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = HEADER
    kinds = [(f"<!-- section: {name} -->", f"<!-- end: {name} -->"),
             (f"<!-- {name}:begin -->", f"<!-- {name}:end -->")]
    for begin, end in kinds:
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
        if pattern.search(text):
            body = "\n".join([begin] + lines + [end]) + "\n"
            text = pattern.sub(lambda _: body, text, count=1)
            break
    else:
        heading = UNMARKED.get(name)
        # Up to the next heading, or the next section's begin marker (kept).
        pattern = heading and re.compile(re.escape(heading) + r".*?(?=\n## |\n<!-- |\Z)", re.S)
        if pattern and pattern.search(text):
            text = pattern.sub(lambda _: "\n".join(lines) + "\n", text, count=1)
        else:  # missing: appended, with markers unless it is one of UNMARKED
            begin, end = kinds[0]
            body = lines if heading else [begin] + lines + [end]
            text = text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("section", choices=["micro", "demo", "e2e", "text"])
    ap.add_argument("results")
    ap.add_argument("--meta")
    ap.add_argument("--pair-dir")
    ap.add_argument("--callgrind-tsv")
    ap.add_argument("--demo-output")
    ap.add_argument("--e2e-runs")
    ap.add_argument("--name", help="text: the section's name; e2e: a section other than 'e2e'")
    ap.add_argument("--body", help="text: the file holding the section (heading included)")
    a = ap.parse_args()
    if a.section == "text":
        if not a.name or not a.body:
            sys.exit("update_results.py: text needs --name and --body")
        with open(a.body) as f:
            replace_section(a.results, a.name, f.read().strip().split("\n"))
        return
    if not a.meta:
        sys.exit(f"update_results.py: {a.section} needs --meta")
    meta = read_meta(a.meta)
    if a.section == "micro":
        if not a.pair_dir or not a.callgrind_tsv:
            sys.exit("update_results.py: micro needs --pair-dir and --callgrind-tsv")
        lines = micro_section(a.pair_dir, a.callgrind_tsv, meta)
    elif a.section == "e2e":
        if not a.e2e_runs:
            sys.exit("update_results.py: e2e needs --e2e-runs")
        lines = e2e_section(a.e2e_runs, meta)
        if a.name:  # another matrix (variable-length or training cells): its own section and heading
            lines[0] = f"## End to end: {meta.get('e2e_title', a.name)}"
            replace_section(a.results, a.name, lines)
            return
    else:
        if not a.demo_output:
            sys.exit("update_results.py: demo needs --demo-output")
        lines = demo_section(a.demo_output, meta)
    replace_section(a.results, a.section, lines)


if __name__ == "__main__":
    main()
