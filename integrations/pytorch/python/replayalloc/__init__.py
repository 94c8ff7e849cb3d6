"""replayalloc: record one inference iteration, plan it, replay it from a slab.

The package is a thin ctypes layer over the shared library; see replayalloc.torch for
PyTorch. The library is libreplayalloc_torch.so (libtorch's CPU allocator, and the
CUDA allocator when built with CUDA) or else libreplayalloc_cuda.so, found in order:
the `library` argument of load(), a `lib/` folder beside this package, the project's
build folder (build/integrations/...), then the system's library path.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from contextlib import contextmanager

__all__ = ["load", "iteration", "stats", "library_path"]

_LIB = None
_LIB_PATH = None
_NAMES = (("libreplayalloc_torch.so", "pytorch"), ("libreplayalloc_cuda.so", "cuda"))


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
    for name, folder in _NAMES:
        yield os.path.join(here, "lib", name)
        yield os.path.join(root, "build", "integrations", folder, name)
    for name, _ in _NAMES:
        found = ctypes.util.find_library(name[3:-3])
        if found:
            yield found


def load(library: str | None = None) -> ctypes.CDLL:
    """Loads (once) and returns the replayalloc shared library."""
    global _LIB, _LIB_PATH
    if _LIB is not None:
        if library is not None and os.path.abspath(library) != _LIB_PATH:
            raise RuntimeError(f"replayalloc: already loaded from {_LIB_PATH}, not {library}")
        return _LIB
    paths = [library] if library is not None else list(_candidates())
    errors = []
    for path in paths:
        if path is None or (os.path.sep in path and not os.path.exists(path)):
            errors.append(f"{path}: not found")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        lib.replayalloc_iteration_begin.argtypes = [ctypes.c_char_p]
        lib.replayalloc_iteration_begin.restype = ctypes.c_int
        lib.replayalloc_iteration_end.argtypes = []
        lib.replayalloc_iteration_end.restype = ctypes.c_int
        lib.replayalloc_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.replayalloc_stats_json.restype = ctypes.c_size_t
        if hasattr(lib, "replayalloc_torch_iteration_begin"):
            lib.replayalloc_torch_iteration_begin.argtypes = [ctypes.c_char_p]
            lib.replayalloc_torch_iteration_begin.restype = ctypes.c_int
            lib.replayalloc_torch_iteration_end.restype = ctypes.c_int
        if hasattr(lib, "replayalloc_torch_version"):
            lib.replayalloc_torch_version.restype = ctypes.c_char_p
            lib.replayalloc_torch_install.restype = ctypes.c_int
            lib.replayalloc_torch_uninstall.restype = ctypes.c_int
        if hasattr(lib, "replayalloc_cuda_stats_json"):
            lib.replayalloc_cuda_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            lib.replayalloc_cuda_stats_json.restype = ctypes.c_size_t
        _LIB, _LIB_PATH = lib, os.path.abspath(path) if os.path.sep in path else path
        return lib
    raise OSError("replayalloc: cannot load the library; tried:\n  " + "\n  ".join(errors) +
                  "\nbuild it (scripts/test.sh, or cmake --build build) or pass library=PATH")


def library_path() -> str:
    load()
    return _LIB_PATH


@contextmanager
def iteration(key: str):
    """One iteration of `key` on this thread: `with replayalloc.iteration("resnet50/bs1"): ...`"""
    lib = load()
    if not key:
        raise ValueError("replayalloc: an iteration key must be a non-empty string")
    # With the libtorch integration, recorded iterations also tag allocations by op.
    begin = getattr(lib, "replayalloc_torch_iteration_begin", lib.replayalloc_iteration_begin)
    end = getattr(lib, "replayalloc_torch_iteration_end", lib.replayalloc_iteration_end)
    rc = begin(key.encode())
    if rc < 0:
        raise RuntimeError(f"replayalloc: cannot begin an iteration of {key!r}")
    try:
        yield
    finally:
        end()


def _json(fn) -> dict:
    need = fn(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    fn(buf, need + 1)
    return json.loads(buf.value.decode())


def stats(device: bool = False) -> dict:
    """Process-wide statistics as a dict; device=True: the CUDA domains only."""
    lib = load()
    if device and not hasattr(lib, "replayalloc_cuda_stats_json"):
        raise RuntimeError(f"replayalloc: {library_path()} was built without CUDA: no device statistics")
    return _json(lib.replayalloc_cuda_stats_json if device else lib.replayalloc_stats_json)
