#!/usr/bin/env python3
"""Saves TorchScript models with random weights (no download) for the main job and
benchmarks: make_models.py OUT_DIR [name ...]. Needs Debian's python3-torch and
python3-torchvision; skips models that already exist.

Models (default: resnet50):
  resnet50            torchvision ResNet-50, input 1x3x224x224
  mobilenet_v3_large  torchvision MobileNetV3-Large, input 1x3x224x224
  bert_b1, bert_b8    a BERT-base-like encoder: BERT-base's layer (width 768, 12
                      heads, FFN 3072, GELU, post-norm) and embeddings (token, position,
                      segment), but 2 layers instead of 12 (the layers repeat the same
                      allocations; 2 keep the benchmark matrix within its 30 minutes on
                      the 2-core bench machine); sequence 128, batch 1 or 8; output: the
                      pooled [CLS] vector
  lstm                a 2-layer LSTM language-model body (vocabulary 10,000, width 512),
                      sequence 64, batch 1; output: the logits of the last step

Beside every NAME.pt it writes NAME.input.pt, a scripted module whose forward()
returns the example input (so a C++ driver needs no knowledge of the model's input).
Both are deterministic (seed 0). Every model returns one tensor."""
import os
import sys

import torch
import torchvision


class BertLike(torch.nn.Module):
    """BERT-base's layer shape: embeddings + `layers` post-norm encoder layers + a tanh pooler."""

    def __init__(self, vocab=30522, width=768, layers=2, heads=12, ffn=3072, max_len=512):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Embedding(max_len, width)
        self.seg = torch.nn.Embedding(2, width)
        self.norm = torch.nn.LayerNorm(width)
        layer = torch.nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, activation="gelu",
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = torch.nn.Linear(width, width)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        h = self.norm(self.tok(ids) + self.pos(positions) + self.seg(torch.zeros_like(ids)))
        h = self.encoder(h)
        return torch.tanh(self.pool(h[:, 0]))


class LstmLm(torch.nn.Module):
    def __init__(self, vocab=10000, width=512, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.lstm = torch.nn.LSTM(width, width, layers, batch_first=True)
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return self.head(out[:, -1])


class Input(torch.nn.Module):
    def __init__(self, x):
        super().__init__()
        self.register_buffer("x", x)

    def forward(self):
        return self.x


def build(name):
    torch.manual_seed(0)
    if name == "resnet50":
        return torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224)
    if name == "mobilenet_v3_large":
        return torchvision.models.mobilenet_v3_large().eval(), torch.randn(1, 3, 224, 224)
    if name in ("bert_b1", "bert_b8"):
        batch = 1 if name == "bert_b1" else 8
        return BertLike().eval(), torch.randint(0, 30522, (batch, 128))
    if name == "lstm":
        return LstmLm().eval(), torch.randint(0, 10000, (1, 64))
    raise SystemExit(f"make_models.py: unknown model {name}")


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: make_models.py OUT_DIR [name ...]")
    out = sys.argv[1]
    names = sys.argv[2:] or ["resnet50"]
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(out, f"{name}.pt")
        input_path = os.path.join(out, f"{name}.input.pt")
        if os.path.exists(path) and os.path.exists(input_path):
            continue
        model, example = build(name)
        with torch.no_grad():
            torch.jit.trace(model, example, check_trace=False).save(path)
        torch.jit.script(Input(example)).save(input_path)
        print(f"make_models.py: wrote {path} and {input_path}")


if __name__ == "__main__":
    main()
