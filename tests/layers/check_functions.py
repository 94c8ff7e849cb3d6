#!/usr/bin/env python3
"""Functions stay short, and growth is an explicit edit (issue 43, item 4).

Every function defined in a C/C++ source of allocator/, hooks/ and integrations/ (tests
and benchmarks aside) is at most LIMIT lines (from its signature's first line to its
closing brace), or, when longer, at most its count in tests/layers/function_budget.txt,
which lists every function above LIMIT; none is above CEILING. A change that makes a
listed function longer raises its budget in the same commit (or splits the function);
one that makes a function cross LIMIT adds a line; one that brings it under LIMIT
removes its line. `check_functions.py --update` rewrites the budget to today's counts
(review the diff).

Functions are found by a scan of braces with comments and literals removed: a block
opened at namespace or class scope whose head has a parameter list (and no `=` before
it) is a function; lambdas, control blocks and initializers inside one count towards
it. Macros that open blocks are not in these sources.
Usage: check_functions.py [SOURCE_DIR] [--update]
"""
import os
import re
import sys

LIMIT = 80
CEILING = 200
BUDGET = "tests/layers/function_budget.txt"
SUFFIXES = (".h", ".hpp", ".cc", ".c", ".cu")


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    # Preprocessor lines (and their continuations) blanked too.
    lines, cont = "".join(out).split("\n"), False
    for k, line in enumerate(lines):
        directive = cont or line.lstrip().startswith("#")
        cont = directive and line.rstrip().endswith("\\")
        if directive:
            lines[k] = ""
    return "\n".join(lines)


CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try)\b")


def functions(path):
    """(name, first line, lines) of each function defined in the file."""
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    found, stack, head_start = [], [], 0
    for i, c in enumerate(text):
        if c in ";{}":
            if c == "{":
                head = text[head_start:i]
                h = " ".join(head.split())
                outer = all(kind in ("ns", "cls") for kind, _, _ in stack)
                if outer and re.search(r"\)\s*(noexcept\s*)?:\s", h) and re.search(r"[\w>]$", h):
                    # A member's braced initializer in a constructor's list: part of the head.
                    stack.append(("init", 0, ""))
                    continue
                if re.match(r"^(namespace\b|extern \"C\")", h) or (h.startswith("extern") and h.endswith('"')):
                    kind = "ns"
                elif re.match(r"^(template\s*<.*>\s*)?(class|struct|union|enum)\b", h) and "(" not in h.split(":")[0]:
                    kind = "cls"
                elif outer and "(" in h and not CONTROL.match(h) and "=" not in h.split("(")[0]:
                    kind = "fn"
                else:
                    kind = "other"
                # The head's first line: the blank lines before it skipped.
                lead = len(head) - len(head.lstrip())
                first = text.count("\n", 0, head_start + lead) + 1
                name = ""
                if kind == "fn":
                    m = re.search(r"([~\w:]+(?:operator\s*[^\s(]+)?)\s*\(", h.split("(")[0] + "(")
                    name = m.group(1) if m else "?"
                stack.append((kind, first, name))
            elif c == "}" and stack:
                kind, first, name = stack.pop()
                if kind == "init":
                    continue
                if kind == "fn":
                    found.append((name, first, text.count("\n", 0, i) + 1 - first + 1))
            head_start = i + 1
    return found


def sources(root):
    for top in ("allocator", "hooks", "integrations"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(d, f), root)


def measured(root):
    """{'path:name[#k]': lines} for functions above LIMIT (k numbers overloads)."""
    out = {}
    for path in sorted(sources(root)):
        seen = {}
        for name, _, lines in functions(os.path.join(root, path)):
            key = f"{path}:{name}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key += f"#{seen[key]}"
            if lines > LIMIT:
                out[key] = lines
    return out


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    update = "--update" in argv
    for a in argv:
        if a != "--update":
            root = os.path.abspath(a)
    now = measured(root)
    budget_path = os.path.join(root, BUDGET)
    if update:
        with open(budget_path, "w") as f:
            f.write(f"# Functions above {LIMIT} lines and the lines each may have "
                    f"(tests/layers/check_functions.py; at most {CEILING}).\n")
            for key in sorted(now):
                f.write(f"{key} {now[key]}\n")
        print(f"wrote {BUDGET}")
        return 0
    allowed = {}
    for line in open(budget_path):
        if line.strip() and not line.startswith("#"):
            key, n = line.rsplit(None, 1)
            allowed[key] = int(n)
    bad = 0
    for key, lines in sorted(now.items()):
        if lines > CEILING:
            print(f"{key}: {lines} lines, over the ceiling of {CEILING}: split it")
            bad += 1
        elif key not in allowed:
            print(f"{key}: {lines} lines, over {LIMIT} and not in {BUDGET}: shorten it, or add it there in this change")
            bad += 1
        elif lines > allowed[key]:
            print(f"{key}: {lines} lines, over its budget of {allowed[key]} in {BUDGET}: raise it in this change, "
                  "or make the function shorter")
            bad += 1
    for key in sorted(set(allowed) - set(now)):
        print(f"{key}: listed in {BUDGET} but no longer over {LIMIT} lines (or gone): remove its line")
        bad += 1
    print(f"functions: {len(now)} over {LIMIT} lines, checked against {BUDGET} (ceiling {CEILING}); "
          f"{bad} difference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
