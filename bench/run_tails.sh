#!/usr/bin/env bash
# bench/run_tails.sh: the tails and the memory of the fixed-shape matrix (issue 34,
# parts 1 and 2). Runs the e2e cells under every allocator as bench/run_all.sh's e2e
# part does, each run with REPLAYALLOC_VERBOSE=3 (Note [The iteration log]) and the
# driver's timed-phase marks (bench/e2e/tail_events.py), and writes two sections of
# RESULTS.md: the usual matrix table of those runs (NAME, "End to end: TITLE") and
# "Tails" (what each replayalloc run's timed iterations were, and its slowest 1% of
# inferences against the general-purpose allocators').
# Usage: bench/run_tails.sh [ROUNDS [CELLS [NAME [TITLE]]]]
#   defaults: 3, run_e2e.py's full fixed-shape cells, e2e-after-purge, "the fixed-shape
#   matrix after the slab's purge of its thread's arena (issue 34)".
# Environment: BUILD_DIR (default <repo>/build). Exits non-zero when a run fails or an
# output differs from glibc's.
# shellcheck source=lib.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=${1:-3}
cells=${2:-}
name=${3:-e2e-after-purge}
title=${4:-"the fixed-shape matrix after the slab's purge of its thread's arena (issue 34)"}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number (got '$rounds')"
[[ $name =~ ^[a-z0-9-]+$ ]] || die "NAME must be lower-case letters, digits and dashes (got '$name')"
build=${BUILD_DIR:-$root/build}
cmake --build "$build" --target e2e_driver replayalloc_preload replayalloc_torch_shared > /dev/null || die "build failed"
py=$(torch_python) || exit 1
scratch_dir
cmd="bench/run_tails.sh $rounds${2:+ $2}${3:+ $3}${4:+ '$4'}"
machine_meta "$build" > "$tmp/meta"
{
  echo "e2e_cmd=$cmd, i.e. bench/e2e/tail_events.py --rounds $rounds${2:+ --cells $2} (run_e2e.py's runs, REPLAYALLOC_VERBOSE=3 and --mark-timed)"
  echo "e2e_title=$title"
  echo "torch_version=$("$py" -c 'import torch; print(torch.__version__)')"
} >> "$tmp/meta"
status=0
(cd "$root" && "$py" bench/e2e/tail_events.py --build "$build" --out "$tmp/runs.jsonl" --rounds "$rounds" ${cells:+--cells "$cells"}) || status=$?
echo "load_after=$(load_average)" >> "$tmp/meta"
cp "$tmp/runs.jsonl" "$build/tails-runs.jsonl"  # kept for a look afterwards
update_results e2e "$root/bench/RESULTS.md" --meta "$tmp/meta" --e2e-runs "$tmp/runs.jsonl" --name "$name"
python3 - "$tmp/runs.jsonl" "$tmp/meta" "$cmd" > "$tmp/section" <<'PY'
import collections, json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[2]) if "=" in l)
GP = ("glibc", "jemalloc", "tcmalloc", "mimalloc")

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))] if v else float("nan")

by = collections.defaultdict(list)
for r in rows:
    by[(r["cell"], r["allocator"])].append(r)
cells = list(dict.fromkeys(r["cell"] for r in rows))
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
print("## Tails: what the slowest inferences were")
print()
print(f"- Date: {meta.get('date')}; machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}; "
      f"load {meta.get('load_before')} before, {meta.get('load_after')} after; commit {meta.get('commit')}")
print(f"- Command: `{sys.argv[3]}` (the same runs as the matrix above). Each replayalloc run logged every iteration it "
      "ended after the warm-up (REPLAYALLOC_VERBOSE=3, Note [The iteration log]): its duration and what it was. "
      "**clean**: replayed from a slab it already had, nothing else done; anything else is an **event** of the "
      "allocator's own making (recorded, passed through, a new slab made, a deviation, a miss), and **messages** are "
      "the other lines it wrote in the timed phase (auto mode's watcher resting or waking, plans made).")
print("- **p50 / p99 / max**: over every timed inference of the cell's runs pooled (all rounds, all threads; the driver's "
      "own clock). **p99 ÷ best**: over the lowest p99 of glibc, jemalloc, tcmalloc and mimalloc in that cell. "
      "**slowest 1%**: the kinds of the logged timed iterations at or above the 99th percentile of their durations.")
print()
print("| cell | allocator | timed | p50 ms | p99 ms | max ms | p99 ÷ best | iterations logged | with events | messages | slowest 1% |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for c in cells:
    p99 = {}
    for a in allocs:
        v = [x for r in by[(c, a)] for x in r.get("timed_ms", [])]
        p99[a] = pct(v, 0.99)
    best = min((p99[a] for a in GP if a in p99 and not math.isnan(p99[a])), default=float("nan"))
    for a in allocs:
        rs = by[(c, a)]
        v = [x for r in rs for x in r.get("timed_ms", [])]
        its = [i for r in rs for i in r.get("iterations", [])]
        kinds = collections.Counter(i["kind"] for i in its if i["kind"] != "clean")
        msgs = sum(r.get("messages_total", 0) for r in rs)
        if a in GP:
            logged = events = slow = "-"
            msgs_s = "-"
        else:
            logged = str(len(its))
            events = str(sum(kinds.values())) + (" (" + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + ")" if kinds else "")
            cut = pct([i["ms"] for i in its], 0.99)
            top = collections.Counter(i["kind"] for i in its if i["ms"] >= cut)
            slow = ", ".join(f"{k} {n}" for k, n in top.most_common()) if its else "-"
            msgs_s = str(msgs)
        ratio = p99[a] / best if best and not math.isnan(best) else float("nan")
        print(f"| {c} | {a} | {len(v)} | {pct(v, 0.5):.1f} | {p99[a]:.1f} | {max(v) if v else float('nan'):.1f} | "
              f"{ratio:.2f} | {logged} | {events} | {msgs_s} | {slow} |")
print()
ev = sum(1 for r in rows if r["allocator"].startswith("replay") for i in r.get("iterations", []) if i["kind"] != "clean")
n = sum(len(r.get("iterations", [])) for r in rows if r["allocator"].startswith("replay"))
print(f"Over all cells: {ev} of {n} timed replayalloc iterations had an event of the allocator's own making.")
PY
cat "$tmp/section"
update_results text "$root/bench/RESULTS.md" --name tails --body "$tmp/section"
exit $status
