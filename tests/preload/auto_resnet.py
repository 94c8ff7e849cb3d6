"""A ResNet-50 inference loop that knows nothing of replayalloc (Debian's python3).

Run plain, it prints a digest of its outputs. Run with libreplayalloc_preload.so
preloaded (auto mode, the default), it also prints what replayalloc did after the
warm-up: the share of allocations of at least REPLAYALLOC_MIN_SIZE served from a slab,
and minor page faults per iteration. run_auto_resnet.sh compares the two runs.
Usage: auto_resnet.py ITERATIONS WARMUP
"""
import ctypes
import hashlib
import json
import os
import resource
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402  (scripts/models.py)

iterations, warmup = int(sys.argv[1]), int(sys.argv[2])
model, x = models.build("resnet50", 1)
process = ctypes.CDLL(None)
stats_json = getattr(process, "replayalloc_stats_json", None)


def stats():
    stats_json.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(8192)
    stats_json(buf, 8192)
    return json.loads(buf.value.decode())


digest = hashlib.sha256()
with torch.no_grad():
    for i in range(iterations):
        if i == warmup and stats_json is not None:
            s0, f0 = stats(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        y = model(x)
        digest.update(y.numpy().tobytes())
print("digest", digest.hexdigest())
if stats_json is not None:
    s1, f1 = stats(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    d = {k: s1[k] - s0[k] for k in ("allocations", "below_min_size", "slab_hits", "fallbacks",
                                    "backend_planned", "passthrough")}
    large = d["allocations"] - d["below_min_size"]  # the host counts no request below the minimum
    n = iterations - warmup
    share = d["slab_hits"] / large if large else 0.0
    print(f"after {warmup} warm-up iterations, {n} more: {d['slab_hits']} of {large} allocations "
          f">= REPLAYALLOC_MIN_SIZE from a slab ({100 * share:.1f}%), "
          f"{(f1 - f0) / n:.0f} minor page faults per iteration; plans {s1['plans']}, "
          f"slab {s1['slab_bytes'] / 2**20:.1f} MiB, lower bound {s1['lower_bound_bytes'] / 2**20:.1f} MiB")
    print("slab share", f"{share:.4f}")
