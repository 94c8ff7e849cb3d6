#!/usr/bin/env python3
"""Saves TorchScript models with random weights (no download) for the main job and
benchmarks: make_models.py OUT_DIR [name ...]. Needs Debian's python3-torch and
python3-torchvision; skips models that already exist."""
import os
import sys

import torch
import torchvision


def build(name):
    torch.manual_seed(0)
    if name == "resnet50":
        return torchvision.models.resnet50().eval(), torch.randn(1, 3, 224, 224)
    if name == "mobilenet_v3_large":
        return torchvision.models.mobilenet_v3_large().eval(), torch.randn(1, 3, 224, 224)
    raise SystemExit(f"make_models.py: unknown model {name}")


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or ["resnet50"]
    os.makedirs(out, exist_ok=True)
    for name in names:
        path = os.path.join(out, f"{name}.pt")
        if os.path.exists(path):
            continue
        model, example = build(name)
        with torch.no_grad():
            torch.jit.trace(model, example).save(path)
        print(f"make_models.py: wrote {path}")


if __name__ == "__main__":
    main()
