#!/usr/bin/python3
"""Records one inference iteration of a model as a replayalloc trace CSV.

    /usr/bin/python3 scripts/record_trace.py --model resnet50 --batch 1 -o resnet50_bs1.csv \
        [--library build/integrations/pytorch/libreplayalloc_torch.so]

The model is built with random weights (torch.manual_seed fixed, nothing downloaded)
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

MODELS = ("resnet50", "mobilenet_v3_large", "densenet121", "transformer", "lstm", "unet")


def build_model(name: str, batch: int):
    """(model, input) for `name` at batch size `batch`: random weights, eval mode."""
    import torch

    torch.manual_seed(0)
    if name in ("resnet50", "mobilenet_v3_large", "densenet121"):
        import torchvision

        model = getattr(torchvision.models, name)()  # weights=None: random, no download
        return model.eval(), torch.randn(batch, 3, 224, 224)
    if name == "transformer":
        # BERT-base-like: 12 layers, d_model 768, 12 heads, FFN 3072, sequence 128.
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                                 batch_first=True)
        return torch.nn.TransformerEncoder(layer, 12).eval(), torch.randn(batch, 128, 768)
    if name == "lstm":
        # Two layers, hidden 512, 64 time steps of 256 features.
        return torch.nn.LSTM(256, 512, num_layers=2).eval(), torch.randn(64, batch, 256)
    if name == "unet":
        return _unet(torch).eval(), torch.randn(batch, 3, 256, 256)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _unet(torch):
    """A small U-Net: four levels (32..256 channels), skip connections by concatenation."""
    nn = torch.nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self, widths=(32, 64, 128, 256), classes=2):
            super().__init__()
            self.down = nn.ModuleList()
            cin = 3
            for w in widths:
                self.down.append(block(cin, w))
                cin = w
            self.bottom = block(widths[-1], widths[-1] * 2)
            self.up = nn.ModuleList()
            self.dec = nn.ModuleList()
            cin = widths[-1] * 2
            for w in reversed(widths):
                self.up.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
                self.dec.append(block(2 * w, w))
                cin = w
            self.head = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for d in self.down:
                x = d(x)
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
            x = self.bottom(x)
            for up, dec, s in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), s], dim=1))
            return self.head(x)

    return UNet()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, choices=MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("-o", "--output", required=True, help="trace file (.csv: CSV, else binary)")
    ap.add_argument("--library", help="libreplayalloc_torch.so (default: the package's search order)")
    ap.add_argument("--warmup", type=int, default=2, help="iterations before the recorded one")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: reproducible)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--batch and --threads must be >= 1, --warmup >= 0")

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
    import replayalloc
    import replayalloc.torch as rt

    torch.set_num_threads(args.threads)
    model, x = build_model(args.model, args.batch)
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
