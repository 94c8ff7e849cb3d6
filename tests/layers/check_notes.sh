#!/usr/bin/env bash
# The Notes index (allocator/DESIGN.md, "Notes") equals the Notes in the code (issue 43,
# item 4): every `Note [X]` defined in the tree (a comment line ending in "Note [X]" with
# a line of `~` under it) has a row in the index, every row names a Note defined in the
# tree (a row marked ‡ names one that is not, and must stay undefined), and every
# "Note [X]" the code refers to is defined (or ‡). Prints each difference; exit 1 if any.
# Usage: check_notes.sh [SOURCE_DIR]
set -uo pipefail
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
cd "$root" || exit 1
design=allocator/DESIGN.md
files=$(git ls-files 2> /dev/null | grep -E '\.(h|hpp|cc|c|cpp|cu|cmake|py|sh|js)$|(^|/)CMakeLists\.txt$' ||
        find allocator hooks integrations cmake tests bench scripts -type f \
          \( -name '*.h' -o -name '*.cc' -o -name '*.c' -o -name '*.cmake' -o -name '*.py' -o -name '*.sh' \
             -o -name CMakeLists.txt \) | sed 's|^\./||')
python3 - "$design" $files <<'PY'
import re, sys
design, files = sys.argv[1], sys.argv[2:]
defined, referenced = {}, {}
for path in files:
    if path.endswith("tests/layers/check_notes.sh"):  # this checker's own examples
        continue
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    except OSError:
        continue
    for i, line in enumerate(lines):
        for m in re.finditer(r"Note \[([^\]]+)\]", line):
            referenced.setdefault(m.group(1), f"{path}:{i + 1}")
        m = re.search(r"(?://|#)\s*Note \[([^\]]+)\]\s*$", line)
        if m and i + 1 < len(lines) and re.match(r"\s*(?://|#)\s*~{3,}\s*$", lines[i + 1]):
            defined.setdefault(m.group(1), f"{path}:{i + 1}")
text = open(design, encoding="utf-8").read()
start = text.index("| Note | defined in | what it says |")
rows, removed = set(), set()
for line in text[start:].split("\n")[2:]:
    if not line.startswith("| "):
        break
    name = line.split("|")[1].strip()
    if name.endswith("‡"):
        removed.add(name[:-1].strip())
    else:
        rows.add(name)
errors = []
for n in sorted(set(defined) - rows):
    errors.append(f"Note [{n}] is defined at {defined[n]} but has no row in {design}'s Notes index"
                  + (" (its row is marked ‡, removed)" if n in removed else ""))
for n in sorted(rows - set(defined)):
    errors.append(f"{design} indexes Note [{n}], which no comment in the tree defines "
                  "(a heading line 'Note [X]' with a line of ~ under it); mark the row ‡ if it was removed")
for n in sorted(set(referenced) - set(defined) - removed):
    errors.append(f"Note [{n}] is referred to at {referenced[n]} but defined nowhere")
for e in errors:
    print(e)
print(f"notes: {len(defined)} defined, {len(rows)} indexed, {len(removed)} marked removed; "
      f"{len(errors)} difference(s)")
sys.exit(1 if errors else 0)
PY
