"""Every objective against its definition: values and gradients, dtypes, edge cases, errors."""

from __future__ import annotations

import math

import pytest
import torch

from numloss import LOSSES, DigitVocab, build_loss
from reference import ref_loss

DIGIT_IDS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # not 0..9, so id and digit value differ
POINT_ID = 2
VOCAB = DigitVocab(DIGIT_IDS, POINT_ID)
WIDTH = 20
HIDDEN = 6

# name, options, alpha used by the reference
CASES = [
    ("mle", {}, 0.0),
    ("del", {}, 1.0),
    ("del", {"alpha": 0.3, "place_weighting": "continuous"}, 0.3),
    ("del", {"place_weighting": "none"}, 1.0),
    ("del", {"distance": "l1"}, 1.0),
    ("ntl-was", {}, 0.3),
    ("ntl-mse", {"alpha": 0.5}, 0.5),
    ("dist2", {}, 0.1),
    ("dist2", {"tau": 2.0, "place_weight": True}, 0.1),
    ("mixce", {}, 1.0),
    ("mixce", {"eta": 0.2}, 1.0),
    ("emo", {}, 1.0),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items()) or 'default'}" for name, opts, _ in CASES]


def spell(text: str) -> list[int]:
    """Label ids of a string: digits, '.', '_' ignored, anything else a text token."""
    ids = []
    for c in text:
        if c.isdigit():
            ids.append(DIGIT_IDS[int(c)])
        elif c == ".":
            ids.append(POINT_ID)
        elif c == "_":
            ids.append(-100)
        else:
            ids.append(13 + (ord(c) % 7))
    return ids


def batch(*rows: str) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([spell(r.ljust(width, "_")) for r in rows])


LABELS = batch("__=12.5+3", "ab___", "x100.25_", "__7", "____")


def make_logits(labels: torch.Tensor, seed: int = 0, width: int = WIDTH, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(*labels.shape, width, generator=generator)
    return logits.to(dtype).requires_grad_(True)


def embedding(width: int = WIDTH) -> torch.Tensor:
    return torch.randn(width, HIDDEN, generator=torch.Generator().manual_seed(7))


def loss_for(name: str, options: dict, width: int = WIDTH):
    if name == "emo":
        options = {**options, "embedding": embedding(width)}
    return build_loss(name, VOCAB, **options)


def reference(name, options, alpha, logits, labels, **counts):
    options = {k: v for k, v in options.items() if k != "alpha"}
    if name == "emo":
        options = {**options, "embedding": embedding(logits.shape[-1])}
    return ref_loss(name, logits, labels, DIGIT_IDS, POINT_ID, alpha, **counts, **options)


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_value_and_gradient_match_the_slow_reference(name, options, alpha):
    logits = make_logits(LABELS)
    out = loss_for(name, options)(logits, LABELS)
    out.loss.backward()
    ref_logits = logits.detach().double().requires_grad_(True)
    ref_total, ref_ce, ref_aux = reference(name, options, alpha, ref_logits, LABELS)
    ref_total.backward()
    assert float(out.ce) == pytest.approx(float(ref_ce), rel=1e-5)
    assert float(out.aux) == pytest.approx(float(ref_aux), rel=1e-5, abs=1e-7)
    assert float(out.loss) == pytest.approx(float(ref_total), rel=1e-5)
    torch.testing.assert_close(logits.grad.double(), ref_logits.grad, rtol=1e-4, atol=1e-6)
    assert int(out.num_tokens) == int((LABELS != -100).sum())
    assert int(out.num_digits) == 10  # 1,2,5,3 + 1,0,0,2,5 + 7


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_step_wide_counts_set_the_normalisation(name, options, alpha):
    logits = make_logits(LABELS, seed=1)
    out = loss_for(name, options)(logits, LABELS, num_items_in_batch=40, num_digits_in_batch=30)
    ref_total, ref_ce, ref_aux = reference(
        name, options, alpha, logits.detach(), LABELS, num_items=40, num_digits=30
    )
    assert float(out.ce) == pytest.approx(float(ref_ce), rel=1e-5)
    assert float(out.loss) == pytest.approx(float(ref_total), rel=1e-5)


# MixCE and EMO stop gradients by definition (sg(.)), so finite differences of their value do
# not give their gradient; the reference test above checks those. Their differentiable parts are
# gradchecked below (EMO's transport cost; the shared core for all).
GRADCHECK_CASES = [case for case in CASES if case[0] not in ("mixce", "emo")]


@pytest.mark.parametrize("name, options, alpha", GRADCHECK_CASES, ids=[IDS[CASES.index(c)] for c in GRADCHECK_CASES])
def test_float64_gradcheck(name, options, alpha):
    labels = batch("=4.05", "x31_")
    logits = make_logits(labels, seed=2, dtype=torch.float64)
    fn = loss_for(name, options)
    assert torch.autograd.gradcheck(lambda x: fn(x, labels).loss, (logits,), eps=1e-6, atol=1e-5, fast_mode=True)


def test_float64_gradcheck_of_emo_transport_cost():
    labels = batch("=4.05", "x31_")
    logits = make_logits(labels, seed=2, dtype=torch.float64)
    fn = loss_for("emo", {})
    assert torch.autograd.gradcheck(lambda x: fn(x, labels).aux, (logits,), eps=1e-6, atol=1e-5, fast_mode=True)


def test_float64_gradcheck_of_the_shared_core():
    from numloss.losses.core import token_nll_and_digit_logits

    labels = batch("=4.05", "x31_").reshape(-1)
    logits = make_logits(labels[None], seed=2, dtype=torch.float64)[0]
    valid = labels != -100
    targets = torch.where(valid, labels, 0)
    digit_index = torch.nonzero(torch.isin(labels, torch.tensor(DIGIT_IDS))).squeeze(1)
    columns = torch.tensor(DIGIT_IDS)
    weights = torch.randn(len(labels), dtype=torch.float64), torch.randn(len(digit_index), 10, dtype=torch.float64)

    def combined(x):
        nll, digit_logits, _ = token_nll_and_digit_logits(x, targets, valid, digit_index, columns)
        return (nll * weights[0]).sum() + (digit_logits * weights[1]).sum()

    assert torch.autograd.gradcheck(combined, (logits,), eps=1e-6, atol=1e-6, fast_mode=True)


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_bfloat16_logits_match_float32_on_the_same_values(name, options, alpha):
    logits16 = make_logits(LABELS, seed=3, dtype=torch.bfloat16)
    logits32 = logits16.detach().float().requires_grad_(True)
    fn = loss_for(name, options)
    out16, out32 = fn(logits16, LABELS), fn(logits32, LABELS)
    out16.loss.backward()
    out32.loss.backward()
    assert out16.loss.dtype == torch.float32  # computed in float32
    assert logits16.grad.dtype == torch.bfloat16
    assert float(out16.loss) == pytest.approx(float(out32.loss), rel=1e-6)
    torch.testing.assert_close(logits16.grad.float(), logits32.grad, rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_all_ignored_and_empty_batches_give_finite_zero(name, options, alpha):
    fn = loss_for(name, options)
    for labels in (torch.full((2, 5), -100), torch.empty(0, 7, dtype=torch.long)):
        logits = make_logits(labels, seed=4)
        out = fn(logits, labels)
        out.loss.backward()
        assert float(out.loss) == 0.0 and float(out.aux) == 0.0 and float(out.ce) == 0.0
        assert int(out.num_tokens) == 0 and int(out.num_digits) == 0
        assert torch.count_nonzero(logits.grad) == 0


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_rows_without_digits_give_zero_aux_for_digit_objectives(name, options, alpha):
    labels = batch("abc__", "xyz=+")
    logits = make_logits(labels, seed=5)
    out = loss_for(name, options)(logits, labels)
    assert torch.isfinite(out.loss) and int(out.num_digits) == 0
    if name not in ("mixce", "emo"):
        assert float(out.aux) == 0.0
        assert float(out.loss) == pytest.approx(float(out.ce))


@pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
def test_padded_logit_width_larger_than_the_tokenizer(name, options, alpha):
    # Qwen2.5 pads its head: extra columns are still part of the softmax.
    logits = make_logits(LABELS, seed=6, width=WIDTH + 13)
    out = loss_for(name, options, width=WIDTH + 13)(logits, LABELS)
    ref_total, _, _ = reference(name, options, alpha, logits.detach(), LABELS)
    assert float(out.loss) == pytest.approx(float(ref_total), rel=1e-5)


def test_two_dimensional_inputs_equal_the_batched_call():
    fn = build_loss("del", VOCAB)
    logits = make_logits(LABELS, seed=8)
    batched = fn(logits, LABELS)
    # [N, V] with [N] is one sequence: numbers may then run across former rows, so use one row
    flat = fn(logits[2], LABELS[2])
    single = fn(logits[2:3], LABELS[2:3])
    assert float(flat.loss) == pytest.approx(float(single.loss))
    assert int(batched.num_digits) == 10


def test_del_hand_worked_single_digit():
    # one position, target digit 0, all ten digit logits 0: p = 0.1, sigmoid = 0.5
    labels = torch.tensor([[DIGIT_IDS[0]]])
    logits = torch.full((1, 1, WIDTH), -1e4)
    logits[0, 0, DIGIT_IDS] = 0.0
    out = build_loss("del", VOCAB)(logits, labels)
    # sum_k 0.1 * BCE(0.5, .) = 10 * 0.1 * ln 2; / 10; units weight u = 2
    assert float(out.aux) == pytest.approx(2 * math.log(2) / 10, rel=1e-6)
    assert float(out.ce) == pytest.approx(math.log(10), rel=1e-6)


def test_ntl_hand_worked():
    labels = torch.tensor([[DIGIT_IDS[3]]])
    logits = torch.full((1, 1, WIDTH), -1e4)
    logits[0, 0, DIGIT_IDS[1]] = 0.0
    logits[0, 0, DIGIT_IDS[7]] = 0.0  # p = 1/2 on digits 1 and 7
    assert float(build_loss("ntl-was", VOCAB)(logits, labels).aux) == pytest.approx(0.5 * 2 + 0.5 * 4)
    assert float(build_loss("ntl-mse", VOCAB)(logits, labels).aux) == pytest.approx((4 - 3) ** 2)


@pytest.mark.parametrize("cls_name", ["ntl-was", "ntl-mse"])
def test_ntl_agrees_with_the_ntloss_package(cls_name):
    ntloss = pytest.importorskip("ntloss")
    from test_digits import wordlevel

    tok = wordlevel(list("0123456789.abcdefgh"))
    vocab = DigitVocab.from_tokenizer(tok)
    width = len(tok)
    generator = torch.Generator().manual_seed(11)
    labels = torch.randint(0, width, (4, 9), generator=generator)
    labels[0, :3] = -100
    logits = torch.randn(4, 9, width, generator=generator)
    if cls_name == "ntl-was":
        peer = ntloss.NTLoss(tokenizer=tok, vocab_size=width, reweigh=False)
    else:
        peer = ntloss.NTLossDotProduct(tokenizer=tok, vocab_size=width, reweigh=False)
    ours = build_loss(cls_name, vocab)(logits, labels)
    assert int(ours.num_digits) > 5
    assert float(ours.aux) == pytest.approx(float(peer(logits, labels)), rel=1e-5)


# -- errors -------------------------------------------------------------------------------------


def test_unknown_objective_and_options_are_errors():
    with pytest.raises(ValueError, match="unknown objective 'dell'.*del"):
        build_loss("dell", VOCAB)
    with pytest.raises(TypeError, match="no option.*'place_weights'.*place_weighting"):
        build_loss("del", VOCAB, place_weights="official")
    with pytest.raises(TypeError, match="no option.*'alpha'"):
        build_loss("mixce", VOCAB, alpha=0.5)
    with pytest.raises(TypeError, match="emo needs embedding"):
        build_loss("emo", VOCAB)
    with pytest.raises(ValueError, match="place_weighting must be one of"):
        build_loss("del", VOCAB, place_weighting="linear")


def test_every_registered_objective_is_reachable_by_name():
    assert list(LOSSES) == ["mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo"]
    assert build_loss("NTL_WAS", VOCAB).name == "ntl-was"


def test_mismatched_shapes_are_explained():
    fn = build_loss("del", VOCAB)
    with pytest.raises(ValueError, match=r"do not match.*already aligned"):
        fn(torch.randn(2, 5, WIDTH), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        fn(torch.randn(2, 5, WIDTH), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="needs at least 13"):
        fn(torch.randn(2, 5, 8), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the logit width"):
        fn(torch.randn(1, 2, WIDTH), torch.tensor([[1, WIDTH]]))


def test_nan_logits_at_a_scored_position_raise():
    logits = make_logits(LABELS).detach()
    logits[0, 3, 5] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN or inf at 1 scored position"):
        build_loss("del", VOCAB)(logits, LABELS)


def test_step_wide_count_smaller_than_this_call_is_an_error():
    with pytest.raises(ValueError, match="num_digits_in_batch=2 is smaller than the 10"):
        build_loss("del", VOCAB)(make_logits(LABELS), LABELS, num_digits_in_batch=2)


def test_custom_ignore_index():
    labels = LABELS.masked_fill(LABELS == -100, 0)
    a = build_loss("del", VOCAB, ignore_index=0)(make_logits(labels, seed=9), labels)
    b = build_loss("del", VOCAB)(make_logits(LABELS, seed=9), LABELS)
    assert float(a.loss) == pytest.approx(float(b.loss))
