"""Every objective against its definition: values and gradients, dtypes, edge cases, errors."""

from __future__ import annotations

import math
import re

import pytest
import torch

from numloss import LOSSES, DigitVocab, build_loss
from numloss.digits import find_digits
from reference import ref_loss

DIGIT_IDS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # not 0..9, so id and digit value differ
POINT_ID = 2
VOCAB = DigitVocab(DIGIT_IDS, POINT_ID)
WIDTH = 20
HIDDEN = 6

# name, options, alpha used by the reference
CASES = [
    ("mle", {}, 0.0),
    ("del", {}, 0.03),
    ("del", {"alpha": 0.3, "place_weighting": "continuous"}, 0.3),
    ("del", {"place_weighting": "none"}, 0.03),
    ("del", {"distance": "l1"}, 0.03),
    ("del", {"sigmoid_input": "centered"}, 0.03),
    ("del", {"alpha": 0.3, "sigmoid_input": "centered", "distance": "l1", "normalize": "tokens"}, 0.3),
    ("ntl-was", {}, 0.3),
    ("ntl-mse", {"alpha": 0.5}, 0.5),
    ("dist2", {}, 0.1),
    ("dist2", {"tau": 2.0, "place_weight": True}, 0.1),
    ("mixce", {}, 1.0),
    ("mixce", {"eta": 0.2}, 1.0),
    ("emo", {}, 1.0),
    ("emo", {"form": "gpt2"}, 1.0),
    ("emo", {"max_ratio": 0.5}, 1.0),
    ("emo", {"form": "gpt2", "mode": 2}, 1.0),
    ("del", {"alpha": 1.0, "normalize": "tokens"}, 1.0),
    ("ntl-was", {"reweigh": True}, 0.3),
    ("ntl-mse", {"alpha": 0.3, "reweigh": True, "normalize": "tokens"}, 0.3),
    ("dist2", {"place_weight": True, "point_ends_run": True, "normalize": "weights"}, 0.1),
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
    # the gradient is stored in bf16: 8 mantissa bits, so errors scale with its largest entry
    atol = max(1e-3, 1e-2 * float(logits32.grad.abs().max()))
    torch.testing.assert_close(logits16.grad.float(), logits32.grad, rtol=2e-2, atol=atol)


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


@pytest.mark.hf  # the ntloss package and a transformers tokenizer
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


# -- held-out equality with the published code (tests/reference/<name>.py) -------------------

# one leading column: the published functions shift inside, numloss takes aligned tensors
OFFICIAL_LABELS = batch("_a3.14+27_", "__905.5=1", "_x12.0.3", "_7__8", "_____", "__bc=")


class _Tokenizer:
    """What the author-side DIST2 code reads of a tokenizer: `.vocab`."""

    vocab = {**{str(d): i for d, i in enumerate(DIGIT_IDS)}, ".": POINT_ID, **{f"t{i}": i for i in range(13, WIDTH)}}


def official_inputs(seed: int):
    """(float64 logits for the published code, float32 aligned logits and labels for numloss)."""
    generator = torch.Generator().manual_seed(100 + seed)
    full = (2 * torch.randn(*OFFICIAL_LABELS.shape, WIDTH, generator=generator, dtype=torch.float64)).requires_grad_(True)
    ours = full.detach()[:, :-1].float().requires_grad_(True)
    return full, ours, OFFICIAL_LABELS[:, 1:]


def assert_same_value_and_gradient(ours_loss, ours_logits, official_loss, official_logits):
    ours_loss.backward()
    official_loss.backward()
    assert float(ours_loss) == pytest.approx(float(official_loss), rel=1e-4)
    want = official_logits.grad[:, :-1]
    scale = float(want.abs().max())
    assert scale > 0
    assert float((ours_logits.grad.double() - want).abs().max()) <= 1e-4 * scale
    assert float(official_logits.grad[:, -1].abs().max()) == 0.0  # the shifted-away column


@pytest.mark.parametrize("eta", [0.5, 0.2, 0.0])
def test_mixce_equals_the_official_code(eta):
    from reference.mixce import mixce

    full, ours, labels = official_inputs(0)
    out = build_loss("mixce", VOCAB, eta=eta)(ours, labels)
    assert_same_value_and_gradient(out.loss, ours, mixce(full, OFFICIAL_LABELS, eta), full)


EMO_OFFICIAL = [
    ({}, "emo_adaptive"),
    ({"form": "adaptive"}, "emo_adaptive"),
    ({"form": "gpt2"}, "emo_gpt2"),
    ({"form": "gpt2", "max_ratio": 3.0}, "emoloss_pypi_mode1"),
    ({"form": "gpt2", "mode": 2}, "emoloss_pypi_mode2"),
]


@pytest.mark.parametrize("options, official", EMO_OFFICIAL, ids=[o for _, o in EMO_OFFICIAL])
@pytest.mark.parametrize("seed", [0, 1])
def test_emo_equals_the_official_code(options, official, seed):
    from reference import emo

    full, ours, labels = official_inputs(seed)
    cost_embedding = embedding()
    if official.startswith("emoloss_pypi"):
        reference_loss = emo.emoloss_pypi(full, OFFICIAL_LABELS, cost_embedding, mode=int(official[-1]))
    else:
        reference_loss = getattr(emo, official)(full, OFFICIAL_LABELS, cost_embedding)
    out = build_loss("emo", VOCAB, embedding=cost_embedding, **options)(ours, labels)
    assert_same_value_and_gradient(out.loss, ours, reference_loss, full)


def test_emo_cap_changes_the_gradient_only_where_the_ratio_exceeds_it():
    # a small embedding spread makes d small, so nll / d passes 3 at some positions
    full, ours, labels = official_inputs(2)
    close = embedding() * 0.05 + torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(1))
    capped = build_loss("emo", VOCAB, embedding=close, form="gpt2", max_ratio=3.0)(ours, labels)
    free = build_loss("emo", VOCAB, embedding=close, form="gpt2")(ours.detach().requires_grad_(True), labels)
    from reference.emo import emoloss_pypi

    assert_same_value_and_gradient(capped.loss, ours, emoloss_pypi(full, OFFICIAL_LABELS, close, mode=1), full)
    assert float(capped.loss) < float(free.loss)  # the cap binds somewhere


def test_emo_adaptive_and_gpt2_share_the_value_not_the_gradient():
    labels = LABELS
    a = make_logits(labels, seed=12)
    b = a.detach().clone().requires_grad_(True)
    adaptive = build_loss("emo", VOCAB, embedding=embedding())(a, labels)
    gpt2 = build_loss("emo", VOCAB, embedding=embedding(), form="gpt2")(b, labels)
    assert float(adaptive.loss) == pytest.approx(float(gpt2.loss), rel=1e-6) == float(adaptive.ce)
    adaptive.loss.backward()
    gpt2.loss.backward()
    assert not torch.allclose(a.grad, b.grad, rtol=1e-3)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [4.0, 1.0])
def test_dist2_unweighted_equals_the_author_code(seed, tau):
    from reference.dist2 import get_digit_loss_mean

    full, ours, labels = official_inputs(seed)
    out = build_loss("dist2", VOCAB, alpha=0.5, tau=tau)(ours, labels)
    reference_loss = get_digit_loss_mean(full, OFFICIAL_LABELS, _Tokenizer(), target_temperature=tau, beta=0.5)
    assert_same_value_and_gradient(out.loss, ours, reference_loss, full)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [2.0, 1.0])
def test_dist2_place_weighted_equals_the_author_code(seed, tau):
    from reference.dist2 import get_digit_loss_weighted, get_sft_loss

    full, ours, labels = official_inputs(seed)
    options = {"place_weight": True, "point_ends_run": True, "normalize": "weights"}
    out = build_loss("dist2", VOCAB, alpha=0.5, tau=tau, **options)(ours, labels)
    reference_loss = get_digit_loss_weighted(
        get_sft_loss(full, OFFICIAL_LABELS), _Tokenizer(), full, OFFICIAL_LABELS, target_temperature=tau, beta=0.5
    )
    assert_same_value_and_gradient(out.loss, ours, reference_loss, full)


def test_dist2_weightings_on_a_worked_example():
    # "3.14" and "12.0.3": numloss weights integer digits by i + 1 and decimals by 1; the author
    # code ends a run at '.', so decimals count from the end of their own run
    labels = batch("3.14", "12.0.3")
    digits = find_digits(labels, VOCAB, WIDTH)
    numloss_weights = build_loss("dist2", VOCAB, place_weight=True).digit_weights(digits)
    author_weights = build_loss("dist2", VOCAB, place_weight=True, point_ends_run=True).digit_weights(digits)
    assert numloss_weights.tolist() == [1, 1, 1, 2, 1, 1, 1]
    assert author_weights.tolist() == [1, 2, 1, 2, 1, 1, 1]


@pytest.mark.parametrize("name", ["ntl-was", "ntl-mse"])
@pytest.mark.parametrize("reweigh", [False, True])
def test_ntl_equals_the_transcribed_ntloss(name, reweigh):
    from reference.ntl import ntl_mse, ntl_was

    _, ours, labels = official_inputs(3)
    reference_logits = ours.detach().double().requires_grad_(True)
    official = (ntl_was if name == "ntl-was" else ntl_mse)(reference_logits, labels, DIGIT_IDS, reweigh)
    out = build_loss(name, VOCAB, reweigh=reweigh)(ours, labels)
    out.aux.backward()
    official.backward()
    assert float(out.aux) == pytest.approx(float(official), rel=1e-5)
    scale = float(reference_logits.grad.abs().max())
    assert float((ours.grad.double() - reference_logits.grad).abs().max()) <= 1e-4 * scale


@pytest.mark.hf  # the ntloss package and a transformers tokenizer
@pytest.mark.parametrize("name", ["ntl-was", "ntl-mse"])
def test_ntl_reweigh_agrees_with_the_ntloss_package(name):
    ntloss = pytest.importorskip("ntloss")  # a test dependency (pyproject [test])
    from test_digits import wordlevel

    tok = wordlevel(list("0123456789.abcdefgh"))
    vocab = DigitVocab.from_tokenizer(tok)
    width = len(tok)
    generator = torch.Generator().manual_seed(13)
    labels = torch.randint(0, width, (4, 9), generator=generator)
    labels[0, :3] = -100
    logits = torch.randn(4, 9, width, generator=generator, requires_grad=True)
    peer_logits = logits.detach().clone().requires_grad_(True)
    klass = ntloss.NTLoss if name == "ntl-was" else ntloss.NTLossDotProduct
    peer = klass(tokenizer=tok, vocab_size=width, reweigh=True)(peer_logits, labels)
    ours = build_loss(name, vocab, reweigh=True)(logits, labels)
    ours.aux.backward()
    peer.backward()
    assert float(ours.aux) == pytest.approx(float(peer), rel=1e-5)
    torch.testing.assert_close(logits.grad, peer_logits.grad, rtol=1e-4, atol=1e-6)


# -- normalisation ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["del", "ntl-was", "ntl-mse", "dist2"])
def test_normalize_tokens_divides_the_digit_terms_by_the_token_count(name):
    logits = make_logits(LABELS, seed=14)
    by_digits = build_loss(name, VOCAB)(logits, LABELS, num_items_in_batch=50, num_digits_in_batch=20)
    fn = build_loss(name, VOCAB, alpha=LOSSES[name].default_alpha, normalize="tokens")
    by_tokens = fn(logits, LABELS, num_items_in_batch=50, num_digits_in_batch=20)
    assert float(by_tokens.aux) == pytest.approx(float(by_digits.aux) * 20 / 50, rel=1e-6)
    assert float(by_tokens.ce) == pytest.approx(float(by_digits.ce))
    assert fn.normalize == "tokens" and fn.token_count_suffices and fn.aux_per_token
    assert not build_loss(name, VOCAB).token_count_suffices


@pytest.mark.parametrize("name", ["del", "ntl-was", "ntl-mse", "dist2"])
def test_normalize_tokens_takes_an_explicit_alpha(name):
    """The default alpha weighs the step's digit mean; a per-token mean would weigh the same
    number several times less, so "tokens" without an alpha is refused in build_loss, naming the fix."""
    default = LOSSES[name].default_alpha
    with pytest.raises(ValueError, match=rf"{name}: normalize=\"tokens\" .* default alpha \({default:g}\) weighs the "
                       rf"step's digit mean: pass alpha explicitly, e\.g\. {default:g} x your data's tokens per digit"):
        build_loss(name, VOCAB, normalize="tokens")
    assert build_loss(name, VOCAB, alpha=default, normalize="tokens").alpha == default


@pytest.mark.hf  # numloss.config
@pytest.mark.parametrize("name", ["del", "ntl-was", "ntl-mse", "dist2"])
def test_a_config_with_normalize_tokens_takes_an_explicit_alpha(name):
    from numloss.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match="pass alpha explicitly"):
        config_from_dict({"objective": {"name": name, "options": {"normalize": "tokens"}}})
    config = config_from_dict({"objective": {"name": name, "alpha": 0.5, "options": {"normalize": "tokens"}}})
    assert config.objective.alpha == 0.5


def test_which_objectives_the_token_count_makes_step_exact():
    assert build_loss("mle", VOCAB).token_count_suffices
    assert build_loss("mixce", VOCAB).token_count_suffices
    assert build_loss("emo", VOCAB, embedding=embedding()).token_count_suffices
    assert not build_loss("dist2", VOCAB, place_weight=True, normalize="weights").token_count_suffices


# -- option values --------------------------------------------------------------------------------

BAD_OPTIONS = [
    ("del", {"alpha": -1.0}, "del: alpha must be a finite number >= 0 and <= 3.4028.e.38, got -1.0"),
    ("del", {"alpha": float("nan")}, "alpha must be a finite number >= 0 .*, got nan"),
    ("ntl-was", {"alpha": float("inf")}, "alpha must be a finite number"),
    ("dist2", {"tau": 0.0}, "tau must be a finite number > 0"),
    ("dist2", {"tau": -2.0}, "tau must be a finite number > 0"),
    ("dist2", {"normalize": "count"}, "normalize must be one of 'digits', 'tokens', 'weights'"),
    ("dist2", {"point_ends_run": True}, "set place_weight=True"),
    ("del", {"normalize": "weights"}, "normalize must be one of 'digits', 'tokens'"),
    ("mixce", {"eta": 1.5}, "eta must be a finite number >= 0 and <= 1, got 1.5"),
    ("mixce", {"eta": -0.1}, "eta must be a finite number"),
    ("emo", {"form": "official"}, "form must be one of 'adaptive', 'gpt2'"),
    ("emo", {"mode": 3}, "mode must be one of 1, 2"),
    ("emo", {"max_ratio": 0.0}, "max_ratio must be a finite number > 0"),
    ("emo", {"mode": 2, "max_ratio": 3.0}, "mode 2 has no such ratio"),
    ("ntl-mse", {"reweigh": "yes"}, "reweigh must be True or False"),
]


@pytest.mark.hf  # numloss.config
@pytest.mark.parametrize("name, options, message", BAD_OPTIONS)
def test_bad_option_values_are_refused_by_build_loss_and_by_config_validation(name, options, message):
    from numloss.config import ConfigError, config_from_dict

    extra = {"embedding": embedding()} if name == "emo" else {}
    with pytest.raises(ValueError, match=message) as caught:
        build_loss(name, VOCAB, **options, **extra)
    assert "\n" not in str(caught.value)
    section = {"name": name, "options": {k: v for k, v in options.items() if k != "alpha"}}
    if "alpha" in options:
        section["alpha"] = options["alpha"]
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"objective": section})
    text = str(caught.value)
    # a value of the wrong kind (nan, inf) is refused by the config's type check, in its words
    assert re.search(message, text) or f"{next(iter(options))}: expected a finite number" in text, text
    assert "\n" not in text


# -- non-finite inputs ------------------------------------------------------------------------------

def test_nan_logits_at_an_ignored_position_are_reported():
    logits = make_logits(LABELS).detach()
    assert int(LABELS[1, 2]) == -100
    logits[1, 2, 4] = float("nan")
    flat = 1 * LABELS.shape[1] + 2
    with pytest.raises(FloatingPointError, match=f"NaN or inf at 1 ignored position.*flat position {flat}.*attention mask"):
        build_loss("del", VOCAB)(logits, LABELS)
    # opted out: the loss itself is finite and its value unchanged
    out = build_loss("del", VOCAB, check_finite=False)(logits, LABELS)
    clean = build_loss("del", VOCAB)(make_logits(LABELS).detach(), LABELS)
    assert float(out.loss) == pytest.approx(float(clean.loss))


def test_emo_ratio_floor_is_1e6_and_the_cap_bounds_it():
    """mode 1's ratio nll / d: d is floored at 1e-6 (the official code's clamp), so where the mass
    sits on the target's own embedding (d = 0) the ratio is nll * 1e6, finite; max_ratio caps it.
    mode 2 floors the nll instead. Hand values."""
    from numloss.losses.emo import MIN_DENOMINATOR, emo_ratio

    assert MIN_DENOMINATOR == 1e-6
    nll = torch.tensor([0.5, 2.0, 0.3])
    cost = torch.tensor([0.0, 0.25, 1e-9])
    torch.testing.assert_close(emo_ratio(nll, cost, 1, None), torch.tensor([0.5e6, 8.0, 0.3e6]))
    torch.testing.assert_close(emo_ratio(nll, cost, 1, 3.0), torch.tensor([3.0, 3.0, 3.0]))
    torch.testing.assert_close(emo_ratio(torch.tensor([0.0, 1.0]), torch.tensor([0.2, 0.5]), 2, None),
                               torch.tensor([0.2e6, 0.5]))
    # the ratio is detached: no gradient flows through it
    leaf = torch.tensor([1.0], requires_grad=True)
    assert not emo_ratio(leaf, leaf * 0.5, 1, None).requires_grad


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("del", {"alpha": "1.0"}, r"alpha must be a finite number >= 0 .*, got '1.0' \(str\)"),
        ("ntl-was", {"alpha": True}, r"alpha must be a finite number >= 0 .*, got True \(bool\)"),
        ("dist2", {"tau": "2"}, "tau must be a finite number > 0 .*, got '2'"),
        ("mixce", {"eta": "0.5"}, "eta must be a finite number"),
        ("emo", {"max_ratio": "3"}, "max_ratio must be a finite number > 0"),
    ],
)
def test_build_loss_takes_numbers_not_strings_or_bools(name, options, message):
    """The Python API converts nothing: a quoted number is an error, not a silent float()."""
    extra = {"embedding": embedding()} if name == "emo" else {}
    with pytest.raises(ValueError, match=message):
        build_loss(name, VOCAB, **options, **extra)


# -- options set after construction ---------------------------------------------------------------

# (objective, option, a value it refuses, a value it takes, build options)
SET_AFTER = [
    ("del", "alpha", -1, 0.5, {}),
    ("del", "alpha", "1.0", 2, {}),
    ("del", "place_weighting", "linear", "continuous", {}),
    ("del", "normalize", "weights", "tokens", {}),
    ("ntl-was", "alpha", float("nan"), 0.1, {}),
    ("ntl-mse", "level", "number", "token", {}),
    ("ntl-mse", "reweigh", True, False, {"level": "token"}),  # reweigh is digit-level only
    ("dist2", "tau", 0.0, 2.0, {}),
    ("dist2", "point_ends_run", True, False, {}),  # needs place_weight=True
    ("mixce", "eta", 1.5, 0.25, {}),
    ("emo", "mode", 3, 2, {}),
    ("emo", "max_ratio", 2.0, None, {"mode": 2}),  # mode 2 has no ratio to cap
]


@pytest.mark.parametrize("name, option, bad, good, build", SET_AFTER)
def test_an_option_set_after_construction_is_checked_as_build_loss_checks_it(name, option, bad, good, build):
    extra = {"embedding": embedding()} if name == "emo" else {}
    loss_fn = build_loss(name, VOCAB, **build, **extra)
    before = getattr(loss_fn, option)
    with pytest.raises(ValueError, match=option) as caught:
        setattr(loss_fn, option, bad)
    assert "\n" not in str(caught.value)
    assert getattr(loss_fn, option) == before or (before != before)  # unchanged (nan != nan)
    with pytest.raises(ValueError, match=option):  # build_loss refuses the same value
        build_loss(name, VOCAB, **{**build, option: bad}, **extra)
    setattr(loss_fn, option, good)
    assert getattr(loss_fn, option) == good


def test_a_changed_alpha_changes_the_loss():
    logits = make_logits(LABELS).detach()
    loss_fn = build_loss("del", VOCAB)
    out = loss_fn(logits, LABELS)
    loss_fn.alpha = 3.0
    assert float(loss_fn(logits, LABELS).loss) == pytest.approx(float(out.ce + 3.0 * out.aux), rel=1e-6)


# -- inputs of the Python API ---------------------------------------------------------------------

def test_logits_and_labels_on_different_or_meta_devices_are_one_clear_error():
    loss_fn = build_loss("del", VOCAB)
    meta = torch.empty(*LABELS.shape, WIDTH, device="meta")
    for logits, labels, says in [
        (meta, LABELS, "logits on meta, labels on cpu"),
        (make_logits(LABELS), LABELS.to("meta"), "logits on cpu, labels on meta"),
        (meta, LABELS.to("meta"), "meta device holds no values"),
    ]:
        with pytest.raises(ValueError, match=says) as caught:
            loss_fn(logits, labels)
        assert "\n" not in str(caught.value) and "del:" in str(caught.value)


@pytest.mark.parametrize(
    "value, error, says",
    [
        ("100", TypeError, "num_items_in_batch must be a number or a one-element tensor.*got '100' \\(str\\)"),
        (True, TypeError, "got True \\(bool\\)"),
        ([100], TypeError, "got \\[100\\] \\(list\\)"),
        (float("nan"), ValueError, "num_items_in_batch must be a finite count"),
        (torch.tensor([100, 5]), ValueError, "must be a scalar"),
        (1, ValueError, "smaller than the"),
    ],
)
def test_a_step_count_that_is_not_a_count_is_one_clear_error(value, error, says):
    loss_fn = build_loss("del", VOCAB)
    logits = make_logits(LABELS)
    with pytest.raises(error, match=says) as caught:
        loss_fn(logits, LABELS, num_items_in_batch=value)
    assert "\n" not in str(caught.value)
    with pytest.raises(error, match=says.replace("num_items_in_batch", "num_digits_in_batch")):
        loss_fn(logits, LABELS, num_digits_in_batch=value)


@pytest.mark.parametrize("value", [10_000, 10_000.0, torch.tensor(10_000), torch.tensor([10_000.0])])
def test_step_counts_take_numbers_and_one_element_tensors(value):
    loss_fn = build_loss("del", VOCAB)
    logits = make_logits(LABELS)
    out = loss_fn(logits, LABELS, num_items_in_batch=value)
    plain = loss_fn(logits, LABELS)
    assert float(out.ce) == pytest.approx(float(plain.ce) * int(plain.num_tokens) / 10_000, rel=1e-6)


def test_mle_takes_normalize_like_the_digit_objectives_and_refuses_alpha():
    """An A/B's MLE arm takes the digit arm's `normalize` (`build_loss("mle", vocab, normalize="tokens")`); MLE has no
    term for alpha to weight, so the API refuses alpha as the command line does."""
    logits = make_logits(LABELS).detach()
    plain = build_loss("mle", VOCAB)(logits, LABELS)
    for normalize in ("digits", "tokens"):
        loss_fn = build_loss("mle", VOCAB, normalize=normalize)
        out = loss_fn(logits, LABELS)
        assert torch.equal(out.loss, plain.loss) and float(out.aux) == 0.0
        assert loss_fn.token_count_suffices  # exact from num_items_in_batch whatever normalize says
    with pytest.raises(TypeError, match=r"objective 'mle' has no option\(s\) 'alpha'"):
        build_loss("mle", VOCAB, alpha=0.3)
    with pytest.raises(ValueError, match="normalize must be one of 'digits', 'tokens'"):
        build_loss("mle", VOCAB, normalize="weights")
