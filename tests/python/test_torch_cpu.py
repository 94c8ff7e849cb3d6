"""replayalloc as libtorch's CPU allocator from Debian's python3 (unittest).

Outputs must be bit-identical with and without replay for ResNet-, MobileNet-,
BERT-like-encoder- and LSTM-shaped models (scripts/models.py's, small sizes; random
weights, fixed seed). Skips with a message when torch or torchvision is missing.
"""
import os
import sys
import unittest

import replayalloc

LIB = os.environ.get("REPLAYALLOC_TEST_LIBRARY")

try:
    import torch
    import torchvision  # noqa: F401  (models.py's ResNet and MobileNet)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    import models  # scripts/models.py
except ImportError as e:  # pragma: no cover - reported as a skip
    torch = None
    MISSING = str(e)

# The encoder and the LSTM at test size (models.py's defaults are BERT-base's and the benchmarks').
ENCODER = dict(layers=2, hidden=64, heads=4, ffn=128, vocab=1000)
LSTM = dict(layers=2, hidden=64, vocab=1000)
GPT2 = dict(layers=2, hidden=128, heads=4, vocab=2000, max_len=256)


@unittest.skipIf(torch is None, "torch/torchvision not installed (apt install python3-torch python3-torchvision)")
class TorchCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = {
            "resnet18": models.build("resnet18", 1, image=64),
            "mobilenet_v3_small": models.build("mobilenet_v3_small", 1, image=64),
            "encoder": models.build("bert", 2, seq=16, **ENCODER),
            "lstm": models.build("lstm", 2, seq=10, **LSTM),
        }
        with torch.no_grad():
            cls.reference = {k: cls.forward(m, x).clone() for k, (m, x) in cls.models.items()}
        replayalloc.load(LIB)
        import replayalloc.torch as rt
        rt.install_cpu()

    @staticmethod
    def forward(model, x):
        y = model(x)
        return y[0] if isinstance(y, tuple) else y

    def test_outputs_are_bit_identical_and_the_steady_state_replays(self):
        import replayalloc.torch as rt
        for name, (model, x) in self.models.items():
            with self.subTest(model=name), torch.no_grad():
                for i in range(7):
                    if i == 3:
                        warm = rt.stats()
                    with rt.iteration(f"py/{name}"):
                        y = self.forward(model, x)
                    self.assertTrue(torch.equal(y, self.reference[name]), f"{name} iteration {i}")
                s = rt.stats()
                self.assertGreater(s["slab_hits"], warm["slab_hits"], name)
                self.assertEqual(s["fallbacks"], warm["fallbacks"], f"{name}: steady state fell back")
                print(f"{name}: {s['slab_hits'] - warm['slab_hits']} slab hits in 4 replayed iterations")

    def test_a_variable_sequence_length_replays_from_one_plan(self):
        # A transformer encoder whose sequence length is drawn per request (16..256),
        # one key (Note [Envelope]): outputs bit-identical to the reference computed
        # before replayalloc was installed, and after the largest shape has been seen
        # (and recorded once more) at least 95% of the requests of an iteration that
        # go to the plan (slab hits + fallbacks) are served from the slab.
        import random
        import replayalloc.torch as rt
        model, _ = models.build("bert", 2, seed=1, **ENCODER)
        rng = random.Random(5)
        seqs = [256, 16] + [rng.randint(16, 256) for _ in range(38)]
        inputs = {t: torch.randint(0, ENCODER["vocab"], (2, t)) for t in sorted(set(seqs))}
        rt.uninstall_cpu()
        with torch.no_grad():
            reference = {t: model(x).clone() for t, x in inputs.items()}
        rt.install_cpu()
        steady = None
        with torch.no_grad():
            for i, t in enumerate(seqs):
                if i == 4:
                    steady = rt.stats()
                with rt.iteration("py/encoder-varlen"):
                    y = model(inputs[t])
                self.assertTrue(torch.equal(y, reference[t]), f"sequence length {t}, iteration {i}")
        s = rt.stats()
        hits = s["slab_hits"] - steady["slab_hits"]
        misses = s["fallbacks"] - steady["fallbacks"]
        share = hits / max(1, hits + misses)
        print(f"encoder, sequence length 16..256: {100 * share:.1f}% of {hits + misses} planned requests "
              f"from the slab over 36 iterations; plans {s['plans']}, grown {s['plans_grown']}")
        self.assertGreaterEqual(share, 0.95)

    def test_generation_replays_every_decode_step(self):
        # A GPT-2-shaped generation loop (scripts/models.py's, 2 layers, random weights):
        # prompts of 4..48 tokens, 4..48 tokens generated greedily per request, the key
        # and value caches grown by torch.cat. One iteration per model call, a key for
        # the prefill and one for the decode steps (the sequence of a whole request
        # changes with its length; a step's only in its sizes: Note [Envelope]). The
        # tokens are identical to the default allocator's, and after a third of the
        # requests at least 90% of the planned requests are served from the slab (the
        # rest: shapes longer than any seen so far). The caches, kept from one step to
        # the next, outlive their iteration and are served outside the slab.
        import random
        import replayalloc.torch as rt
        model, _ = models.build("gpt2", 1, seed=2, **GPT2)
        rng = random.Random(11)
        requests = [(torch.randint(0, GPT2["vocab"], (1, rng.randint(4, 48))), rng.randint(4, 48))
                    for _ in range(30)]
        rt.uninstall_cpu()
        with torch.no_grad():
            reference = [models.generate(model, p, n) for p, n in requests]
        rt.install_cpu()
        steady = None
        with torch.no_grad():
            for i, (prompt, n) in enumerate(requests):
                if i == 10:
                    steady = rt.stats()
                tokens = models.generate(model, prompt, n, step=lambda kind: rt.iteration("py/gpt2/" + kind))
                self.assertTrue(torch.equal(tokens, reference[i]), f"request {i}: other tokens")
        s = rt.stats()
        hits = s["slab_hits"] - steady["slab_hits"]
        misses = s["fallbacks"] - steady["fallbacks"]
        every = s["allocations"] - steady["allocations"]
        share = hits / max(1, hits + misses)
        print(f"gpt2 generation, 20 requests after warm-up: {100 * share:.1f}% of {hits + misses} planned "
              f"requests from the slab ({100 * hits / max(1, every):.1f}% of all {every}, the rest the caches "
              f"that outlive a step); plans {s['plans']}, grown {s['plans_grown']}")
        self.assertGreaterEqual(share, 0.90)

    def test_generation_one_iteration_per_request(self):
        # The same kind of loop with the whole request one iteration of one key (issue
        # 31; Note [Periodic iterations] in allocator/trace/period.h): a 4-layer model,
        # prompts of 8..64 tokens and 8..32 new tokens per request. Requests of every
        # length share one regime (prefix serving for shorter ones, the plan extended by
        # steps for longer ones), and the caches, which live within the request, are
        # planned like any other block. Tokens identical to the default allocator's;
        # after a warm-up of 12 requests, at least 90% of each later request's
        # allocations served from the slab.
        import random
        import replayalloc.torch as rt
        options = dict(GPT2, layers=4)
        model, _ = models.build("gpt2", 1, seed=3, **options)
        rng = random.Random(7)
        requests = []
        for _ in range(36):
            prompt = torch.randint(0, options["vocab"], (1, rng.randint(8, 64)))
            requests.append((prompt, rng.randint(8, 32)))
        rt.uninstall_cpu()
        with torch.no_grad():
            reference = [models.generate(model, p, n) for p, n in requests]
        rt.install_cpu()
        worst, total_hits, total = 1.0, 0, 0
        with torch.no_grad():
            for i, (prompt, n) in enumerate(requests):
                before = rt.stats()
                with rt.iteration("py/gpt2/request"):
                    tokens = models.generate(model, prompt, n)
                self.assertTrue(torch.equal(tokens, reference[i]), f"request {i}: other tokens")
                if i < 12:
                    continue
                s = rt.stats()
                hits = s["slab_hits"] - before["slab_hits"]
                every = s["allocations"] - before["allocations"] - (s["below_min_size"] - before["below_min_size"])
                worst = min(worst, hits / max(1, every))
                total_hits, total = total_hits + hits, total + every
        s = rt.stats()
        print(f"gpt2 generation, one iteration per request, 24 requests after 12: {100 * total_hits / total:.1f}% "
              f"of {total} allocations from the slab (worst request {100 * worst:.1f}%); plans {s['plans']}, "
              f"grown {s['plans_grown']}, recordings {s['recordings']}")
        self.assertGreaterEqual(worst, 0.90)

    def test_a_mismatched_torch_is_refused_clearly(self):
        import replayalloc.torch as rt
        self.assertEqual(rt._version_tuple("1.13.0a0+gitabc"), (1, 13, 0))
        self.assertEqual(rt._version_tuple("2.11.0+cu130"), (2, 11, 0))
        real = torch.__version__
        try:
            torch.__version__ = "9.9.9"
            with self.assertRaises(RuntimeError) as cm:
                rt.install_cpu()
            self.assertIn("built against libtorch", str(cm.exception))
        finally:
            torch.__version__ = real


if __name__ == "__main__":
    unittest.main()
