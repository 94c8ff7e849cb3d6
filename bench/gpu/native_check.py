#!/usr/bin/env python3
"""The native CUDA route on a real GPU (issue 42, items 1-3): what a user relies on, each
check in turn in one process with replayalloc's c10 CUDAAllocator installed
(replayalloc.torch.use_for_cuda(route="native")). Prints one JSON line per check
({"check", "ok", ...}) and exits 1 when any failed. Run by bench/gpu/run_native.sh.

  route        use_for_cuda installs the native allocator (PyTorch's current allocator)
  memory_api   memory_allocated / max_memory_allocated / memory_stats / reset_peak follow
               the live blocks exactly; memory_reserved covers the plans' slabs
  replay       a replayed iteration's outputs equal the same work outside iterations,
               and its device allocations come from a slab
  snapshot     torch.cuda.memory._snapshot() lists the slabs; blocks never overlap
  record_stream a block freed after record_stream is not reused before the other
               stream's work (outside iterations and replayed from a slab)
  oom          an impossible request raises torch.OutOfMemoryError and is counted; the
               allocator serves afterwards
  raw          caching_allocator_alloc / caching_allocator_delete
  cudnn        cuDNN's benchmark mode (cacheInfo) runs and agrees with the default mode
  graph        a CUDA graph replays correctly while eager tensors are made and kept
               between replays (its pool is never handed to them), and its pool is given
               back when the graph goes
"""
import argparse
import contextlib
import json
import sys
import time
import traceback

results = []


def check(fn):
    t0 = time.perf_counter()
    try:
        info = fn() or {}
        results.append({"check": fn.__name__, "ok": True, **info})
    except Exception as e:  # report and go on: one call runs every check
        results.append({"check": fn.__name__, "ok": False, "error": f"{type(e).__name__}: {e}",
                        "where": traceback.format_exc().strip().splitlines()[-3:]})
    results[-1]["s"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(results[-1]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library")
    a = ap.parse_args()
    import replayalloc
    import replayalloc.torch as rt
    t0 = time.perf_counter()
    route = rt.use_for_cuda(a.library, route="native")
    build_s = time.perf_counter() - t0
    import torch
    MiB = 1 << 20

    def route_check():
        assert route == "native" and rt.cuda_route() == "native", route
        x = torch.ones(4, device="cuda")
        assert float(x.sum()) == 4.0
        return {"route": route, "build_or_load_s": round(build_s, 1), "torch": torch.__version__}
    route_check.__name__ = "route"
    check(route_check)

    def memory_api():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        x = torch.empty(10 * MiB, dtype=torch.uint8, device="cuda")
        grown = torch.cuda.memory_allocated() - base
        assert grown == 10 * MiB, f"memory_allocated grew by {grown}, not {10 * MiB}"
        st = torch.cuda.memory_stats()
        assert st["allocated_bytes.all.current"] == torch.cuda.memory_allocated(), st
        assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
        del x
        after = torch.cuda.memory_allocated()
        assert after == base, f"after the free: {after}, before: {base}"
        peak = torch.cuda.max_memory_allocated()
        assert peak >= base + 10 * MiB, f"peak {peak}"
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == base, torch.cuda.max_memory_allocated()
        return {"allocated_after": after, "peak_was": peak}
    check(memory_api)

    w = torch.randn(2048, 2048, device="cuda")
    a_in = torch.randn(512, 2048, device="cuda")

    def work():
        h = torch.relu(a_in @ w)
        h = torch.tanh(h @ w) + h
        return (h @ w).sum(dim=1)

    def replay():
        ref = work()
        s0 = None
        outs = []
        for i in range(8):
            if i == 4:
                s0 = rt.stats(device=True)
            with rt.iteration("check/mlp"):
                outs.append(work())
            if i == 1:
                replayalloc.wait_plans()
            if i == 5:
                reserved = torch.cuda.memory_reserved()
                slab = rt.stats(device=True)["slab_bytes"]
                assert reserved >= slab, f"memory_reserved {reserved} < the slabs' {slab} bytes"
        s = rt.stats(device=True)
        hits = s["slab_hits"] - s0["slab_hits"]
        assert hits > 0, f"no device allocation from a slab in 4 replayed iterations: {s}"
        for i, o in enumerate(outs):
            assert torch.equal(o, ref), f"iteration {i} differs from the same work outside iterations"
        return {"slab_hits_4_iterations": hits, "fallbacks": s["fallbacks"] - s0["fallbacks"],
                "slab_bytes": s["slab_bytes"], "memory_reserved": torch.cuda.memory_reserved()}
    check(replay)

    def snapshot():
        with rt.iteration("check/mlp"):
            keep = work()
            snap = torch.cuda.memory._snapshot()
        segs = snap["segments"]
        assert segs, "no segment"
        slab = rt.stats(device=True)["slab_bytes"]
        total = sum(s["total_size"] for s in segs)
        assert total >= slab, f"segments {total} < slabs {slab}"
        for s in segs:
            end = s["address"]
            used = 0
            for b in s["blocks"]:
                assert b["size"] >= 0
                used += b["size"]
            assert used <= s["total_size"], f"blocks {used} > segment {s['total_size']}"
            del end
        del keep
        return {"segments": len(segs), "bytes": total, "largest": max(s["total_size"] for s in segs)}
    check(snapshot)

    def record_stream():
        side = torch.cuda.Stream()
        n = 4 * MiB  # floats: 16 MiB
        wrong = []
        for inside in (False, True):
            for i in range(6):
                ctx = rt.iteration("check/record_stream") if inside else contextlib.nullcontext()
                with ctx:
                    x = torch.full((n,), 3.0, device="cuda")
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        torch.cuda._sleep(100_000_000)  # the side stream is busy for a while
                        y = x * 2
                    x.record_stream(side)
                    del x
                    z = torch.full((n,), 7.0, device="cuda")  # may reuse x's bytes: after y only
                    del z
                torch.cuda.synchronize()
                if not bool((y == 6).all()):
                    wrong.append((inside, i))
                del y
                if inside and i == 1:
                    replayalloc.wait_plans()
        assert not wrong, f"a block reused before the stream it was recorded on was done: {wrong}"
        return {"synchronized_frees": torch.cuda.memory_stats().get("num_sync_all_streams", "n/a")}
    check(record_stream)

    def oom():
        before = torch.cuda.memory_stats().get("num_ooms", 0)
        try:
            torch.empty(1 << 46, dtype=torch.uint8, device="cuda")  # 64 TiB
            raise AssertionError("64 TiB were served")
        except torch.OutOfMemoryError as e:
            msg = str(e).splitlines()[0][:200]
        after = torch.cuda.memory_stats().get("num_ooms", 0)
        assert after == before + 1, f"num_ooms {before} -> {after}"
        x = torch.ones(MiB, device="cuda")
        assert float(x.sum()) == MiB
        return {"message": msg}
    check(oom)

    def raw():
        p = torch.cuda.caching_allocator_alloc(3 * MiB)
        assert p != 0
        torch.cuda.caching_allocator_delete(p)
        return {}
    check(raw)

    def cudnn():
        conv = torch.nn.Conv2d(64, 128, 3, padding=1).cuda()
        x = torch.randn(8, 64, 56, 56, device="cuda")
        torch.backends.cudnn.benchmark = False
        ref = conv(x)
        torch.backends.cudnn.benchmark = True
        y = conv(x)
        torch.backends.cudnn.benchmark = False
        diff = float((y - ref).abs().max())
        assert diff < 1e-3, diff
        return {"max_abs_diff": diff}
    check(cudnn)

    def graph():
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
        static_in = torch.randn(64, 1024, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        reserved0 = torch.cuda.memory_reserved()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        reserved_graph = torch.cuda.memory_reserved() - reserved0
        pools = [s for s in torch.cuda.memory._snapshot()["segments"]
                 if tuple(s.get("segment_pool_id", s.get("owner_private_pool_id", (0, 0)))) != (0, 0)]
        kept, worst = [], 0.0
        for i in range(4):
            inp = torch.randn(64, 1024, device="cuda")
            # eager tensors made and kept between replays: the graph must never write them
            kept += [torch.full((256 * 1024,), float(i), device="cuda") for _ in range(8)]
            static_in.copy_(inp)
            g.replay()
            with rt.iteration("check/graph-eager"):
                ref = model(inp)
            worst = max(worst, float((static_out - ref).abs().max()))
        torch.cuda.synchronize()
        for j, t in enumerate(kept):
            assert bool((t == float(j // 8)).all()), f"an eager tensor kept between replays changed ({j})"
        assert worst < 1e-4, f"graph replay differs from eager by {worst}"
        del g, static_out
        torch.cuda.synchronize()
        released = torch.cuda.memory_reserved()
        return {"graph_pool_bytes": reserved_graph, "pool_segments": len(pools), "max_abs_diff": worst,
                "reserved_after_release_minus_before": released - reserved0 - sum(t.numel() * 4 for t in kept)}
    check(graph)

    def summary():
        text = torch.cuda.memory_summary()
        assert "Allocated memory" in text
        return {"lines": len(text.splitlines())}
    check(summary)

    failed = [r["check"] for r in results if not r["ok"]]
    print(json.dumps({"native_check": "ok" if not failed else "FAILED", "failed": failed,
                      "passed": len(results) - len(failed)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
