"""DEL's `p_weights="detached"`: the same value as the released term, with p = softmax(z) held
constant in the gradient (issue 46), on both sigmoid inputs and on the fused path.

With p constant, d term / d z_j = u/10 * sum_k p_k (sigmoid(s_k) - [k == y]) d s_k / d z_j, where
d s_k / d z_j = [k == j] for the raw sigmoid and [k == j] - 1/10 for the centred one.
"""

from __future__ import annotations

import pytest
import torch

from numloss import DigitVocab, build_loss
from numloss.digits import find_digits
from numloss.losses.del_terms import del_pushdown, del_term

DIGIT_IDS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
VOCAB = DigitVocab(DIGIT_IDS, 2)
WIDTH = 20


def batch(seed: int, offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [3, 9, 20] (float64) and labels with digits, text, an ignored position and a digit-free row."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, WIDTH, (3, 9), generator=generator)
    labels[0, 2] = -100
    labels[2] = torch.tensor([13, 14, 15, 16, 17, 18, 19, 13, -100])
    logits = torch.randn(3, 9, WIDTH, generator=generator, dtype=torch.float64) * 3 + offset
    return logits, labels


def hand_gradient(z: torch.Tensor, y: torch.Tensor, u: torch.Tensor, sigmoid_input: str) -> torch.Tensor:
    """d term / d z [M, 10] with p constant, written out (no autograd)."""
    p = torch.softmax(z, -1)
    s = z - z.mean(-1, keepdim=True) if sigmoid_input == "centered" else z
    g = p * (torch.sigmoid(s) - torch.nn.functional.one_hot(y, 10).to(z.dtype))
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
def test_the_objective_wires_the_option_through_in_every_dtype(dtype, sigmoid_input):
    """Whole loss: equal values; gradient = MLE's + alpha / N_dig x the hand derivative at digit rows."""
    logits, labels = batch(3)
    alpha = 0.7
    detached = build_loss("del", VOCAB, alpha=alpha, sigmoid_input=sigmoid_input, p_weights="detached")
    released = build_loss("del", VOCAB, alpha=alpha, sigmoid_input=sigmoid_input)
    x = logits.to(dtype).requires_grad_(True)
    out = detached(x, labels)
    torch.testing.assert_close(out.loss, released(logits.to(dtype), labels).loss, rtol=0, atol=0)
    (grad,) = torch.autograd.grad(out.loss, x)
    x_mle = logits.to(dtype).requires_grad_(True)
    (mle_grad,) = torch.autograd.grad(build_loss("mle", VOCAB)(x_mle, labels).loss, x_mle)
    digits = find_digits(labels, VOCAB)
    z = logits.to(dtype).double().reshape(-1, WIDTH)[digits.index][:, DIGIT_IDS]
    u = detached.digit_weights(digits).double()
    expected = torch.zeros(labels.numel(), WIDTH, dtype=torch.float64)
    expected[digits.index[:, None], torch.tensor(DIGIT_IDS)] = alpha / digits.count * hand_gradient(
        z, digits.target, u, sigmoid_input
    )
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(
        (grad.double() - mle_grad.double()).reshape(-1, WIDTH), expected, rtol=tolerance, atol=tolerance
    )


@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
def test_fused_detached_equals_unfused(sigmoid_input):
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(3, 9, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(WIDTH, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    _, labels = batch(5)
    loss_fn = build_loss("del", VOCAB, alpha=0.3, sigmoid_input=sigmoid_input, p_weights="detached")
    fused = loss_fn.from_hidden(hidden, weight, labels, chunk_size=4)
    fused_grads = torch.autograd.grad(fused.loss, (hidden, weight))
    plain = loss_fn(hidden @ weight.T, labels)
    plain_grads = torch.autograd.grad(plain.loss, (hidden, weight))
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-12, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
def test_detached_never_pushes_the_target_down_and_the_closed_form_agrees_with_autograd(sigmoid_input):
    generator = torch.Generator().manual_seed(11)
    z = torch.randn(4000, 10, generator=generator, dtype=torch.float64) * 10 - 5
    y = torch.randint(0, 10, (4000,), generator=generator)
    x = z.clone().requires_grad_(True)
    del_term(x, y, torch.ones(4000, dtype=torch.float64), sigmoid_input=sigmoid_input, p_weights="detached").sum().backward()
    others = 1.0 - torch.nn.functional.one_hot(y, 10).double()
    pushed = x.grad.gather(1, y[:, None]).squeeze(1) > (x.grad * others).sum(-1) / 9
    assert not bool(pushed.any())
    assert torch.equal(del_pushdown(z, y, sigmoid_input=sigmoid_input, p_weights="detached"), pushed)
    # while the released form, on the same logits, pushes some targets down
    assert bool(del_pushdown(z, y, sigmoid_input="raw").any())


def test_an_unknown_p_weights_is_refused_in_one_line():
    with pytest.raises(ValueError, match="p_weights"):
        build_loss("del", VOCAB, p_weights="frozen")
