#!/usr/bin/env python3
"""Programs nobody tuned on, under every allocator (bench/run_programs.sh drives it).

measure.py ROUNDS OUT_MARKDOWN NAME=LIB[,VAR=VALUE...] ...
Runs each program of PROGRAMS once per allocator and round, each in a process of its
own, the order rotated every round; an allocator is preloaded (LIB `-` for none: the C
library's own). From the child's rusage (wait4): CPU time (user + system), peak RSS and
minor page faults. Each program's standard output must be the same under every
allocator; the table says so. Writes a Markdown table per program to OUT_MARKDOWN.
"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERAL = ("glibc", "jemalloc", "tcmalloc", "mimalloc")


def python3():
    # Any interpreter will do (nothing is imported but json); Debian's when present.
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


def sql(page_size):
    """insert.sql, with the page size set first where given: a file's path."""
    path = os.path.join(HERE, "insert.sql")
    if not page_size:
        return path
    with open(path) as f:
        text = f.read()
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"replayalloc_insert_{page_size}_{os.getpid()}.sql")
    with open(out, "w") as f:
        f.write(f"pragma page_size={page_size};\n" + text)
    return out


# name -> (argv, stdin text, what it is)
PROGRAMS = {
    "perl": (["perl", os.path.join(HERE, "hash.pl")], None,
             "Perl 5: a hash of 400,000 keys built, sorted, a fifth deleted (hash.pl)"),
    "sqlite": (["sqlite3", ":memory:"], sql(0),
               "sqlite3: 200,000 rows inserted into an indexed table in memory, 4 KiB pages (insert.sql)"),
    "sqlite-8k": (["sqlite3", ":memory:"], sql(8192), "the same with 8 KiB pages"),
    "python": ([python3(), os.path.join(HERE, "json_roundtrip.py")], None,
               "CPython: 60,000 records to JSON and back three times, a 28 MB string (json_roundtrip.py)"),
    "g++": (["g++", "-O2", "-std=c++20", "-c", os.path.join(ROOT, "bench", "micro", "threaded_stress.cc"),
             "-o", "/dev/null"], None, "g++ -O2 compiling bench/micro/threaded_stress.cc (cc1plus and as)"),
}


def measure(argv, stdin, env):
    """Runs argv (stdin: a file's path or None); its output, exit code, CPU s, peak RSS MiB, minor faults."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: stdin from the file, stdout to the pipe, stderr kept quiet
        try:
            os.close(r)
            if stdin is not None:
                os.dup2(os.open(stdin, os.O_RDONLY), 0)
            os.dup2(w, 1)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    return (b"".join(chunks).decode(errors="replace"), os.waitstatus_to_exitcode(status),
            ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, ru.ru_minflt)


def main():
    rounds = int(sys.argv[1])
    out_md = sys.argv[2]
    allocators = []
    for spec in sys.argv[3:]:
        name, rest = spec.split("=", 1)
        parts = rest.split(",")
        extra = dict(p.split("=", 1) for p in parts[1:])
        allocators.append((name, None if parts[0] == "-" else parts[0], extra))
    only = os.environ.get("PROGRAMS_ONLY")
    programs = [p for p in PROGRAMS if not only or p in only.split(",")]
    results = {}
    outputs = {}
    for r in range(rounds):
        for prog in programs:
            argv, stdin, _ = PROGRAMS[prog]
            for i in range(len(allocators)):
                name, lib, extra = allocators[(i + r) % len(allocators)]
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                env["REPLAYALLOC_VERBOSE"] = "0"
                if lib:
                    env["LD_PRELOAD"] = lib
                env.update(extra)
                out, code, cpu, rss, faults = measure(argv, stdin, env)
                if code != 0:
                    sys.exit(f"measure.py: {prog} under {name} exited with {code}")
                outputs.setdefault((prog, name), set()).add(out)
                results.setdefault((prog, name), []).append((cpu, rss, faults))
                print(f"round {r + 1} {prog} {name}: cpu {cpu:.3f} s, rss {rss:.1f} MiB, faults {faults}",
                      file=sys.stderr)
    names = [a[0] for a in allocators]
    lines = []
    for prog in programs:
        argv, stdin, what = PROGRAMS[prog]
        med = {n: [statistics.median(x[j] for x in results[(prog, n)]) for j in range(3)] for n in names}
        general = [n for n in names if n in GENERAL]
        best = min(med[n][0] for n in general)
        leanest = min(med[n][1] for n in general)
        want = outputs[(prog, "glibc")] if (prog, "glibc") in outputs else outputs[(prog, names[0])]
        lines.append(f"**{prog}**: {what}")
        lines.append("")
        lines.append("| allocator | CPU s | ÷ best | faults | peak RSS MiB | RSS ÷ leanest | output agrees |")
        lines.append("|---|---:|---:|---:|---:|---:|---|")
        for n in names:
            cpu, rss, faults = med[n]
            same = "yes" if outputs[(prog, n)] == want and len(want) == 1 else "NO"
            lines.append(f"| {n} | {cpu:.3f} | {cpu / best:.3f} | {faults:.0f} | {rss:.1f} | {rss / leanest:.2f} | {same} |")
        lines.append("")
    with open(out_md, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
