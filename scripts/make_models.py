#!/usr/bin/env python3
"""Saves TorchScript models with random weights (no download) for the main job and
benchmarks: make_models.py OUT_DIR [name ...]. Needs Debian's python3-torch and
python3-torchvision; skips models that already exist. The models are scripts/models.py's.

Files (default: resnet50):
  resnet50            torchvision ResNet-50, input 1x3x224x224
  mobilenet_v3_large  torchvision MobileNetV3-Large, input 1x3x224x224
  bert_b1, bert_b8    models.py's BERT-like encoder (BERT-base's layer: width 768, 12
                      heads, FFN 3072, GELU, post-norm; embeddings: token, position,
                      segment), but 2 layers instead of 12 (the layers repeat the same
                      allocations; 2 keep the benchmark matrix within its 30 minutes on
                      the 2-core bench machine); sequence 128, batch 1 or 8; output: the
                      pooled [CLS] vector
  bert_varlen         bert_b1's model with an input of 256 tokens, of which the e2e
                      benchmark's variable-length cells take a prefix per request
  lstm                models.py's LSTM language-model body (2 layers, vocabulary 10,000,
                      width 512), sequence 64, batch 1; output: the logits of the last step

Beside every NAME.pt it writes NAME.input.pt, a scripted module whose forward()
returns the example input (so a C++ driver needs no knowledge of the model's input).
Both are deterministic (seed 0). Every model returns one tensor."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (scripts/models.py)

# File name -> (models.py name, batch, options).
FILES = {
    "resnet50": ("resnet50", 1, {}),
    "mobilenet_v3_large": ("mobilenet_v3_large", 1, {}),
    "bert_b1": ("bert", 1, {"layers": 2}),
    "bert_b8": ("bert", 8, {"layers": 2}),
    "bert_varlen": ("bert", 1, {"layers": 2, "seq": 256}),
    "lstm": ("lstm", 1, {}),
}


class Input(torch.nn.Module):
    def __init__(self, x):
        super().__init__()
        self.register_buffer("x", x)

    def forward(self):
        return self.x


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit("usage: make_models.py OUT_DIR [name ...]\n\n" + __doc__)
    out = sys.argv[1]
    names = sys.argv[2:] or ["resnet50"]
    for name in names:
        if name not in FILES:
            raise SystemExit(f"make_models.py: unknown model {name} (one of {', '.join(FILES)})")
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(out, f"{name}.pt")
        input_path = os.path.join(out, f"{name}.input.pt")
        if os.path.exists(path) and os.path.exists(input_path):
            continue
        model_name, batch, options = FILES[name]
        model, example = models.build(model_name, batch, **options)
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(path)
        torch.jit.script(Input(example)).save(input_path)
        print(f"make_models.py: wrote {path} and {input_path}")


if __name__ == "__main__":
    main()
