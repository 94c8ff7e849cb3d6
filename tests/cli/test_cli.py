"""The replayalloc command-line tool, run as a program (REPLAYALLOC_CLI names it).

Malformed input: every command that reads it fails with a clear message (naming the
line where the input has lines), a non-zero exit code, and writes nothing. Happy
paths: the plan parses and its offsets are valid (checked here, independently of the
library's validate()), the report's numbers match a lower bound computed here, convert
round-trips, predict is exact on traces whose sizes are linear in the batch size.
Never a crash: mutated inputs end in exit code 0 or 1, never a signal. Plan
directories, MiniMalloc's CSV and training steps have files of their own
(cli_support.py lists them).
"""
import json
import os
import random
import unittest

from cli_support import HEADER, Base, chain_trace, footprint, lower_bound, parse_trace, run


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


if __name__ == "__main__":
    unittest.main()
