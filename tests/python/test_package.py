"""The Python package over libreplayalloc_cuda.so, with Debian's python3 (unittest).

Run by ctest with REPLAYALLOC_TEST_LIBRARY naming the built library. Tests that need
torch skip with a message when it is absent; those that need a GPU run on the GPU
machine (bench/gpu/run.sh).
"""
import os
import threading
import unittest

import replayalloc

LIB = os.environ.get("REPLAYALLOC_TEST_LIBRARY")


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        replayalloc.load(LIB)

    def test_iterations_are_counted_and_stats_are_a_dict(self):
        before = replayalloc.stats()["iterations"]
        for _ in range(3):
            with replayalloc.iteration("py/model"):
                pass
        s = replayalloc.stats()
        self.assertEqual(s["iterations"], before + 3)
        for key in ("allocations", "slab_hits", "fallbacks", "plans", "rerecords",
                    "slab_bytes", "lower_bound_bytes"):
            self.assertIn(key, s)
        if hasattr(replayalloc.load(), "replayalloc_cuda_stats_json"):
            self.assertIn("slab_hits", replayalloc.stats(device=True))
        else:  # a build without the CUDA toolkit says so
            with self.assertRaises(RuntimeError):
                replayalloc.stats(device=True)

    def test_iteration_ends_when_the_body_raises(self):
        with self.assertRaises(KeyError):
            with replayalloc.iteration("py/raises"):
                raise KeyError("x")
        # No iteration is left open: ending one now is an error (-1).
        self.assertEqual(replayalloc.load().replayalloc_iteration_end(), -1)

    def test_empty_key_is_refused(self):
        with self.assertRaises(ValueError):
            with replayalloc.iteration(""):
                pass

    def test_iterations_on_threads(self):
        errors = []

        def run():
            try:
                for _ in range(5):
                    with replayalloc.iteration("py/threads"):
                        pass
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_a_second_library_is_refused(self):
        with self.assertRaises(RuntimeError):
            replayalloc.load("/nonexistent/libreplayalloc_cuda.so")


class Torch(unittest.TestCase):
    def test_use_for_cuda_says_why_it_cannot(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed (apt install python3-torch)")
        import replayalloc.torch as rt
        if int(torch.__version__.split(".")[0]) >= 2 and torch.cuda.is_available():
            self.skipTest("a GPU is present: bench/gpu/run.sh tests use_for_cuda for real")
        with self.assertRaises(RuntimeError) as cm:
            rt.use_for_cuda()
        msg = str(cm.exception)
        self.assertTrue("2.0 or newer" in msg or "no CUDA device" in msg, msg)


if __name__ == "__main__":
    unittest.main()
