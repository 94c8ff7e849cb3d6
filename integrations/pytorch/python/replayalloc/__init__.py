"""replayalloc: record one inference iteration, plan it, replay it from a slab.

The package is a thin ctypes layer over the shared library; see replayalloc.torch for
PyTorch. The library is libreplayalloc_torch.so (libtorch's CPU allocator, and the
CUDA allocator when built with CUDA) or else libreplayalloc_cuda.so, found in order:
the `library` argument of load(); else the environment variable REPLAYALLOC_LIBRARY (a
path to the library file), which replaces the search; else a `lib/` folder beside this
package, the project's build folder (build/integrations/...) when the package is used
from the source tree, the library folder of the prefix the package is installed in
(<prefix>/lib/python3/dist-packages/replayalloc -> <prefix>/lib/<multiarch>/ or
<prefix>/lib/), then the system's library path. The project's other libraries
(libreplayalloc.so for linked programs, libreplayalloc_preload.so for LD_PRELOAD) are
refused with a message saying which library the package loads.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import sysconfig
from contextlib import contextmanager

__all__ = ["load", "iteration", "stats", "reset_stats", "library_path", "__version__"]


def _source_version() -> str:
    """The version of the source tree this package sits in: its CMakeLists.txt's
    project(VERSION), where CMake takes it from too."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
    try:
        with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
            m = re.search(r"project\(replayalloc\s+VERSION\s+([0-9.]+)", f.read())
        return m.group(1) if m else "0+unknown"
    except OSError:
        return "0+unknown"


try:  # written by CMake's install and by the wheel build, from project(VERSION)
    from ._version import __version__
except ImportError:  # the source tree (PYTHONPATH=integrations/pytorch/python)
    __version__ = _source_version()

_LIB = None
_LIB_PATH = None
_NAMES = (("libreplayalloc_torch.so", "pytorch"), ("libreplayalloc_cuda.so", "cuda"))
_ENV = "REPLAYALLOC_LIBRARY"  # a path to the library file: replaces the search
# The project's other libraries, which this package cannot use: what each one is. Both
# carry jemalloc, whose initial-exec TLS makes dlopen fail with "cannot allocate memory
# in static TLS block", a message that names neither this mistake nor the right file.
_NOT_FOR_PYTHON = {
    "libreplayalloc.so": "the C and C++ library, for programs linked against it",
    "libreplayalloc_preload.so": "the LD_PRELOAD library, for programs run under it",
}
_WANTED = "the Python package loads libreplayalloc_torch.so or libreplayalloc_cuda.so"


def _wrong_library(path: str, source: str, what: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    beside = [os.path.join(folder, name) for name, _ in _NAMES
              if os.path.exists(os.path.join(folder, name))]
    hint = f" ({beside[0]} is beside it)" if beside else ""
    return f"replayalloc: {source} names {path}, {what}: {_WANTED}{hint}"


def _refuse_wrong_library(path: str, source: str) -> None:
    """Raises OSError when `path` is one of the project's libraries this package cannot use."""
    name = re.sub(r"\.so(\.[0-9]+)*$", ".so", os.path.basename(path))  # libreplayalloc.so.0 too
    what = _NOT_FOR_PYTHON.get(name)
    if what is not None:
        raise OSError(_wrong_library(path, source, what))


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    # The source tree's root (integrations/pytorch/python/replayalloc), or the install
    # prefix (lib/python3/dist-packages/replayalloc): both four folders up.
    root = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))
    libdirs = []
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        libdirs.append(os.path.join(root, "lib", multiarch))
    libdirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    for name, folder in _NAMES:
        yield os.path.join(here, "lib", name)
        yield os.path.join(root, "build", "integrations", folder, name)
        for libdir in libdirs:
            path = os.path.join(libdir, name)
            if os.path.exists(path):
                yield path
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
    from_env = library is None and bool(os.environ.get(_ENV))
    source = f"{_ENV}" if from_env else "library="
    if library is not None:
        paths = [library]
    elif from_env:
        paths = [os.environ[_ENV]]
    else:
        paths = list(_candidates())
    if library is not None or from_env:
        _refuse_wrong_library(paths[0], source)
    errors = []
    for path in paths:
        if path is None or (os.path.sep in path and not os.path.exists(path)):
            errors.append(f"{path}: not found")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            hint = f" ({_WANTED})" if "static TLS" in str(e) else ""
            errors.append(f"{path}: {e}{hint}")
            continue
        if not (hasattr(lib, "replayalloc_torch_version") or hasattr(lib, "replayalloc_cuda_stats_json")):
            errors.append(_wrong_library(path, source if library is not None or from_env else "the search",
                                         "a library without the Python package's functions"))
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
    if from_env:
        raise OSError(f"replayalloc: cannot load the library {_ENV} names: " + errors[0])
    raise OSError("replayalloc: cannot load the library; tried:\n  " + "\n  ".join(errors) +
                  "\nbuild it (scripts/test.sh, or cmake --build build), install it, pass "
                  f"library=PATH or set {_ENV}=PATH")


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


def reset_stats() -> None:
    """Sets the statistics' counters to zero, and their peaks to the current values
    (replayalloc_reset_stats; as torch.cuda.reset_peak_memory_stats)."""
    load().replayalloc_reset_stats()


def wait_plans() -> None:
    """Blocks until every plan the planner thread is making is installed: plans are made
    off the request path, and a key's iterations pass through to jemalloc until its plan
    is there (REPLAYALLOC_BACKGROUND_PLANNING). For a service's warm-up, a benchmark, a
    test."""
    lib = load()
    if hasattr(lib, "replayalloc_wait_plans"):
        lib.replayalloc_wait_plans()


def save_trace(key: str, path: str) -> None:
    """Writes the last recording of `key` to `path` (.csv: CSV, else the binary format),
    for `replayalloc report`, `viz` and `predict` (a training step's memory split: the
    README's Training section). Raises when the key has no recording yet."""
    lib = load()
    if lib.replayalloc_save_trace(key.encode(), os.fsencode(path)) != 0:
        raise RuntimeError(f"replayalloc: no trace of {key!r} written to {path} (no recording of it yet, "
                           "or the file could not be written: the library's message says which)")
