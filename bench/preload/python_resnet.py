"""One run of the Python ResNet-50 inference loop under whatever allocator is
preloaded: prints one JSON line (median latency, p99, minor page faults per inference,
peak RSS, output digest). Usage: python_resnet.py ITERATIONS WARMUP"""
import hashlib
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402  (scripts/models.py)

iterations, warmup = int(sys.argv[1]), int(sys.argv[2])
model, x = models.build("resnet50", 1)
times, digest = [], hashlib.sha256()
with torch.no_grad():
    for i in range(warmup + iterations):
        if i == warmup:
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        y = model(x)
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e3)
            digest.update(y.numpy().tobytes())
ru = resource.getrusage(resource.RUSAGE_SELF)
times.sort()
print(json.dumps({
    "p50_ms": statistics.median(times),
    "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))],
    "faults_per_inference": (ru.ru_minflt - f0) / iterations,
    "peak_rss_mib": ru.ru_maxrss / 1024,
    "digest": digest.hexdigest()[:16],
}))
