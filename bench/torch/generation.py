"""bench/torch/generation.py: one process of the generation benchmark (Debian's python3).

A GPT-2-shaped decoder (scripts/models.py: 4 layers, width 256, 4 heads, vocabulary
8,000) generates greedily for REQUESTS requests per thread whose prompt (8..64 tokens)
and generation (8..64 tokens) lengths, and with --batch-max B a batch of 1..B, are drawn
from a fixed seed, the key/value caches grown by torch.cat. --threads T: T threads, each
with its own requests (one intra-op thread each), sharing the model. The allocator is
whatever serves malloc in this process (LD_PRELOAD), or, with --replay-torch LIB,
replayalloc as libtorch's CPU allocator: one iteration per model call (a key for the
prefill and one for the decode steps), or with --per-request one iteration per request
(one key: Note [Periodic iterations], allocator/trace/period.h). The first WARMUP
requests of each thread are not timed. Prints one JSON line: tokens per second (all
threads), p50 and p99 of the time per generated token (per request: its time over its
tokens), CPU ms per token, minor page faults per token, peak RSS, a digest of every
generated token, replayalloc's statistics over the timed phase if loaded.
Usage: generation.py REQUESTS WARMUP [--replay-torch LIB] [--per-request] [--threads T]
                     [--batch-max B]
"""
import argparse
import ctypes
import hashlib
import json
import os
import random
import resource
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402  (scripts/models.py)

ap = argparse.ArgumentParser()
ap.add_argument("requests", type=int)
ap.add_argument("warmup", type=int)
ap.add_argument("--replay-torch", metavar="LIB")
ap.add_argument("--per-request", action="store_true")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--batch-max", type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(1)
model, _ = models.build("gpt2", 1, layers=4, hidden=256, heads=4, vocab=8000, max_len=256)
work = []
for t in range(a.threads):
    rng = random.Random(2026 + t)
    mine = []
    for i in range(a.requests):
        length, batch = rng.randint(8, 64), rng.randint(1, a.batch_max)
        prompt = torch.randint(0, 8000, (batch, length), generator=torch.Generator().manual_seed(1000 * t + i))
        mine.append((prompt, rng.randint(8, 64)))
    work.append(mine)

lib = ctypes.CDLL(None)
stats_fn = getattr(lib, "replayalloc_stats_json", None)
call_step = request_step = None
if a.replay_torch:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "integrations", "pytorch", "python"))
    import replayalloc
    import replayalloc.torch as rt
    stats_fn = replayalloc.load(a.replay_torch).replayalloc_stats_json
    rt.install_cpu()
    if a.per_request:
        request_step = lambda: rt.iteration("gen/request")  # noqa: E731
    else:
        call_step = lambda kind: rt.iteration("gen/" + kind)  # noqa: E731


def stats():
    if stats_fn is None:
        return None
    stats_fn.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(16384)
    stats_fn(buf, 16384)
    return json.loads(buf.value.decode())


warm = threading.Barrier(a.threads + 1)
done = threading.Barrier(a.threads + 1)
digests = [hashlib.sha256() for _ in range(a.threads)]
per_token = [[] for _ in range(a.threads)]
tokens = [0] * a.threads


def serve(t):
    torch.set_num_threads(1)
    with torch.no_grad():
        for i, (prompt, n) in enumerate(work[t]):
            if i == a.warmup:
                warm.wait()
            t0 = time.perf_counter()
            if request_step:
                with request_step():
                    out = models.generate(model, prompt, n, step=call_step)
            else:
                out = models.generate(model, prompt, n, step=call_step)
            dt = time.perf_counter() - t0
            digests[t].update(out.numpy().tobytes())
            if i >= a.warmup:
                per_token[t].append(dt / n)
                tokens[t] += n * prompt.shape[0]
    done.wait()


threads = [threading.Thread(target=serve, args=(t,)) for t in range(a.threads)]
for th in threads:
    th.start()
warm.wait()
s0 = stats()
t0, c0 = time.perf_counter(), time.process_time()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
done.wait()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
for th in threads:
    th.join()
s1 = stats()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
lat = sorted(x for xs in per_token for x in xs)
total = sum(tokens)
delta = None
if s0 and s1:
    delta = {k: s1[k] - s0[k] for k in s1 if isinstance(s1[k], (int, float)) and k in s0}
    delta["plans"] = s1["plans"]
print(json.dumps({"tokens_per_s": total / wall, "p50_ms_per_token": 1e3 * statistics.median(lat),
                  "p99_ms_per_token": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                  "cpu_ms_per_token": 1e3 * cpu / total, "faults_per_token": faults / total,
                  "peak_rss_mib": rss, "tokens": total,
                  "digest": hashlib.sha256(b"".join(d.digest() for d in digests)).hexdigest(),
                  "replayalloc": delta}))
