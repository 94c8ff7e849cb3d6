"""A BERT-like encoder serving requests of random sequence length (16..256), in a Python
loop that knows nothing of replayalloc (Debian's python3).

Run plain, it prints a digest of its outputs. Run with libreplayalloc_preload.so
preloaded (auto mode, the default), it also prints what replayalloc did after the
warm-up: the share of allocations of at least REPLAYALLOC_MIN_SIZE served from a slab,
minor page faults per request and the plans made. run_auto_varlen.sh compares the runs.
Either way it prints the time the requests after the warm-up took (bench/preload/run_python_varlen.sh).
Usage: auto_varlen.py REQUESTS WARMUP
"""
import ctypes
import hashlib
import json
import os
import random
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402  (scripts/models.py)

requests, warmup = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
model, _ = models.build("bert", 1, layers=2, hidden=256, heads=4, ffn=1024, vocab=8000)
rng = random.Random(7)
lengths = [rng.randint(16, 256) for _ in range(requests)]
inputs = [torch.randint(0, 8000, (1, t), generator=torch.Generator().manual_seed(i)) for i, t in enumerate(lengths)]
process = ctypes.CDLL(None)
stats_json = getattr(process, "replayalloc_stats_json", None)


def stats():
    stats_json.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(8192)
    stats_json(buf, 8192)
    return json.loads(buf.value.decode())


digest = hashlib.sha256()
with torch.no_grad():
    for i, x in enumerate(inputs):
        if i == warmup:
            r0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
            t0, f0 = time.perf_counter(), r0.ru_minflt
            if stats_json is not None:
                s0 = stats()
        y = model(x)
        digest.update(y.numpy().tobytes())
elapsed = time.perf_counter() - t0
cpu = time.thread_time() - c0  # the serving thread's CPU time (other threads may spin)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
print("digest", digest.hexdigest())
print(f"timed {elapsed:.4f} s, cpu {cpu:.4f} s, {faults} minor faults for the {requests - warmup} requests after the warm-up")
if stats_json is not None:
    s1 = stats()
    d = {k: s1[k] - s0[k] for k in ("allocations", "below_min_size", "slab_hits", "fallbacks",
                                    "backend_planned", "passthrough", "plans", "recordings")}
    large = d["allocations"] - d["below_min_size"]  # the host counts no request below the minimum
    n = requests - warmup
    share = d["slab_hits"] / large if large else 0.0
    print(f"after {warmup} warm-up requests, {n} more (sequence length 16..256): {d['slab_hits']} of {large} "
          f"allocations >= REPLAYALLOC_MIN_SIZE from a slab ({100 * share:.1f}%), "
          f"{faults / n:.0f} minor page faults per request; plans {s1['plans']} ({d['plans']} after the "
          f"warm-up), grown {s1['plans_grown']}, recordings {s1['recordings']}, auto rests {s1['auto_rests']}, "
          f"slab {s1['slab_bytes'] / 2**20:.1f} MiB")
    print("slab share", f"{share:.4f}")
