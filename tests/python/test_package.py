"""The Python package over libreplayalloc_cuda.so, with Debian's python3 (unittest).

Run by ctest with REPLAYALLOC_TEST_LIBRARY naming the built library. Tests that need
torch skip with a message when it is absent; those that need a GPU run on the GPU
machine (bench/gpu/run.sh).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types
import unittest
from unittest import mock

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


class WrongLibrary(unittest.TestCase):
    """REPLAYALLOC_LIBRARY naming one of the project's libraries the package cannot use
    (its dlopen would fail with "cannot allocate memory in static TLS block") says which
    library it is and which one the package loads. Each load in a process of its own,
    as the package loads one library per process."""

    def load_with(self, path):
        env = dict(os.environ, REPLAYALLOC_LIBRARY=path)
        r = subprocess.run([sys.executable, "-c", "import replayalloc; replayalloc.load()"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stderr.strip().splitlines()[-1]

    def library(self, var):
        path = os.environ.get(var)
        if not path:
            self.skipTest(f"{var} is not set (ctest sets it)")
        return path

    def test_the_c_library_is_refused_naming_the_right_one(self):
        core = self.library("TEST_CORE_LIBRARY")
        self.assertEqual(self.load_with(core),
                         f"OSError: replayalloc: REPLAYALLOC_LIBRARY names {core}, the C and C++ library, "
                         "for programs linked against it: the Python package loads libreplayalloc_torch.so "
                         "or libreplayalloc_cuda.so")

    def test_the_preload_library_is_refused(self):
        preload = self.library("TEST_PRELOAD_LIBRARY")
        self.assertEqual(self.load_with(preload),
                         f"OSError: replayalloc: REPLAYALLOC_LIBRARY names {preload}, the LD_PRELOAD library, "
                         "for programs run under it: the Python package loads libreplayalloc_torch.so or "
                         "libreplayalloc_cuda.so")

    def test_the_right_library_beside_it_is_named(self):
        # As installed: <prefix>/lib holds libreplayalloc.so.0 and the package's library.
        core = self.library("TEST_CORE_LIBRARY")
        with tempfile.TemporaryDirectory() as d:
            wrong = os.path.join(d, "libreplayalloc.so.0")
            right = os.path.join(d, os.path.basename(LIB))
            shutil.copy(core, wrong)
            shutil.copy(LIB, right)
            self.assertTrue(self.load_with(wrong).endswith(
                f"the Python package loads libreplayalloc_torch.so or libreplayalloc_cuda.so ({right} is beside it)"))


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

    def test_a_cuda_route_that_does_not_exist_is_refused(self):
        self.torch_or_skip()
        import replayalloc.torch as rt
        with self.assertRaises(ValueError) as cm:
            rt.use_for_cuda(LIB, route="fast")
        self.assertIn("the route argument is 'fast'; it must be one of auto, native, pluggable", str(cm.exception))
        with mock.patch.dict(os.environ, {"REPLAYALLOC_CUDA_ROUTE": "Native"}):
            with self.assertRaises(ValueError) as cm:
                rt.use_for_cuda(LIB)
        self.assertIn("REPLAYALLOC_CUDA_ROUTE is 'Native'", str(cm.exception))
        self.assertIn("PyTorch's own CUDA allocator stays in use", str(cm.exception))
        self.assertIsNone(rt.cuda_route())

    def test_the_cuda_route_setting_is_known_to_the_library(self):
        # The library warns about REPLAYALLOC_ settings it does not know; this one is the package's.
        env = dict(os.environ, REPLAYALLOC_CUDA_ROUTE="pluggable", REPLAYALLOC_CUDA_ROUT="x")
        r = subprocess.run([sys.executable, "-c", f"import replayalloc; replayalloc.load({LIB!r}); replayalloc.stats()"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("unknown setting REPLAYALLOC_CUDA_ROUTE ", r.stderr)
        self.assertIn("unknown setting REPLAYALLOC_CUDA_ROUT ", r.stderr)  # a misspelling still is

    def test_the_native_route_finds_its_sources_and_says_why_it_cannot_build(self):
        torch = self.torch_or_skip()
        import replayalloc.torch as rt
        src, incs, libdir = rt._native_build_inputs(LIB)
        self.assertTrue(os.path.isfile(src), src)
        for rel in ("replayalloc/cuda_native.hpp", "replayalloc/replayalloc.hpp", "replayalloc/version.h"):
            self.assertTrue(any(os.path.isfile(os.path.join(d, rel)) for d in incs), (rel, incs))
        self.assertEqual(libdir, os.path.dirname(os.path.realpath(LIB)))
        if rt._version_tuple(torch.__version__) >= rt._NATIVE_MIN_TORCH and torch.version.cuda:
            self.skipTest("this torch could build the native route: bench/gpu/run_native.sh builds it for real")
        with self.assertRaises(RuntimeError) as cm:
            rt.native_cuda_module(LIB)
        msg = str(cm.exception)
        self.assertTrue("needs torch 2.9 or newer" in msg or "built without CUDA" in msg, msg)

    def test_cuda_allocator_says_why_it_cannot(self):
        torch = self.torch_or_skip()
        import replayalloc.torch as rt
        if hasattr(torch.cuda.memory, "CUDAPluggableAllocator") and torch.cuda.is_available():
            self.skipTest("a GPU is present: bench/gpu/run.sh tests the pluggable allocator for real")
        with self.assertRaises(RuntimeError) as cm:
            rt.cuda_allocator()
        msg = str(cm.exception)
        self.assertIn("No allocator made: PyTorch's own CUDA allocator stays in use", msg)
        if hasattr(replayalloc.load(), rt.CUDA_ALLOC_SYMBOL):
            self.assertTrue("needs PyTorch 2.0 or newer" in msg or "PyTorch sees no CUDA device" in msg, msg)
        else:
            self.assertIn("was built without CUDA", msg)

    def test_cuda_allocator_names_the_library_and_its_functions(self):
        # torch's side stood in for (no GPU here): the allocator is made from this
        # library's path and the two functions PyTorch calls.
        torch = self.torch_or_skip()
        import replayalloc.torch as rt
        lib = replayalloc.load()
        if not hasattr(lib, "replayalloc_cuda_stats_json"):
            self.skipTest(f"{replayalloc.library_path()} was built without CUDA")
        for name in (rt.CUDA_ALLOC_SYMBOL, rt.CUDA_FREE_SYMBOL):
            self.assertTrue(hasattr(lib, name), f"{replayalloc.library_path()} does not export {name}")
        made = []
        with mock.patch.object(torch.cuda.memory, "CUDAPluggableAllocator",
                               lambda *args: made.append(args) or "the allocator", create=True), \
             mock.patch.object(torch.cuda, "is_available", lambda: True):
            self.assertEqual(rt.cuda_allocator(), "the allocator")
        self.assertEqual(made, [(replayalloc.library_path(), "replayalloc_cuda_alloc", "replayalloc_cuda_free")])

    def test_cuda_allocator_refuses_a_library_without_cuda(self):
        self.torch_or_skip()
        import replayalloc.torch as rt
        without_cuda = types.SimpleNamespace(replayalloc_stats_json=None)  # no CUDA functions
        with mock.patch.object(rt, "load", lambda library=None: without_cuda), \
             mock.patch.object(rt, "library_path", lambda: "/x/libreplayalloc_torch.so"):
            with self.assertRaises(RuntimeError) as cm:
                rt.cuda_allocator()
        self.assertEqual(str(cm.exception),
                         "replayalloc.torch.cuda_allocator(): /x/libreplayalloc_torch.so was built without CUDA "
                         "(it has no replayalloc_cuda_alloc/replayalloc_cuda_free); configure with the CUDA "
                         "toolkit found and rebuild. No allocator made: PyTorch's own CUDA allocator stays in use")

    def torch_or_skip(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed (apt install python3-torch)")
        replayalloc.load(LIB)
        return torch


if __name__ == "__main__":
    unittest.main()
