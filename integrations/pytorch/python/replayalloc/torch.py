"""replayalloc for PyTorch.

    import replayalloc.torch as rt
    rt.install_cpu()                  # libtorch's CPU allocator, ops tagged
    rt.use_for_cuda()                 # before the first CUDA allocation
    with rt.iteration("resnet50/bs1"):
        y = model(x)
    print(rt.stats(), rt.stats(device=True))

install_cpu() needs libreplayalloc_torch.so built against the very libtorch this
Python imports (it says so when they differ). use_for_cuda() installs replayalloc as
PyTorch's CUDA allocator through torch.cuda.memory.CUDAPluggableAllocator (PyTorch
2.0 or newer).
"""
from __future__ import annotations

import re

from . import iteration, library_path, load, stats  # noqa: F401  (re-exported)

__all__ = ["install_cpu", "uninstall_cpu", "use_for_cuda", "iteration", "stats"]


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


def use_for_cuda(library: str | None = None) -> None:
    """Makes replayalloc PyTorch's CUDA allocator. Call it before any CUDA tensor exists."""
    import torch

    major = int(torch.__version__.split(".")[0])
    if major < 2 or not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        raise RuntimeError(
            f"replayalloc.torch.use_for_cuda() needs PyTorch 2.0 or newer "
            f"(torch.cuda.memory.CUDAPluggableAllocator); this is torch {torch.__version__}")
    if not torch.cuda.is_available():
        raise RuntimeError("replayalloc.torch.use_for_cuda(): PyTorch sees no CUDA device")
    load(library)
    path = library_path()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        path, "replayalloc_cuda_alloc", "replayalloc_cuda_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(
            "replayalloc.torch.use_for_cuda() came too late: PyTorch's CUDA allocator is "
            "already in use (a CUDA tensor was made before). Call it first thing.") from e
