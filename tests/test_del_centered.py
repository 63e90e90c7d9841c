"""DEL's `sigmoid_input`: "centered" is invariant to a common shift of the logits, equals "raw" at
zero-mean digit logits, and the digit diagnostics say what the term does.

The cases are drawn by a seeded enumerator over (vocabulary style, seed, shift, dtype, options):
the space is small and structured (three tokenizer families, shifts in [-50, 50] with both ends),
so every draw is reproducible by its id and the whole grid runs in a few seconds.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from numloss import DigitVocab, build_loss
from numloss.digits import find_digits
from numloss.losses.del_terms import del_pushdown, del_term, sigmoid_logits
from numloss.losses.number_tokens import slot_logits
from tokenizer_styles import gpt2_style, llama3_style

DIGIT_IDS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
VOCAB = DigitVocab(DIGIT_IDS, 2)
WIDTH = 20


def single_digit_batch(seed: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [3, 9, 20] and labels with digits, text, an ignored position and a row without digits."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, WIDTH, (3, 9), generator=generator)
    labels[0, 2] = -100
    labels[2] = torch.tensor([13, 14, 15, 16, 17, 18, 19, 13, -100])  # no digit in this row
    logits = torch.randn(3, 9, WIDTH, generator=generator, dtype=torch.float64) * 3 + 20 * torch.rand(1, generator=generator, dtype=torch.float64)
    return logits.to(dtype), labels


def chunked_batch(style, seed: int, dtype: torch.dtype = torch.float64):
    tok = style()
    texts = ["x=1234.5+ 42", " 100 25.75 7", "a 9 b 12"]
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    labels = torch.full((len(rows), max(map(len, rows))), -100)
    for r, ids in enumerate(rows):
        labels[r, : len(ids)] = torch.tensor(ids)
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(*labels.shape, len(tok), generator=generator, dtype=torch.float64) * 2
    return DigitVocab.from_tokenizer(tok), logits.to(dtype), labels


def cases(count: int, seed: int = 0):
    """(style, seed, shift) draws: shifts uniform in [-50, 50] plus both ends and 0."""
    rng = random.Random(seed)
    styles = ["single", "llama3", "gpt2"]
    shifts = [-50.0, 50.0, 0.0] + [rng.uniform(-50, 50) for _ in range(count - 3)]
    return [(styles[i % 3], i, shifts[i]) for i in range(count)]


def batch_of(style: str, seed: int, dtype: torch.dtype):
    if style == "single":
        logits, labels = single_digit_batch(seed, dtype)
        return VOCAB, logits, labels
    return chunked_batch({"llama3": llama3_style, "gpt2": gpt2_style}[style], seed, dtype)


def value_and_grad(loss_fn, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.clone().requires_grad_(True)
    out = loss_fn(x, labels)
    out.loss.backward()
    return out.loss.detach(), x.grad


# -- shift invariance ---------------------------------------------------------------------------


@pytest.mark.parametrize("style, seed, shift", cases(12))
@pytest.mark.parametrize("options", [{}, {"distance": "l1", "place_weighting": "continuous", "normalize": "tokens"}])
def test_centered_is_invariant_to_a_common_shift_of_the_logits(style, seed, shift, options):
    for dtype, rtol, atol in ((torch.float64, 1e-10, 1e-12), (torch.float32, 1e-5, 1e-6)):
        vocab, logits, labels = batch_of(style, seed, dtype)
        loss_fn = build_loss("del", vocab, alpha=0.7, sigmoid_input="centered", **options)
        value, grad = value_and_grad(loss_fn, logits, labels)
        shifted_value, shifted_grad = value_and_grad(loss_fn, logits + shift, labels)
        torch.testing.assert_close(shifted_value, value, rtol=rtol, atol=atol)
        torch.testing.assert_close(shifted_grad, grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shift", [-3.0, 5.0])
def test_raw_is_not_shift_invariant(shift):
    """The control: the property above fails for raw DEL, so the test can tell them apart."""
    logits, labels = single_digit_batch(0)
    loss_fn = build_loss("del", VOCAB, sigmoid_input="raw")
    value, _ = value_and_grad(loss_fn, logits, labels)
    shifted, _ = value_and_grad(loss_fn, logits + shift, labels)
    assert abs(float(shifted - value)) > 1e-3


# -- centered equals raw at zero-mean digit logits ----------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_at_zero_mean_digit_logits_centered_equals_raw_up_to_a_common_gradient_shift(seed):
    logits, labels = single_digit_batch(seed)
    digit_columns = torch.tensor(DIGIT_IDS)
    logits[..., digit_columns] -= logits[..., digit_columns].mean(-1, keepdim=True)
    raw_value, raw_grad = value_and_grad(build_loss("del", VOCAB, sigmoid_input="raw"), logits, labels)
    cen_value, cen_grad = value_and_grad(build_loss("del", VOCAB, sigmoid_input="centered"), logits, labels)
    torch.testing.assert_close(cen_value, raw_value, rtol=1e-12, atol=1e-12)
    difference = cen_grad - raw_grad
    other_columns = [c for c in range(WIDTH) if c not in DIGIT_IDS]
    assert float(difference[..., other_columns].abs().max()) < 1e-14
    at_digits = difference[..., digit_columns]
    common = at_digits.mean(-1, keepdim=True)
    torch.testing.assert_close(at_digits, common.expand_as(at_digits), rtol=0, atol=1e-14)
    # the shift is not zero where there are digits: the two gradients do differ
    scored = torch.zeros(labels.shape, dtype=torch.bool)
    scored.view(-1)[find_digits(labels, VOCAB).index] = True
    assert float(common[scored].abs().max()) > 1e-6
    assert float(common[~scored].abs().max()) < 1e-14


@pytest.mark.parametrize("style", [llama3_style, gpt2_style])
@pytest.mark.parametrize("seed", range(3))
def test_on_slot_marginals_centered_equals_raw_at_zero_mean_up_to_a_common_shift(style, seed):
    """Multi-digit tokens: the property holds for the slot marginals z_j(k) (what the term reads),
    with the mean over the digits the slot can hold; absent digits' gradients are 0 in both."""
    vocab, logits, labels = chunked_batch(style, seed)
    digits = find_digits(labels, vocab, logits.shape[-1])
    table = vocab.number_table()
    number_logits = logits.reshape(-1, logits.shape[-1])[digits.rows][:, table.columns]
    z, support = slot_logits(number_logits, digits, table)
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
    assert bool((~support).any()) == (style is gpt2_style)  # GPT-2 merges leave digits absent


# -- hand-worked, gradcheck, fused ----------------------------------------------------------------


def test_centered_hand_worked():
    """z = (2, 0, ..., 0), target 0, u = 1: the mean is 0.2, so the sigmoid reads 1.8 and -0.2."""
    z = torch.tensor([[2.0] + [0.0] * 9], dtype=torch.float64)
    total = math.exp(2) + 9
    p_target, p_other = math.exp(2) / total, 1 / total

    def softplus(x: float) -> float:
        return math.log1p(math.exp(x))

    centered = (p_target * softplus(-1.8) + 9 * p_other * softplus(-0.2)) / 10
    raw = (p_target * softplus(-2.0) + 9 * p_other * softplus(0.0)) / 10
    y, u = torch.tensor([0]), torch.ones(1, dtype=torch.float64)
    assert float(del_term(z, y, u, sigmoid_input="centered")) == pytest.approx(centered, rel=1e-14)
    assert float(del_term(z, y, u, sigmoid_input="raw")) == pytest.approx(raw, rel=1e-14)
    assert sigmoid_logits(z, "centered")[0].tolist() == pytest.approx([1.8] + [-0.2] * 9)


def test_centered_gradcheck_float64():
    logits, labels = single_digit_batch(3)
    loss_fn = build_loss("del", VOCAB, alpha=1.0, sigmoid_input="centered")
    x = logits.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: loss_fn(v, labels).loss, (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("shift", [-40.0, 0.0, 35.0])
def test_fused_centered_equals_unfused_and_a_bias_shift_changes_nothing(shift):
    """The fused path (hidden @ W.T + b, never materialised) equals the logits path; shifting the
    head's bias by a constant shifts every logit, which centered DEL does not see."""
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(3, 9, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(WIDTH, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    bias = torch.full((WIDTH,), 25.0, dtype=torch.float64) + shift
    _, labels = single_digit_batch(5)
    loss_fn = build_loss("del", VOCAB, alpha=0.3, sigmoid_input="centered")
    fused = loss_fn.from_hidden(hidden, weight, labels, lm_head_bias=bias, chunk_size=4)
    fused_grads = torch.autograd.grad(fused.loss, (hidden, weight))
    plain = loss_fn(hidden @ weight.T + bias, labels)
    plain_grads = torch.autograd.grad(plain.loss, (hidden, weight))
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-12, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    unshifted = loss_fn(hidden @ weight.T + 25.0, labels)
    torch.testing.assert_close(plain.loss, unshifted.loss, rtol=1e-10, atol=1e-12)


# -- pushdown and the diagnostics ---------------------------------------------------------------


def autograd_pushdown(z, y, distance, sigmoid_input, support=None):
    x = z.clone().requires_grad_(True)
    del_term(x, y, torch.ones(len(y), dtype=z.dtype), distance, sigmoid_input, support).sum().backward()
    g = x.grad
    others = torch.ones_like(g) - torch.nn.functional.one_hot(y, 10).to(g.dtype)
    if support is not None:
        others = others * support.to(g.dtype)
    return g.gather(1, y[:, None]).squeeze(1) > (g * others).sum(-1) / others.sum(-1)


@pytest.mark.parametrize("sigmoid_input", ["raw", "centered"])
@pytest.mark.parametrize("distance", [None, "l1"])
@pytest.mark.parametrize("scale, offset", [(1.0, 0.0), (3.0, -3.0), (3.0, 30.0), (10.0, -10.0)])
def test_pushdown_in_closed_form_agrees_with_autograd(sigmoid_input, distance, scale, offset):
    generator = torch.Generator().manual_seed(int(scale * 7 + offset))
    z = torch.randn(4000, 10, generator=generator, dtype=torch.float64) * scale + offset
    y = torch.randint(0, 10, (4000,), generator=generator)
    expected = autograd_pushdown(z, y, distance, sigmoid_input)
    assert torch.equal(del_pushdown(z, y, distance, sigmoid_input), expected)
    if sigmoid_input == "raw" and offset < 0:
        assert bool(expected.any())  # the cases hold positions that are pushed down


@pytest.mark.parametrize("distance", [None, "l1"])
def test_centered_never_pushes_the_target_down_where_all_ten_digits_are_possible(distance):
    generator = torch.Generator().manual_seed(13)
    for scale in (0.3, 1.0, 3.0, 10.0, 30.0):
        z = torch.randn(20000, 10, generator=generator, dtype=torch.float64) * scale
        z += torch.randn(20000, 1, generator=generator, dtype=torch.float64) * 30
        y = torch.randint(0, 10, (20000,), generator=generator)
        assert not bool(del_pushdown(z, y, distance, "centered").any())


@pytest.mark.parametrize("offset, margins_pushed", [(30.0, []), (0.0, []), (-3.0, [-2, 0, 2])])
def test_raw_del_pushes_the_target_down_below_zero_as_the_docs_table_says(offset, margins_pushed):
    """docs/losses.md's table: the nine other digits at `offset`, the target `margin` above them."""
    pushed = []
    for margin in (-2, 0, 2, 4):
        z = torch.full((1, 10), offset, dtype=torch.float64)
        z[0, 0] += margin
        if bool(del_pushdown(z, torch.tensor([0]), sigmoid_input="raw")):
            pushed.append(margin)
        assert not bool(del_pushdown(z, torch.tensor([0]), sigmoid_input="centered"))
    assert pushed == margins_pushed


@pytest.mark.parametrize("name, sigmoid_input", [("mle", None), ("ntl-was", None), ("del", "raw"), ("del", "centered")])
def test_the_diagnostics_equal_an_independent_computation(name, sigmoid_input):
    logits, labels = single_digit_batch(2)
    generator = torch.Generator().manual_seed(4)
    # digit logits around -3, where raw DEL pushes the target down at some positions, not all
    logits[..., DIGIT_IDS] = torch.randn(*labels.shape, 10, generator=generator, dtype=torch.float64) * 2 - 3
    options = {"sigmoid_input": sigmoid_input} if name == "del" else {}
    out = build_loss(name, VOCAB, **options)(logits, labels)
    digits = find_digits(labels, VOCAB)
    z = logits.reshape(-1, WIDTH)[digits.index][:, DIGIT_IDS]
    y = digits.target
    p = torch.softmax(z, -1)
    own = sigmoid_input if name == "del" else "raw"
    assert float(out.digit_logit_mean) == pytest.approx(float(z.mean()), rel=1e-12)
    assert float(out.digit_target_prob) == pytest.approx(float(p.gather(1, y[:, None]).mean()), rel=1e-12)
    expected_share = float(autograd_pushdown(z, y, None, own).double().mean())
    assert float(out.pushdown_share) == pytest.approx(expected_share, abs=1e-12)
    if own == "raw":
        assert 0 < expected_share < 1


def test_the_diagnostics_are_zero_without_digits():
    logits, labels = single_digit_batch(0)
    labels[:] = 14
    out = build_loss("del", VOCAB)(logits, labels)
    assert float(out.digit_logit_mean) == 0 and float(out.pushdown_share) == 0 and float(out.digit_target_prob) == 0
    empty = build_loss("del", VOCAB)(logits[:, :0], labels[:, :0])
    assert float(empty.pushdown_share) == 0


def test_bad_sigmoid_input_is_one_line_before_anything_loads():
    from numloss.config import ConfigError, config_from_dict

    with pytest.raises(ValueError, match="sigmoid_input must be one of 'raw', 'centered', got 'mean'"):
        build_loss("del", VOCAB, sigmoid_input="mean")
    with pytest.raises(ConfigError, match="sigmoid_input must be one of") as caught:
        config_from_dict({"objective": {"name": "del", "options": {"sigmoid_input": "Centered"}}})
    assert "\n" not in str(caught.value)
    with pytest.raises(TypeError, match="no option"):
        build_loss("ntl-was", VOCAB, sigmoid_input="centered")
    loss_fn = build_loss("del", VOCAB, sigmoid_input="centered")
    assert "sigmoid_input='centered'" in repr(loss_fn)
    with pytest.raises(ValueError):
        loss_fn.sigmoid_input = "other"


def test_the_docs_table_of_l_against_the_margin_is_what_the_code_computes():
    from pathlib import Path

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


@pytest.mark.parametrize("fused", [False, True])
def test_a_patched_model_with_centred_del_ignores_a_shift_of_its_head(fused):
    """The patch path (the Trainer's fused route): a constant added to every logit by the LM head's
    bias changes neither centred DEL's loss nor any weight's gradient; raw DEL's loss does change."""
    import copy

    import numloss
    from test_hf import VOCAB as HF_VOCAB
    from test_hf import collate, rows, tiny_llama

    batch = collate(rows())
    results = {}
    for mode in ("centered", "raw"):
        for shift in (0.0, 40.0):
            model = tiny_llama()
            head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
            head.weight = copy.deepcopy(model.lm_head.weight)
            torch.nn.init.constant_(head.bias, shift)
            model.lm_head = head
            numloss.patch(model, build_loss("del", HF_VOCAB, alpha=1.0, sigmoid_input=mode), fused=fused)
            outputs = model(**batch)
            outputs.loss.backward()
            results[(mode, shift)] = (outputs.loss.item(), {k: p.grad.clone() for k, p in model.named_parameters()
                                                            if p.grad is not None and k != "lm_head.bias"})
    (loss0, grads0), (loss40, grads40) = results[("centered", 0.0)], results[("centered", 40.0)]
    assert loss40 == pytest.approx(loss0, rel=1e-5)
    for key, grad in grads0.items():
        torch.testing.assert_close(grads40[key], grad, rtol=1e-4, atol=1e-6, msg=key)
    assert abs(results[("raw", 40.0)][0] - results[("raw", 0.0)][0]) > 1.0
