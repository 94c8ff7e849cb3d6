"""What the replayalloc CLI's Python tests share: the program (REPLAYALLOC_CLI names it),
running it, a chain-of-layers trace and its lower bound computed here (independently of
the library), and a test base with a scratch directory. The tests are test_cli.py
(malformed input, usage, happy paths), test_cli_plans.py (plan directories),
test_cli_minimalloc.py (MiniMalloc's CSV, the search) and test_cli_training.py (the
training split), each a ctest of its own (tests/cli/CMakeLists.txt).
"""
import os
import subprocess
import tempfile
import unittest

CLI = os.environ.get("REPLAYALLOC_CLI", "")
HEADER = "id,size,align,alloc_at,free_at,op\n"


def run(*args, check=None):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, errors="replace",
                       timeout=60)
    if check is not None and p.returncode != check:
        raise AssertionError(f"{args}: exit {p.returncode}, expected {check}\n{p.stdout}\n{p.stderr}")
    return p


def chain_trace(batch=1, layers=30, ops=("aten::conv2d", "aten::relu", "aten::add")):
    """CSV of a chain of layers: a 4 KiB workspace, then an activation of batch * (1000 + 64 l)
    bytes live until the next layer's activation exists; the last one outlives the iteration."""
    rows, at, prev = [], 0, None
    for l in range(layers):
        op = ops[l % len(ops)]
        rows.append([len(rows), 4096, 64, at, at + 1, op])
        at += 2
        rows.append([len(rows), batch * (1000 + 64 * l), 16, at, None, op])
        at += 1
        if prev is not None:
            prev[4] = at
            at += 1
        prev = rows[-1]
    return HEADER + "".join(",".join("" if x is None else str(x) for x in r) + "\n" for r in rows)


def parse_trace(text):
    out = []
    for line in text.splitlines()[1:]:
        i, size, align, a, f, op = line.split(",", 5)
        out.append(dict(id=int(i), size=int(size), align=int(align), alloc_at=int(a),
                        free_at=int(f) if f else None, op=op))
    return out


def footprint(a, slot_align=64):
    al = max(a["align"], slot_align)
    return (a["size"] + al - 1) // al * al


def lower_bound(allocs):
    steps = []
    for a in allocs:
        if a["free_at"] is not None:
            steps += [(a["alloc_at"], 1, footprint(a)), (a["free_at"], 0, footprint(a))]
    live = peak = 0
    for _, alloc, b in sorted(steps):  # frees (0) before allocations (1) at one position
        live += b if alloc else -b
        peak = max(peak, live)
    return peak


class Base(unittest.TestCase):
    def setUp(self):
        if not CLI or not os.access(CLI, os.X_OK):
            self.skipTest("REPLAYALLOC_CLI does not name the built replayalloc program")
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, content):
        path = os.path.join(self.dir, name)
        with open(path, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        return path

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_nothing_written(self, *names):
        for n in names:
            self.assertFalse(os.path.exists(self.path(n)), f"{n} was written")
        leftovers = [f for f in os.listdir(self.dir) if ".tmp." in f]
        self.assertEqual(leftovers, [], "temporary files left behind")


# Malformed inputs: (name, content, what the message must say).
