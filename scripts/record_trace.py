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

--train records one training step instead (bert or a torchvision classifier; its
loss, optimizer and target are scripts/models.py training()'s): the model in training
mode, each step inside the iteration of key MODEL/train/bsB: forward, loss, backward,
optimizer.step(), optimizer.zero_grad(set_to_none=True) (the gradients are made and
freed inside the step, so they are in the trace; the optimizer's state is made by the
first step, so --warmup must be at least 1 for a steady-state step). --state-json PATH
writes the bytes that live between steps, which the trace does not hold: parameters,
buffers, gradients (none: set to None) and optimizer state. --image and --seq set the
input's size (torchvision's image side; bert's or lstm's sequence length).

    /usr/bin/python3 scripts/record_trace.py --model bert --layers 2 --batch 8 --train \
        -o bert_train_b8.csv --state-json bert_train_b8.state.json
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "integrations", "pytorch", "python"))
sys.path.insert(0, HERE)  # scripts/models.py


def _bytes(tensors) -> int:
    """The bytes of `tensors`, each storage counted once."""
    seen, total = set(), 0
    for t in tensors:
        ptr = t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            total += t.numel() * t.element_size()
    return total


def _install(args) -> bool:
    """replayalloc as libtorch's CPU allocator; False (said) when it cannot be."""
    import replayalloc
    import replayalloc.torch as rt
    try:
        replayalloc.load(args.library)
        rt.install_cpu()
    except (OSError, RuntimeError) as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return False
    return True


def _save(key, output):
    """Saves the last recording of `key`: (its absolute path, its rows or -1 when not
    CSV), or (None, 0) when it could not be saved (said)."""
    import replayalloc
    out = os.path.abspath(output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        replayalloc.save_trace(key, out)
    except RuntimeError as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return None, 0
    with open(out) as f:
        rows = sum(1 for _ in f) - 1 if out.endswith(".csv") else -1
    return out, rows


def record_training(args) -> int:
    """main() for --train: records a steady-state training step (the module docstring)."""
    import json

    import torch
    import models
    import replayalloc.torch as rt

    options = {k: v for k, v in (("layers", args.layers), ("image", args.image), ("seq", args.seq)) if v is not None}
    try:
        model, x = models.build(args.model, args.batch, **options)
        target, loss_fn, optimizer = models.training(args.model, model.train(), args.batch)
    except ValueError as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return 2
    if not _install(args):
        return 2

    key = f"{args.model}/train/bs{args.batch}"
    for _ in range(args.warmup + 1):
        with rt.iteration(key):
            loss = loss_fn(model(x), target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            value = loss.item()
            del loss  # nothing the step made outlives it
    rt.uninstall_cpu()
    out, rows = _save(key, args.output)
    if out is None:
        return 1
    print(f"record_trace: {key}: {rows if rows >= 0 else '?'} allocations (loss {value:.4g}) -> {out}")
    if args.state_json:
        params = list(model.parameters())
        state = {
            "model": args.model, "batch": args.batch, "options": options,
            "parameters_bytes": _bytes(params),
            "buffers_bytes": _bytes(model.buffers()),
            "gradients_bytes": _bytes(p.grad for p in params if p.grad is not None),
            "optimizer_bytes": _bytes(v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)),
        }
        state["total_bytes"] = sum(v for k, v in state.items() if k.endswith("_bytes"))
        with open(args.state_json, "w") as f:
            json.dump(state, f, indent=1)
            f.write("\n")
    return 0


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
    ap.add_argument("--train", action="store_true", help="record a training step (see above)")
    ap.add_argument("--state-json", help="--train: where to write the bytes that live between steps")
    ap.add_argument("--image", type=int, help="torchvision models: the input's side (default 224)")
    ap.add_argument("--seq", type=int, help="bert, lstm: the sequence length (default models.py's)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.warmup < 0 or args.threads < 1 or (args.layers is not None and args.layers < 1):
        ap.error("--batch, --threads and --layers must be >= 1, --warmup >= 0")
    if args.layers is not None and args.model not in ("bert", "lstm"):
        ap.error("--layers is for bert and lstm")
    if args.image is not None and (args.image < 1 or args.model in ("bert", "lstm", "gpt2", "unet")):
        ap.error("--image (>= 1) is for torchvision models")
    if args.seq is not None and (args.seq < 1 or args.model not in ("bert", "lstm")):
        ap.error("--seq (>= 1) is for bert and lstm")
    if (args.image is not None or args.seq is not None or args.state_json) and not args.train:
        ap.error("--image, --seq and --state-json go with --train")
    if args.train and args.warmup < 1:
        ap.error("--train needs --warmup >= 1 (the first step makes the optimizer's state)")

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
    import replayalloc.torch as rt

    torch.set_num_threads(args.threads)
    if args.train:
        return record_training(args)
    try:
        model, x = models.build(args.model, args.batch,
                                **({} if args.layers is None else {"layers": args.layers}))
    except ValueError as e:
        print(f"record_trace: {e}", file=sys.stderr)
        return 2
    if not _install(args):
        return 2

    key = f"{args.model}/bs{args.batch}"
    with torch.no_grad():
        for _ in range(args.warmup + 1):
            with rt.iteration(key):
                y = model(x)
            del y  # the output outlives the iteration, as in a serving loop
    rt.uninstall_cpu()
    out, rows = _save(key, args.output)
    if out is None:
        return 1
    print(f"record_trace: {key}: {rows if rows >= 0 else '?'} allocations -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
