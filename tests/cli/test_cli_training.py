"""Training steps: the split of report and predict (Note [Training memory]) on a hand-made
step whose bytes per part are known, and on a real torch 1.13 step.
"""
import json
import os
import unittest

from cli_support import HEADER, Base, chain_trace, run


def training_trace(batch):
    """CSV of a training step's first iteration, as tests/cli/training_test.cc builds it
    (Note [Training memory]): Linear(4, 8), ReLU, Linear(8, 2), MSE loss, SGD with momentum,
    built inside the step: 232 bytes each of parameters, gradients and momentum buffers;
    saved activations 40 * batch + 4 bytes; the loss 4 bytes."""
    b, never = batch, None
    rows = [
        (128, 0, never, "aten::empty"), (32, 1, never, "aten::empty"), (64, 2, never, "aten::empty"),
        (8, 3, never, "aten::empty"), (256, 4, 5, "aten::addmm"), (32 * b, 6, 8, "aten::addmm"),
        (32 * b, 7, 20, "aten::clamp_min"), (8 * b, 9, 16, "aten::addmm"), (4, 10, never, "aten::mse_loss"),
        (4, 11, 17, "aten::ones_like"), (8 * b, 12, 15, "aten::mse_loss_backward"), (64, 13, 39, "aten::mm"),
        (8, 14, 40, "aten::sum"), (32 * b, 18, 21, "aten::mm"), (32 * b, 19, 24, "aten::threshold_backward"),
        (128, 22, 41, "aten::mm"), (32, 23, 42, "aten::sum"), (512, 25, 26, "aten::mm"),
        (4, 27, 30, "aten::zeros"), (288, 28, 29, "Optimizer.step#SGD.step"), (128, 31, never, "aten::clone"),
        (32, 32, never, "aten::clone"), (64, 33, never, "aten::clone"), (8, 34, never, "aten::clone"),
        (4, 35, 38, "aten::zeros"), (288, 36, 37, "Optimizer.zero_grad#SGD.zero_grad"),
    ]
    return HEADER + "".join(f"{i},{size},16,{a},{'' if f is None else f},{op}\n"
                            for i, (size, a, f, op) in enumerate(rows))


# One training step of torch 1.13 on the CPU, recorded through replayalloc's libtorch
# integration (Linear(64, 128), ReLU, Linear(128, 10), cross-entropy, batch 8, SGD with
# momentum 0.9, first step, zero_grad(set_to_none=True); the model built before the
# iteration) and saved with replayalloc_save_trace().
TORCH_STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch113_mlp_sgd_step.csv")


class Training(Base):
    """The training split of report and predict (Note [Training memory])."""

    def parts(self, training):
        return {p["name"]: p for p in training["parts"]}

    def test_report_splits_a_training_step(self):
        t = self.write("train16.csv", training_trace(16))
        rep = json.loads(run("report", t, "--json", check=0).stdout)
        tr = rep["training"]
        self.assertEqual((tr["backward_at"], tr["optimizer_at"], tr["end"]), (12, 28, 43))
        parts = self.parts(tr)
        self.assertEqual([p["name"] for p in tr["parts"]],
                         ["parameters", "gradients", "optimizer_state", "saved_activations", "outputs",
                          "workspace", "temporaries"])
        expect = {"parameters": (4, 232, 232), "gradients": (4, 232, 72), "optimizer_state": (4, 232, 0),
                  "saved_activations": (3, 40 * 16 + 4, 512), "outputs": (1, 4, 4),
                  "workspace": (4, 256 + 512 + 288 + 288, 0), "temporaries": (6, 104 * 16 + 8, 1024)}
        for name, (count, total, at_peak) in expect.items():
            self.assertEqual((parts[name]["count"], parts[name]["total_bytes"], parts[name]["at_peak_bytes"]),
                             (count, total, at_peak), name)
        self.assertEqual(tr["peak_bytes"], 1844)
        self.assertEqual(tr["peak_bytes"], rep["peak_live_bytes"])
        self.assertEqual((tr["peak_at"], tr["peak_phase"], tr["peak_op"]), (19, "backward", "aten::threshold_backward"))
        self.assertEqual(tr["held_after_bytes"], 232 + 4 + 232)
        self.assertEqual(sum(p["at_slab_peak_bytes"] for p in tr["parts"]), rep["lower_bound_bytes"])
        text = run("report", t, check=0).stdout
        for words in ("training step  forward [0, 12), backward [12, 28), optimizer [28, 43)",
                      "step peak", "1.80 KiB  at event 19 (backward), set by aten::threshold_backward",
                      "training split", "saved activations", "optimizer state", "held after"):
            self.assertIn(words, text)
        self.assertRegex(text, r"\n  saved activations +3 +644 B +512 B +27\.8% +512 B\n")
        self.assertRegex(text, r"\n  optimizer state +4 +232 B +0 B +0\.0% +0 B\n")

        given = json.loads(run("report", t, "--json", "--parameters-bytes", "1000", check=0).stdout)["training"]
        self.assertEqual(self.parts(given)["parameters"]["total_bytes"], 1232)
        self.assertEqual(given["parameters_given_bytes"], 1000)
        self.assertEqual(given["peak_bytes"], 2844)
        for bad in ("-5", "lots", "1.5", "1e3", ""):
            p = run("report", t, "--parameters-bytes", bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--parameters-bytes", p.stderr)

    def test_inference_has_no_split(self):
        t = self.write("chain.csv", chain_trace(2))
        self.assertIsNone(json.loads(run("report", t, "--json", check=0).stdout)["training"])
        text = run("report", t, check=0).stdout
        self.assertNotIn("training", text)
        self.assertIn("by kind", text)

    def test_a_real_torch_step(self):
        rep = json.loads(run("report", TORCH_STEP, "--json", check=0).stdout)
        tr = rep["training"]
        parts = self.parts(tr)
        # 64 x 128 + 128 + 128 x 10 + 10 floats: 38,440 bytes of gradients and of momentum.
        self.assertEqual((parts["gradients"]["count"], parts["gradients"]["total_bytes"]), (4, 38440))
        self.assertEqual((parts["optimizer_state"]["count"], parts["optimizer_state"]["total_bytes"]), (4, 38440))
        # The ReLU's output (8 x 128 floats), log-softmax's (8 x 10), nll_loss's total
        # weight, backward()'s seed.
        self.assertEqual((parts["saved_activations"]["count"], parts["saved_activations"]["total_bytes"]),
                         (4, 4096 + 320 + 4 + 4))
        self.assertEqual((parts["outputs"]["count"], parts["outputs"]["total_bytes"]), (1, 4))
        self.assertEqual(parts["parameters"]["count"], 0)  # built before the iteration
        self.assertEqual((tr["peak_phase"], tr["peak_op"]), ("optimizer", "Optimizer.zero_grad#SGD.zero_grad"))
        text = run("report", TORCH_STEP, "--parameters-bytes", "38440", check=0).stdout
        self.assertIn("(parameters: 37.5 KiB given with --parameters-bytes, live all along)", text)

    def test_predict_splits_the_predicted_step(self):
        t2, t8, t16 = (self.write(f"train{b}.csv", training_trace(b)) for b in (2, 8, 16))
        p = json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--json",
                           check=0).stdout)
        truth = json.loads(run("report", t16, "--json", check=0).stdout)["training"]
        self.assertEqual(p["method"], "per_allocation")
        self.assertEqual(p["predicted"]["training"], truth)
        self.assertEqual(self.parts(p["predicted"]["training"])["saved_activations"]["total_bytes"], 644)
        for recording, b in zip(p["inputs"], (2, 8)):
            parts = self.parts(recording["measured"]["training"])
            self.assertEqual(parts["saved_activations"]["total_bytes"], 40 * b + 4)
            self.assertEqual(parts["gradients"]["total_bytes"], 232)
            self.assertEqual(parts["optimizer_state"]["total_bytes"], 232)
        p = json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--json",
                           "--parameters-bytes", "1000", check=0).stdout)
        self.assertEqual(p["predicted"]["training"]["peak_bytes"], 2844)
        text = run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", check=0).stdout
        self.assertRegex(text, r"\n  training step +batch 2 +batch 8 +batch 16\*\n")
        self.assertRegex(text, r"\n  saved activations +\S+ \S+ +\S+ \S+ +512 B\n")
        self.assertRegex(text, r"\n  step peak +\S+ \S+ +\S+ \S+ +1\.80 KiB\n")
        self.assertIn("peak at batch 16*: event 19 (backward), set by aten::threshold_backward", text)
        # Forced linear peak: no predicted split, and it says so.
        text = run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16", "--method", "linear_peak",
                   check=0).stdout
        self.assertIn("the predicted split needs the per-allocation fit", text)
        self.assertIsNone(json.loads(run("predict", "--trace", f"2={t2}", "--trace", f"8={t8}", "--at", "16",
                                         "--method", "linear_peak", "--json", check=0).stdout)
                          ["predicted"]["training"])
        # Inference recordings: no training block.
        c1, c8 = (self.write(f"c{b}.csv", chain_trace(b)) for b in (1, 8))
        self.assertNotIn("training", run("predict", "--trace", f"1={c1}", "--trace", f"8={c8}", "--at", "4",
                                         check=0).stdout)


if __name__ == "__main__":
    unittest.main()
