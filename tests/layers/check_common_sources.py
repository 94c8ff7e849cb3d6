#!/usr/bin/env python3
"""Note [Sources common to the variants] (allocator/CMakeLists.txt): each source compiled
once for the core, dlopen and preload variants must preprocess to the same text under
every one of those variants' flags. Reads the build's compile_commands.json: for each
variant, the command of one of its own sources, with the common source put in its
place and -E -P instead of -c -o; the texts are compared with the core variant's.

Usage: check_common_sources.py BUILD_DIR
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys

VARIANTS = ("replayalloc_core", "replayalloc_core_dlopen", "replayalloc_core_preload")
COMMON = "replayalloc_core_common"


def target_of(entry):
    out = entry.get("output", "")
    if not out:
        args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        out = args[args.index("-o") + 1] if "-o" in args else ""
    for part in out.split("/"):
        if part.endswith(".dir"):
            return part[:-4]
    return ""


def preprocess(entry, source):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a == entry["file"]:
            continue
        out.append(a)
    run = subprocess.run(out + ["-E", "-P", source], cwd=entry["directory"], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"preprocessing {source} failed:\n{run.stderr[-2000:]}")
    return hashlib.sha256(run.stdout.encode()).hexdigest()


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = os.path.join(argv[0], "compile_commands.json")
    with open(path) as f:
        entries = json.load(f)
    common = sorted({e["file"] for e in entries if target_of(e) == COMMON})
    one = {}
    for e in entries:
        t = target_of(e)
        if t in VARIANTS and t not in one:
            one[t] = e
    missing = [v for v in VARIANTS if v not in one]
    if not common or missing:
        print(f"common sources: {len(common)}; variants without a compile command: {missing}", file=sys.stderr)
        return 1
    bad = 0
    for source in common:
        texts = {v: preprocess(one[v], source) for v in VARIANTS}
        differ = [v for v in VARIANTS if texts[v] != texts[VARIANTS[0]]]
        if differ:
            bad += 1
            print(f"{os.path.relpath(source)}: preprocesses otherwise in {', '.join(differ)} than in "
                  f"{VARIANTS[0]}: move it from core_common_sources to core_sources (allocator/CMakeLists.txt)")
    print(f"common sources: {len(common)} compiled once for {len(VARIANTS)} variants; {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
