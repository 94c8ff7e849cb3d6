"""replayalloc for PyTorch.

    import replayalloc.torch as rt
    rt.use_for_cuda()                 # before the first CUDA allocation
    with rt.iteration("resnet50/bs1"):
        y = model(x)
    print(rt.stats(device=True))

use_for_cuda() installs replayalloc as PyTorch's CUDA allocator through
torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0 or newer).
"""
from __future__ import annotations

from . import iteration, library_path, load, stats  # noqa: F401  (re-exported)

__all__ = ["use_for_cuda", "iteration", "stats"]


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
