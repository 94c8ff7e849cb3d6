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
rmm_torch_allocator; use_for_cuda() makes it and installs it.
"""
from __future__ import annotations

import re

from . import iteration, library_path, load, stats  # noqa: F401  (re-exported)

__all__ = ["install_cpu", "uninstall_cpu", "cuda_allocator", "use_for_cuda", "iteration", "stats"]


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


def use_for_cuda(library: str | None = None) -> None:
    """Makes replayalloc PyTorch's CUDA allocator (cuda_allocator(), installed). Call it
    before any CUDA tensor exists."""
    import torch

    allocator = cuda_allocator(library)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "replayalloc.torch.use_for_cuda() came too late: PyTorch's CUDA allocator is "
            "already in use (a CUDA tensor was made before). Call it first thing.") from e
