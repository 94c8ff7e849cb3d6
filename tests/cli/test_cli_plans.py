"""`replayalloc plans`, `plans verify` and `plans prune` over one file of every kind the
engine meets (good host and device plans, corrupt, truncated, another version or slot
alignment, a wrong name, unsafe, temporary, not a plan), each file made here with a
valid checksum.
"""
import datetime
import json
import os
import struct
import time
import unittest

from cli_support import Base, chain_trace, lower_bound, parse_trace, run


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


if __name__ == "__main__":
    unittest.main()
