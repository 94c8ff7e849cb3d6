#!/usr/bin/python3
"""Records one inference iteration of a model as a replayalloc trace CSV.

    /usr/bin/python3 scripts/record_trace.py --model resnet50 --batch 1 -o resnet50_bs1.csv \
        [--library build/integrations/pytorch/libreplayalloc_torch.so]

The model is scripts/models.py's (bert, lstm, unet, or a torchvision classifier by
name: resnet50, mobilenet_v3_large, densenet121, ...; --layers sets bert's and lstm's
layer count), built with random weights (torch.manual_seed fixed, nothing downloaded)
and run in eval mode under no_grad, with replayalloc installed as libtorch's CPU
allocator (replayalloc.torch.install_cpu) in REPLAYALLOC_MODE=record, so every
iteration is recorded and none is replayed. After --warmup iterations (which build
oneDNN's caches and the like, so the recorded iteration is a steady-state one), one more
iteration is recorded and saved with replayalloc_save_trace(): the CSV interchange
format `id,size,align,alloc_at,free_at,op`, ops tagged by ATen op name.

Needs Debian's python3 (torch 1.13, torchvision) and libreplayalloc_torch.so built
against the same torch. Exits non-zero with a message when anything is missing.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "integrations", "pytorch", "python"))
sys.path.insert(0, HERE)  # scripts/models.py


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True,
                    help="a scripts/models.py name: bert, lstm, unet, resnet50, mobilenet_v3_large, "
                         "densenet121 or another torchvision classifier")
    ap.add_argument("--layers", type=int, help="bert, lstm: the layer count (default: models.py's, "
                                               "bert 12, lstm 2)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("-o", "--output", required=True, help="trace file (.csv: CSV, else binary)")
    ap.add_argument("--library", help="libreplayalloc_torch.so (default: the package's search order)")
    ap.add_argument("--warmup", type=int, default=2, help="iterations before the recorded one")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: reproducible)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.warmup < 0 or args.threads < 1 or (args.layers is not None and args.layers < 1):
        ap.error("--batch, --threads and --layers must be >= 1, --warmup >= 0")
    if args.layers is not None and args.model not in ("bert", "lstm"):
        ap.error("--layers is for bert and lstm")

    # Recording only: the library reads its options once, when it starts.
    os.environ["REPLAYALLOC_MODE"] = "record"
    os.environ.setdefault("REPLAYALLOC_VERBOSE", "0")
    # Recording makes no slab: a small reservation works where address space is capped.
    os.environ.setdefault("REPLAYALLOC_RESERVE", "1G")
    try:
        import torch
    except ImportError as e:
        print(f"record_trace: cannot import torch ({e}); run it with Debian's /usr/bin/python3",
              file=sys.stderr)
        return 2
    import models
    import replayalloc
    import replayalloc.torch as rt

    torch.set_num_threads(args.threads)
    try:
        model, x = models.build(args.model, args.batch,
                                **({} if args.layers is None else {"layers": args.layers}))
    except ValueError as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return 2
    try:
        lib = replayalloc.load(args.library)
        rt.install_cpu()
    except (OSError, RuntimeError) as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return 2
    lib.replayalloc_save_trace.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.replayalloc_save_trace.restype = ctypes.c_int

    key = f"{args.model}/bs{args.batch}"
    with torch.no_grad():
        for _ in range(args.warmup + 1):
            with rt.iteration(key):
                y = model(x)
            del y  # the output outlives the iteration, as in a serving loop
    rt.uninstall_cpu()
    out = os.path.abspath(args.output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if lib.replayalloc_save_trace(key.encode(), out.encode()) != 0:
        print(f"record_trace: replayalloc could not save the trace of {key} to {out}", file=sys.stderr)
        return 1
    with open(out) as f:
        rows = sum(1 for _ in f) - 1 if out.endswith(".csv") else -1
    print(f"record_trace: {key}: {rows if rows >= 0 else '?'} allocations -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
