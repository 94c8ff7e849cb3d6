#!/usr/bin/python3
"""bench/update_results.py: writes one section of bench/RESULTS.md from raw results.

Called by bench/run_micro.sh; not meant to be run by hand, but it can be:

  update_results.py micro RESULTS.md --bench-json J --callgrind-tsv T --meta M
  update_results.py demo  RESULTS.md --demo-output D --meta M

A section sits between `<!-- section: NAME -->` and `<!-- end: NAME -->`; it is
replaced in place, or appended when missing. Every other line of the file is kept.
Nothing here invents a number: every figure comes from the files given.
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

ALLOCATORS = ["glibc", "jemalloc", "replay_hit", "replay_miss"]
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


def micro_section(bench_json, cg_tsv, meta):
    with open(bench_json) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    # (allocator, variant, size, threads) -> {"median": ns, "cv": fraction}
    rows = {}
    errors = []
    for b in data["benchmarks"]:
        m = re.match(r"pair/(\w+)/(\w+)/(\d+)/threads:(\d+)$", b.get("run_name", ""))
        if not m:
            continue
        key = (m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
        if b.get("error_occurred"):
            errors.append(f"{b['run_name']}: {b.get('error_message', 'error')}")
            rows.setdefault(key, {})["error"] = True
            continue
        agg = b.get("aggregate_name")
        if agg not in ("median", "cv"):
            continue
        v = b.get("per_pair")
        if v is None:
            continue
        rows.setdefault(key, {})[agg] = v * 1e9 if agg == "median" else v

    sizes = sorted({k[2] for k in rows})
    threads = sorted({k[3] for k in rows})
    out = []
    out.append("## Micro: malloc+free pair")
    out.append("")
    out.append("Written by `bench/run_micro.sh`.")
    out.append("")
    out += machine_lines(meta)
    out.append(
        f"- Libraries: glibc {ctx.get('glibc_version', '?')}, jemalloc {ctx.get('jemalloc_version', '?')}"
        f" ({ctx.get('jemalloc_options', '?')}; `malloc` in the bench binary resolves to"
        f" `{ctx.get('malloc_from', '?')}`), Google Benchmark"
        f" {meta.get('gbench_version', '?')} (Debian's build, which warns it was built as DEBUG: that is"
        " the harness, not the code measured)")
    out.append(f"- Command: `{meta['bench_cmd']}`")
    out.append(f"- Callgrind: `{meta['cg_cmd']}`")
    out.append("")
    out.append(
        "Each benchmark iteration runs "
        f"{ctx.get('pairs_per_iteration', '?')} pairs `p = malloc(size); use(p); free(p)` of one size. "
        "The figure is the **median over 5 repetitions of the CPU time per pair of one thread, in ns** "
        "(with 2 threads, both run the loop at once and the figure is still one thread's cost per pair). "
        "The repetitions of all benchmarks run in one random order, so a burst of other load on the "
        "machine falls on every allocator alike rather than on one benchmark's 5 repetitions.")
    out.append("")
    out.append("- **glibc**: `__libc_malloc`/`__libc_free`, called directly.")
    out.append("- **jemalloc**: plain `malloc`/`free`, which jemalloc serves in this binary.")
    out.append(
        "- **replay hit**: `replayalloc_malloc`/`replayalloc_free` inside `replayalloc_iteration_begin/end`, "
        "the iteration recorded and planned during the (untimed) warm-up; every request is a slab hit "
        "(checked by the bench before and after the timed loop). Begin+end are included, amortised over "
        "the pairs of one iteration.")
    out.append(
        "- **replay miss**: the same, but the plan was recorded with 16 bytes more than the timed requests "
        "ask for, so every request falls back to jemalloc (`mallocx`) after the resync scan, and every "
        "free goes to the backend. `REPLAYALLOC_REPLAN_AFTER=0` keeps the plan (otherwise the engine "
        "would record again and the misses would become hits).")
    out.append(
        "- **bare**: only `DoNotOptimize(p)` between malloc and free. **touch**: one byte written in every "
        "4 KiB of the block (one byte below 4 KiB), so a page fault on freshly mapped memory is paid "
        "where the allocator causes one.")
    out.append("- Ratios are replayalloc's time divided by the other allocator's: below 1× replayalloc is faster.")
    out.append("")
    for variant in ("bare", "touch"):
        for t in threads:
            out.append(f"**{variant}, {t} thread{'s' if t > 1 else ''}** (ns per pair)")
            out.append("")
            out.append("| size | glibc | jemalloc | replay hit | replay miss | hit ÷ glibc | hit ÷ jemalloc"
                       " | miss ÷ glibc | miss ÷ jemalloc |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for s in sizes:
                v = {a: rows.get((a, variant, s, t), {}).get("median") for a in ALLOCATORS}
                out.append(
                    f"| {size_name(s)} | {fmt_ns(v['glibc'])} | {fmt_ns(v['jemalloc'])} | "
                    f"{fmt_ns(v['replay_hit'])} | {fmt_ns(v['replay_miss'])} | "
                    f"{fmt_ratio(v['replay_hit'], v['glibc'])} | {fmt_ratio(v['replay_hit'], v['jemalloc'])} | "
                    f"{fmt_ratio(v['replay_miss'], v['glibc'])} | {fmt_ratio(v['replay_miss'], v['jemalloc'])} |")
            out.append("")
    cvs = [(r.get("cv", 0), k) for k, r in rows.items() if "cv" in r]
    if cvs:
        cvs.sort(reverse=True)
        worst = ", ".join(f"{k[0]}/{k[1]}/{size_name(k[2])}/{k[3]}t {c * 100:.0f}%" for c, k in cvs[:3])
        over = sum(1 for c, _ in cvs if c > 0.05)
        out.append(
            f"Spread: {over} of {len(cvs)} rows have a coefficient of variation above 5% over the 5 "
            f"repetitions; the largest: {worst}.")
        out.append("")
    if errors:
        out.append("Benchmarks that reported an error (no figure shown):")
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
        cg_sizes = sorted({k[1] for k in cg})
        per = lambda a, s, sc="pairs": (cg[(a, s, sc)][0] / cg[(a, s, sc)][1]) if (a, s, sc) in cg else None
        out.append("**Instructions per pair** (callgrind, `Ir` collected only around the pairs, divided by "
                   "the pair count; user-space instructions only: time in the kernel, page faults and "
                   "cache misses are not in these counts)")
        out.append("")
        out.append("| size | loop baseline | replay hit | replay hit incl. begin/end | replay miss | jemalloc | glibc |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|")
        for s in cg_sizes:
            cells = [per("baseline", s), per("replay", s), per("replay", s, "iteration"), per("miss", s),
                     per("jemalloc", s), per("glibc", s)]
            out.append(f"| {size_name(s)} | " + " | ".join("n/a" if c is None else f"{c:.1f}" for c in cells) + " |")
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


def replace_section(path, name, lines):
    begin, end = f"<!-- section: {name} -->", f"<!-- end: {name} -->"
    body = "\n".join([begin] + lines + [end]) + "\n"
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = HEADER
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: body, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + body
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("section", choices=["micro", "demo"])
    ap.add_argument("results")
    ap.add_argument("--meta", required=True)
    ap.add_argument("--bench-json")
    ap.add_argument("--callgrind-tsv")
    ap.add_argument("--demo-output")
    a = ap.parse_args()
    meta = read_meta(a.meta)
    if a.section == "micro":
        if not a.bench_json or not a.callgrind_tsv:
            sys.exit("update_results.py: micro needs --bench-json and --callgrind-tsv")
        lines = micro_section(a.bench_json, a.callgrind_tsv, meta)
    else:
        if not a.demo_output:
            sys.exit("update_results.py: demo needs --demo-output")
        lines = demo_section(a.demo_output, meta)
    replace_section(a.results, a.section, lines)


if __name__ == "__main__":
    main()
