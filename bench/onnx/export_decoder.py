#!/usr/bin/python3
"""bench/onnx/export_decoder.py: the ONNX decoder of the second framework's generation
benchmark (bench/run_onnx_generation.sh).

A GPT-2-shaped decoder (scripts/models.py's Gpt2Like: 4 layers, width 256, 4 heads,
vocabulary 8,000, random weights from seed 0) exported from PyTorch with its key/value
cache as inputs and outputs, so that ONNX Runtime's caller feeds the cache back each
step, as ONNX Runtime's own GPT-2 generation examples do. Inputs: ids (batch x seq,
int64), past_0..past_{L-1} (2 x batch x heads x past x head_dim, float); outputs:
logits of the last position (batch x vocab) and present_0..present_{L-1}. The prefill
passes a past of length 0. Needs torch only (torch.onnx's own exporter).

Usage: export_decoder.py OUT.onnx [--layers 4] [--hidden 256] [--heads 4] [--vocab 8000]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import models  # noqa: E402


class WithFlatCache(torch.nn.Module):
    """Gpt2Like with its cache as one stacked tensor per layer (key, value)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, *past):
        # Gpt2Like reads the past length from past[0][0]; a past of length 0 works too.
        logits, cache = self.model(ids, [(p[0], p[1]) for p in past])
        return (logits, *[torch.stack(kv) for kv in cache])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8000)
    a = ap.parse_args()
    model, _ = models.build("gpt2", layers=a.layers, hidden=a.hidden, heads=a.heads, vocab=a.vocab,
                            max_len=256)
    wrapped = WithFlatCache(model).eval()
    head = a.hidden // a.heads
    ids = torch.randint(0, a.vocab, (1, 5))
    past = [torch.randn(2, 1, a.heads, 3, head) for _ in range(a.layers)]
    names_in = ["ids"] + [f"past_{i}" for i in range(a.layers)]
    names_out = ["logits"] + [f"present_{i}" for i in range(a.layers)]
    axes = {"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch"}}
    for i in range(a.layers):
        axes[f"past_{i}"] = {1: "batch", 3: "past"}
        axes[f"present_{i}"] = {1: "batch", 3: "total"}
    with torch.no_grad():
        expected = wrapped(ids, *past)
        torch.onnx.export(wrapped, (ids, *past), a.out, input_names=names_in, output_names=names_out,
                          dynamic_axes=axes, opset_version=14, do_constant_folding=True)
    print(f"{a.out}: {a.layers} layers, width {a.hidden}, vocabulary {a.vocab}; "
          f"logits[0,:3] {expected[0][0, :3].tolist()}")


if __name__ == "__main__":
    main()
