#!/usr/bin/env python3
"""Programs nobody tuned on, under every allocator (bench/run_programs.sh drives it).

measure.py ROUNDS OUT_MARKDOWN NAME=LIB[,VAR=VALUE...] ...
Runs each program of PROGRAMS once per allocator and round, each in a process of its
own, the order rotated every round and reversed every other; an allocator is preloaded
(LIB `-` for none: the C library's own). From the program's rusage (wait4, which counts
the processes it waited for, g++'s cc1plus and as), as bench/programs/rusage.c reports it
(compiled into the scratch folder; a process forked from this one would count this one's
pages in its peak RSS): CPU time (user + system), peak RSS (of the largest process) and
minor page faults. Each program's output (its standard
output, or the hash of the object file g++ writes) must be the same under every
allocator; the table says so. Writes a Markdown table per program to OUT_MARKDOWN.
PROGRAMS_ONLY: a comma-separated subset of the programs.

COUNT=instructions: each program runs once per allocator under valgrind's callgrind
(every process it starts traced), and the table gives the instructions executed, summed
over its processes: deterministic where the clock is not (a shared host moved one
program's CPU time 20-50% from one process to the next), though blind to what costs
time beside instructions (cache misses, page faults, system calls). Runs go two at a
time (or as many as there are cores); ROUNDS is ignored. The shell script's ~700
processes are left out unless PROGRAMS_ONLY names it (each traced process starts
valgrind's own).
"""
import concurrent.futures
import functools
import glob
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERAL = ("glibc", "jemalloc", "tcmalloc", "mimalloc")


def python3():
    # Debian's when present: the one that imports python3-torch (the torch program; the
    # others import nothing but json).
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


SQL = os.path.join(HERE, "insert.sql")
OBJECT = "threaded_stress.o"  # g++'s output (and ld's), in the run's scratch folder
LINK = "link.sh"  # ld's command (link_command), written to the scratch folder

# name -> (argv, stdin file, what it is); OBJECT in argv: that file in the scratch folder
PROGRAMS = {
    "perl": (["perl", os.path.join(HERE, "hash.pl")], None,
             "Perl 5: a hash of 400,000 keys built, sorted, a fifth deleted (hash.pl)"),
    "sqlite": (["sqlite3", ":memory:"], SQL,
               "sqlite3: 200,000 rows inserted into an indexed table in memory, 4 KiB pages (insert.sql)"),
    "sqlite-8k": (["sqlite3", "-cmd", "pragma page_size=8192", ":memory:"], SQL, "the same with 8 KiB pages"),
    "python": ([python3(), os.path.join(HERE, "json_roundtrip.py")], None,
               "CPython: 60,000 records to JSON and back three times, a 28 MB string (json_roundtrip.py)"),
    "shell": (["sh", os.path.join(HERE, "commands.sh")], None,
              "a POSIX shell script: 100 rounds of expr, sort, tr, sed and cut, ~700 short processes (commands.sh)"),
    "g++": (["g++", "-O2", "-std=c++20", "-c", os.path.join(ROOT, "bench", "micro", "threaded_stress.cc"),
             "-o", OBJECT], None,
            "g++ -O2 compiling bench/micro/threaded_stress.cc (cc1plus and as; the object file's hash compared)"),
    # Five more, each tried first by hand on 2026-12-06 (bench/RESULTS.md, "Five more
    # programs nobody tuned on"); TEXT and DATA are made in the scratch folder (make_inputs).
    "sort": (["sort", "text.txt"], None, "sort: 600,000 lines of 3-15 words (45 MB, TEXT)"),
    "awk": (["mawk", "{for (i = 1; i <= NF; i++) c[$i]++} END {for (w in c) n++; print n}", "text.txt"], None,
            "mawk: the words of TEXT counted in an associative array"),
    "jq": (["jq", "[.[] | select(.score > 0.5) | {id, name, n: (.tags | length)}] | length", "data.json"], None,
           "jq: 150,000 records parsed (16 MB, DATA), filtered and reshaped"),
    "git": (["git", "-C", ROOT, "log", "-p", "-n", "400", "--stat"], None,
            "git log -p --stat of this repository's last 400 commits"),
    "clang": (["clang++", "-O2", "-std=c++20", "-c", os.path.join(ROOT, "bench", "micro", "threaded_stress.cc"),
               "-o", OBJECT], None,
              "clang++ -O2 compiling bench/micro/threaded_stress.cc (the object file's hash compared)"),
    # Two more, first measured on 2026-12-07 (bench/RESULTS.md, "Two more programs nobody
    # tuned on"): bc's numbers are small mallocs (3.1 M of them), CMake's growing list a
    # copy of up to 277 KB at each append (79,000 requests of 4 KiB and more).
    "bc": (["bc", "-l"], os.path.join(HERE, "pi.bc"), "bc -l: pi to 2,500 digits (pi.bc)"),
    "cmake": (["cmake", "-P", os.path.join(HERE, "lists.cmake")], None,
              "cmake -P: a list of 20,000 keys built by appends, sorted, rewritten by a regex (lists.cmake)"),
    # First measured on 2026-12-07 (bench/RESULTS.md, "Callocs of up to 32 KiB from the front
    # cache"): zero-filled Buffers, callocs of 1-65 KiB freed by V8's collector.
    "node": (["node", os.path.join(HERE, "buffers.js")], None,
             "Node.js: 60,000 zero-filled Buffers of 1-65 KiB, 512 live (buffers.js)"),
    # Two more, first measured on 2026-12-07 (bench/RESULTS.md, "GNU ld and PyTorch's
    # import"): the linker's 60,000 requests, 4 of them of 2-16 MiB, and a PyTorch
    # service's start.
    "ld": (["sh", LINK], None,
           "GNU ld (through g++) links this build's libreplayalloc_preload.so (25 MB with its debug "
           "information) from its objects, the command ninja ran (the output's hash compared)"),
    "torch": ([python3(), "-c", "import torch; print(torch.__version__)"], None,
              "Debian's CPython imports PyTorch (python3-torch): a service's start"),
}
# Programs left out, said, where what they need is missing and PROGRAMS_ONLY does not
# name them: why, and whether it is there.
OPTIONAL = {
    "node": ("scripts/setup.sh --onnx installs Node.js", lambda: shutil.which("node") is not None),
    "ld": ("this build's link command, from ninja -t commands, was not found", lambda: link_command() is not None),
    "torch": ("scripts/setup.sh installs python3-torch", lambda: imports_torch()),
}


@functools.cache  # asked by OPTIONAL's check, main's and the scratch folder's script: ninja once
def link_command():
    """The command ninja ran to link the build's preload library (BUILD_DIR, default
    build/), its output `"$out"`; None where there is none (no ninja, no such build)."""
    build = os.environ.get("BUILD_DIR") or os.path.join(ROOT, "build")
    target = "hooks/libreplayalloc_preload.so"
    try:
        lines = subprocess.run(["ninja", "-C", build, "-t", "commands", target], capture_output=True, text=True,
                               timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    cmd = lines[-1] if lines else ""
    if f" -o {target} " not in cmd:
        return None
    cmd = cmd.removeprefix(": && ").removesuffix(" && :").replace(f" -o {target} ", ' -o "$out" ')
    return f'out="$PWD/{OBJECT}"\ncd {build} && {cmd}\n'


def imports_torch():
    try:
        return subprocess.run([python3(), "-c", "import torch"], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def make_inputs(scratch):
    """TEXT (text.txt: 600,000 lines of words drawn from 50,000) and DATA (data.json:
    150,000 records) in the scratch folder, the same every run (a seeded generator)."""
    import json
    import random
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(50000)]
    with open(os.path.join(scratch, "text.txt"), "w") as f:
        for _ in range(600000):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) + "\n")
    records = [{"id": i, "name": rng.choice(words), "tags": [rng.choice(words) for _ in range(rng.randint(0, 6))],
                "score": rng.random()} for i in range(150000)]
    with open(os.path.join(scratch, "data.json"), "w") as f:
        json.dump(records, f)


def measure(argv, stdin, env, scratch, writes_object=None, helper=None):
    """Runs argv (stdin: a file's path or None) in the folder scratch; its output (standard
    output, or OBJECT's hash where it writes one), exit code, CPU s, peak RSS MiB, minor
    faults and standard error. helper: the rusage program (bench/programs/rusage.c), which
    runs argv and reports what it used (a child of this process starts with its pages:
    its peak RSS would count them); None: this process's wait4 (callgrind's runs, whose
    RSS is not read)."""
    err_path = os.path.join(scratch, "stderr")
    usage_path = os.path.join(scratch, "rusage.out")
    run = [helper, usage_path] + argv if helper else argv
    obj = os.path.join(scratch, OBJECT)
    if os.path.exists(obj):
        os.remove(obj)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: stdin from the file, stdout to the pipe, stderr to a file
        try:
            os.close(r)
            os.chdir(scratch)
            if stdin is not None:
                os.dup2(os.open(stdin, os.O_RDONLY), 0)
            os.dup2(w, 1)
            os.dup2(os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            os.execvpe(run[0], run, env)
        finally:
            os._exit(127)
    os.close(w)
    # The output as it comes (sort's is 45 MB, which held whole left this process ~50 MiB
    # larger): its first 64 KiB and its hash.
    head, digest, total = b"", hashlib.sha256(), 0
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        if total <= 65536:
            head += b[:65537 - total]
        digest.update(b)
        total += len(b)
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    # a long output (sort's) kept as its hash
    out = head.decode(errors="replace") if total <= 65536 else "sha256 " + digest.hexdigest()
    if (writes(argv) if writes_object is None else writes_object) and os.path.exists(obj):
        digest = hashlib.sha256()
        with open(obj, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        out += "object " + digest.hexdigest()
    with open(err_path, errors="replace") as f:
        err = f.read()
    # a library that cannot be preloaded is only a warning of ld.so's: not measured as another
    if "cannot be preloaded" in err:
        sys.exit(f"measure.py: {argv[0]}: {err.strip()}")
    code = os.waitstatus_to_exitcode(status)
    if helper:
        if not os.path.exists(usage_path):  # the helper could not run it, or did not report
            sys.exit(f"measure.py: {argv[0]}: no usage reported (exit {code}: {err.strip()[-500:]})")
        with open(usage_path) as f:
            rss_kib, faults, user, system = f.read().split()
        os.remove(usage_path)
        return out, code, float(user) + float(system), int(rss_kib) / 1024.0, int(faults), err
    return out, code, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, ru.ru_minflt, err


def writes(argv):
    """Whether a program's output is the file OBJECT (g++'s object, ld's library)."""
    return OBJECT in argv or LINK in argv


def allocator_env(lib, extra):
    """The environment of a run under one allocator: LIB preloaded (None: the C library's
    own), replayalloc quiet, EXTRA's variables set."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["REPLAYALLOC_VERBOSE"] = "0"
    if lib:
        env["LD_PRELOAD"] = lib
    env.update(extra)
    return env


def counting():
    mode = os.environ.get("COUNT", "")
    if mode not in ("", "instructions"):
        sys.exit(f"measure.py: COUNT={mode}: the only count is 'instructions'")
    return mode == "instructions"


def count_one(prog, name, lib, extra, scratch, n):
    """One run of prog under callgrind in a folder of its own (the inputs linked in): its
    output, and the instructions of all its processes."""
    argv, stdin, _ = PROGRAMS[prog]
    job = os.path.join(scratch, f"job{n}")
    os.mkdir(job)
    for f in ("text.txt", "data.json", LINK):
        if os.path.exists(os.path.join(scratch, f)):
            os.symlink(os.path.join(scratch, f), os.path.join(job, f))
    env = allocator_env(lib, extra)
    env["PYTHONHASHSEED"] = "0"  # CPython's string hashes (and so its dicts' work) the same every run
    # Perl's likewise (its hash seed and key order drawn per run moved hash.pl's count by
    # 0.07% between runs of one library; fixed: 3,967.32 M and 3,967.31 M)
    env["PERL_HASH_SEED"] = "0"
    env["PERL_PERTURB_KEYS"] = "0"
    out_files = os.path.join(job, "callgrind.%p")
    wrapped = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out_files}"] + argv
    out, code, _, _, _, err = measure(wrapped, stdin, env, job, writes(argv))
    if code != 0:
        sys.exit(f"measure.py: {prog} under {name} (callgrind) exited with {code}: {err.strip()[-2000:]}")
    total = bulk = 0
    for f in glob.glob(os.path.join(job, "callgrind.*")):
        with open(f, errors="replace") as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    total += int(line.split()[1])
                    break
        bulk += string_instructions(f)
    print(f"{prog} {name}: {total / 1e6:,.1f} M instructions, {bulk / 1e6:,.1f} M of them in memset/memcpy",
          file=sys.stderr)
    return prog, name, out, (total, bulk)


def string_instructions(path):
    """The instructions of one callgrind output spent in the C library's memset, memcpy
    and memmove. valgrind counts each byte `rep stosb` and `rep movsb` store as one
    instruction (glibc uses them from a few KiB), so a calloc zeroed by memset (glibc's, and
    replayalloc's for reused blocks) counts ~100,000 for 100 KiB where jemalloc's, which
    gives the pages back and has the kernel zero them at the next fault, counts none:
    what the kernel does is not counted at all."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True).stdout
    n = 0
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 3 and any(f in line for f in ("__memset_", "__memmove_", "__memcpy_", "__mempcpy_")):
            try:
                n += int(fields[0].replace(",", ""))
            except ValueError:
                pass
    return n


def count_all(programs, allocators, scratch):
    jobs = [(prog, name, lib, extra) for prog in programs for name, lib, extra in allocators]
    outputs, counts = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        futures = [pool.submit(count_one, *job, scratch, n) for n, job in enumerate(jobs)]
        for fut in futures:
            prog, name, out, total = fut.result()
            outputs.setdefault((prog, name), set()).add(out)
            counts[(prog, name)] = total
    return counts, outputs


def write_counts(out_md, programs, allocators, counts, outputs):
    names = [a[0] for a in allocators]
    general = [n for n in names if n in GENERAL]
    lines = []
    for title, part in (("all instructions", lambda c: c[0]),
                        ("outside the C library's memset and memcpy", lambda c: c[0] - c[1])):
        lines.append(f"**Millions of instructions, {title}**")
        lines.append("")
        lines.append("| program | " + " | ".join(names) + " | replayalloc ÷ best | ÷ glibc | outputs agree |")
        lines.append("|---|" + "---:|" * (len(names) + 2) + "---|")
        for prog in programs:
            v = {n: part(counts[(prog, n)]) for n in names}
            best = min(v[n] for n in general)
            want = outputs[(prog, names[0])]
            agree = all(outputs[(prog, n)] == want for n in names) and len(want) == 1
            mine = v.get("replayalloc")
            cells = " | ".join(f"{v[n] / 1e6:,.1f}" for n in names)
            ratio = f"{mine / best:.3f}" if mine else "-"
            vs_glibc = f"{mine / v['glibc']:.3f}" if mine and "glibc" in v else "-"
            lines.append(f"| {prog} | {cells} | {ratio} | {vs_glibc} | {'yes' if agree else 'NO'} |")
        lines.append("")
    lines.append("callgrind, every process of the run; ÷ best: over the fewest of " + ", ".join(general) + ". The "
                 "second table leaves out memset, memcpy and memmove, whose `rep stosb` and `rep movsb` valgrind "
                 "counts a byte an instruction (a calloc zeroed by memset counts ~100,000 for 100 KiB; one zeroed "
                 "by the kernel at its pages' faults, as jemalloc's reused large blocks are, counts nothing).")
    for prog in programs:
        lines.append(f"- **{prog}**: {PROGRAMS[prog][2]}")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    rounds = int(sys.argv[1])
    out_md = sys.argv[2]
    allocators = []
    for spec in sys.argv[3:]:
        name, rest = spec.split("=", 1)
        parts = rest.split(",")
        extra = dict(p.split("=", 1) for p in parts[1:])
        allocators.append((name, None if parts[0] == "-" else parts[0], extra))
    only = [p for p in os.environ.get("PROGRAMS_ONLY", "").split(",") if p]
    unknown = [p for p in only if p not in PROGRAMS]
    if unknown:
        sys.exit(f"measure.py: PROGRAMS_ONLY names no program {', '.join(unknown)} (there are {', '.join(PROGRAMS)})")
    programs = [p for p in PROGRAMS if not only or p in only]
    if counting() and not only:
        programs.remove("shell")
    if counting() and shutil.which("valgrind") is None:
        sys.exit("measure.py: COUNT=instructions needs valgrind (scripts/setup.sh installs it)")
    for p in [p for p in programs if p in OPTIONAL and p not in only and not OPTIONAL[p][1]()]:
        print(f"measure.py: {p} left out ({OPTIONAL[p][0]})", file=sys.stderr)
        programs.remove(p)
    if "ld" in programs and link_command() is None:
        sys.exit(f"measure.py: ld: {OPTIONAL['ld'][0]} (BUILD_DIR, a Ninja build)")
    missing = sorted({PROGRAMS[p][0][0] for p in programs if shutil.which(PROGRAMS[p][0][0]) is None})
    if missing:
        sys.exit(f"measure.py: {', '.join(missing)} missing (scripts/setup.sh installs them)")
    scratch = tempfile.mkdtemp(prefix="replayalloc_programs_")
    try:
        if any(f in PROGRAMS[p][0] for p in programs for f in ("text.txt", "data.json")):
            make_inputs(scratch)
        if "ld" in programs:
            with open(os.path.join(scratch, LINK), "w") as f:
                f.write(link_command())
        if counting():
            counts, outputs = count_all(programs, allocators, scratch)
        else:
            results, outputs = run_all(rounds, programs, allocators, scratch, build_helper(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if counting():
        write_counts(out_md, programs, allocators, counts, outputs)
    else:
        write_tables(out_md, programs, allocators, results, outputs)


def build_helper(scratch):
    """The rusage program (bench/programs/rusage.c), compiled into the scratch folder."""
    helper = os.path.join(scratch, "rusage_helper")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("measure.py: no C compiler (cc) for bench/programs/rusage.c (scripts/setup.sh installs one)")
    built = subprocess.run([cc, "-O2", "-o", helper, os.path.join(HERE, "rusage.c")], capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"measure.py: bench/programs/rusage.c did not compile: {built.stderr.strip()[-2000:]}")
    return helper


def run_all(rounds, programs, allocators, scratch, helper):
    results = {}
    outputs = {}
    for r in range(rounds):
        # rotated each round and reversed every other, so that no allocator always runs
        # right after the same one (the one before can leave the host faster or slower)
        order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
        if r % 2:
            order.reverse()
        for prog in programs:
            argv, stdin, _ = PROGRAMS[prog]
            for name, lib, extra in order:
                env = allocator_env(lib, extra)
                out, code, cpu, rss, faults, err = measure(argv, stdin, env, scratch, helper=helper)
                if code != 0:
                    sys.exit(f"measure.py: {prog} under {name} exited with {code}: {err.strip()[-2000:]}")
                outputs.setdefault((prog, name), set()).add(out)
                results.setdefault((prog, name), []).append((cpu, rss, faults))
                print(f"round {r + 1} {prog} {name}: cpu {cpu:.3f} s, rss {rss:.1f} MiB, faults {faults}",
                      file=sys.stderr)
    return results, outputs


def write_tables(out_md, programs, allocators, results, outputs):
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
