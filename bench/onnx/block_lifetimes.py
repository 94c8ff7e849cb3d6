#!/usr/bin/python3
"""bench/onnx/block_lifetimes.py: the lifetimes of a loop's blocks, in its steps.

  block_lifetimes.py EVENTS ANCHOR_SIZE

EVENTS is what bench/onnx/block_lifetimes.c wrote; a step begins at each malloc of
ANCHOR_SIZE bytes (ONNX Runtime's decoder under Node.js: 7008, the first request of each
run, Note [Anchored iterations] in allocator/runtime/auto_detect.h). Prints, for the
blocks allocated from the first step on, how many were freed in their own step, the
next, two later, 3-10 later, more than 10 later or never, and of those that outlived
their step, by which request kind (A malloc, C calloc, R realloc, M aligned) and whether
the freeing thread was the allocating one; then the commonest sizes of each class.
"""
import collections
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: block_lifetimes.py EVENTS ANCHOR_SIZE")
    anchor = int(sys.argv[2])
    step = -1
    live = {}
    classes = collections.Counter()
    kinds = collections.Counter()
    sizes = collections.defaultdict(collections.Counter)
    allocated = 0
    for line in open(sys.argv[1]):
        op, p, size, tid = line.split()
        size = int(size)
        if op != "F":
            if op == "A" and size == anchor:
                step += 1
            live[p] = (step, op, size, tid)
            allocated += step >= 0
            continue
        if p not in live:
            continue
        born, kind, size, by = live.pop(p)
        if born < 0:
            continue
        later = step - born
        name = "0" if later == 0 else "1" if later == 1 else "2" if later == 2 else "3-10" if later <= 10 else ">10"
        classes[name] += 1
        if later > 0:
            kinds[(name, kind, "same thread" if by == tid else "another thread")] += 1
            sizes[name][size] += 1
    classes["never"] = sum(1 for born, _, _, _ in live.values() if born >= 0)
    total = sum(classes.values())
    print(f"steps {step + 1}, blocks of at least 4 KiB allocated in them {allocated}")
    for name in ("0", "1", "2", "3-10", ">10", "never"):
        print(f"freed {name:>5} steps later: {classes[name]:7d}  {100 * classes[name] / max(1, total):5.1f}%")
    print("outliving their step, by kind and freeing thread:")
    for (name, kind, who), n in sorted(kinds.items(), key=lambda x: -x[1]):
        print(f"  {name:>5} {kind} {who}: {n}")
    for name in ("1", "2", "3-10", ">10"):
        print(f"sizes freed {name} steps later: {sizes[name].most_common(6)}")


if __name__ == "__main__":
    main()
