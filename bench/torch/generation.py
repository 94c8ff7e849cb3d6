"""bench/torch/generation.py: one process of the generation benchmark (Debian's python3).

A GPT-2-shaped decoder (scripts/models.py: 4 layers, width 256, 4 heads, vocabulary
8,000) generates greedily for REQUESTS requests whose prompt (8..64 tokens) and
generation (8..64 tokens) lengths are drawn from a fixed seed, the key/value caches
grown by torch.cat. The allocator is whatever serves malloc in this process
(LD_PRELOAD), or, with --replay-torch LIB, replayalloc as libtorch's CPU allocator with
one key for the prefill and one for the decode steps. The first WARMUP requests are not
timed. Prints one JSON line: tokens per second, CPU ms per token, minor page faults per
token, peak RSS, a digest of every generated token, replayalloc's statistics if loaded.
Usage: generation.py REQUESTS WARMUP [--replay-torch LIB]
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
torch_lib = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--replay-torch" else None
torch.set_num_threads(1)
model, _ = models.build("gpt2", 1, layers=4, hidden=256, heads=4, vocab=8000, max_len=256)
rng = random.Random(2026)
work = [(torch.randint(0, 8000, (1, rng.randint(8, 64)), generator=torch.Generator().manual_seed(i)),
         rng.randint(8, 64)) for i in range(requests)]
step = None
stats_json = getattr(ctypes.CDLL(None), "replayalloc_stats_json", None)
if torch_lib:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "integrations", "pytorch", "python"))
    import replayalloc
    import replayalloc.torch as rt
    lib = replayalloc.load(torch_lib)
    rt.install_cpu()
    stats_json = lib.replayalloc_stats_json
    step = lambda kind: rt.iteration("gen/" + kind)  # noqa: E731

digest = hashlib.sha256()
tokens = 0
with torch.no_grad():
    for i, (prompt, n) in enumerate(work):
        if i == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = models.generate(model, prompt, n, step=step)
        digest.update(out.numpy().tobytes())
        if i >= warmup:
            tokens += n
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
stats = None
if stats_json is not None:
    stats_json.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(8192)
    stats_json(buf, 8192)
    stats = json.loads(buf.value.decode())
print(json.dumps({"tokens_per_s": tokens / wall, "cpu_ms_per_token": 1e3 * cpu / tokens,
                  "faults_per_token": faults / tokens, "peak_rss_mib": rss, "tokens": tokens,
                  "digest": digest.hexdigest(), "replayalloc": stats}))
