"""DEL's forms: `sigmoid_input="centered"` is invariant to a common shift of the logits and equals
"raw" at zero-mean digit logits; `p_weights="detached"` has the released term's value with p held
constant in the gradient; the closed-form pushdown and the digit diagnostics say what each does.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from numloss import build_loss
from numloss.digits import find_digits
from numloss.losses.del_terms import del_pushdown, del_term, sigmoid_logits
from numloss.losses.number_tokens import slot_logits
from test_losses import BATCHES, DIGIT_IDS, VOCAB, VOCABS, WIDTH, WIDTHS


def batch_of(vocab: str, seed: int, dtype: torch.dtype = torch.float64):
    """(the vocabulary, logits around a random offset in `dtype`, the labels) of test_losses'
    batch on `vocab`: digits, text, ignored positions, a row without digits; on "chunks" also
    number tokens of an incomplete group (digits absent from a slot)."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*BATCHES[vocab].shape, WIDTHS[vocab], generator=generator, dtype=torch.float64)
    logits += 20 * torch.rand(1, generator=generator, dtype=torch.float64)
    return VOCABS[vocab], logits.to(dtype), BATCHES[vocab]


def value_and_grad(loss_fn, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.clone().requires_grad_(True)
    out = loss_fn(x, labels)
    out.loss.backward()
    return out.loss.detach(), x.grad


# -- centred: shift invariance, and raw at zero mean ----------------------------------------------


@settings(max_examples=24, deadline=None, derandomize=True)
@given(st.sampled_from(list(VOCABS)), st.integers(0, 2**16), st.floats(-50, 50),
       st.sampled_from([{}, {"distance": "l1", "place_weighting": "continuous", "normalize": "tokens"}]))
@example("digits", 0, -50.0, {})
@example("chunks", 1, 50.0, {})
def test_centered_is_invariant_to_a_common_shift_of_the_logits(name, seed, shift, options):
    for dtype, rtol, atol in ((torch.float64, 1e-10, 1e-12), (torch.float32, 1e-5, 1e-6)):
        vocab, logits, labels = batch_of(name, seed, dtype)
        loss_fn = build_loss("del", vocab, alpha=0.7, sigmoid_input="centered", **options)
        value, grad = value_and_grad(loss_fn, logits, labels)
        shifted_value, shifted_grad = value_and_grad(loss_fn, logits + shift, labels)
        torch.testing.assert_close(shifted_value, value, rtol=rtol, atol=atol)
        torch.testing.assert_close(shifted_grad, grad, rtol=rtol, atol=atol)
    if abs(shift) >= 1:  # the control: raw DEL sees the shift, so the property tells the two apart
        raw = build_loss("del", vocab, alpha=0.7, sigmoid_input="raw", **options)
        assert abs(float(value_and_grad(raw, logits + shift, labels)[0] - value_and_grad(raw, logits, labels)[0])) > 1e-3


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("seed", range(3))
def test_at_zero_mean_centered_equals_raw_up_to_a_common_gradient_shift(name, seed):
    """On the slot marginals z_j(k) the term reads (single digits: the ten digit logits), with the
    mean over the digits the slot can hold; absent digits' gradients are 0 in both."""
    vocab, logits, labels = batch_of(name, seed)
    digits = find_digits(labels, vocab, logits.shape[-1])
    table = vocab.number_table()
    z, support = slot_logits(logits.reshape(-1, logits.shape[-1])[digits.rows][:, table.columns], digits, table)
    held = support.double()
    z = (z - (z * held).sum(-1, keepdim=True) / held.sum(-1, keepdim=True)).detach()
    z = torch.where(support, z, z.amax(-1, keepdim=True) - 1e4)  # absent digits as slot_logits sets them
    u = torch.rand(z.shape[0], dtype=torch.float64)
    grads = {}
    for mode in ("raw", "centered"):
        x = z.clone().requires_grad_(True)
        term = del_term(x, digits.target, u, sigmoid_input=mode, support=support)
        term.sum().backward()
        grads[mode] = (term.detach(), x.grad)
    torch.testing.assert_close(grads["centered"][0], grads["raw"][0], rtol=1e-12, atol=1e-12)
    difference = grads["centered"][1] - grads["raw"][1]
    common = (difference * held).sum(-1, keepdim=True) / held.sum(-1, keepdim=True)
    torch.testing.assert_close(difference * held, common * held, rtol=0, atol=1e-13)
    assert float((difference * ~support).abs().max()) == 0.0
    assert bool((~support).any()) == (name == "chunks")  # its three-digit group leaves digits absent
    assert float(common.abs().max()) > 1e-6  # the shift is not zero: the two gradients do differ


def test_centered_hand_worked():
    """z = (2, 0, ..., 0), target 0, u = 1: the mean is 0.2, so the sigmoid reads 1.8 and -0.2."""
    z = torch.tensor([[2.0] + [0.0] * 9], dtype=torch.float64)
    total = math.exp(2) + 9
    p_target, p_other = math.exp(2) / total, 1 / total
    # BCE(sigmoid(s), 1) = softplus(-s), BCE(sigmoid(s), 0) = softplus(s) = log(1 + e^s)
    centered = (p_target * math.log1p(math.exp(-1.8)) + 9 * p_other * math.log1p(math.exp(-0.2))) / 10
    raw = (p_target * math.log1p(math.exp(-2.0)) + 9 * p_other * math.log(2)) / 10
    y, u = torch.tensor([0]), torch.ones(1, dtype=torch.float64)
    assert float(del_term(z, y, u, sigmoid_input="centered")) == pytest.approx(centered, rel=1e-14)
    assert float(del_term(z, y, u, sigmoid_input="raw")) == pytest.approx(raw, rel=1e-14)
    assert sigmoid_logits(z, "centered")[0].tolist() == pytest.approx([1.8] + [-0.2] * 9)


# -- detached: the released value, p constant in the gradient ----------------------------------------


def hand_gradient(z: torch.Tensor, y: torch.Tensor, u: torch.Tensor, sigmoid_input: str) -> torch.Tensor:
    """d term / d z [M, 10] with p constant, written out (no autograd): u/10 * sum_k p_k
    (sigmoid(s_k) - [k == y]) d s_k / d z_j, d s_k / d z_j = [k == j] (raw), [k == j] - 1/10 (centred)."""
    p = torch.softmax(z, -1)
    s = z - z.mean(-1, keepdim=True) if sigmoid_input == "centered" else z
    g = p * (torch.sigmoid(s) - F.one_hot(y, 10).to(z.dtype))
    if sigmoid_input == "centered":
        g = g - g.sum(-1, keepdim=True) / 10
    return u[:, None] / 10 * g


@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
@pytest.mark.parametrize("offset", [-30.0, 0.0, 30.0])
def test_detached_term_value_equals_the_released_term_and_its_gradient_the_hand_derivative(sigmoid_input, offset):
    generator = torch.Generator().manual_seed(int(offset) + 7)
    z = torch.randn(50, 10, generator=generator, dtype=torch.float64) * 3 + offset
    y = torch.randint(0, 10, (50,), generator=generator)
    u = torch.rand(50, generator=generator, dtype=torch.float64) * 10
    x = z.clone().requires_grad_(True)
    value = del_term(x, y, u, sigmoid_input=sigmoid_input, p_weights="detached")
    torch.testing.assert_close(value, del_term(z, y, u, sigmoid_input=sigmoid_input), rtol=0, atol=0)
    value.sum().backward()
    torch.testing.assert_close(x.grad, hand_gradient(z, y, u, sigmoid_input), rtol=1e-12, atol=1e-15)
    attached = z.clone().requires_grad_(True)
    del_term(attached, y, u, sigmoid_input=sigmoid_input).sum().backward()
    assert not torch.allclose(attached.grad, x.grad)  # the option changes the gradient, not the value


# -- pushdown and the diagnostics ---------------------------------------------------------------


def autograd_pushdown(z, y, distance=None, sigmoid_input="raw", p_weights="attached"):
    x = z.clone().requires_grad_(True)
    del_term(x, y, torch.ones(len(y), dtype=z.dtype), distance, sigmoid_input, None, p_weights).sum().backward()
    others = 1.0 - F.one_hot(y, 10).to(x.grad.dtype)
    return x.grad.gather(1, y[:, None]).squeeze(1) > (x.grad * others).sum(-1) / others.sum(-1)


@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
@pytest.mark.parametrize("distance, p_weights", [(None, "attached"), ("l1", "attached"), (None, "detached")])
@pytest.mark.parametrize("scale, offset", [(0.3, 0.0), (1.0, 0.0), (3.0, -3.0), (3.0, 30.0), (10.0, -10.0), (30.0, 0.0)])
def test_pushdown_in_closed_form_agrees_with_autograd(sigmoid_input, distance, p_weights, scale, offset):
    """Centred never pushes the target down where all ten digits are possible, at any scale and
    any offset of a row (drawn per row around `offset`)."""
    generator = torch.Generator().manual_seed(int(scale * 7 + offset))
    z = torch.randn(10000, 10, generator=generator, dtype=torch.float64) * scale + offset
    z += torch.randn(10000, 1, generator=generator, dtype=torch.float64) * (30 if sigmoid_input == "centered" else 0)
    y = torch.randint(0, 10, (10000,), generator=generator)
    expected = autograd_pushdown(z, y, distance, sigmoid_input, p_weights)
    assert torch.equal(del_pushdown(z, y, distance, sigmoid_input, None, p_weights), expected)
    if p_weights == "detached" or sigmoid_input == "centered":  # detached: only the BCE path is left
        assert not bool(expected.any())
    elif offset < 0:
        assert bool(expected.any())  # the cases hold positions that are pushed down


@pytest.mark.parametrize("name, sigmoid_input", [("mle", None), ("ntl-was", None), ("del", "raw"), ("del", "centered")])
def test_the_diagnostics_equal_an_independent_computation_and_are_zero_without_digits(name, sigmoid_input):
    _, logits, labels = batch_of("digits", 2)
    generator = torch.Generator().manual_seed(4)
    # digit logits around -3, where raw DEL pushes the target down at some positions, not all
    logits[..., DIGIT_IDS] = torch.randn(*labels.shape, 10, generator=generator, dtype=torch.float64) * 2 - 3
    loss_fn = build_loss(name, VOCAB, **({"sigmoid_input": sigmoid_input} if name == "del" else {}))
    out = loss_fn(logits, labels)
    digits = find_digits(labels, VOCAB)
    z = logits.reshape(-1, WIDTH)[digits.index][:, DIGIT_IDS]
    p = torch.softmax(z, -1)
    assert float(out.digit_logit_mean) == pytest.approx(float(z.mean()), rel=1e-12)
    assert float(out.digit_target_prob) == pytest.approx(float(p.gather(1, digits.target[:, None]).mean()), rel=1e-12)
    expected_share = float(autograd_pushdown(z, digits.target, None, sigmoid_input or "raw").double().mean())
    assert float(out.pushdown_share) == pytest.approx(expected_share, abs=1e-7)  # a float32 mean of 0s and 1s
    if sigmoid_input != "centered":
        assert 0 < expected_share < 1
    for empty in (loss_fn(logits, torch.full_like(labels, 14)), loss_fn(logits[:, :0], labels[:, :0])):
        assert float(empty.digit_logit_mean) == float(empty.pushdown_share) == float(empty.digit_target_prob) == 0


def test_the_docs_table_of_l_against_the_margin_is_what_the_code_computes():
    text = (Path(__file__).resolve().parents[1] / "docs" / "losses.md").read_text()
    table = text.split("| offset | margin |", 1)[1].split("\n\n", 1)[0]  # the table, to its blank line
    rows = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    assert len(rows) == 12
    for line in rows:
        offset, margin, prob, raw, raw_push, centred, centred_push = (c.strip() for c in line.strip("|").split("|"))
        offset_value, margin_value = (float(v.replace("\u2212", "-")) for v in (offset, margin))
        z = torch.full((1, 10), offset_value, dtype=torch.float64)
        z[0, 0] += margin_value
        y, u = torch.tensor([0]), torch.ones(1, dtype=torch.float64)
        assert f"{float(torch.softmax(z, -1)[0, 0]):.2f}" == prob
        assert f"{float(del_term(z, y, u, sigmoid_input='raw')) * 10:.3f}" == raw
        assert f"{float(del_term(z, y, u, sigmoid_input='centered')) * 10:.3f}" == centred
        assert ("yes" if bool(del_pushdown(z, y, sigmoid_input="raw")) else "no") == raw_push
        assert ("yes" if bool(del_pushdown(z, y, sigmoid_input="centered")) else "no") == centred_push
