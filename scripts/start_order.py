#!/usr/bin/env python3
"""Writes hooks/start_code.ld: the LD_PRELOAD library's functions that a short process's
start and exit run, first in its .text (Note [The start's code together],
hooks/CMakeLists.txt).

Runs each command below under callgrind with the library preloaded, takes every function
of the library that ran, and lists the input sections that hold them (the build compiles
every function into a section of its own: Note [A smaller LD_PRELOAD library]). Run it
again when ctest's preload.start_code fails (a function the start runs lies outside the
gathered code), from an optimized g++ build (the names are that compiler's):

    python3 scripts/start_order.py build/hooks/libreplayalloc_preload.so

Needs valgrind and binutils' nm. The commands are those bench/programs/commands.sh runs, a
shell's command substitution, pipe and background job, and two that go past the boot heap
(`ls -l`, a Perl hash), each a process of its own; what they run is the same whatever the
library's layout, so the list can be made from a library linked with or without it.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = [
    ["/bin/true"],
    ["expr", "5", "*", "7", "+", "3"],
    ["sort", "-r", "/etc/passwd"],
    ["tr", "a-z", "A-Z"],
    ["sed", "s/root/x/", "/etc/passwd"],
    ["cut", "-c1-12", "/etc/passwd"],
    ["sh", "-c", "n=$(expr 1 + 2); printf '%s\\n' \"$n\" line | sort -r | cut -c1-4; true & wait"],
    # Commands that make more requests, some past the boot heap (jemalloc's start, whose
    # own code is one section an object and stays where it is).
    ["ls", "-l", "/usr/bin"],
    ["perl", "-e", "my %h; $h{$_} = 'x' x $_ for 1 .. 2000; print scalar(keys %h), qq(\\n)"],
]
# Sections gathered whatever the profile says: the forked child's code (Note [A forked
# child's code together]: it and the PLT it calls through in one window), the static
# constructors, the options' setters (support/options.cc's table: each runs where its
# REPLAYALLOC_ variable is set), crtbeginS.o's code (frame_dummy, the destructors' walk)
# and libc_nonshared.a's pthread_atfork, which every start calls.
FIXED = [
    "*(SORT(.text.sorted.replayalloc_*))",
    "*(.text.startup .text.startup.*)",
    "*(.text._ZN11replayalloc6detail12_GLOBAL__N_1L5table*)",
    "*crtbeginS.o(.text .text.*)",
    "*libc_nonshared.a:pthread_atfork.oS(.text)",
]

# The rest of GNU ld's default .text statement (ld --verbose), in its order.
DEFAULT_TEXT = [
    "*(.text.unlikely .text.*_unlikely .text.unlikely.*)",
    "*(.text.exit .text.exit.*)",
    "*(.text.startup .text.startup.*)",
    "*(.text.hot .text.hot.*)",
    "*(SORT(.text.sorted.*))",
    "*(.text .stub .text.* .gnu.linkonce.t.*)",
    "*(.gnu.warning)",
]


def functions_run(library, command):
    """The names (as the symbol table spells them) of the library's functions the command ran."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.%p")
        env = dict(os.environ, LD_PRELOAD=library, REPLAYALLOC_VERBOSE="0")
        subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--demangle=no",
                        "--compress-strings=no", "--callgrind-out-file=" + out] + command,
                       env=env, input=b"line a\nline b\n", stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        names = set()
        base = os.path.basename(library)
        for name in os.listdir(tmp):
            ours = False
            with open(os.path.join(tmp, name), errors="replace") as f:
                for line in f:
                    if line.startswith("ob="):
                        ours = os.path.basename(line[3:].strip()) == base
                    elif line.startswith("fn=") and ours:
                        names.add(line[3:].strip())
        return names


def defined_functions(path):
    """(address, name) of each function a library or an archive defines, by nm."""
    nm = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True, check=True)
    return [(p[0], p[2]) for p in (line.split() for line in nm.stdout.splitlines()) if len(p) == 3 and p[1] in "tTwW"]


def aliases(library):
    """Every name of each address: a constructor's C1 and C2 share one body and section."""
    by_address = collections.defaultdict(set)
    names = {}
    for address, name in defined_functions(library):
        by_address[address].add(name)
        names[name] = address
    return lambda n: sorted(by_address[names[n]]) if n in names else [n]


def jemalloc_names(library):
    """The functions of the private jemalloc beside the library's build (allocator/): its
    archive has one .text an object, so no name of its can be placed alone."""
    archive = os.path.join(os.path.dirname(os.path.dirname(library)), "allocator", "libreplayalloc_jemalloc.a")
    return {name for _, name in defined_functions(archive)} if os.path.exists(archive) else set()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("library", help="the LD_PRELOAD library of a build (BUILD/hooks/libreplayalloc_preload.so)")
    parser.add_argument("--out", default=os.path.join(ROOT, "hooks", "start_code.ld"))
    args = parser.parse_args()
    library = os.path.abspath(args.library)
    counts = collections.Counter()
    for command in COMMANDS:
        ran = functions_run(library, command)
        if not ran:
            sys.exit("start_order.py: callgrind saw none of %s's functions in %s (is valgrind installed?)"
                     % (os.path.basename(library), " ".join(command)))
        counts.update(ran)
    names_of = aliases(library)
    jemalloc = jemalloc_names(library)
    lines, seen = [], set()
    # The functions most commands run first, so that the rarer ones are those that spill over.
    for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if re.match(r"_GLOBAL__sub_I|0x", name) or name in jemalloc:
            continue  # in .text.startup, gathered above; code without a symbol (the PLT's); jemalloc's
        for alias in names_of(name):
            if alias in seen or alias.endswith(".cold"):
                continue  # a function's cold part is where its error paths go: left apart
            seen.add(alias)
            lines.append("    *(.text.%s .text.hot.%s .text.startup.%s)" % (alias, alias, alias))
    with open(args.out, "w") as f:
        f.write("/* Note [The start's code together] (hooks/CMakeLists.txt): the LD_PRELOAD library's\n"
                "   functions that a short process's start and exit run, first in its .text.\n"
                "   Written by scripts/start_order.py from %d commands; do not edit by hand.\n"
                "   Inserted into the linker's default script, this .text statement takes every input\n"
                "   section the default one would (the patterns at its end are GNU ld's own), so that\n"
                "   one .text holds all the code (tools that read the library, valgrind among them,\n"
                "   know its functions by the .text section), the default statement left empty. */\n"
                "SECTIONS\n{\n  .text :\n  {\n" % len(COMMANDS))
        for fixed in FIXED:
            f.write("    %s\n" % fixed)
        f.write("\n".join(lines) + "\n")
        for rest in DEFAULT_TEXT:
            f.write("    %s\n" % rest)
        f.write("  }\n}\nINSERT AFTER .plt.sec;\n")
    print("start_order.py: %d functions (%d names) into %s" % (len(counts), len(lines), os.path.relpath(args.out)))


if __name__ == "__main__":
    main()
