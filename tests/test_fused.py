"""The fused path equals the unfused call: values and gradients for hidden, weight and bias."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import numloss.fused as fused_module
from numloss import DigitVocab, build_loss
from numloss.fused import default_chunk_size, fused_loss

VOCAB = DigitVocab(list(range(10)), decimal_point_id=10)
# every objective, and every form and option that changes its arithmetic
VARIANTS = {
    "mle": ("mle", {}),
    # DEL at alpha 1 rather than its small default, so that its term weighs in the comparisons
    "del": ("del", {"alpha": 1.0}),
    "del-tokens": ("del", {"alpha": 1.0, "normalize": "tokens", "place_weighting": "continuous"}),
    "del-centered": ("del", {"alpha": 1.0, "sigmoid_input": "centered"}),
    "del-detached": ("del", {"alpha": 1.0, "sigmoid_input": "centered", "p_weights": "detached"}),
    "ntl-was": ("ntl-was", {}),
    "ntl-was-reweigh": ("ntl-was", {"reweigh": True}),
    "ntl-mse": ("ntl-mse", {}),
    "ntl-mse-reweigh": ("ntl-mse", {"alpha": 0.3, "reweigh": True, "normalize": "tokens"}),
    "dist2": ("dist2", {}),
    "dist2-placed": ("dist2", {"place_weight": True, "tau": 2.0}),
    "dist2-author": ("dist2", {"place_weight": True, "point_ends_run": True, "normalize": "weights"}),
    "mixce": ("mixce", {}),
    "mixce-0.2": ("mixce", {"eta": 0.2}),
    "emo": ("emo", {}),
    "emo-gpt2": ("emo", {"form": "gpt2"}),
    "emo-cap": ("emo", {"form": "gpt2", "max_ratio": 3.0}),
    "emo-adaptive-cap": ("emo", {"max_ratio": 0.5}),
    "emo-mode2": ("emo", {"mode": 2}),
}
OBJECTIVES = list(VARIANTS)
# digit terms that read the NLL (NTL's reweigh) have no per-token rule: backward recomputes
RECOMPUTED = [key for key, (_, options) in VARIANTS.items() if options.get("reweigh")]
V, H = 48, 16
POINT = 10


def make_loss(key: str, weight: torch.Tensor):
    name, options = VARIANTS[key]
    if name == "emo":
        return build_loss(name, VOCAB, embedding=weight.detach(), **options)
    return build_loss(name, VOCAB, **options)


def labels_with_numbers() -> torch.Tensor:
    """[3, 13]: a prompt, numbers (one across the chunk-of-5 boundary), a row without digits."""
    generator = torch.Generator().manual_seed(3)
    labels = torch.randint(11, V, (3, 13), generator=generator)
    labels[0, :3] = -100
    labels[0, 3:9] = torch.tensor([1, 2, 3, POINT, 4, 5])  # "123.45" spans rows 3..8 (chunk edge at 5)
    labels[1, 0:2] = torch.tensor([7, 0])
    labels[1, 11:13] = torch.tensor([9, 9])  # touches the row end
    labels[1, 6] = -100
    return labels  # row 2: no digits at all


def inputs(dtype=torch.float32, bias=True, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 13, H, generator=generator).to(dtype).requires_grad_(True)
    weight = (torch.randn(V, H, generator=generator) / 2).to(dtype).requires_grad_(True)
    b = (torch.randn(V, generator=generator) / 4).to(dtype).requires_grad_(True) if bias else None
    return hidden, weight, b


def grads_of(out_loss, tensors):
    grads = torch.autograd.grad(out_loss, [t for t in tensors if t is not None])
    return [g.float() for g in grads]


def assert_same(reference, reference_grads, fused, fused_grads, rtol, atol):
    for field in ("loss", "ce", "aux", "digit_entropy"):
        torch.testing.assert_close(getattr(fused, field).float(), getattr(reference, field).float(), rtol=rtol, atol=atol)
    assert int(fused.num_tokens) == int(reference.num_tokens)
    assert int(fused.num_digits) == int(reference.num_digits)
    for got, want in zip(fused_grads, reference_grads, strict=True):
        scale = float(want.abs().max())
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol * max(scale, 1e-6))


# dtype, chunk size, bias, step-wide counts, strategy, tolerance
SETTINGS = {
    "float32": (torch.float32, 5, True, {}, "forward", 1e-5),
    "float32-one-chunk": (torch.float32, 64, True, {}, "forward", 1e-5),
    # both paths round the logits to bf16; gradients differ by bf16 rounding of the matmuls
    "bfloat16": (torch.bfloat16, 5, True, {}, "forward", 2e-2),
    "counts-no-bias": (torch.float32, 4, False, {"num_items_in_batch": 100, "num_digits_in_batch": 30}, "forward", 1e-5),
    "recompute": (torch.float32, 5, True, {}, "recompute", 1e-5),
    "float64": (torch.float64, 4, True, {}, "forward", 1e-12),
}


@pytest.mark.parametrize("name", OBJECTIVES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_values_and_gradients_equal_the_unfused_call(name, setting):
    dtype, chunk_size, bias, counts, strategy, tolerance = SETTINGS[setting]
    labels = labels_with_numbers()
    hidden, weight, b = inputs(dtype, bias)
    loss_fn = make_loss(name, weight)
    reference = loss_fn(F.linear(hidden, weight, b), labels, **counts)
    reference_grads = grads_of(reference.loss, (hidden, weight, b))
    fused = fused_loss(loss_fn, hidden, weight, labels, b, **counts, chunk_size=chunk_size, strategy=strategy)
    assert fused.loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert_same(reference, reference_grads, fused, grads_of(fused.loss, (hidden, weight, b)), tolerance, tolerance)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_gradient_is_computed_in_forward_unless_the_objective_has_no_rule(name, monkeypatch):
    """The fast route: the stored gradient is scaled, never recomputed; objectives without a
    per-token rule (NTL's reweigh reads the NLL at digit positions) recompute, exactly as well."""
    calls = []
    original = fused_module._recompute
    monkeypatch.setattr(fused_module, "_recompute", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert (make_loss(name, inputs()[1]).gradient_weights(torch.zeros(2), torch.zeros(2)) is None) == (name in RECOMPUTED)
    test_values_and_gradients_equal_the_unfused_call(name, "float32")  # hidden, weight and bias gradients
    assert bool(calls) == (name in RECOMPUTED)


@pytest.mark.parametrize("name", ["mle", "mixce", "emo", "emo-mode2"])
def test_other_uses_of_the_outputs_fall_back_to_recompute(name):
    """Back-propagating ce + loss (not the predicted gradient) still gives the exact gradient."""
    labels = labels_with_numbers()
    hidden, weight, b = inputs()
    loss_fn = make_loss(name, weight)
    reference = loss_fn(F.linear(hidden, weight, b), labels)
    want = grads_of(reference.loss + 3.0 * reference.ce + reference.aux, (hidden, weight, b))
    fused = loss_fn.from_hidden(hidden, weight, labels, b, chunk_size=5)
    got = grads_of(fused.loss + 3.0 * fused.ce + fused.aux, (hidden, weight, b))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_two_dimensional_inputs_equal_the_batched_call(name):
    labels = labels_with_numbers()
    hidden, weight, b = inputs()
    loss_fn = make_loss(name, weight)
    batched = loss_fn.from_hidden(hidden, weight, labels, b, chunk_size=5)
    # one row only, flattened: [T, H] with [T]
    flat = loss_fn.from_hidden(hidden[0], weight, labels[0], b, chunk_size=5)
    row = loss_fn(F.linear(hidden[0:1], weight, b), labels[0:1])
    torch.testing.assert_close(flat.loss, row.loss, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(batched.loss)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_ignored_empty_and_digitless_batches_are_finite_with_a_graph(name):
    hidden, weight, b = inputs()
    loss_fn = make_loss(name, weight)
    for labels, h in [(torch.full((2, 7), -100), hidden[:2, :7]), (torch.zeros(0, 13, dtype=torch.long), hidden[:0]),
                      (labels_with_numbers()[2:3], hidden[2:3])]:  # the last: a row without digits
        h = h.detach().requires_grad_(True)
        out = loss_fn.from_hidden(h, weight, labels, b, chunk_size=3)
        assert torch.isfinite(out.loss) and out.loss.requires_grad and int(out.num_digits) == 0
        if not bool((labels != -100).any()):
            assert out.loss.item() == 0.0 and out.aux.item() == 0.0 and int(out.num_tokens) == 0
            assert all(g.numel() == 0 or float(g.abs().max()) == 0.0 for g in grads_of(out.loss, (h, weight, b)))
        elif VARIANTS[name][0] not in ("mixce", "emo"):
            assert out.aux.item() == 0.0


def test_float64_gradcheck():
    """Objectives whose gradient is the derivative of their value (MixCE, EMO and detached DEL stop
    gradients)."""
    labels = labels_with_numbers()[:, :6]
    hidden, weight, bias = (t.detach()[:, :6].requires_grad_(True) if t.dim() == 3 else t for t in inputs(torch.float64))
    for name in [k for k, (n, o) in VARIANTS.items() if n not in ("mixce", "emo") and "p_weights" not in o]:
        loss_fn = make_loss(name, weight)
        torch.autograd.gradcheck(
            lambda h, w, b, f=loss_fn: f.from_hidden(h, w, labels, lm_head_bias=b, chunk_size=4).loss,
            (hidden, weight, bias),
            # a second backward of the same graph recomputes instead of reusing the stored
            # gradient, which differs in the last bits
            nondet_tol=1e-10,
            fast_mode=True,
        )


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any operator returns while active (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("name", ["del", "emo"])
def test_no_tensor_of_the_size_of_the_logits_is_ever_created(name):
    """N = 256 rows, V = 48, chunks of 8: nothing as large as N x V exists, in forward or backward."""
    rows, width, size = 256, V, 4
    labels = torch.randint(0, width, (rows,), generator=torch.Generator().manual_seed(0))
    hidden = torch.randn(rows, size, requires_grad=True)
    weight = torch.randn(width, size, requires_grad=True)
    loss_fn = make_loss(name, weight)
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
    loss_fn = make_loss("del", weight)
    labels = labels_with_numbers()
    with pytest.raises(ValueError, match="do not match"):
        loss_fn.from_hidden(hidden, weight, labels[:, :5])
    with pytest.raises(ValueError, match="hidden size"):
        loss_fn.from_hidden(hidden, weight[:, :8], labels)
    with pytest.raises(ValueError, match=r"\[V, H\]"):
        loss_fn.from_hidden(hidden, weight[0], labels)
    with pytest.raises(ValueError, match="lm_head_bias"):
        loss_fn.from_hidden(hidden, weight, labels, lm_head_bias=b[:5])
    with pytest.raises(TypeError, match="labels"):
        loss_fn.from_hidden(hidden, weight, labels.float())
    with pytest.raises(ValueError, match="chunk_size"):
        loss_fn.from_hidden(hidden, weight, labels, chunk_size=0)
    with pytest.raises(ValueError, match="columns but digit"):
        loss_fn.from_hidden(hidden, weight[:8], labels.clamp(max=7))
    with pytest.raises(ValueError, match="embedding has"):
        build_loss("emo", VOCAB, embedding=torch.randn(V + 1, H)).from_hidden(hidden, weight, labels)


def non_finite(case: str):
    hidden, weight, _ = inputs()
    hidden, weight = hidden.detach().clone(), weight.detach()
    if case == "fp16 overflow":  # finite in fp16, but the logits pass 65504
        return (hidden * 300).half(), (weight * 300).half()
    hidden[0, 5 if case == "scored" else 1, 0] = float("nan")  # row 0 starts with three ignored positions
    return hidden, weight


@pytest.mark.parametrize("case, says", [
    ("scored", "the hidden states hold NaN or inf at 1 scored position.*diverged"),
    ("ignored", "hidden states hold NaN or inf at 1 ignored position.*attention mask"),
    ("fp16 overflow", "fp16 logits overflowed.*65504.*bf16"),
])
def test_non_finite_inputs_are_one_line_naming_the_cause(case, says):
    hidden, weight = non_finite(case)
    with pytest.raises(FloatingPointError, match=says) as caught:
        make_loss("del", weight).from_hidden(hidden, weight, labels_with_numbers())
    assert "\n" not in str(caught.value)


def test_gpu_benchmark_runs_in_smoke_mode_on_cpu(capsys):
    """bench/gpu.py --smoke: every method runs, and the fused DEL gradient check passes."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "gpu.py"
    spec = importlib.util.spec_from_file_location("bench_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--smoke"])
    assert {row["method"] for row in rows} == {"ce", "del", "del-fused"}
    assert all(row["grad_check"] < 2e-2 and row["seconds"] > 0 for row in rows)
    assert "del/ce time" in capsys.readouterr().out
