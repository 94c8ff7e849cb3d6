#!/usr/bin/python3
"""scripts/models.py: the models of the benchmarks, tests and scripts, defined once.

Python side only (the C++ programs load the TorchScript files scripts/make_models.py
saves from these). Random weights from a fixed seed, nothing downloaded, eval mode.
Needs torch, and torchvision for its models; works with Debian's torch 1.13 and 2.x.

    import models                       # sys.path: this file's folder
    model, x = models.build("bert", batch=8, layers=2)
    y = model(x)

build(name, batch, seed, **options) -> (model, example input):
  NAME (any torchvision.models classifier: resnet50, resnet18, mobilenet_v3_large,
        mobilenet_v3_small, densenet121, ...)
        input batch x 3 x image x image; options: image (224)
  bert  BERT-like encoder (BertLike): BERT-base's embeddings (token, position, segment)
        and post-norm encoder layer (GELU), a tanh pooler over the first position;
        input token ids, batch x seq; output batch x hidden. Options: layers (12),
        hidden (768), heads (12), ffn (4 x hidden), vocab (30522), seq (128).
        BERT-base is the default; the e2e benchmark uses layers=2.
  lstm  a language-model body (LstmLm): embedding, a stacked LSTM, a linear head over
        the last step; input token ids, batch x seq; output batch x vocab. Options:
        layers (2), hidden (512), vocab (10000), seq (64)
  unet  a small U-Net (UNet): four levels (32..256 channels), skips by concatenation;
        input batch x 3 x image x image. Options: image (256)
  gpt2  a GPT-2-shaped decoder (Gpt2Like): token and position embeddings, pre-norm
        blocks (causal attention, GELU MLP), tied output embedding; forward(ids, past)
        returns the logits of the last position and the key/value cache, grown by
        torch.cat one step at a time. Input: a prompt, batch x seq. Options: layers (12),
        hidden (768), heads (12), vocab (50257), max_len (1024), seq (16). generate()
        runs prefill and greedy decode steps.

Training (bench/e2e/e2e_driver.cc --train does the same in C++):
  training(name, model, batch) -> (target, loss function, optimizer) of one training
        step: bert, MSE against batch x hidden fixed floats, Adam (lr 1e-4); a
        torchvision classifier, cross entropy against batch fixed class indices of
        1,000, SGD (lr 0.01, momentum 0.9). A step: loss_fn(model(x), target).backward(),
        optimizer.step(), optimizer.zero_grad().

Run as a script it prints what it builds: models.py NAME [--batch B] [KEY=VALUE...].
"""
import math
import sys

import torch

NAMES = ("resnet50", "mobilenet_v3_large", "densenet121", "bert", "lstm", "unet", "gpt2")  # the benchmarks'


class BertLike(torch.nn.Module):
    """BERT-base's shape with `layers` encoder layers: embeddings, post-norm layers, pooler."""

    def __init__(self, layers=12, hidden=768, heads=12, ffn=None, vocab=30522, max_len=512):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(max_len, hidden)
        self.seg = torch.nn.Embedding(2, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        layer = torch.nn.TransformerEncoderLayer(hidden, heads, ffn or 4 * hidden, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = torch.nn.Linear(hidden, hidden)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        h = self.norm(self.tok(ids) + self.pos(positions) + self.seg(torch.zeros_like(ids)))
        h = self.encoder(h)
        return torch.tanh(self.pool(h[:, 0]))


class LstmLm(torch.nn.Module):
    """An LSTM language-model body: embedding, `layers` LSTM layers, the logits of the last step."""

    def __init__(self, layers=2, hidden=512, vocab=10000):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return self.head(out[:, -1])


def _unet_block(cin, cout):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(torch.nn.Module):
    """A small U-Net: one level per width, skip connections by concatenation."""

    def __init__(self, widths=(32, 64, 128, 256), classes=2):
        super().__init__()
        self.down = torch.nn.ModuleList()
        cin = 3
        for w in widths:
            self.down.append(_unet_block(cin, w))
            cin = w
        self.bottom = _unet_block(widths[-1], widths[-1] * 2)
        self.up = torch.nn.ModuleList()
        self.dec = torch.nn.ModuleList()
        cin = widths[-1] * 2
        for w in reversed(widths):
            self.up.append(torch.nn.ConvTranspose2d(cin, w, 2, stride=2))
            self.dec.append(_unet_block(2 * w, w))
            cin = w
        self.head = torch.nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for d in self.down:
            x = d(x)
            skips.append(x)
            x = torch.nn.functional.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, dec, s in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), s], dim=1))
        return self.head(x)


class _GptBlock(torch.nn.Module):
    """GPT-2's block: pre-norm causal self-attention with a key/value cache, then a GELU MLP."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.fc, self.out = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x, past):
        b, t, h = x.shape
        d = h // self.heads
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in self.qkv(self.ln1(x)).split(h, dim=2))
        if past is not None:  # the cache grows one step: a new tensor, the old one freed
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if t > 1:
            total = k.shape[2]
            causal = torch.ones(t, total, dtype=torch.bool, device=att.device).tril(total - t)
            att = att.masked_fill(~causal, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.proj(y)
        x = x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))
        return x, (k, v)


class Gpt2Like(torch.nn.Module):
    """GPT-2's shape with `layers` blocks; forward(ids, past) -> (last logits, new cache)."""

    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, max_len=1024):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, hidden), torch.nn.Embedding(max_len, hidden)
        self.blocks = torch.nn.ModuleList(_GptBlock(hidden, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(hidden)

    def forward(self, ids, past=None):
        start = 0 if past is None else past[0][0].shape[2]
        x = self.wte(ids) + self.wpe(torch.arange(start, start + ids.shape[1], device=ids.device).unsqueeze(0))
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            cache.append(kv)
        return self.ln(x)[:, -1] @ self.wte.weight.t(), cache


def generate(model, prompt, steps, step=None):
    """Greedy generation: the prompt's prefill, then steps - 1 decode steps of one token.
    Returns the `steps` generated tokens (batch x steps). `step(kind)`, when given, is a
    context manager entered around each model call with kind "prefill" or "decode"
    (replayalloc.torch.iteration with a key per kind, for instance)."""
    import contextlib

    def call(kind, *args):
        with (step(kind) if step else contextlib.nullcontext()):
            return model(*args)

    logits, past = call("prefill", prompt)
    token = logits.argmax(-1, keepdim=True)
    out = [token]
    for _ in range(steps - 1):
        logits, past = call("decode", token, past)
        token = logits.argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, 1)


def build(name, batch=1, seed=0, **options):
    """(model in eval mode, example input) for `name` at batch size `batch`.

    pre: options are those the module docstring lists for `name`.
    The seed is set first, then the model is made, then the input, so a given
    (name, batch, seed, options) gives the same weights and input every time.
    Raises ValueError for a name that is neither ours nor a torchvision classifier."""
    torch.manual_seed(seed)
    if name == "bert":
        seq, vocab = options.pop("seq", 128), options.get("vocab", 30522)
        return BertLike(**options).eval(), torch.randint(0, vocab, (batch, seq))
    if name == "lstm":
        seq, vocab = options.pop("seq", 64), options.get("vocab", 10000)
        return LstmLm(**options).eval(), torch.randint(0, vocab, (batch, seq))
    if name == "gpt2":
        seq, vocab = options.pop("seq", 16), options.get("vocab", 50257)
        return Gpt2Like(**options).eval(), torch.randint(0, vocab, (batch, seq))
    if name == "unet":
        image = options.pop("image", 256)
        return UNet(**options).eval(), torch.randn(batch, 3, image, image)
    import torchvision

    make = getattr(torchvision.models, name, None) if name.islower() and not name.startswith("_") else None
    if not callable(make):
        raise ValueError(f"unknown model {name!r}: one of {', '.join(NAMES)} or a torchvision.models classifier")
    image = options.pop("image", 224)
    return make(**options).eval(), torch.randn(batch, 3, image, image)  # weights=None: random


def training_target(kind, batch, hidden=768, seed=1):
    """The fixed target of every training step: "classes", `batch` class indices of
    1,000 (cross entropy); "vector", batch x hidden floats in [-0.5, 0.5) (MSE against a
    tanh output). From its own generator, so it does not move the global seed."""
    g = torch.Generator().manual_seed(seed)
    if kind == "classes":
        return torch.randint(0, 1000, (batch,), generator=g)
    return torch.rand(batch, hidden, generator=g) - 0.5


def training(name, model, batch):
    """(target, loss function, optimizer) of the benchmarks' training step for `model`,
    made by build(name, batch, ...). bert: MSE against a "vector" target, Adam (lr 1e-4);
    a torchvision classifier: cross entropy against "classes", SGD (lr 0.01, momentum
    0.9). Raises ValueError for the other models (lstm, unet, gpt2)."""
    if name == "bert":
        target = training_target("vector", batch, model.pool.out_features)
        return target, torch.nn.functional.mse_loss, torch.optim.Adam(model.parameters(), lr=1e-4)
    if name in ("lstm", "unet", "gpt2"):
        raise ValueError(f"no training step for {name!r}: bert or a torchvision classifier")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return training_target("classes", batch), torch.nn.functional.cross_entropy, optimizer


def main(argv):
    """models.py NAME [--batch B] [KEY=VALUE...]: builds the model, prints its size and input."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    name, batch, options = argv[0], 1, {}
    rest = argv[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--batch" and rest:
            batch = int(rest.pop(0))
        elif "=" in arg:
            k, v = arg.split("=", 1)
            options[k] = int(v)
        else:
            raise SystemExit(f"models.py: unexpected argument {arg!r} (see --help)")
    try:
        model, x = build(name, batch, **options)
    except (ValueError, TypeError) as e:  # an unknown name, an option the model does not take
        raise SystemExit(f"models.py: {e}")
    params = sum(p.numel() for p in model.parameters())
    print(f"{name} {options or ''}: {type(model).__name__}, {params} parameters, "
          f"input {tuple(x.shape)} {x.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
