"""The Python package's short program (Note [Plans that arrive in time]): libreplayalloc_torch.so
as libtorch's CPU allocator, six iterations of one key (replayalloc.iteration), each a
1 MiB tensor; prints the slab hits, 4 on every run (the first two are recorded)."""
import torch

import replayalloc
import replayalloc.torch as rt

rt.install_cpu()
for i in range(6):
    with replayalloc.iteration("short/python"):
        t = torch.empty(1 << 18, dtype=torch.float32)
        t.fill_(i)
        del t
print(replayalloc.stats()["slab_hits"])
