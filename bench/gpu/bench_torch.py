#!/usr/bin/env python3
"""One GPU benchmark cell: a model, a batch size, an allocator. Prints one JSON line.

Run by bench/gpu/run.sh, one process per cell (an allocator is chosen once per
process). The models are scripts/models.py's: resnet50 (torchvision) and bert (the
BERT-like encoder at BERT-base's size, 12 layers, sequence 128). Random weights, fixed
seeds, no downloads. Each timed iteration is the forward pass plus
torch.cuda.synchronize(), so latency is what a request waits for.

With --train, each timed iteration is one training step instead (scripts/models.py
training(): forward, loss, backward(), the optimizer's step, zero_grad(); SGD with
momentum for resnet50, Adam for bert), one replayalloc iteration per step; the line
then carries a checksum of every parameter after the last step, compared with the
default allocator's (cuDNN deterministic, so the same kernels run under every
allocator).
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))


def build(model, batch, train=False):
    import models  # scripts/models.py; it imports torch, so only once the allocator is chosen

    m, x = models.build(model, batch)
    m, x = m.cuda(), x.cuda()
    if not train:
        return m, x, None
    m.train()
    target, loss_fn, opt = models.training(model, m, batch)  # the optimizer over the CUDA parameters
    target = target.cuda()

    def step():
        loss = loss_fn(m(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return m, x, step


def check_package(library):
    import replayalloc.torch as rt
    rt.use_for_cuda(library)
    import torch
    import replayalloc
    a = torch.ones(1 << 20, device="cuda")  # 4 MiB: above every minimum size
    for i in range(6):
        with rt.iteration("package-check"):
            b = (a * 2).sum()
        if i == 1:
            replayalloc.wait_plans()  # the plan of the two recordings, made in the background
    assert float(b) == float(1 << 21)
    try:
        rt.use_for_cuda(library)
        late = "no error"
    except RuntimeError as e:
        late = str(e)
    s = rt.stats(device=True)
    assert s["slab_hits"] > 0, f"no device allocation served from a slab: {s}"
    print(json.dumps({"package_check": "ok", "second_call": late, "device_slab_hits": s["slab_hits"],
                      "device_plans": s["plans"]}))


def generate(a, rt):
    """--generate: the GPT-2-shaped decoder of bench/torch/generation.py on the GPU, greedy,
    prompts of 8..64 tokens and 8..32 new tokens drawn per request (a fixed seed), one
    iteration per request under one key (issue 31: Note [Periodic iterations]). Prints one
    JSON line: tokens per second over the requests after the warm-up, the device slab's
    share of their device allocations, the device memory used, the tokens' digest."""
    import hashlib
    import random
    import models
    import torch
    torch.manual_seed(0)
    m, _ = models.build("gpt2", 1, layers=12, hidden=768, heads=12, vocab=50257, max_len=1024)
    m = m.cuda()
    rng = random.Random(2026)
    work = [(torch.randint(0, 50257, (1, rng.randint(8, 64)), generator=torch.Generator().manual_seed(i)).cuda(),
             rng.randint(8, 32)) for i in range(a.warmup + a.iters)]
    free0, _ = torch.cuda.mem_get_info()
    digest = hashlib.sha256()
    tokens, t_start, s0 = 0, None, None
    with torch.inference_mode():
        for i, (prompt, n) in enumerate(work):
            if i == a.warmup:
                torch.cuda.synchronize()
                t_start = time.perf_counter()
                s0 = rt.stats(device=True) if rt else None
            with rt.iteration("gpt2/request") if rt else contextlib.nullcontext():
                out = models.generate(m, prompt, n)
            digest.update(out.cpu().numpy().tobytes())
            if i >= a.warmup:
                tokens += n
            if i == a.warmup - 1 and rt:
                import replayalloc
                replayalloc.wait_plans()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t_start
    free1, _ = torch.cuda.mem_get_info()
    out = {"allocator": a.allocator, "model": "gpt2-12l", "mode": "generate", "round": a.round,
           "requests": a.iters, "tokens_per_s": tokens / wall, "device_used_mib": (free0 - free1) / 2**20,
           "digest": digest.hexdigest()}
    if rt:
        s = rt.stats(device=True)
        d = {k: s[k] - s0[k] for k in ("slab_hits", "fallbacks", "passthrough", "allocations")}
        out["slab_share"] = d["slab_hits"] / max(1, d["slab_hits"] + d["fallbacks"] + d["passthrough"])
        out["slab_mib"] = s["slab_bytes"] / 2**20
        out["lower_bound_mib"] = s["lower_bound_bytes"] / 2**20
        out["plans"] = s["plans"]
    print(json.dumps(out))


ROUTES = {"replayalloc": "pluggable", "native": "native"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", choices=["default", "async", "replayalloc", "native"],
                    help="replayalloc: the pluggable route; native: replayalloc's own c10 CUDAAllocator")
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "bert"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--reference")
    ap.add_argument("--library")
    ap.add_argument("--check-package", action="store_true")
    ap.add_argument("--train", action="store_true", help="time training steps, not inferences")
    ap.add_argument("--generate", action="store_true", help="LLM generation, one iteration per request")
    a = ap.parse_args()
    if a.check_package:
        return check_package(a.library)
    if a.generate:
        rt = None
        if a.allocator in ("replayalloc", "native"):
            import replayalloc.torch as rt
            rt.use_for_cuda(a.library, route=ROUTES[a.allocator])
        return generate(a, rt)

    rt = None
    if a.allocator in ("replayalloc", "native"):
        import replayalloc.torch as rt
        rt.use_for_cuda(a.library, route=ROUTES[a.allocator])
    import torch
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    m, x, step = build(a.model, a.batch, a.train)
    key = f"{a.model}/bs{a.batch}" + ("/train" if a.train else "")
    times = []
    with torch.inference_mode() if not a.train else contextlib.nullcontext():
        for i in range(a.warmup + a.iters):
            ctx = rt.iteration(key) if rt else contextlib.nullcontext()
            t0 = time.perf_counter()
            with ctx:
                y = step() if a.train else m(x)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            if i == a.warmup and rt:
                hits0 = rt.stats(device=True)
            if i >= a.warmup:
                times.append((t1 - t0) * 1e3)
    free1, _ = torch.cuda.mem_get_info()
    times.sort()
    out = {
        "allocator": a.allocator, "model": a.model, "batch": a.batch, "round": a.round,
        "mode": "train" if a.train else "inference",
        "iters": a.iters,
        "p50_ms": statistics.median(times),
        "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))],
        "throughput": a.batch * 1e3 / statistics.mean(times),
        "device_used_mib": (free0 - free1) / 2**20,
    }
    if a.allocator != "replayalloc":  # the native route's figures are replayalloc's own
        with contextlib.suppress(Exception):
            out["max_memory_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
            out["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    if rt:
        s = rt.stats(device=True)
        timed = {k: s[k] - hits0[k] for k in ("slab_hits", "fallbacks", "backend_planned", "passthrough")}
        planned = timed["slab_hits"] + timed["fallbacks"]
        out["slab_hit_rate"] = timed["slab_hits"] / planned if planned else 0.0
        out["slab_mib"] = s["slab_bytes"] / 2**20
        out["lower_bound_mib"] = s["lower_bound_bytes"] / 2**20
        out["fallbacks"] = timed["fallbacks"]
    if a.train:  # what must not change: every parameter after the last step
        with torch.no_grad():
            y = torch.cat([p.detach().float().flatten() for p in m.parameters()])
    y = y.float().cpu()
    if a.reference:
        if os.path.exists(a.reference):
            ref = torch.load(a.reference)
            out["output_equal"] = bool(torch.equal(y, ref))
            out["output_max_abs_diff"] = float((y - ref).abs().max())
        elif a.allocator == "default":
            torch.save(y, a.reference)
            out["output_equal"] = True
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
