#!/usr/bin/env python3
"""Which files may write key state and cursor fields (issue 43, item 4).

The key policy decides; the mechanism carries its decisions out. A key's state (the
fields of `key_entry` and its `regime`s, runtime/key_entry.h) and a replay cursor's
(`replay_cursor`, replay/fast_path.h) are written only where tests/layers/write_access.txt
says: one line per field and file that writes it today. A new writer (a field written
in a file not listed for it) fails this check, so that spreading state changes into
another module is an explicit edit of that list, reviewed as such; a listed writer that
no longer writes the field fails too ("remove its line"), so the list only shrinks by
being kept true. `check_writes.py --update` rewrites the list to today's writers (review
the diff).

A write is found in the source with comments and literals removed (check_functions.py's
`strip`): `.F` or `->F` (with any subscripts and members after it, as in
`regimes[r].version`) followed by an assignment (`=`, `+=`, `|=`, ...), `++` or `--`
before or after it, or a mutating call (`.store(`, `.fetch_add(`, `.exchange(`,
`.push_back(`, `.clear(`, `.reset(`, ...). Only the fields below are checked: those
whose names no other structure of the allocator uses (a text scan cannot tell whose
`count` or `handed` is written). Sources: allocator/, hooks/ and integrations/ (tests
and benchmarks aside).
Usage: check_writes.py [SOURCE_DIR] [--update]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_functions import SUFFIXES, strip  # noqa: E402

LIST = "tests/layers/write_access.txt"
FIELDS = {
    "key_entry": [
        "regimes[]", "history", "after1", "after2", "probe_left", "structure_deviations", "last_first_miss",
        "probe_quiet_until", "probe_backoff", "evictions", "evictions_since", "regimes_kept_until", "automatic",
        "by_shape", "probe_from", "probe_found_other", "probe_found_new", "last_trace", "last_period", "last_trace_regime",
        "resume_at", "last_used",
        "confirmed", "recording",
    ],
    "replay_cursor": [
        "free_cur", "first_frees", "second_frees", "dead_prefix", "serving", "guarded", "published",
        "free_published", "free_saved", "bypass_below", "last_kind", "mismatched", "too_large_at", "miss_bytes",
        "bypassed",
    ],
}
# Left out, their names being members of other structures too (the statistics, the
# iteration log's summary, auto mode's state): key_entry's at_quiet, recordings,
# failures, grow_wanted; replay_cursor's hit_bytes, free_count, handed, freed_here,
# resync_window, grown, first_miss_at/size, first_too_large_at/size and the remote,
# invalid and double free counts. "regimes[]": key_entry's regimes, written only
# through a subscript (the statistics' `regimes` is a count).
MUTATORS = ("store", "fetch_add", "fetch_sub", "fetch_or", "fetch_and", "exchange", "compare_exchange_weak",
            "compare_exchange_strong", "push_back", "emplace_back", "clear", "reset", "assign", "erase", "insert",
            "resize", "swap")


def write_patterns(field):
    subscripted = field.endswith("[]")
    name = field[:-2] if subscripted else field
    access = (r"(?:\.|->)" + name + r"\b" + (r"\s*\[[^\]]*\]" if subscripted else "") +
              r"(?:\s*\[[^\]]*\])*(?:\s*(?:\.|->)\w+(?:\s*\[[^\]]*\])*)*")
    return [
        re.compile(access + r"\s*(?:=(?!=)|\+=|-=|\*=|/=|%=|\|=|&=|\^=|<<=|>>=|\+\+|--)"),
        re.compile(r"(?:\+\+|--)\s*[\w\s\.\->\[\]\(\)\*]*" + access),
        re.compile(access + r"\s*\.\s*(?:" + "|".join(MUTATORS) + r")\s*\("),
    ]


def writers(root):
    """{(struct, field, file)} found in the sources."""
    patterns = {(s, f): write_patterns(f) for s, fields in FIELDS.items() for f in fields}
    found = set()
    for top in ("allocator", "hooks", "integrations"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(d, name)
                rel = os.path.relpath(path, root)
                text = strip(open(path, encoding="utf-8", errors="replace").read())
                for (s, f), pats in patterns.items():
                    if any(p.search(text) for p in pats):
                        found.add((s, f, rel))
    return found


def main():
    args = [a for a in sys.argv[1:] if a != "--update"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    listed_path = os.path.join(root, LIST)
    found = writers(root)
    if "--update" in sys.argv:
        with open(listed_path, "w", encoding="utf-8") as out:
            out.write("# Files that write each field of a key's or a cursor's state (tests/layers/check_writes.py).\n")
            for s, f, rel in sorted(found):
                out.write(f"{s} {f} {rel}\n")
        print(f"writes: {len(found)} writers written to {LIST}")
        return 0
    listed = set()
    for line in open(listed_path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            listed.add(tuple(line.split()))
    status = 0
    for s, f, rel in sorted(found - listed):
        print(f"{rel} writes {s}::{f}, which {LIST} does not allow: keep the write in a module listed for it "
              f"(the key policy, for key state), or add the line '{s} {f} {rel}' in this change")
        status = 1
    for s, f, rel in sorted(listed - found):
        print(f"{LIST}: {rel} no longer writes {s}::{f}: remove its line")
        status = 1
    print(f"writes: {len(found)} writers of {sum(len(v) for v in FIELDS.values())} fields checked against {LIST}")
    return status


if __name__ == "__main__":
    sys.exit(main())
