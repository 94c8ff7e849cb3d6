"""`replayalloc viz --torch-snapshot FILE`: the plan as torch.cuda.memory._snapshot()'s
pickle (Note [Torch snapshot], allocator/cli/torch_snapshot.h).

Loads the file with pickle and checks what PyTorch's viewer reads: one segment (the
slab) whose blocks cover it exactly, the slots live at the peak at their offsets (their
footprints summing to the lower bound computed here), and device_traces with every
planned allocation's alloc, free_requested and free_completed in order, never two live
blocks overlapping, each alloc's frame naming its op. Where torch.cuda._memory_viz has
trace_plot and segment_plot (PyTorch 2.1 and newer) they must accept it and return
HTML; the older module's stats() (torch 1.13, Debian 12) must add its segments up.
"""
import os
import pickle
import unittest

from cli_support import Base, chain_trace, footprint, lower_bound, parse_trace, run


class TorchSnapshot(Base):
    def snapshot(self, text, *extra):
        t = self.write("t.csv", text)
        p = run("viz", t, "--torch-snapshot", self.path("snap.pickle"), *extra, check=0)
        self.assertIn("PyTorch memory snapshot (pickle)", p.stderr)
        with open(self.path("snap.pickle"), "rb") as f:
            return pickle.load(f)

    def test_segments_are_the_slab_at_the_peak(self):
        text = chain_trace(2)
        snap = self.snapshot(text)
        self.assertEqual(sorted(snap), ["device_traces", "segments"])
        self.assertFalse(os.path.exists(self.path("p.html")))
        (seg,) = snap["segments"]
        for key in ("address", "total_size", "stream", "segment_type", "allocated_size", "active_size",
                    "requested_size", "device", "blocks"):
            self.assertIn(key, seg)
        self.assertEqual((seg["device"], seg["stream"], seg["segment_type"]), (0, 0, "large"))
        # The blocks cover the segment, in address order, without gaps or overlaps.
        at = seg["address"]
        for b in seg["blocks"]:
            self.assertEqual(b["address"], at)
            self.assertGreater(b["size"], 0)
            self.assertIn(b["state"], ("active_allocated", "inactive"))
            at += b["size"]
        self.assertEqual(at, seg["address"] + seg["total_size"])
        active = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        allocs = [a for a in parse_trace(text) if a["free_at"] is not None]
        self.assertEqual(sum(b["size"] for b in active), lower_bound(allocs))
        self.assertEqual(seg["allocated_size"], lower_bound(allocs))
        self.assertGreaterEqual(seg["total_size"], lower_bound(allocs))
        ops = {a["op"] for a in allocs}
        for b in active:
            (frame,) = b["frames"]
            self.assertIn(frame["name"], ops)
            self.assertLessEqual(b["requested_size"], b["size"])

    def test_device_traces_replay_the_iteration(self):
        text = chain_trace(3, layers=40)
        snap = self.snapshot(text)
        (seg,) = snap["segments"]
        (entries,) = snap["device_traces"]
        first = entries[0]
        self.assertEqual((first["action"], first["addr"], first["size"]),
                         ("segment_alloc", seg["address"], seg["total_size"]))
        allocs = sorted((a for a in parse_trace(text) if a["free_at"] is not None), key=lambda a: a["alloc_at"])
        live, alloc_ops, peak = {}, [], 0
        i = 1
        while i < len(entries):
            e = entries[i]
            for key in ("action", "addr", "size", "stream", "frames"):
                self.assertIn(key, e)
            addr, size = e["addr"], e["size"]
            if e["action"] == "alloc":
                self.assertGreaterEqual(addr, seg["address"])
                self.assertLessEqual(addr + size, seg["address"] + seg["total_size"])
                for a, s in live.items():
                    self.assertTrue(addr + size <= a or a + s <= addr, f"{e} overlaps a live block at {a}")
                live[addr] = size
                alloc_ops.append(e["frames"][0]["name"])
                peak = max(peak, sum(live.values()))
            else:
                self.assertEqual(e["action"], "free_requested")
                self.assertEqual(entries[i + 1]["action"], "free_completed")
                self.assertEqual(entries[i + 1]["addr"], addr)
                self.assertEqual(live.pop(addr), size)
                i += 1
            i += 1
        self.assertEqual(live, {})
        self.assertEqual(alloc_ops, [a["op"] for a in allocs])
        self.assertEqual(peak, lower_bound(allocs))
        self.assertEqual(sorted(e["size"] for e in entries if e["action"] == "alloc"),
                         sorted(footprint(a) for a in allocs))

    def test_with_the_page_and_from_a_plan_file(self):
        t = self.write("t.csv", chain_trace(2))
        run("plan", t, "-o", self.path("t.raplan"), check=0)
        run("viz", self.path("t.raplan"), "-o", self.path("p.html"), "--torch-snapshot", self.path("s.pickle"),
            check=0)
        self.assertTrue(os.path.getsize(self.path("p.html")) > 0)
        with open(self.path("s.pickle"), "rb") as f:
            self.assertEqual(len(pickle.load(f)["segments"]), 1)

    def test_usage(self):
        t = self.write("t.csv", chain_trace(1))
        p = run("viz", t, check=2)
        self.assertIn("missing -o PLAN.html (or --torch-snapshot FILE)", p.stderr)
        p = run("viz", t, "-o", "-", "--torch-snapshot", "-", check=2)
        self.assertIn("-o and --torch-snapshot are both stdout", p.stderr)

    def test_pytorch_memory_viz_reads_it(self):
        try:
            from torch.cuda import _memory_viz
        except ImportError:
            self.skipTest("torch is not installed (apt install python3-torch)")
        snap = self.snapshot(chain_trace(2))
        if hasattr(_memory_viz, "trace_plot") and hasattr(_memory_viz, "segment_plot"):
            for plot in (_memory_viz.trace_plot, _memory_viz.segment_plot):
                html = plot(snap)
                self.assertIsInstance(html, str)
                self.assertIn("<html", html.lower())
        else:  # torch 1.13: its stats() over the segments (it asserts they add up)
            s = _memory_viz.stats(snap["segments"])
            self.assertEqual(s["segments"], 1)
            self.assertEqual(s["total_size"].value, snap["segments"][0]["total_size"])
            self.assertEqual(s["active_allocated"].value, snap["segments"][0]["active_size"])


if __name__ == "__main__":
    unittest.main()
