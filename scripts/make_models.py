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

Training files (bench/e2e/e2e_driver.cc --train): traced in training mode (batch
norm uses the batch's statistics and updates its running ones), parameters saved with
requires_grad, and beside the input a NAME.target.pt (a scripted module returning the
fixed target of every step: class indices for cross entropy, or floats for MSE).
Batch 8; sizes chosen so a step (forward, loss, backward, optimizer) takes well under a
second on one core of the 2-core bench machine, except the encoder (about 1.1 s):
  train_resnet18            torchvision ResNet-18, input 8x3x112x112 (a quarter of
                            224x224's pixels: about 0.3 s a step); 1,000 classes
  train_mobilenet_v3_small  torchvision MobileNetV3-Small, input 8x3x224x224 (about
                            0.16 s a step); 1,000 classes; its classifier's dropout off
                            (its random draws would depend on the threads' interleaving)
  train_bert                bert_b8's model (2 layers, BERT-base's width), sequence 128,
                            batch 8; target: 8x768 floats (MSE against the pooled vector)

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

# Training files -> (models.py name, batch, options, target): "classes" (1,000 class
# indices, for cross entropy) or "vector" (batch x hidden floats, for MSE).
TRAIN_FILES = {
    "train_resnet18": ("resnet18", 8, {"image": 112}, "classes"),
    "train_mobilenet_v3_small": ("mobilenet_v3_small", 8, {"dropout": 0.0}, "classes"),
    "train_bert": ("bert", 8, {"layers": 2}, "vector"),
}


def save_training(name, out):
    """Writes OUT/NAME.pt (traced in training mode, trainable), NAME.input.pt and
    NAME.target.pt for a TRAIN_FILES name; skips files that exist."""
    paths = [os.path.join(out, f"{name}{suffix}.pt") for suffix in ("", ".input", ".target")]
    if all(os.path.exists(p) for p in paths):
        return
    model_name, batch, options, target = TRAIN_FILES[name]
    model, example = models.build(model_name, batch, **options)
    model.train()  # grad enabled while tracing: the graph of a training step's forward
    traced = torch.jit.trace(model, example, check_trace=False)
    if not all(p.requires_grad for p in traced.parameters()):
        raise SystemExit(f"make_models.py: {name}: traced parameters do not require grad")
    traced.save(paths[0])
    torch.jit.script(Input(example)).save(paths[1])
    torch.jit.script(Input(models.training_target(target, batch))).save(paths[2])
    print(f"make_models.py: wrote {paths[0]}, {paths[1]} and {paths[2]}")


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
        if name not in FILES and name not in TRAIN_FILES:
            raise SystemExit(f"make_models.py: unknown model {name} (one of {', '.join(list(FILES) + list(TRAIN_FILES))})")
    os.makedirs(out, exist_ok=True)
    for name in names:
        if name in TRAIN_FILES:
            save_training(name, out)
            continue
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
