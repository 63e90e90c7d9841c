"""The fused path equals the unfused call: values and gradients for hidden, weight and bias."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import numloss.fused as fused_module
from numloss import build_loss
from numloss.fused import default_chunk_size, fused_loss
from test_losses import BATCHES, CASES, IDS, VOCAB, WIDTHS, loss_for

# every objective, and every form and option that changes its arithmetic (test_losses.CASES)
VARIANTS = dict(zip(IDS, CASES, strict=True))
# digit terms that read the NLL (NTL's reweigh) have no per-token rule: backward recomputes
RECOMPUTED = [key for key, (_, options, _) in VARIANTS.items() if options.get("reweigh")]
H = 16


def make_loss(key: str, vocab: str = "digits"):
    name, options, alpha = VARIANTS[key]
    # at alpha 1 rather than DEL's small default, so that its term weighs in the comparisons
    return loss_for(name, {**options, "alpha": 1.0} if name == "del" else options, vocab)


def inputs(dtype=torch.float32, bias=True, seed=0, vocab="digits"):
    """hidden [5, 9, H] for test_losses.BATCHES (numbers across chunk edges, a row without digits,
    one all ignored), the head's weight and bias."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(*BATCHES[vocab].shape, H, generator=generator).to(dtype).requires_grad_(True)
    weight = (torch.randn(WIDTHS[vocab], H, generator=generator) / 2).to(dtype).requires_grad_(True)
    b = (torch.randn(WIDTHS[vocab], generator=generator) / 4).to(dtype).requires_grad_(True) if bias else None
    return hidden, weight, b


def grads_of(out_loss, tensors):
    grads = torch.autograd.grad(out_loss, [t for t in tensors if t is not None])
    return [g.float() for g in grads]


# dtype, chunk size, bias, step-wide counts, strategy, tolerance, vocabulary
SETTINGS = {
    "float32": (torch.float32, 5, True, {}, "forward", 1e-5, "digits"),
    "float32-one-chunk": (torch.float32, 64, True, {}, "forward", 1e-5, "digits"),
    # both paths round the logits to bf16; gradients differ by bf16 rounding of the matmuls
    "bfloat16": (torch.bfloat16, 5, True, {}, "forward", 2e-2, "digits"),
    "counts-no-bias": (torch.float32, 4, False, {"num_items_in_batch": 100, "num_digits_in_batch": 30}, "forward", 1e-5, "digits"),
    "recompute": (torch.float32, 5, True, {}, "recompute", 1e-5, "digits"),
    "float64": (torch.float64, 4, True, {}, "forward", 1e-12, "digits"),
    "float64-number-tokens": (torch.float64, 7, True, {}, "forward", 1e-12, "chunks"),
}


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("setting", SETTINGS)
def test_values_and_gradients_equal_the_unfused_call(name, setting, monkeypatch):
    """The fast route: the gradient stored in forward is scaled, never recomputed; objectives
    without a per-token rule (NTL's reweigh reads the NLL at digit positions) recompute, exactly as
    well (and every one does with strategy="recompute")."""
    dtype, chunk_size, bias, counts, strategy, tolerance, vocab = SETTINGS[setting]
    calls = []
    original = fused_module._recompute
    monkeypatch.setattr(fused_module, "_recompute", lambda *a, **k: calls.append(1) or original(*a, **k))
    labels = BATCHES[vocab]
    hidden, weight, b = inputs(dtype, bias, vocab=vocab)
    loss_fn = make_loss(name, vocab)
    assert (loss_fn.gradient_weights(torch.zeros(2), torch.zeros(2)) is None) == (name in RECOMPUTED)
    reference = loss_fn(F.linear(hidden, weight, b), labels, **counts)
    fused = fused_loss(loss_fn, hidden, weight, labels, b, **counts, chunk_size=chunk_size, strategy=strategy)
    assert fused.loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    for field in ("loss", "ce", "aux", "digit_entropy", "num_tokens", "num_digits"):
        torch.testing.assert_close(getattr(fused, field).float(), getattr(reference, field).float(), rtol=tolerance, atol=tolerance)
    # under an outer scale
    for got, want in zip(*(grads_of(1.5 * out.loss, (hidden, weight, b)) for out in (fused, reference)), strict=True):
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance * max(float(want.abs().max()), 1e-6))
    assert bool(calls) == (name in RECOMPUTED or strategy == "recompute")


@pytest.mark.parametrize("name", ["mle-default", "mixce-default", "emo-default", "emo-form=gpt2-mode=2"])
def test_other_uses_of_the_outputs_fall_back_to_recompute(name):
    """Back-propagating ce + loss (not the predicted gradient) still gives the exact gradient."""
    labels = BATCHES["digits"]
    hidden, weight, b = inputs()
    loss_fn = make_loss(name)
    reference = loss_fn(F.linear(hidden, weight, b), labels)
    want = grads_of(reference.loss + 3.0 * reference.ce + reference.aux, (hidden, weight, b))
    fused = loss_fn.from_hidden(hidden, weight, labels, b, chunk_size=5)
    got = grads_of(fused.loss + 3.0 * fused.ce + fused.aux, (hidden, weight, b))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any operator returns while active (forward and backward)."""

    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("name", ["del", "emo"])
def test_no_tensor_of_the_size_of_the_logits_is_ever_created(name):
    """N = 256 rows, V = 48, chunks of 8: nothing as large as N x V exists, in forward or backward."""
    rows, width, size = 256, 48, 4
    labels = torch.randint(0, width, (rows,), generator=torch.Generator().manual_seed(0))
    hidden = torch.randn(rows, size, requires_grad=True)
    weight = torch.randn(width, size, requires_grad=True)
    loss_fn = build_loss(name, VOCAB, **({"embedding": weight.detach()} if name == "emo" else {}))
    with LargestTensor() as unfused:
        loss_fn(F.linear(hidden, weight), labels).loss.backward()
    with LargestTensor() as fused:
        loss_fn.from_hidden(hidden, weight, labels, chunk_size=8).loss.backward()
    assert unfused.largest >= rows * width  # the watcher sees the logits when they exist
    assert fused.largest <= max(8 * width, rows * size, width * size)


def test_default_chunk_size_depends_on_vocab_and_hidden():
    assert default_chunk_size(151936, 896) == (1 << 24) // (151936 + 896)
    assert default_chunk_size(32000, 4096) > default_chunk_size(151936, 4096)
    assert default_chunk_size(10**9, 10) == 16


def test_bad_shapes_are_explained():
    hidden, weight, b = inputs()
    loss_fn = make_loss("del-default")
    labels = BATCHES["digits"]
    with pytest.raises(ValueError, match="do not match"):
        loss_fn.from_hidden(hidden, weight, labels[:, :5])
    with pytest.raises(ValueError, match="hidden size"):
        loss_fn.from_hidden(hidden, weight[:, :8], labels)
    with pytest.raises(ValueError, match=r"\[V, H\]"):
        loss_fn.from_hidden(hidden, weight[0], labels)
    with pytest.raises(ValueError, match="lm_head_bias"):
        loss_fn.from_hidden(hidden, weight, labels, lm_head_bias=b[:5])
    with pytest.raises(ValueError, match="chunk_size"):
        loss_fn.from_hidden(hidden, weight, labels, chunk_size=0)
    with pytest.raises(ValueError, match="columns but digit"):
        loss_fn.from_hidden(hidden, weight[:8], labels.clamp(max=7))
    with pytest.raises(ValueError, match="embedding has"):
        build_loss("emo", VOCAB, embedding=torch.randn(WIDTHS["digits"] + 1, H)).from_hidden(hidden, weight, labels)


@pytest.mark.parametrize("case, says", [
    ("scored", "the hidden states hold NaN or inf at 1 scored position.*diverged"),
    ("ignored", "hidden states hold NaN or inf at 1 ignored position.*attention mask"),
    ("fp16 overflow", "fp16 logits overflowed.*65504.*bf16"),
])
def test_non_finite_inputs_are_one_line_naming_the_cause(case, says):
    hidden, weight, _ = inputs()
    hidden, weight = hidden.detach().clone(), weight.detach()
    if case == "fp16 overflow":  # finite in fp16, but the logits pass 65504
        hidden, weight = (hidden * 300).half(), (weight * 300).half()
    else:  # row 0 starts with two ignored positions
        hidden[0, 5 if case == "scored" else 1, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=says) as caught:
        make_loss("del-default").from_hidden(hidden, weight, BATCHES["digits"])
    assert "\n" not in str(caught.value)


def test_gpu_benchmark_runs_in_smoke_mode_on_cpu(capsys):
    """bench/gpu.py --smoke: every method runs, and the fused DEL gradient check passes."""
    import runpy
    from pathlib import Path

    rows = runpy.run_path(str(Path(__file__).resolve().parents[1] / "bench" / "gpu.py"))["main"](["--smoke"])
    assert {row["method"] for row in rows} == {"ce", "del", "del-fused"}
    assert all(row["grad_check"] < 2e-2 and row["seconds"] > 0 for row in rows)
    assert "del/ce time" in capsys.readouterr().out
