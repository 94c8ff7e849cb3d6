#!/usr/bin/env python3
"""The README's figures are bench/RESULTS.md's (issue 43, item 6).

The README's summary of results (from "In short" in "Where the numbers are" to the
next top-level section) says no more than RESULTS.md: every decimal figure in it (a
ratio such as 1.003x or 0.61x, a time such as 0.43 s, each end of a range such as
1.10-1.13x) appears in RESULTS.md as written or rounded from a longer one there
(0.614x); every whole percentage (87-92%) appears there, or a percentage with
decimals that rounds to it (86.9%); and every quoted name of a section (for instance
"Never repeats") begins a heading of RESULTS.md. Prints each figure or name it cannot
find; exit 1 if any. Each bullet of the summary is checked against the sections it
names (the whole file when it names none). A figure dropped from RESULTS.md, a README
figure derived rather than measured (its first run found "0.44x", a ratio of two of the
table's numbers), or a section renamed fails; what it cannot tell is a figure that
matches another number of the same sections than the one the README means (sections
are long: changing one README ratio from 0.61x to 0.68x went unnoticed), nor whole
numbers other than percentages.
Usage: check_readme_figures.py [SOURCE_DIR]
"""
import os
import re
import sys


def rounds_to(longer, shorter):
    """Whether the decimal string `longer` rounds (half up) to `shorter`'s places."""
    places = len(shorter.split(".")[1])
    scale = 10 ** places
    return int(float(longer) * scale + 0.5 + 1e-9) == round(float(shorter) * scale)


def words(text):
    return re.sub(r"\s+", " ", text)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    results = open(os.path.join(root, "bench", "RESULTS.md"), encoding="utf-8").read()
    start = readme.find("In short (details and the caveats in RESULTS.md)")
    if start < 0:
        print("README.md: no summary of results ('In short (details and the caveats in RESULTS.md)') found")
        return 1
    end = readme.find("\n## ", start)
    summary_text = readme[start:end if end >= 0 else len(readme)]
    summary = words(summary_text)
    # RESULTS.md's sections: each heading with its text, to the next heading of its
    # level or above (hand notes after a generated section belong to it).
    sections = []
    marks = [(m.start(), len(m.group(1)), words(m.group(2).strip()))
             for m in re.finditer(r"^(#+) (.*)$", results, re.M)]
    for i, (at, level, title) in enumerate(marks):
        stop_at = next((a for a, lv, _ in marks[i + 1:] if lv <= level), len(results))
        sections.append((title, words(results[at:stop_at])))
    errors = []
    counts = [0, 0, 0]
    # Each bullet of the summary against the sections it names (the whole file when it
    # names none).
    for bullet in re.split(r"\n(?=- )", summary_text):
        text = words(bullet)
        names = sorted(set(re.findall(r'"([A-Z][^"]{3,160})"', text)))
        named = [body for title, body in sections if any(title.startswith(q) for q in names)]
        for q in names:
            counts[2] += 1
            if not any(title.startswith(q) for title, _ in sections):
                errors.append(f'README.md names a section "{q}" that no heading of bench/RESULTS.md begins with')
        scope = " ".join(named) if named else words(results)
        where = "the sections it names" if named else "bench/RESULTS.md"
        in_scope = set(re.findall(r"(?<![\w.])(\d+\.\d+)(?![\d.])", scope))
        for d in sorted(set(re.findall(r"(?<![\w.])(\d+\.\d+)(?![\d.])", text))):
            counts[0] += 1
            places = len(d.split(".")[1])
            if d not in in_scope and not any(len(m.split(".")[1]) > places and rounds_to(m, d) for m in in_scope):
                errors.append(f"README.md's figure {d} (\"{text[2:60]}...\") is not in {where} (nor one that rounds to it)")
        measured = [float(p) for p in re.findall(r"(?<![\w.])(\d+\.\d+)%", scope)]
        for p in sorted(set(re.findall(r"(?<![\w.])(\d+)%", text)), key=int):
            counts[1] += 1
            n = int(p)
            if not re.search(r"(?<![\d.])" + p + r"%", scope) and not any(n - 0.5 <= m < n + 0.5 for m in measured):
                errors.append(f"README.md's figure {p}% (\"{text[2:60]}...\") is not in {where} (nor one that rounds to it)")
    for e in errors:
        print(e)
    print(f"readme figures: {counts[0]} decimals, {counts[1]} percentages and {counts[2]} section names of "
          f"README.md's summary checked against bench/RESULTS.md; {len(errors)} not found")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
