#!/usr/bin/env python3
"""Turns gpu_results.jsonl into the markdown table of bench/RESULTS.md (medians over rounds).
Training cells (bench_torch.py --train) are the model's name with /train; their
throughput is samples per second over training steps, and "outputs equal" compares
every parameter after the last step with the default allocator's."""
import collections
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
device = open(sys.argv[2]).read().strip().replace("\n", "; ") if len(sys.argv) > 2 else "?"
cells = collections.defaultdict(list)
errors = [r for r in rows if "error" in r]
for r in rows:
    if "error" not in r:
        cells[(r["model"] + ("/train" if r.get("mode") == "train" else ""), r["batch"], r["allocator"])].append(r)

def med(rs, k):
    v = [r[k] for r in rs if k in r]
    return statistics.median(v) if v else float("nan")

print(f"Device: {device}\n")
print("| model | batch | allocator | p50 ms | p99 ms | throughput /s | vs default | device MiB used | max reserved MiB (torch) | slab MiB (lower bound) | slab hits | outputs equal |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
NAMES = {"replayalloc": "replayalloc (pluggable)", "native": "replayalloc (native)"}
for (model, batch) in sorted({(m, b) for m, b, _ in cells}):
    base = med(cells.get((model, batch, "default"), []), "throughput")
    for alloc in ("default", "async", "replayalloc", "native"):
        rs = cells.get((model, batch, alloc))
        if not rs:
            continue
        tp = med(rs, "throughput")
        ours = alloc in NAMES
        slab = f"{med(rs, 'slab_mib'):.1f} ({med(rs, 'lower_bound_mib'):.1f})" if ours else ""
        hits = f"{100 * med(rs, 'slab_hit_rate'):.1f}%" if ours else ""
        reserved = med(rs, "max_memory_reserved_mib")
        reserved = "" if reserved != reserved else f"{reserved:.0f}"  # nan: torch's API blind
        compared = [r["output_equal"] for r in rs if "output_equal" in r]  # a reference existed
        eq = ("yes" if all(compared) else "NO") + (f" ({len(compared)} of {len(rs)})" if len(compared) < len(rs) else "")
        eq = eq if compared else "no reference"
        print(f"| {model} | {batch} | {NAMES.get(alloc, alloc)} | {med(rs, 'p50_ms'):.3f} | {med(rs, 'p99_ms'):.3f} | "
              f"{tp:.1f} | {tp / base:.3f}x | {med(rs, 'device_used_mib'):.0f} | {reserved} | {slab} | {hits} | "
              f"{eq} |")
print(f"\n{len(rows)} runs, medians over {max((len(v) for v in cells.values()), default=0)} rounds per cell.")
for e in errors:
    print(f"\nFAILED: {json.dumps(e)}")
