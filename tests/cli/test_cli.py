"""The replayalloc command-line tool, run as a program (REPLAYALLOC_CLI names it).

Malformed input: every command that reads it fails with a clear message (naming the
line where the input has lines), a non-zero exit code, and writes nothing. Happy
paths: the plan parses and its offsets are valid (checked here, independently of the
library's validate()), the report's numbers match a lower bound computed here, convert
round-trips, predict is exact on traces whose sizes are linear in the batch size.
Never a crash: mutated inputs end in exit code 0 or 1, never a signal. Plan directories:
`plans`, `plans verify` and `plans prune` over one file of every kind the engine meets
(good host and device plans, corrupt, truncated, another version or slot alignment, a
wrong name, unsafe, temporary, not a plan), each file made here with a valid checksum.
Training steps: the split of report and predict (Note [Training memory]) on a hand-made
step whose bytes per part are known, and on a real torch 1.13 step.
"""
import datetime
import json
import os
import random
import struct
import subprocess
import tempfile
import time
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


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def reseal(body):
    """`body` (a trace or plan file without its last 4 bytes) with its CRC-32C appended."""
    return body + struct.pack("<I", crc32c(body))


def plan_file_name(key):
    """planner/plan_file.cc plan_file_name(): the name the engine gives a key's plan."""
    k = key.encode()
    safe = bytes(c if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "-_.") else ord("_")
                 for c in k[:64])
    h = 0xcbf29ce484222325
    for c in k:  # fnv1a over each byte as a little-endian u64
        for i in range(8):
            h ^= (c >> (8 * i)) & 0xFF
            h = (h * 0x100000001b3) % 2**64
    return f"{safe.decode()}-{h:016x}.raplan"


def with_trace_key(ratrace, key):
    """A binary trace (trace_io.cc) with its key replaced (the key is not in the signature)."""
    (old,) = struct.unpack_from("<I", ratrace, 48)
    k = key.encode()
    return reseal(ratrace[:48] + struct.pack("<I", len(k)) + k + ratrace[52 + old:-4])


def with_plan_version(raplan, version):
    """A plan file whose library version says `version`, its checksum made right."""
    (old,) = struct.unpack_from("<I", raplan, 16)
    v = version.encode()
    return reseal(raplan[:16] + struct.pack("<I", len(v)) + v + raplan[20 + old:-4])


def plan_flags(raplan):
    return struct.unpack_from("<I", raplan, 12)[0]


def without_made_at(raplan):
    """The layout before flag bit 1 (made_at) existed: the flag and its u64 taken out."""
    assert plan_flags(raplan) & 2
    return reseal(raplan[:12] + struct.pack("<I", plan_flags(raplan) & ~2) + raplan[16:-12])


def with_least(raplan, least):
    """An envelope plan: flag bit 0 and one u64 per allocation (the least request its slot
    serves) inserted before made_at."""
    flags = plan_flags(raplan)
    tail = 12 if flags & 2 else 4
    return reseal(raplan[:12] + struct.pack("<I", flags | 1) + raplan[16:-tail]
                  + b"".join(struct.pack("<Q", x) for x in least) + raplan[len(raplan) - tail:-4])


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
MALFORMED = [
    ("bad_quotes", HEADER + "0,64,16,0,1,aten::add\n1,64,16,1,2,\"aten::mul\n", "line 3: unbalanced quotes"),
    ("bad_header", "id,size,align,alloc,free,op\n0,64,16,0,1,x\n", "line 1: expected the header"),
    ("empty", "", "empty input"),
    ("few_fields", HEADER + "0,64,16,0\n", "line 2: expected 6 fields"),
    ("negative_size", HEADER + "0,-5,16,0,1,x\n", "line 2: size '-5'"),
    ("zero_size", HEADER + "0,64,16,0,1,x\n1,0,16,1,2,x\n", "line 3: size '0'"),
    ("huge_size", HEADER + f"0,{2**47 + 1},16,0,1,x\n", "line 2: size"),
    ("overflowing_size", HEADER + f"0,{2**64 + 5},16,0,1,x\n", "line 2: size"),
    ("text_size", HEADER + "0,lots,16,0,1,x\n", "line 2: size 'lots'"),
    ("bad_align", HEADER + "0,64,24,0,1,x\n", "line 2: align '24'"),
    ("free_before_alloc", HEADER + "0,64,16,0,1,x\n1,64,16,5,3,x\n", "line 3: allocation 1 is freed at 3"),
    ("free_at_alloc", HEADER + "0,64,16,4,4,x\n", "line 2: allocation 0 is freed at 4"),
    ("negative_time", HEADER + "0,64,16,-1,4,x\n", "line 2: alloc_at '-1'"),
    ("duplicate_id", HEADER + "7,64,16,0,1,x\n7,64,16,1,2,y\n", "line 3: id 7 already used on line 2"),
    ("binary_garbage", b"\x00\xff\x13garbage\x01\x02", "line 1"),
    ("plan_csv", "id,offset,size\n0,0,64\n", "holds no lifetimes"),
    ("too_big_in_total", HEADER + "".join(f"{i},{2**47},16,0,1,x\n" for i in range(40000)), "2^62"),
]


class Malformed(Base):
    def check_fails(self, args, expect, outputs):
        p = run(*args)
        self.assertNotEqual(p.returncode, 0, f"{args} succeeded")
        self.assertLess(p.returncode, 128, "killed by a signal")
        self.assertIn(expect, p.stderr, args)
        self.assertIn("error", p.stderr)
        self.assert_nothing_written(*outputs)

    def test_every_command_refuses_every_malformed_trace(self):
        good = self.write("good.csv", chain_trace(1))
        for name, content, expect in MALFORMED:
            with self.subTest(name):
                bad = self.write(name + ".csv", content)
                self.check_fails(["plan", bad, "-o", self.path("out.csv")], expect, ["out.csv"])
                self.check_fails(["plan", bad, "-o", self.path("out.raplan")], expect, ["out.raplan"])
                self.check_fails(["viz", bad, "-o", self.path("out.html")], expect, ["out.html"])
                self.check_fails(["convert", bad, self.path("out.ratrace")], expect, ["out.ratrace"])
                self.check_fails(["report", bad], expect, [])
                self.check_fails(["predict", "--trace", f"1={good}", "--trace", f"8={bad}", "--at", "16"],
                                 expect, [])

    def test_missing_file(self):
        self.check_fails(["plan", self.path("nope.csv"), "-o", self.path("out.csv")],
                         "No such file", ["out.csv"])
        self.check_fails(["report", self.path("nope.raplan")], "No such file", [])

    def test_unknown_algo(self):
        t = self.write("t.csv", chain_trace(1))
        p = run("plan", t, "-o", self.path("out.csv"), "--algo", "nope")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("unknown --algo 'nope'", p.stderr)
        self.assertIn("greedy_by_size", p.stderr)  # the known ones are listed
        self.assert_nothing_written("out.csv")

    def test_corrupt_and_truncated_plan_files(self):
        t = self.write("t.csv", chain_trace(1))
        run("plan", t, "-o", self.path("good.raplan"), check=0)
        with open(self.path("good.raplan"), "rb") as f:
            good = f.read()
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x40
        cases = [("flipped.raplan", bytes(flipped), "checksum"),
                 ("truncated.raplan", good[: len(good) - 9], "plan file"),
                 ("magic_only.raplan", good[:8], "plan file"),
                 ("other_version.raplan", good[:8] + b"\x63\x00\x00\x00" + good[12:], "format version 99")]
        for name, content, expect in cases:
            with self.subTest(name):
                path = self.write(name, content)
                self.check_fails(["report", path], expect, [])
                self.check_fails(["viz", path, "-o", self.path("out.html")], expect, ["out.html"])
                self.check_fails(["convert", path, self.path("out.csv")], expect, ["out.csv"])

    def test_unwritable_output_leaves_nothing(self):
        t = self.write("t.csv", chain_trace(1))
        p = run("plan", t, "-o", os.path.join(self.dir, "no_such_dir", "out.csv"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("error", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "no_such_dir")))

    def test_mutated_inputs_never_crash(self):
        rng = random.Random(6)
        csv = chain_trace(2, layers=12).encode()
        run("plan", self.write("t.csv", csv), "-o", self.path("t.raplan"), check=0)
        with open(self.path("t.raplan"), "rb") as f:
            raplan = f.read()
        for i in range(150):
            base = bytearray(csv if i % 2 else raplan)
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(base))
                kind = rng.randrange(3)
                if kind == 0:
                    base[pos] = rng.randrange(256)
                elif kind == 1:
                    del base[pos: pos + rng.randint(1, 16)]
                else:
                    base[pos:pos] = bytes(rng.choice(b"0123456789,-\n\"") for _ in range(rng.randint(1, 4)))
            path = self.write("m", bytes(base))
            for args in (["report", path], ["viz", path, "-o", self.path("m.html")]):
                p = run(*args)
                self.assertIn(p.returncode, (0, 1), f"{args} on mutation {i}: {p.stderr}")
                if p.returncode:
                    self.assertIn("error", p.stderr)
            if os.path.exists(self.path("m.html")):
                os.unlink(self.path("m.html"))


class Usage(Base):
    def test_help_and_bad_arguments(self):
        for cmd in ("plan", "report", "viz", "predict", "convert", "plans"):
            with self.subTest(cmd):
                p = run(cmd, "--help", check=0)
                self.assertIn(f"usage: replayalloc {cmd}", p.stdout)
                p = run(cmd, "--no-such-option")
                self.assertEqual(p.returncode, 2)
                self.assertIn("unknown option '--no-such-option'", p.stderr)
                self.assertIn(f"usage: replayalloc {cmd}", p.stderr)
        self.assertEqual(run().returncode, 2)
        p = run("frobnicate")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown command 'frobnicate'", p.stderr)
        self.assertIn("usage: replayalloc COMMAND", run("--help", check=0).stdout)

    def test_missing_pieces(self):
        t = self.write("t.csv", chain_trace(1))
        self.assertIn("missing -o", run("plan", t).stderr)
        self.assertEqual(run("plan", t).returncode, 2)
        self.assertIn("needs a value", run("plan", t, "-o").stderr)
        self.assertEqual(run("viz", t).returncode, 2)
        self.assertEqual(run("convert", t).returncode, 2)
        self.assertEqual(run("report").returncode, 2)
        self.assertEqual(run("report", t, "--top", "many").returncode, 2)
        self.assertEqual(run("plan", t, "-o", self.path("x.csv"), "--slot-align", "48").returncode, 2)
        p = run("predict", "--trace", f"1={t}", "--at", "4")
        self.assertEqual(p.returncode, 2)
        self.assertIn("at least two", p.stderr)
        for bad in (["--trace", f"1={t}", "--trace", f"1={t}", "--at", "4"],
                    ["--trace", f"x={t}", "--trace", f"2={t}", "--at", "4"],
                    ["--trace", f"1={t}", "--trace", f"2={t}", "--at", "0"],
                    ["--trace", f"1={t}", "--trace", f"2={t}"]):
            self.assertEqual(run("predict", *bad).returncode, 2, bad)
        self.assert_nothing_written("x.csv")


class HappyPaths(Base):
    def test_plan_csv_parses_and_offsets_are_valid(self):
        text = chain_trace(3, layers=40)
        allocs = parse_trace(text)
        t = self.write("t.csv", text)
        helptext = run("plan", "--help", check=0).stdout
        algos = helptext.split("planner: ", 1)[1].split(" (default", 1)[0].split(", ")
        self.assertIn("best", algos)
        for algo in algos:
            if algo == "exact":
                continue  # a MIP: test_exact_on_a_tiny_trace
            with self.subTest(algo):
                p = run("plan", t, "-o", self.path("p.csv"), "--algo", algo, check=0)
                summary = json.loads(p.stdout)
                for key in ("slab_bytes", "lower_bound_bytes", "algorithm", "plan_ms", "allocations",
                            "efficiency"):
                    self.assertIn(key, summary)
                self.assertEqual(summary["lower_bound_bytes"], lower_bound(allocs))
                self.assertEqual(summary["allocations"], len(allocs))
                with open(self.path("p.csv")) as f:
                    lines = f.read().splitlines()
                self.assertEqual(lines[0], "id,offset,size")
                by_id = {a["id"]: a for a in allocs}
                placed = []
                for line in lines[1:]:
                    i, off, size = map(int, line.split(","))
                    a = by_id[i]
                    self.assertEqual(size, a["size"])
                    self.assertEqual(off % 64, 0)
                    self.assertLessEqual(off + footprint(a), summary["slab_bytes"])
                    placed.append((a, off))
                # Every allocation that does not outlive the iteration is placed, once.
                self.assertEqual(sorted(a["id"] for a, _ in placed),
                                 sorted(a["id"] for a in allocs if a["free_at"] is not None))
                self.assertEqual(summary["planned"], len(placed))
                for x, (a, oa) in enumerate(placed):
                    for b, ob in placed[x + 1:]:
                        if a["alloc_at"] < b["free_at"] and b["alloc_at"] < a["free_at"]:
                            self.assertTrue(oa + footprint(a) <= ob or ob + footprint(b) <= oa,
                                            f"{a['id']} and {b['id']} overlap while both live")
                self.assertGreaterEqual(summary["slab_bytes"], summary["lower_bound_bytes"])

    def test_exact_on_a_tiny_trace(self):
        if "exact" not in run("plan", "--help", check=0).stdout:
            self.skipTest("this build has no exact planner (no MIP solver found)")
        text = chain_trace(1, layers=4)
        t = self.write("t.csv", text)
        summary = json.loads(run("plan", t, "-o", self.path("p.csv"), "--algo", "exact", check=0).stdout)
        self.assertEqual(summary["lower_bound_bytes"], lower_bound(parse_trace(text)))
        self.assertGreaterEqual(summary["slab_bytes"], summary["lower_bound_bytes"])

    def test_raplan_report_and_convert(self):
        text = chain_trace(2)
        allocs = parse_trace(text)
        t = self.write("t.csv", text)
        plan = json.loads(run("plan", t, "-o", self.path("p.raplan"), check=0).stdout)
        rep = json.loads(run("report", self.path("p.raplan"), "--json", check=0).stdout)
        self.assertEqual(rep["source"], "plan")
        self.assertEqual(rep["slab_bytes"], plan["slab_bytes"])
        self.assertEqual(rep["lower_bound_bytes"], lower_bound(allocs))
        self.assertAlmostEqual(rep["efficiency"], rep["lower_bound_bytes"] / rep["slab_bytes"], places=5)
        self.assertEqual(rep["persistent_bytes"], sum(a["size"] for a in allocs if a["free_at"] is None))
        kinds = {k["name"]: k for k in rep["kinds"]}
        self.assertEqual(kinds["workspace"]["count"], 30)   # the 4 KiB buffers
        self.assertEqual(kinds["activations"]["count"], 29)
        self.assertEqual(kinds["persistent"]["count"], 1)
        self.assertEqual(sum(k["at_peak_bytes"] for k in rep["kinds"]), rep["lower_bound_bytes"])
        self.assertEqual(sum(o["at_peak_bytes"] for o in rep["top_ops"]), rep["lower_bound_bytes"])
        text_report = run("report", t, check=0).stdout
        for word in ("peak live", "lower bound", "slab", "efficiency", "workspace", "activations",
                     "persistent", "aten::conv2d"):
            self.assertIn(word, text_report)
        # CSV -> binary -> CSV, and the trace inside the plan file, give the same CSV.
        run("convert", t, self.path("t.ratrace"), check=0)
        run("convert", self.path("t.ratrace"), self.path("back.csv"), check=0)
        run("convert", self.path("p.raplan"), self.path("fromplan.csv"), check=0)
        for name in ("back.csv", "fromplan.csv"):
            with open(self.path(name)) as f:
                self.assertEqual(f.read(), text, name)
        self.assertEqual(run("plan", self.path("t.ratrace"), "-o", "-", check=0).stdout.splitlines()[0],
                         "id,offset,size")

    def test_predict_is_exact_on_linear_traces(self):
        t1, t8, t32 = (self.write(f"b{b}.csv", chain_trace(b)) for b in (1, 8, 32))
        p = json.loads(run("predict", "--trace", f"1={t1}", "--trace", f"8={t8}", "--at", "32",
                           "--json", check=0).stdout)
        truth = json.loads(run("report", t32, "--json", check=0).stdout)
        self.assertEqual(p["method"], "per_allocation")
        self.assertEqual(p["predicted"]["lower_bound_bytes"], truth["lower_bound_bytes"])
        self.assertEqual(p["predicted"]["slab_bytes"], truth["slab_bytes"])
        self.assertEqual(p["predicted"]["peak_live_bytes"], truth["peak_live_bytes"])
        self.assertEqual(p["constant"], 30)
        text = run("predict", "--trace", f"1={t1}", "--trace", f"8={t8}", "--at", "32", "--at", "16",
                   check=0).stdout
        self.assertIn("batch 32*", text)
        self.assertIn("per-allocation fit", text)
        # Recordings that differ: the linear peak, and why.
        t8b = self.write("b8b.csv", chain_trace(8, layers=31))
        p = json.loads(run("predict", "--trace", f"1={t1}", "--trace", f"8={t8b}", "--at", "32",
                           "--json", check=0).stdout)
        self.assertEqual(p["method"], "linear_peak")
        self.assertIn("number of allocations", p["why_not_per_allocation"])
        p = run("predict", "--trace", f"1={t1}", "--trace", f"8={t8b}", "--at", "32",
                "--method", "per_allocation")
        self.assertEqual(p.returncode, 1)
        self.assertIn("does not apply", p.stderr)

    def test_predict_refuses_two_models(self):
        # A CNN at batch 1 and a transformer at batch 8: no line through them means anything.
        # The ops each ran alone are named, those of most allocations first.
        cnn = self.write("cnn_b1.csv", chain_trace(1))
        bert = self.write("bert_b8.csv", chain_trace(8, layers=40, ops=("aten::matmul", "aten::softmax",
                                                                        "aten::layer_norm")))
        p = run("predict", "--trace", f"1={cnn}", "--trace", f"8={bert}", "--at", "32", check=1)
        self.assertEqual(p.stdout, "")
        self.assertEqual(
            p.stderr.strip(),
            "replayalloc predict: error: the recordings are not of one model: 0% of the allocations at batch 1 "
            "come from an op that batch 8 also ran, and 0% the other way (ops only at batch 1: 'aten::add', "
            "'aten::conv2d', 'aten::relu'; only at batch 8: 'aten::matmul', 'aten::layer_norm', "
            "'aten::softmax'); predict fits recordings of the same model at different batch sizes")
        # Whatever the method asked for, and in JSON too.
        for extra in (["--method", "linear_peak"], ["--json"]):
            p = run("predict", "--trace", f"1={cnn}", "--trace", f"8={bert}", "--at", "32", *extra, check=1)
            self.assertIn("the recordings are not of one model: ", p.stderr)
        # Without op tags: more than twice the allocations.
        untagged = self.write("untagged_b8.csv", chain_trace(8, layers=70, ops=("unknown",)))
        small = self.write("untagged_b1.csv", chain_trace(1, layers=30, ops=("unknown",)))
        p = run("predict", "--trace", f"1={small}", "--trace", f"8={untagged}", "--at", "32", check=1)
        self.assertIn("the recordings are not of one model: 60 allocations at batch 1 and 140 at batch 8, "
                      "more than twice as many", p.stderr)
        # The same model whose kernels change with the batch (one op more at batch 8, a few
        # allocations more) is still answered, by the linear peak.
        more = self.write("cnn_b8.csv", chain_trace(8, layers=33, ops=("aten::conv2d", "aten::relu", "aten::add",
                                                                      "aten::mkldnn_convolution")))
        p = json.loads(run("predict", "--trace", f"1={cnn}", "--trace", f"8={more}", "--at", "32", "--json",
                           check=0).stdout)
        self.assertEqual(p["method"], "linear_peak")

    def test_viz_page(self):
        text = chain_trace(2)
        t = self.write("t.csv", text)
        run("viz", t, "-o", self.path("p.html"), "--title", "<chain & co>", check=0)
        with open(self.path("p.html")) as f:
            html = f.read()
        planned = sum(1 for a in parse_trace(text) if a["free_at"] is not None)
        blocks = html[html.index('<g id="blocks">'): html.index("</g>", html.index('<g id="blocks">'))]
        self.assertEqual(blocks.count("<rect"), planned)
        self.assertIn('id="lower-bound"', html)
        self.assertIn("&lt;chain &amp; co&gt;", html)
        self.assertNotIn("<chain", html)
        for ref in ("http://", "https://", "src=", "<link"):
            self.assertNotIn(ref, html.replace('xmlns="http://www.w3.org/2000/svg"', ""))

    def test_viz_size_for_20k_blocks(self):
        t = self.write("big.csv", chain_trace(1, layers=10000))
        run("viz", t, "-o", self.path("big.html"), check=0)
        size = os.path.getsize(self.path("big.html"))
        self.assertLess(size, 4 << 20, f"{size} bytes for 20k blocks")


class PlanDirectory(Base):
    """`replayalloc plans`, `plans verify`, `plans prune` over a directory with one file of
    every kind the engine meets (runtime/plan_store.cc, Note [Plan files])."""

    def keyed_plan(self, key, *extra, layers=30):
        """A plan file's bytes for `key` (the plan command keeps its trace's key)."""
        text = chain_trace(2, layers=layers)
        t = self.write("t.csv", text)
        run("convert", t, self.path("t.ratrace"), check=0)
        with open(self.path("t.ratrace"), "rb") as f:
            keyed = with_trace_key(f.read(), key)
        self.write("keyed.ratrace", keyed)
        summary = json.loads(run("plan", self.path("keyed.ratrace"), "-o", self.path("out.raplan"), *extra,
                                 check=0).stdout)
        with open(self.path("out.raplan"), "rb") as f:
            data = f.read()
        for n in ("t.csv", "t.ratrace", "keyed.ratrace", "out.raplan"):
            os.unlink(self.path(n))
        return data, summary, parse_trace(text)

    def setUp(self):
        super().setUp()
        self.plans = os.path.join(self.dir, "plans")
        os.mkdir(self.plans, 0o700)
        self.version = run("version", check=0).stdout.split()[1]
        self.t0 = int(time.time())
        good, self.summary, self.allocs = self.keyed_plan("svc/a")
        self.t1 = int(time.time())
        gpu, _, _ = self.keyed_plan("svc/gpu")
        old_version, _, _ = self.keyed_plan("svc/old")
        wide, _, _ = self.keyed_plan("svc/wide", "--slot-align", "128")
        env, _, _ = self.keyed_plan("svc/env")
        before_made, _, _ = self.keyed_plan("svc/before")
        self.assertEqual(plan_flags(good), 2, "a new plan file has made_at (flag bit 1)")
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x40
        # Activations scale with the shape (served from 1 byte up), workspaces are exact.
        least = [1 if a["size"] != 4096 else a["size"] for a in self.allocs]
        self.good_name = plan_file_name("svc/a")
        self.files = {
            self.good_name: good,
            plan_file_name("cuda:svc/gpu"): gpu,
            plan_file_name("svc/env"): with_least(env, least),
            plan_file_name("svc/before"): without_made_at(before_made),
            "svc_corrupt.raplan": bytes(flipped),
            "svc_truncated.raplan": good[:len(good) - 9],
            plan_file_name("svc/old"): with_plan_version(old_version, "0.0.1-old"),
            plan_file_name("svc/wide"): wide,
            "svc_a-copy.raplan": good,
            f".{self.good_name}.0123456789abcdef.tmp": good[:100],
            f".{self.good_name}.fedcba9876543210.tmp": good[:200],
            "README.txt": "not a plan\n",
            "writable.raplan": good,
        }
        for name, content in self.files.items():
            with open(os.path.join(self.plans, name), "wb" if isinstance(content, bytes) else "w") as f:
                f.write(content)
            os.chmod(os.path.join(self.plans, name), 0o644)  # whatever the umask
        os.chmod(os.path.join(self.plans, "writable.raplan"), 0o666)
        hour_ago = time.time() - 3600
        os.utime(os.path.join(self.plans, f".{self.good_name}.0123456789abcdef.tmp"), (hour_ago, hour_ago))
        self.before_mtime = int(os.path.getmtime(os.path.join(self.plans, plan_file_name("svc/before"))))
        # A link named like a plan, to a plan outside: never followed, never its target removed.
        self.outside = self.write("outside.raplan", good)
        os.symlink(self.outside, os.path.join(self.plans, "link.raplan"))

    EXPECTED = {  # file -> verdict
        "svc_corrupt.raplan": "corrupt",
        "svc_truncated.raplan": "truncated",
        "svc_a-copy.raplan": "wrong_name",
        "writable.raplan": "unsafe",
        "link.raplan": "unsafe",
        "README.txt": "not_a_plan",
    }

    def expected(self):
        e = dict(self.EXPECTED)
        e.update({self.good_name: "ok", plan_file_name("cuda:svc/gpu"): "ok", plan_file_name("svc/env"): "ok",
                  plan_file_name("svc/before"): "ok", plan_file_name("svc/old"): "other_version",
                  plan_file_name("svc/wide"): "other_slot_align",
                  f".{self.good_name}.0123456789abcdef.tmp": "temporary",
                  f".{self.good_name}.fedcba9876543210.tmp": "temporary"})
        return e

    def verify(self, *extra, check):
        return json.loads(run("plans", "verify", self.plans, "--json", *extra, check=check).stdout)

    def test_verify_says_why_each_file_would_be_ignored(self):
        v = self.verify(check=1)
        verdicts = {f["file"]: f["verdict"] for f in v["files"]}
        self.assertEqual(verdicts, self.expected())
        by = {f["file"]: f for f in v["files"]}
        self.assertTrue(v["dir_ok"])
        self.assertFalse(v["ok"])
        self.assertEqual(v["library_version"], self.version)
        self.assertEqual(v["slot_align"], 64)
        self.assertEqual(v["loaded"], 4)
        self.assertEqual(v["left_alone"], 3)  # README.txt and the two temporary files
        self.assertEqual(v["ignored"], len(verdicts) - 7)
        self.assertTrue(by[self.good_name]["loaded"])
        self.assertEqual((by[self.good_name]["key"], by[self.good_name]["domain"]), ("svc/a", "host"))
        gpu = by[plan_file_name("cuda:svc/gpu")]
        self.assertEqual((gpu["key"], gpu["domain"]), ("svc/gpu", "cuda"))
        self.assertIn("checksum", by["svc_corrupt.raplan"]["why"])
        self.assertIn("truncated", by["svc_truncated.raplan"]["why"])
        self.assertIn("made by replayalloc 0.0.1-old", by[plan_file_name("svc/old")]["why"])
        self.assertIn("slot alignment 128", by[plan_file_name("svc/wide")]["why"])
        self.assertIn(self.good_name, by["svc_a-copy.raplan"]["why"])  # the name it should have
        self.assertIn("symbolic link", by["link.raplan"]["why"])
        self.assertIn("0666", by["writable.raplan"]["why"])
        self.assertFalse(any(f["loaded"] for f in v["files"] if f["verdict"] != "ok"))
        # The table says the same.
        text = run("plans", "verify", self.plans, check=1).stdout
        for name, verdict in self.expected().items():
            line = next(l for l in text.splitlines() if name in l.split())
            self.assertEqual(line.split()[0], verdict, line)
        # With the slot alignment those plans were made with, 'wide' is the good one.
        wide = {f["file"]: f["verdict"] for f in self.verify("--slot-align", "128", check=1)["files"]}
        self.assertEqual(wide[plan_file_name("svc/wide")], "ok")
        self.assertEqual(wide[self.good_name], "other_slot_align")

    def test_verify_passes_on_loadable_plans_and_other_files(self):
        # A writer's temporary file is never read, so it fails nothing either.
        keep = (self.good_name, plan_file_name("cuda:svc/gpu"), plan_file_name("svc/env"),
                plan_file_name("svc/before"), "README.txt", f".{self.good_name}.0123456789abcdef.tmp")
        for name in os.listdir(self.plans):
            if name not in keep:
                os.unlink(os.path.join(self.plans, name))
        v = self.verify(check=0)
        self.assertTrue(v["ok"])
        self.assertEqual(v["loaded"], 4)
        self.assertEqual(v["ignored"], 0)
        self.assertIn("README.txt", run("plans", "verify", self.plans, check=0).stdout)
        # A directory other users can write is refused whatever it holds.
        os.chmod(self.plans, 0o777)
        v = self.verify(check=1)
        self.assertFalse(v["dir_ok"])
        self.assertIn("can be written by users other than", v["dir_why"])
        self.assertEqual(v["loaded"], 0)
        p = run("plans", "prune", self.plans)
        self.assertEqual(p.returncode, 1)
        self.assertIn("not pruned", p.stderr)
        self.assertEqual(sorted(os.listdir(self.plans)), sorted(keep))
        os.chmod(self.plans, 0o700)

    def test_listing(self):
        out = json.loads(run("plans", self.plans, "--json", check=0).stdout)
        self.assertEqual(out["dir"], self.plans)
        by = {p["file"]: p for p in out["plans"]}
        self.assertEqual(set(by), {n for n in self.expected() if n.endswith(".raplan")})
        self.assertEqual(out["other_files"], 3)  # README.txt and the two temporary files
        a = by[self.good_name]
        self.assertEqual(a["key"], "svc/a")
        self.assertEqual(a["domain"], "host")
        self.assertEqual(a["library_version"], self.version)
        self.assertEqual(a["slot_align"], 64)
        self.assertEqual(a["allocations"], len(self.allocs))
        self.assertEqual(a["planned"], self.summary["planned"])
        self.assertEqual(a["slab_bytes"], self.summary["slab_bytes"])
        self.assertEqual(a["lower_bound_bytes"], lower_bound(self.allocs))
        self.assertEqual(a["algorithm"], self.summary["algorithm"])
        self.assertEqual(a["size_bytes"], len(self.files[self.good_name]))
        self.assertEqual(a["made_from"], "plan")
        self.assertTrue(self.t0 <= a["made_at"] <= self.t1, (self.t0, a["made_at"], self.t1))
        self.assertEqual(a["made"], datetime.datetime.fromtimestamp(a["made_at"], datetime.timezone.utc)
                         .strftime("%Y-%m-%dT%H:%M:%SZ"))
        sizes = [x["size"] for x in self.allocs if x["free_at"] is not None]
        self.assertEqual(a["shapes"], {"kind": "exact", "slots": len(sizes), "ranged_slots": 0,
                                       "size_min": min(sizes), "size_max": max(sizes)})
        self.assertEqual((by[plan_file_name("cuda:svc/gpu")]["key"], by[plan_file_name("cuda:svc/gpu")]["domain"]),
                         ("svc/gpu", "cuda"))
        self.assertEqual(by["svc_a-copy.raplan"]["domain"], "unknown")
        self.assertEqual(by[plan_file_name("svc/old")]["library_version"], "0.0.1-old")
        self.assertEqual(by[plan_file_name("svc/wide")]["slot_align"], 128)
        # A file from before made_at: the file's mtime, marked as such.
        before = by[plan_file_name("svc/before")]
        self.assertEqual((before["made_from"], before["made_at"]), ("mtime", self.before_mtime))
        # An envelope plan: the activations (placed ones) serve a range from 1 byte.
        ranged = [x["size"] for x in self.allocs if x["free_at"] is not None and x["size"] != 4096]
        env = by[plan_file_name("svc/env")]["shapes"]
        self.assertEqual(env["kind"], "envelope")
        self.assertEqual((env["ranged_slots"], env["least_min"], env["capacity_min"], env["capacity_max"]),
                         (len(ranged), 1, min(ranged), max(ranged)))
        for bad in ("svc_corrupt.raplan", "svc_truncated.raplan", "link.raplan", "writable.raplan"):
            self.assertIn("error", by[bad])
            self.assertNotIn("key", by[bad])
        text = run("plans", self.plans, check=0).stdout
        for word in ("svc/a", "svc/gpu", "cuda", "(mtime)", a["made"], "serve a range", "exact sizes",
                     "0.0.1-old", "slot alignment 128"):
            self.assertIn(word, text)

    def test_prune_removes_exactly_the_stale_files(self):
        before = sorted(os.listdir(self.plans))
        stale = {"svc_corrupt.raplan", "svc_truncated.raplan", "svc_a-copy.raplan", plan_file_name("svc/old"),
                 plan_file_name("svc/wide"), f".{self.good_name}.0123456789abcdef.tmp"}
        dry = json.loads(run("plans", "prune", self.plans, "--dry-run", "--json", check=0).stdout)
        self.assertTrue(dry["dry_run"])
        self.assertEqual({r["file"] for r in dry["removed"]}, stale)
        self.assertEqual(sorted(os.listdir(self.plans)), before, "--dry-run removed something")
        self.assertIn("would remove", run("plans", "prune", self.plans, "--dry-run", check=0).stdout)

        out = json.loads(run("plans", "prune", self.plans, "--json", check=0).stdout)
        self.assertFalse(out["dry_run"])
        self.assertEqual(out["tmp_age_s"], 600)
        self.assertEqual({r["file"]: r["verdict"] for r in out["removed"]},
                         {n: self.expected()[n] for n in stale})
        self.assertEqual(out["failed"], [])
        self.assertEqual(sorted(os.listdir(self.plans)), sorted(set(before) - stale))
        # The young temporary file, the unsafe files and the non-plan are kept, and say why.
        kept = {k["file"]: k["why"] for k in out["kept"]}
        self.assertIn("younger than --tmp-age", kept[f".{self.good_name}.fedcba9876543210.tmp"])
        self.assertIn("symbolic link", kept["link.raplan"])
        self.assertTrue(os.path.islink(os.path.join(self.plans, "link.raplan")))
        with open(self.outside, "rb") as f:
            self.assertEqual(f.read(), self.files[self.good_name], "a link's target was touched")
        with open(os.path.join(self.plans, self.good_name), "rb") as f:
            self.assertEqual(f.read(), self.files[self.good_name])

        # Nothing left to prune but the young temporary file, which --tmp-age 0 takes.
        again = json.loads(run("plans", "prune", self.plans, "--json", check=0).stdout)
        self.assertEqual(again["removed"], [])
        text = run("plans", "prune", self.plans, "--tmp-age", "0", check=0).stdout
        self.assertIn("removed", text)
        self.assertNotIn(f".{self.good_name}.fedcba9876543210.tmp", os.listdir(self.plans))
        self.assertIn("README.txt", os.listdir(self.plans))
        # Left: the loadable plans, the unsafe ones (for a person to look at) and README.txt.
        v = self.verify(check=1)
        self.assertEqual({f["verdict"] for f in v["files"]}, {"ok", "unsafe", "not_a_plan"})

    def test_usage(self):
        self.assertIn("usage: replayalloc plans", run("plans", "verify", "--help", check=0).stdout)
        for args in (["plans"], ["plans", "verify"], ["plans", "prune"], ["plans", self.plans, self.plans],
                     ["plans", "verify", self.plans, "--slot-align", "48"],
                     ["plans", "prune", self.plans, "--tmp-age", "soon"],
                     ["plans", self.plans, "--dry-run"], ["plans", "verify", self.plans, "--tmp-age", "1"]):
            p = run(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn("usage: replayalloc plans", p.stderr)
        for sub in ([], ["verify"], ["prune"]):
            p = run("plans", *sub, self.path("no_such_dir"))
            self.assertEqual(p.returncode, 1, sub)
            self.assertIn("No such file", p.stderr)


def training_trace(batch):
    """CSV of a training step's first iteration, as tests/cli/training_test.cc builds it
    (Note [Training memory]): Linear(4, 8), ReLU, Linear(8, 2), MSE loss, SGD with momentum,
    built inside the step: 232 bytes each of parameters, gradients and momentum buffers;
    saved activations 40 * batch + 4 bytes; the loss 4 bytes."""
    b, never = batch, None
    rows = [
        (128, 0, never, "aten::empty"), (32, 1, never, "aten::empty"), (64, 2, never, "aten::empty"),
        (8, 3, never, "aten::empty"), (256, 4, 5, "aten::addmm"), (32 * b, 6, 8, "aten::addmm"),
        (32 * b, 7, 20, "aten::clamp_min"), (8 * b, 9, 16, "aten::addmm"), (4, 10, never, "aten::mse_loss"),
        (4, 11, 17, "aten::ones_like"), (8 * b, 12, 15, "aten::mse_loss_backward"), (64, 13, 39, "aten::mm"),
        (8, 14, 40, "aten::sum"), (32 * b, 18, 21, "aten::mm"), (32 * b, 19, 24, "aten::threshold_backward"),
        (128, 22, 41, "aten::mm"), (32, 23, 42, "aten::sum"), (512, 25, 26, "aten::mm"),
        (4, 27, 30, "aten::zeros"), (288, 28, 29, "Optimizer.step#SGD.step"), (128, 31, never, "aten::clone"),
        (32, 32, never, "aten::clone"), (64, 33, never, "aten::clone"), (8, 34, never, "aten::clone"),
        (4, 35, 38, "aten::zeros"), (288, 36, 37, "Optimizer.zero_grad#SGD.zero_grad"),
    ]
    return HEADER + "".join(f"{i},{size},16,{a},{'' if f is None else f},{op}\n"
                            for i, (size, a, f, op) in enumerate(rows))


# One training step of torch 1.13 on the CPU, recorded through replayalloc's libtorch
# integration (Linear(64, 128), ReLU, Linear(128, 10), cross-entropy, batch 8, SGD with
# momentum 0.9, first step, zero_grad(set_to_none=True); the model built before the
# iteration) and saved with replayalloc_save_trace().
TORCH_STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch113_mlp_sgd_step.csv")


# MiniMalloc's README example (named ids) and a small instance whose optimum is above
# the lower bound: three buffers that pairwise meet, and an alignment-free fourth.
MINIMALLOC_EXAMPLE = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n"
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHALLENGING = os.path.join(SOURCE_DIR, "bench", "planner", "minimalloc")


def minimalloc_rows(text):
    """{id: (lower, upper, size, offset or None)} of a MiniMalloc CSV."""
    lines = text.strip().splitlines()
    out = {}
    for line in lines[1:]:
        f = line.split(",")
        out[f[0]] = tuple(int(x) for x in f[1:4]) + ((int(f[4]),) if len(f) > 4 else (None,))
    return out


def check_solution(test, rows, capacity=None):
    """Independently of validate(): no two buffers that meet share a byte."""
    items = list(rows.values())
    top = 0
    for i, (lo, up, size, off) in enumerate(items):
        top = max(top, off + size)
        for lo2, up2, size2, off2 in items[i + 1:]:
            if lo < up2 and lo2 < up:
                test.assertTrue(off + size <= off2 or off2 + size2 <= off, f"{items[i]} overlaps")
    if capacity is not None:
        test.assertLessEqual(top, capacity)
    return top


class Minimalloc(Base):
    """MiniMalloc's CSV through convert and plan; the search; plans optimize."""

    def test_plan_a_minimalloc_problem_with_the_search(self):
        src = self.write("example.csv", MINIMALLOC_EXAMPLE)
        p = run("plan", src, "--slot-align", "1", "--algo", "search", "--time-limit", "5",
                "--format", "minimalloc", "-o", self.path("solution.csv"), check=0)
        summary = json.loads(p.stdout)
        self.assertEqual(summary["slab_bytes"], 12)
        self.assertTrue(summary["proven_optimal"])
        with open(self.path("solution.csv")) as f:
            text = f.read()
        self.assertTrue(text.startswith("id,lower,upper,size,offset\n"))
        rows = minimalloc_rows(text)
        self.assertEqual(sorted(rows), ["0", "1", "2", "3", "4"])  # named ids are numbered
        self.assertEqual(check_solution(self, rows), 12)

    def test_a_solution_round_trips_through_a_plan_file(self):
        src = self.write("example.csv", MINIMALLOC_EXAMPLE)
        run("plan", src, "--slot-align", "1", "--format", "minimalloc", "-o", self.path("s.csv"), check=0)
        run("convert", self.path("s.csv"), self.path("s.raplan"), check=0)
        run("convert", self.path("s.raplan"), self.path("back.csv"), "--to", "minimalloc", check=0)
        with open(self.path("s.csv")) as a, open(self.path("back.csv")) as b:
            self.assertEqual(a.read(), b.read())
        # The problem alone, and the trace CSV, round-trip too.
        run("convert", src, self.path("t.ratrace"), check=0)
        run("convert", self.path("t.ratrace"), self.path("p.csv"), "--to", "minimalloc", check=0)
        with open(self.path("p.csv")) as f, open(self.path("s.csv")) as g:
            self.assertEqual({k: v[:3] for k, v in minimalloc_rows(f.read()).items()},
                             {k: v[:3] for k, v in minimalloc_rows(g.read()).items()})

    def test_an_invalid_solution_is_refused(self):
        bad = self.write("bad.csv", "id,lower,upper,size,offset\n1,0,5,10,0\n2,3,8,10,5\n")
        p = run("convert", bad, self.path("bad.raplan"), check=1)
        self.assertIn("share bytes", p.stderr)
        self.assert_nothing_written("bad.raplan")
        p = run("convert", self.write("problem.csv", "id,lower,upper,size\n1,0,5,10\n"),
                self.path("x.raplan"), check=1)
        self.assertIn("holds no plan", p.stderr)
        run("plan", bad, "-o", self.path("o.csv"), "--time-limit", "1", check=2)  # best has no time limit

    def test_the_search_reaches_minimallocs_capacity_on_a_challenging_instance(self):
        src = os.path.join(CHALLENGING, "C.1048576.csv")
        if not os.path.exists(src):
            self.skipTest("bench/planner/minimalloc is not in this tree")
        p = run("plan", src, "--slot-align", "1", "--algo", "search", "--time-limit", "20",
                "--format", "minimalloc", "-o", self.path("c.csv"), check=0)
        summary = json.loads(p.stdout)
        best = json.loads(run("plan", src, "--slot-align", "1", "-o", self.path("b.csv"), check=0).stdout)
        self.assertLessEqual(summary["slab_bytes"], 1048576)
        self.assertLess(summary["slab_bytes"], best["slab_bytes"])
        with open(self.path("c.csv")) as f:
            check_solution(self, minimalloc_rows(f.read()), 1048576)

    def test_plans_optimize_rewrites_only_smaller_plans(self):
        plans = self.path("plans")
        os.mkdir(plans, 0o700)
        # MiniMalloc's files have no key ("minimalloc"): the file's name comes from verify.
        src = os.path.join(CHALLENGING, "K.1048576.csv")
        if not os.path.exists(src):
            self.skipTest("bench/planner/minimalloc is not in this tree")
        run("plan", src, "-o", self.path("k.raplan"), check=0)
        hint = run("plans", "verify", self.dir, check=1).stdout
        name = next(w for w in hint.split() if w.startswith("minimalloc-") and w.endswith(".raplan"))
        os.rename(self.path("k.raplan"), os.path.join(plans, name))
        before = os.stat(os.path.join(plans, name))
        p = run("plans", "optimize", plans, "--time-limit", "10", "--json", check=0)
        report = json.loads(p.stdout)
        (f,) = report["files"]
        self.assertEqual(f["action"], "rewritten")
        self.assertLess(f["slab_after"], f["slab_before"])
        self.assertGreaterEqual(f["slab_after"], f["lower_bound"])
        self.assertIn("ok ", run("plans", "verify", plans, check=0).stdout)
        listed = json.loads(run("plans", plans, "--json", check=0).stdout)
        self.assertIn(str(f["slab_after"]), json.dumps(listed))
        # Again: nothing smaller to find within the budget (or proven optimal): kept.
        p = run("plans", "optimize", plans, "--time-limit", "1", "--json", check=0)
        (g,) = json.loads(p.stdout)["files"]
        self.assertLessEqual(g["slab_after"], f["slab_after"])
        self.assertNotEqual(os.stat(os.path.join(plans, name)).st_ino, before.st_ino)


class Training(Base):
    """The training split of report and predict (Note [Training memory])."""

    def parts(self, training):
        return {p["name"]: p for p in training["parts"]}

    def test_report_splits_a_training_step(self):
        t = self.write("train16.csv", training_trace(16))
        rep = json.loads(run("report", t, "--json", check=0).stdout)
        tr = rep["training"]
        self.assertEqual((tr["backward_at"], tr["optimizer_at"], tr["end"]), (12, 28, 43))
        parts = self.parts(tr)
        self.assertEqual([p["name"] for p in tr["parts"]],
                         ["parameters", "gradients", "optimizer_state", "saved_activations", "outputs",
                          "workspace", "temporaries"])
        expect = {"parameters": (4, 232, 232), "gradients": (4, 232, 72), "optimizer_state": (4, 232, 0),
                  "saved_activations": (3, 40 * 16 + 4, 512), "outputs": (1, 4, 4),
                  "workspace": (4, 256 + 512 + 288 + 288, 0), "temporaries": (6, 104 * 16 + 8, 1024)}
        for name, (count, total, at_peak) in expect.items():
            self.assertEqual((parts[name]["count"], parts[name]["total_bytes"], parts[name]["at_peak_bytes"]),
                             (count, total, at_peak), name)
        self.assertEqual(tr["peak_bytes"], 1844)
        self.assertEqual(tr["peak_bytes"], rep["peak_live_bytes"])
        self.assertEqual((tr["peak_at"], tr["peak_phase"], tr["peak_op"]), (19, "backward", "aten::threshold_backward"))
        self.assertEqual(tr["held_after_bytes"], 232 + 4 + 232)
        self.assertEqual(sum(p["at_slab_peak_bytes"] for p in tr["parts"]), rep["lower_bound_bytes"])
        text = run("report", t, check=0).stdout
        for words in ("training step  forward [0, 12), backward [12, 28), optimizer [28, 43)",
                      "step peak", "1.80 KiB  at event 19 (backward), set by aten::threshold_backward",
                      "training split", "saved activations", "optimizer state", "held after"):
            self.assertIn(words, text)
        self.assertRegex(text, r"\n  saved activations +3 +644 B +512 B +27\.8% +512 B\n")
        self.assertRegex(text, r"\n  optimizer state +4 +232 B +0 B +0\.0% +0 B\n")

        given = json.loads(run("report", t, "--json", "--parameters-bytes", "1000", check=0).stdout)["training"]
        self.assertEqual(self.parts(given)["parameters"]["total_bytes"], 1232)
        self.assertEqual(given["parameters_given_bytes"], 1000)
        self.assertEqual(given["peak_bytes"], 2844)
        for bad in ("-5", "lots", "1.5", "1e3", ""):
            p = run("report", t, "--parameters-bytes", bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--parameters-bytes", p.stderr)

    def test_inference_has_no_split(self):
        t = self.write("chain.csv", chain_trace(2))
        self.assertIsNone(json.loads(run("report", t, "--json", check=0).stdout)["training"])
        text = run("report", t, check=0).stdout
        self.assertNotIn("training", text)
        self.assertIn("by kind", text)

    def test_a_real_torch_step(self):
        rep = json.loads(run("report", TORCH_STEP, "--json", check=0).stdout)
        tr = rep["training"]
        parts = self.parts(tr)
        # 64 x 128 + 128 + 128 x 10 + 10 floats: 38,440 bytes of gradients and of momentum.
        self.assertEqual((parts["gradients"]["count"], parts["gradients"]["total_bytes"]), (4, 38440))
        self.assertEqual((parts["optimizer_state"]["count"], parts["optimizer_state"]["total_bytes"]), (4, 38440))
        # The ReLU's output (8 x 128 floats), log-softmax's (8 x 10), nll_loss's total
        # weight, backward()'s seed.
        self.assertEqual((parts["saved_activations"]["count"], parts["saved_activations"]["total_bytes"]),
                         (4, 4096 + 320 + 4 + 4))
        self.assertEqual((parts["outputs"]["count"], parts["outputs"]["total_bytes"]), (1, 4))
        self.assertEqual(parts["parameters"]["count"], 0)  # built before the iteration
        self.assertEqual((tr["peak_phase"], tr["peak_op"]), ("optimizer", "Optimizer.zero_grad#SGD.zero_grad"))
        text = run("report", TORCH_STEP, "--parameters-bytes", "38440", check=0).stdout
        self.assertIn("(parameters: 37.5 KiB given with --parameters-bytes, live all along)", text)

    def test_predict_splits_the_predicted_step(self):
        t2, t8, t16 = (self.write(f"train{b}.csv", training_trace(b)) for b in (2, 8, 16))
        p = json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--json",
                           check=0).stdout)
        truth = json.loads(run("report", t16, "--json", check=0).stdout)["training"]
        self.assertEqual(p["method"], "per_allocation")
        self.assertEqual(p["predicted"]["training"], truth)
        self.assertEqual(self.parts(p["predicted"]["training"])["saved_activations"]["total_bytes"], 644)
        for recording, b in zip(p["inputs"], (2, 8)):
            parts = self.parts(recording["measured"]["training"])
            self.assertEqual(parts["saved_activations"]["total_bytes"], 40 * b + 4)
            self.assertEqual(parts["gradients"]["total_bytes"], 232)
            self.assertEqual(parts["optimizer_state"]["total_bytes"], 232)
        p = json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--json",
                           "--parameters-bytes", "1000", check=0).stdout)
        self.assertEqual(p["predicted"]["training"]["peak_bytes"], 2844)
        text = run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", check=0).stdout
        self.assertRegex(text, r"\n  training step +batch 2 +batch 8 +batch 16\*\n")
        self.assertRegex(text, r"\n  saved activations +\S+ \S+ +\S+ \S+ +512 B\n")
        self.assertRegex(text, r"\n  step peak +\S+ \S+ +\S+ \S+ +1\.80 KiB\n")
        self.assertIn("peak at batch 16*: event 19 (backward), set by aten::threshold_backward", text)
        # Forced linear peak: no predicted split, and it says so.
        text = run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--method", "linear_peak",
                   check=0).stdout
        self.assertIn("the predicted split needs the per-allocation fit", text)
        self.assertIsNone(json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16",
                                         "--method", "linear_peak", "--json", check=0).stdout)
                          ["predicted"]["training"])
        # Inference recordings: no training block.
        c1, c8 = (self.write(f"c{b}.csv", chain_trace(b)) for b in (1, 8))
        self.assertNotIn("training", run("predict", "--trace", f"1={c1}", "--trace", f"8={c8}", "--at", "4",
                                         check=0).stdout)


if __name__ == "__main__":
    unittest.main()
