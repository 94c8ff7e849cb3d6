"""LLM generation in a Python loop that knows nothing of replayalloc (Debian's python3):
a GPT-2-shaped decoder (scripts/models.py: 4 layers, width 256, 4 heads, vocabulary
8,000) generating greedily for REQUESTS requests whose prompt (8..64 tokens) and new
tokens (8..32) are drawn per request, the key/value caches grown by torch.cat.

Run plain, it prints a digest of every generated token. Run with
libreplayalloc_preload.so preloaded (auto mode, the default, nothing marked), it also
prints, over the requests after WARMUP, the share of the allocations of at least
REPLAYALLOC_MIN_SIZE served from a slab and the plans made
(Note [Requests of repeated steps], allocator/runtime/auto_detect.cc).
run_auto_generation.sh compares the runs.
Usage: auto_generation.py REQUESTS WARMUP [SEED]
"""
import ctypes
import hashlib
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402  (scripts/models.py)

requests, warmup = int(sys.argv[1]), int(sys.argv[2])
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
torch.set_num_threads(1)
model, _ = models.build("gpt2", 1, seed=3, layers=4, hidden=256, heads=4, vocab=8000, max_len=256)
rng = random.Random(seed)
work = []
for i in range(requests):
    prompt = torch.randint(0, 8000, (1, rng.randint(8, 64)), generator=torch.Generator().manual_seed(i))
    work.append((prompt, rng.randint(8, 32)))
stats_json = getattr(ctypes.CDLL(None), "replayalloc_stats_json", None)


def stats():
    stats_json.restype = ctypes.c_size_t
    buf = ctypes.create_string_buffer(16384)
    stats_json(buf, 16384)
    return json.loads(buf.value.decode())


digest = hashlib.sha256()
with torch.no_grad():
    for i, (prompt, n) in enumerate(work):
        if i == warmup and stats_json is not None:
            before = stats()  # once: a call allocates a buffer of 16 KiB, inside the stream watched
        tokens = models.generate(model, prompt, n)
        digest.update(tokens.numpy().tobytes())
print("digest", digest.hexdigest())
if stats_json is not None:
    s = stats()
    hits = s["slab_hits"] - before["slab_hits"]
    every = s["allocations"] - before["allocations"] - (s["below_min_size"] - before["below_min_size"])
    share = hits / every if every else 0.0
    print(f"after {warmup} warm-up requests, {requests - warmup} more (prompts 8..64, 8..32 new tokens): {hits} of "
          f"{every} allocations >= REPLAYALLOC_MIN_SIZE from a slab ({100 * share:.1f}%); plans {s['plans']}, "
          f"grown {s['plans_grown']}, recordings {s['recordings']}, auto rests {s['auto_rests']}, "
          f"slab {s['slab_bytes'] / 2**20:.1f} MiB")
    print("slab share", f"{share:.4f}")
