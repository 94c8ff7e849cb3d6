"""replayalloc for PyTorch.

    import replayalloc.torch as rt
    rt.install_cpu()                  # libtorch's CPU allocator, ops tagged
    rt.use_for_cuda()                 # before the first CUDA allocation, or:
    torch.cuda.memory.change_current_allocator(rt.cuda_allocator())
    with rt.iteration("resnet50/bs1"):
        y = model(x)
    print(rt.stats(), rt.stats(device=True))

install_cpu() needs libreplayalloc_torch.so built against the very libtorch this
Python imports (it says so when they differ). cuda_allocator() is replayalloc as a
torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0 or newer), for
torch.cuda.memory.change_current_allocator, as rmm.allocators.torch's
rmm_torch_allocator. use_for_cuda() installs replayalloc's native CUDA allocator (a
c10 CUDAAllocator of its own, built against this torch on first use: torch 2.9 or
newer), or that pluggable allocator where the native one cannot be built.
"""
from __future__ import annotations

import os
import re
import warnings

from . import iteration, library_path, load, stats  # noqa: F401  (re-exported)

__all__ = ["install_cpu", "uninstall_cpu", "cuda_allocator", "use_for_cuda", "cuda_route", "native_cuda_module",
           "iteration", "stats"]


def _version_tuple(v: str):
    """(major, minor, patch) of "1.13.0", "1.13.0a0+git...", "2.11.0+cu130"."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v)
    return tuple(int(g or 0) for g in m.groups()) if m else (0, 0, 0)


def install_cpu(library: str | None = None) -> None:
    """Makes replayalloc libtorch's CPU allocator, with allocations tagged by op."""
    import torch

    lib = load(library)
    if not hasattr(lib, "replayalloc_torch_install"):
        raise RuntimeError(
            f"replayalloc.torch.install_cpu(): {library_path()} has no libtorch integration; "
            "build libreplayalloc_torch.so (configure with libtorch found)")
    built = lib.replayalloc_torch_version().decode()
    if _version_tuple(built) != _version_tuple(torch.__version__):
        raise RuntimeError(
            f"replayalloc.torch.install_cpu(): {library_path()} was built against libtorch "
            f"{built}, but this Python imports torch {torch.__version__}; rebuild it against "
            "this torch (its headers and libraries) or use the matching build")
    if lib.replayalloc_torch_install() != 0:
        raise RuntimeError("replayalloc.torch.install_cpu() failed (see the message above)")


def uninstall_cpu() -> None:
    """Gives libtorch its own CPU allocator back; tensors made meanwhile stay valid."""
    lib = load()
    if hasattr(lib, "replayalloc_torch_uninstall"):
        lib.replayalloc_torch_uninstall()


# The library's extern "C" functions with CUDAPluggableAllocator's signatures
# (integrations/cuda/include/replayalloc/cuda.h).
CUDA_ALLOC_SYMBOL = "replayalloc_cuda_alloc"
CUDA_FREE_SYMBOL = "replayalloc_cuda_free"


def cuda_allocator(library: str | None = None):
    """replayalloc as PyTorch's pluggable CUDA allocator: a
    torch.cuda.memory.CUDAPluggableAllocator over the library's replayalloc_cuda_alloc
    and replayalloc_cuda_free, for torch.cuda.memory.change_current_allocator (which
    must come before the first CUDA tensor). Raises RuntimeError, saying which, when
    the library was built without CUDA, this torch has no CUDAPluggableAllocator
    (PyTorch older than 2.0) or PyTorch sees no CUDA device; nothing is changed then."""
    import torch

    lib = load(library)
    path = library_path()
    if not (hasattr(lib, CUDA_ALLOC_SYMBOL) and hasattr(lib, CUDA_FREE_SYMBOL)):
        raise RuntimeError(
            f"replayalloc.torch.cuda_allocator(): {path} was built without CUDA (it has no "
            f"{CUDA_ALLOC_SYMBOL}/{CUDA_FREE_SYMBOL}); configure with the CUDA toolkit found "
            "and rebuild. No allocator made: PyTorch's own CUDA allocator stays in use")
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        raise RuntimeError(
            "replayalloc.torch.cuda_allocator() needs PyTorch 2.0 or newer "
            f"(torch.cuda.memory.CUDAPluggableAllocator); this is torch {torch.__version__}. "
            "No allocator made: PyTorch's own CUDA allocator stays in use")
    if not torch.cuda.is_available():
        built = torch.version.cuda
        raise RuntimeError(
            f"replayalloc.torch.cuda_allocator(): PyTorch sees no CUDA device (torch "
            f"{torch.__version__}, " + (f"built with CUDA {built}" if built else "built without CUDA") +
            "). No allocator made: PyTorch's own CUDA allocator stays in use")
    return torch.cuda.memory.CUDAPluggableAllocator(path, CUDA_ALLOC_SYMBOL, CUDA_FREE_SYMBOL)


# The native route (Note [The native route], integrations/pytorch/cuda/c10_allocator.cc):
# a PyTorch C++ extension built against the torch that imports it, on first use (cached
# by torch.utils.cpp_extension under TORCH_EXTENSIONS_DIR, ~/.cache/torch_extensions).
_NATIVE_SOURCE = "c10_allocator.cc"
_NATIVE_NAME = "replayalloc_c10_cuda"
_NATIVE_MIN_TORCH = (2, 9)  # the CUDAAllocator interface it is written against
_ROUTES = ("auto", "native", "pluggable")
_ROUTE_ENV = "REPLAYALLOC_CUDA_ROUTE"
_route = None  # the route use_for_cuda() installed


def _first(candidates, rel):
    return next((os.path.abspath(c) for c in candidates if os.path.exists(os.path.join(c, rel))), None)


def _native_build_inputs(lib_path: str):
    """The adapter's source and the include folders it needs: the source tree's, or those
    an install put beside this package and under its prefix."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", "..", "..", ".."))  # source tree or prefix
    libdir = os.path.dirname(os.path.realpath(lib_path))
    src = _first([here, os.path.join(root, "integrations", "pytorch", "cuda")], _NATIVE_SOURCE)
    want = {
        "replayalloc/cuda_native.hpp": [os.path.join(root, "integrations", "cuda", "include"),
                                        os.path.join(root, "include")],
        "replayalloc/replayalloc.hpp": [os.path.join(root, "allocator", "include"), os.path.join(root, "include")],
        # generated by CMake: the library's build folder's, or the prefix's
        "replayalloc/version.h": [os.path.join(libdir, "..", "..", "include"), os.path.join(libdir, "include"),
                                  os.path.join(libdir, "..", "include"), os.path.join(root, "include")],
    }
    incs, missing = [], []
    for rel, cands in want.items():
        d = _first(cands, rel)
        if d is None:
            missing.append(rel)
        elif d not in incs:
            incs.append(d)
    if src is None:
        missing.insert(0, _NATIVE_SOURCE)
    else:
        src = os.path.join(src, _NATIVE_SOURCE)
    if missing:
        raise RuntimeError(f"the native route's sources are not here ({', '.join(missing)} not found beside "
                           f"{here} or {libdir})")
    return src, incs, libdir


def native_cuda_module(library: str | None = None):
    """The native route's extension module, built against this torch on first use (about
    a minute; cached after). Raises RuntimeError saying why when it cannot be built:
    torch older than 2.9, no CUDA in this torch, no compiler, sources missing."""
    import torch

    if _version_tuple(torch.__version__) < _NATIVE_MIN_TORCH:
        raise RuntimeError(f"the native route needs torch {'.'.join(map(str, _NATIVE_MIN_TORCH))} or newer "
                           f"(its CUDAAllocator interface); this is torch {torch.__version__}")
    if not torch.version.cuda:
        raise RuntimeError(f"torch {torch.__version__} was built without CUDA")
    load(library)  # first: the extension links this very file (one core in the process)
    lib_path = library_path()
    src, incs, libdir = _native_build_inputs(lib_path)
    from torch.utils.cpp_extension import load as load_extension
    try:
        return load_extension(
            name=_NATIVE_NAME, sources=[src], extra_include_paths=incs, with_cuda=True,
            extra_cflags=["-std=c++20", "-O2"],
            extra_ldflags=[f"-L{libdir}", f"-l:{os.path.basename(lib_path)}", f"-Wl,-rpath,{libdir}"])
    except Exception as e:  # a compiler's error (its output is in e), a missing tool: say so, shortly
        lines = [ln for ln in str(e).splitlines() if "error:" in ln.lower()][:3] or str(e).splitlines()[-3:]
        raise RuntimeError(f"building the native route against torch {torch.__version__} failed: "
                           + " | ".join(lines)) from e


def cuda_route():
    """The route use_for_cuda() installed: "native", "pluggable", or None."""
    return _route


def use_for_cuda(library: str | None = None, route: str | None = None) -> str:
    """Makes replayalloc PyTorch's CUDA allocator; call it before any CUDA tensor exists.
    Returns the route installed. route (default: REPLAYALLOC_CUDA_ROUTE, else "auto"):
    "native", replayalloc's own c10 CUDAAllocator (no pointer map, PyTorch's memory API
    and CUDA graphs served: native_cuda_module()); "pluggable", cuda_allocator() through
    torch.cuda.memory.change_current_allocator; "auto", native where it builds, else
    pluggable with a warning that says why."""
    import torch
    global _route

    source = "the route argument"
    if route is None:
        route, source = os.environ.get(_ROUTE_ENV, "") or "auto", _ROUTE_ENV
    if route not in _ROUTES:
        raise ValueError(f"replayalloc.torch.use_for_cuda(): {source} is {route!r}; it must be one of "
                         f"{', '.join(_ROUTES)}. Nothing changed: PyTorch's own CUDA allocator stays in use")
    allocator = cuda_allocator(library)  # the checks both routes need (CUDA in library, torch, device)
    too_late = ("replayalloc.torch.use_for_cuda() came too late: PyTorch's CUDA allocator is "
                "already in use (a CUDA tensor was made before). Call it first thing.")
    if route != "pluggable":
        try:
            module = native_cuda_module(library)
        except RuntimeError as e:
            if route == "native":
                raise RuntimeError(f"replayalloc.torch.use_for_cuda(route='native'): {e}. Nothing changed: "
                                   "PyTorch's own CUDA allocator stays in use") from e
            warnings.warn(f"replayalloc: the native CUDA route is not available ({e}); "
                          "the pluggable route serves instead", RuntimeWarning, stacklevel=2)
        else:
            try:
                module.install()
            except RuntimeError as e:
                raise RuntimeError(too_late) from e
            _route = "native"
            return _route
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(too_late) from e
    _route = "pluggable"
    return _route
