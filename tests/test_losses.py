"""Every objective against its definition: values and gradients, dtypes, edge cases, errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from numloss import LOSSES, DigitVocab, build_loss
from numloss.digits import _number_table, find_digits
from numloss.losses.core import token_nll_and_digit_logits
from numloss.losses.emo import emo_ratio
from reference import emo as ref_emo
from reference.definitions import ref_loss
from reference.dist2 import get_digit_loss_mean, get_digit_loss_weighted, get_sft_loss
from reference.mixce import mixce
from reference.ntl import ntl_mse, ntl_was

DIGIT_IDS = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # not 0..9, so id and digit value differ
POINT_ID = 2
VOCAB = DigitVocab(DIGIT_IDS, POINT_ID)
WIDTH = 20
HIDDEN = 6
# a chunking vocabulary (torch only): every two-digit token (a complete group), spaced single digits
# (" 4": GPT-2 writes a number after a space so) and a few three-digit tokens, an incomplete group in
# which most digits are absent from each slot
NUMBER_TOKENS = [(20 + v, f"{v:02d}", False) for v in range(100)] + [(120 + v, str(v), True) for v in range(10)]
NUMBER_TOKENS += [(130 + n, t, False) for n, t in enumerate(["123", "314", "999", "250"])]
VOCABS = {"digits": VOCAB, "chunks": DigitVocab(DIGIT_IDS, POINT_ID, NUMBER_TOKENS)}
WIDTHS = {"digits": WIDTH, "chunks": 134}

# name, options, alpha used by the reference
CASES = [
    ("mle", {}, 0.0),
    ("mle", {"normalize": "tokens"}, 0.0),  # an A/B's MLE arm takes the digit arm's `normalize`
    ("del", {}, 0.03),
    ("del", {"alpha": 0.3, "place_weighting": "continuous"}, 0.3),
    ("del", {"place_weighting": "none"}, 0.03),
    ("del", {"distance": "l1"}, 0.03),
    ("del", {"sigmoid_input": "centered"}, 0.03),
    ("del", {"alpha": 0.3, "sigmoid_input": "centered", "distance": "l1", "normalize": "tokens"}, 0.3),
    ("del", {"alpha": 0.7, "sigmoid_input": "centered", "p_weights": "detached"}, 0.7),
    ("ntl-was", {}, 0.3),
    ("ntl-mse", {"alpha": 0.5}, 0.5),
    ("ntl-was", {"level": "token"}, 0.3),
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
    ("ntl-mse", {"alpha": 0.5, "level": "token"}, 0.5),
    ("dist2", {"place_weight": True, "point_ends_run": True, "normalize": "weights"}, 0.1),
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items()) or 'default'}" for name, opts, _ in CASES]
EVERY_CASE = pytest.mark.parametrize("name, options, alpha", CASES, ids=IDS)
EVERY_VOCAB = pytest.mark.parametrize("vocab", VOCABS)


def batch(*rows: str, vocab: str = "digits") -> torch.Tensor:
    """Labels of strings: digits ("chunks": the longest number token first), '.', '_' ignored (and
    the padding), anything else a text token."""
    spell = {**{str(d): i for d, i in enumerate(DIGIT_IDS)}, ".": POINT_ID}
    if vocab == "chunks":
        spell.update({(" " if spaced else "") + digits: i for i, digits, spaced in NUMBER_TOKENS})
    out = []
    for row in rows:
        pieces = []
        while row:
            piece = next(row[:n] for n in (3, 2, 1) if n == 1 or row[:n] in spell)
            pieces.append(spell[piece] if piece in spell else -100 if piece == "_" else 13 + ord(piece) % 7)
            row = row[len(piece) :]
        out.append(pieces)
    return torch.tensor([ids + [-100] * (max(map(len, out)) - len(ids)) for ids in out])


# a number across an ignored position, a row without digits, one all ignored; "chunks": mixed
# lengths and spacing, "1234" as "123" "4", " 42" as " 4" "2"
BATCHES = {
    "digits": batch("__=12.5+3", "ab___", "x100.25_", "__7", "____"),
    "chunks": batch("__=1234.5+ 42", "ab___", "x3_14.25 999", "__7", "____", vocab="chunks"),
}
LABELS = BATCHES["digits"]
# digit slots and number tokens in BATCHES: 1,2,5,3 + 1,0,0,2,5 + 7; 123,4,5, 4,2 + 3,14,25, 9,99 + 7
COUNTS = {"digits": (10, 10), "chunks": (16, 11)}


def make_logits(labels: torch.Tensor, seed: int = 0, width: int = WIDTH, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(*labels.shape, width, generator=generator)
    return logits.to(dtype).requires_grad_(True)


def embedding(width: int = WIDTH) -> torch.Tensor:
    return torch.randn(width, HIDDEN, generator=torch.Generator().manual_seed(7))


def loss_for(name: str, options: dict, vocab: str = "digits", width: int | None = None):
    if name == "emo":
        options = {**options, "embedding": embedding(width or WIDTHS[vocab])}
    return build_loss(name, VOCABS[vocab], **options)


def reference(name, options, alpha, logits, labels, vocab="digits", **counts):
    options = {k: v for k, v in options.items() if k != "alpha"}
    if name == "emo":
        options = {**options, "embedding": embedding(logits.shape[-1])}
    tokens = NUMBER_TOKENS if vocab == "chunks" else ()
    return ref_loss(name, logits, labels, DIGIT_IDS, POINT_ID, alpha, tokens, **counts, **options)


@EVERY_VOCAB
@EVERY_CASE
def test_value_and_gradient_match_the_slow_reference(name, options, alpha, vocab):
    """With this call's counts and with the step's, which set the normalisation; on a head padded
    past the tokenizer (Qwen2.5's), whose extra columns stay in the softmax."""
    labels, width = BATCHES[vocab], WIDTHS[vocab] + 13
    logits = make_logits(labels, width=width)
    loss_fn = loss_for(name, options, vocab, width)
    out = loss_fn(logits, labels)
    out.loss.backward()
    ref_logits = logits.detach().double().requires_grad_(True)
    ref_total, ref_ce, ref_aux = reference(name, options, alpha, ref_logits, labels, vocab)
    ref_total.backward()
    assert float(out.ce) == pytest.approx(float(ref_ce), rel=1e-5)
    assert float(out.aux) == pytest.approx(float(ref_aux), rel=1e-5, abs=1e-7)
    assert float(out.loss) == pytest.approx(float(ref_total), rel=1e-5)
    torch.testing.assert_close(logits.grad.double(), ref_logits.grad, rtol=1e-4, atol=1e-6)
    assert int(out.num_tokens) == int((labels != -100).sum())
    assert int(out.num_digits) == COUNTS[vocab][options.get("level") == "token"]
    if name not in ("mle", "mixce", "emo"):
        assert float(out.aux) > 0
    # the step's counts as a tensor and a one-element tensor (test_token_count_suffices...: numbers)
    step = loss_fn(logits.detach(), labels, num_items_in_batch=torch.tensor(40), num_digits_in_batch=torch.tensor([30.0]))
    ref_total, ref_ce, _ = reference(name, options, alpha, logits.detach(), labels, vocab, num_items=40, num_digits=30)
    assert float(step.ce) == pytest.approx(float(ref_ce), rel=1e-5)
    assert float(step.loss) == pytest.approx(float(ref_total), rel=1e-5)


# MixCE, EMO and detached DEL stop gradients by definition (sg(.)), so finite differences of their
# value do not give their gradient (the reference test checks it); EMO's transport cost (aux) is
# gradchecked.
GRADCHECK_CASES = [c for c in CASES if c[0] != "mixce" and c[1].get("form") != "gpt2" and "p_weights" not in c[1]]


@EVERY_VOCAB
@pytest.mark.parametrize("name, options, alpha", GRADCHECK_CASES, ids=[IDS[CASES.index(c)] for c in GRADCHECK_CASES])
def test_float64_gradcheck(name, options, alpha, vocab):
    labels = batch("=4.05", "x31_", " 12.5+ 42", vocab=vocab)
    fn = loss_for(name, options, vocab)
    part = "aux" if name == "emo" else "loss"
    logits = make_logits(labels, seed=2, width=WIDTHS[vocab], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: getattr(fn(x, labels), part), (logits,), eps=1e-6, atol=1e-5, fast_mode=True)


def test_float64_gradcheck_of_the_shared_core_under_any_incoming_gradient():
    """Random (also negative) weights on the NLL, the digit logits and the transport cost: the
    scale-folding shortcut of the backward only holds for non-negative ones."""
    labels = batch("=4.05", "x31_").reshape(-1)
    logits = make_logits(labels[None], seed=2, dtype=torch.float64)[0]
    valid = labels != -100
    digit_index = torch.nonzero(torch.isin(labels, torch.tensor(DIGIT_IDS))).squeeze(1)
    weights = [torch.randn(*shape, dtype=torch.float64) for shape in ((len(labels),), (len(digit_index), 10), (len(labels),))]
    unit = torch.nn.functional.normalize(embedding().double(), dim=-1)  # EMO's transport cost too

    def combined(x):
        outputs = token_nll_and_digit_logits(x, torch.where(valid, labels, 0), valid, digit_index, torch.tensor(DIGIT_IDS), unit)
        return sum((out * w).sum() for out, w in zip(outputs[:2] + outputs[3:], weights, strict=True))

    assert torch.autograd.gradcheck(combined, (logits,), eps=1e-6, atol=1e-6, fast_mode=True)


@EVERY_VOCAB
@EVERY_CASE
def test_bfloat16_logits_match_float32_on_the_same_values_after_a_first_use_under_inference_mode(name, options, alpha, vocab):
    """An evaluation under torch.inference_mode() before training (as `numloss compare` does
    between runs in one process) must not leave cached tables that backward cannot save."""
    labels = BATCHES[vocab]
    logits16 = make_logits(labels, seed=3, width=WIDTHS[vocab], dtype=torch.bfloat16)
    logits32 = logits16.detach().float().requires_grad_(True)
    fn = loss_for(name, options, vocab)
    _number_table.cache_clear()
    with torch.inference_mode():
        evaluated = fn(logits32.detach(), labels)
    out16, out32 = fn(logits16, labels), fn(logits32, labels)
    out16.loss.backward()
    out32.loss.backward()
    assert float(out32.loss) == float(evaluated.loss)
    assert out16.loss.dtype == torch.float32 and logits16.grad.dtype == torch.bfloat16  # computed in float32
    assert float(out16.loss) == pytest.approx(float(out32.loss), rel=1e-6)
    # the gradient is stored in bf16: 8 mantissa bits, so errors scale with its largest entry
    atol = max(1e-3, 1e-2 * float(logits32.grad.abs().max()))
    torch.testing.assert_close(logits16.grad.float(), logits32.grad, rtol=2e-2, atol=atol)


@EVERY_VOCAB
@EVERY_CASE
def test_empty_ignored_and_digitless_batches_are_finite_on_both_paths(name, options, alpha, vocab):
    """The logits path and the fused one (`from_hidden`, chunks of 3), which keeps a graph."""
    fn = loss_for(name, options, vocab)
    weight = torch.randn(WIDTHS[vocab], HIDDEN, requires_grad=True)
    for labels in (torch.full((2, 5), -100), torch.empty(0, 7, dtype=torch.long), batch("abc__", "xyz=+")):
        hidden = torch.randn(*labels.shape, HIDDEN, generator=torch.Generator().manual_seed(4))
        logits = (hidden @ weight.detach().T).requires_grad_(True)
        hidden.requires_grad_(True)
        for out, inputs in ((fn(logits, labels), (logits,)), (fn.from_hidden(hidden, weight, labels, chunk_size=3), (hidden, weight))):
            grads = torch.autograd.grad(out.loss, inputs, allow_unused=True, materialize_grads=True)
            assert torch.isfinite(out.loss) and int(out.num_digits) == 0 and all(torch.isfinite(g).all() for g in grads)
            if not bool((labels != -100).any()):  # nothing scored: zero, with a zero gradient
                assert float(out.loss) == float(out.aux) == float(out.ce) == 0.0 and int(out.num_tokens) == 0
                assert all(torch.count_nonzero(g) == 0 for g in grads)
            elif name not in ("mixce", "emo"):  # rows without digits: no digit term
                assert float(out.aux) == 0.0 and float(out.loss) == pytest.approx(float(out.ce))


@pytest.mark.parametrize("name, options, alpha", [c for c in CASES if "level" not in c[1]], ids=[i for i, c in zip(IDS, CASES, strict=True) if "level" not in c[1]])
def test_single_digits_of_a_chunking_vocabulary_score_exactly_as_with_ten_digits(name, options, alpha):
    """(Not at level="token": there p is over every number token, so the chunks do matter.)"""
    logits = make_logits(LABELS, seed=5, width=WIDTHS["chunks"]).detach()
    outs, grads = [], []
    for vocab in VOCABS:
        x = logits.clone().requires_grad_(True)
        outs.append(loss_for(name, options, vocab, WIDTHS["chunks"])(x, LABELS))
        outs[-1].loss.backward()
        grads.append(x.grad)
    for field in ("loss", "ce", "aux", "num_digits", "digit_entropy"):
        assert torch.equal(getattr(outs[0], field), getattr(outs[1], field)), field
    assert torch.equal(*grads)


def test_two_dimensional_inputs_equal_the_batched_call_and_a_custom_ignore_index_works():
    """On both paths: the fused one (`from_hidden`) flattens as the logits path does."""
    fn = build_loss("del", VOCAB)
    hidden, weight = torch.randn(*LABELS.shape, HIDDEN, generator=torch.Generator().manual_seed(8)), embedding()
    logits = hidden @ weight.T
    # [N, V] with [N] is one sequence: numbers may then run across former rows, so use one row
    row = float(fn(logits[2:3], LABELS[2:3]).loss)
    assert float(fn(logits[2], LABELS[2]).loss) == pytest.approx(row)
    assert float(fn.from_hidden(hidden[2], weight, LABELS[2], chunk_size=3).loss) == pytest.approx(row, rel=1e-5)
    labels = LABELS.masked_fill(LABELS == -100, 0)
    custom = build_loss("del", VOCAB, ignore_index=0)(logits, labels)
    assert float(custom.loss) == pytest.approx(float(fn(logits, LABELS).loss))


def test_hand_worked_del_and_ntl():
    # DEL: one position, target 0, all ten digit logits 0: p = 0.1, sigmoid = 0.5, so
    # sum_k 0.1 * BCE(0.5, .) = 10 * 0.1 * ln 2; / 10; units weight u = 2
    logits = torch.full((1, 1, WIDTH), -1e4)
    logits[0, 0, DIGIT_IDS] = 0.0
    out = build_loss("del", VOCAB)(logits, torch.tensor([[DIGIT_IDS[0]]]))
    assert float(out.aux) == pytest.approx(2 * math.log(2) / 10, rel=1e-6)
    assert float(out.ce) == pytest.approx(math.log(10), rel=1e-6)
    # NTL: p = 1/2 on digits 1 and 7, target 3
    logits = torch.full((1, 1, WIDTH), -1e4)
    logits[0, 0, [DIGIT_IDS[1], DIGIT_IDS[7]]] = 0.0
    labels = torch.tensor([[DIGIT_IDS[3]]])
    assert float(build_loss("ntl-was", VOCAB)(logits, labels).aux) == pytest.approx(0.5 * 2 + 0.5 * 4)
    assert float(build_loss("ntl-mse", VOCAB)(logits, labels).aux) == pytest.approx((4 - 3) ** 2)


# -- errors -------------------------------------------------------------------------------------


def test_unknown_objectives_and_options_are_errors_and_every_objective_has_a_name():
    with pytest.raises(ValueError, match="unknown objective 'dell'.*del"):
        build_loss("dell", VOCAB)
    with pytest.raises(TypeError, match="no option.*'place_weights'.*place_weighting"):
        build_loss("del", VOCAB, place_weights="official")
    with pytest.raises(TypeError, match="no option.*'alpha'"):
        build_loss("mixce", VOCAB, alpha=0.5)
    with pytest.raises(TypeError, match=r"objective 'mle' has no option\(s\) 'alpha'"):  # no term to weigh
        build_loss("mle", VOCAB, alpha=0.3)
    with pytest.raises(TypeError, match="emo needs embedding"):
        build_loss("emo", VOCAB)
    assert list(LOSSES) == ["mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo"]
    assert build_loss("NTL_WAS", VOCAB).name == "ntl-was"


# -- held-out equality with the published code (tests/reference/<name>.py) -------------------

# one leading column: the published functions shift inside, numloss takes aligned tensors
OFFICIAL_LABELS = batch("_a3.14+27_", "__905.5=1", "_x12.0.3", "_7__8", "_____", "__bc=")


# what the author-side DIST2 code reads of a tokenizer: `.vocab`
AUTHOR_TOKENIZER = SimpleNamespace(vocab={**{str(d): i for d, i in enumerate(DIGIT_IDS)}, ".": POINT_ID,
                                          **{f"t{i}": i for i in range(13, WIDTH)}})


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


def _dist2(tau, weighted=False):
    if weighted:
        return lambda f, e: get_digit_loss_weighted(get_sft_loss(f, OFFICIAL_LABELS), AUTHOR_TOKENIZER, f, OFFICIAL_LABELS, target_temperature=tau, beta=0.5)
    return lambda f, e: get_digit_loss_mean(f, OFFICIAL_LABELS, AUTHOR_TOKENIZER, target_temperature=tau, beta=0.5)


AUTHOR_WEIGHTS = {"place_weight": True, "point_ends_run": True, "normalize": "weights"}
# numloss objective and options -> the published loss of (full logits, embedding)
OFFICIAL = {
    **{f"mixce-{eta}": ("mixce", {"eta": eta}, lambda f, e, eta=eta: mixce(f, OFFICIAL_LABELS, eta)) for eta in (0.5, 0.2, 0.0)},
    "emo-adaptive": ("emo", {}, lambda f, e: ref_emo.emo_adaptive(f, OFFICIAL_LABELS, e)),
    "emo-gpt2": ("emo", {"form": "gpt2"}, lambda f, e: ref_emo.emo_gpt2(f, OFFICIAL_LABELS, e)),
    "emoloss-mode1-cap": ("emo", {"form": "gpt2", "max_ratio": 3.0}, lambda f, e: ref_emo.emoloss_pypi(f, OFFICIAL_LABELS, e, mode=1)),
    "emoloss-mode2": ("emo", {"form": "gpt2", "mode": 2}, lambda f, e: ref_emo.emoloss_pypi(f, OFFICIAL_LABELS, e, mode=2)),
    **{f"dist2-tau{tau}": ("dist2", {"alpha": 0.5, "tau": tau}, _dist2(tau)) for tau in (4.0, 1.0)},
    **{f"dist2-weighted-tau{tau}": ("dist2", {"alpha": 0.5, "tau": tau, **AUTHOR_WEIGHTS}, _dist2(tau, True)) for tau in (2.0, 1.0)},
}


# a small embedding spread makes d small, so nll / d passes EMO's cap of 3 at some positions
CLOSE = embedding() * 0.05 + torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("case", OFFICIAL)
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_the_official_code(case, seed):
    name, options, official = OFFICIAL[case]
    full, ours, labels = official_inputs(seed)
    extra = {"embedding": CLOSE if "max_ratio" in options else embedding()} if name == "emo" else {}
    out = build_loss(name, VOCAB, **options, **extra)(ours, labels)
    assert_same_value_and_gradient(out.loss, ours, official(full, extra.get("embedding")), full)
    if "max_ratio" in options:  # the cap binds somewhere
        assert float(out.loss) < float(build_loss(name, VOCAB, form="gpt2", **extra)(ours.detach(), labels).loss)


def test_dist2_weightings_on_a_worked_example():
    # "3.14" and "12.0.3": numloss weights integer digits by i + 1 and decimals by 1; the author
    # code ends a run at '.', so decimals count from the end of their own run
    digits = find_digits(batch("3.14", "12.0.3"), VOCAB, WIDTH)
    assert build_loss("dist2", VOCAB, place_weight=True).digit_weights(digits).tolist() == [1, 1, 1, 2, 1, 1, 1]
    assert build_loss("dist2", VOCAB, place_weight=True, point_ends_run=True).digit_weights(digits).tolist() == [1, 2, 1, 2, 1, 1, 1]


@pytest.mark.parametrize("official", ["transcription", pytest.param("package", marks=pytest.mark.hf)])
@pytest.mark.parametrize("name", ["ntl-was", "ntl-mse"])
@pytest.mark.parametrize("reweigh", [False, True])
def test_ntl_equals_the_ntloss_code(name, reweigh, official):
    """tests/reference/ntl.py, and the ntloss package itself (a test dependency, pyproject [test])."""
    _, ours, labels = official_inputs(3)
    reference_logits = ours.detach().double().requires_grad_(True)
    if official == "transcription":
        official = (ntl_was if name == "ntl-was" else ntl_mse)(reference_logits, labels, DIGIT_IDS, reweigh)
    else:
        ntloss = pytest.importorskip("ntloss")
        from test_digits import wordlevel

        tok = wordlevel(["a", ".", *"0123456789", *"cdefghi"])  # the ids of VOCAB
        assert DigitVocab.from_tokenizer(tok) == VOCAB
        klass = ntloss.NTLoss if name == "ntl-was" else ntloss.NTLossDotProduct
        official = klass(tokenizer=tok, vocab_size=WIDTH, reweigh=reweigh)(reference_logits, labels)
    out = build_loss(name, VOCAB, reweigh=reweigh)(ours, labels)
    out.aux.backward()
    official.backward()
    assert float(out.aux) == pytest.approx(float(official), rel=1e-5)
    scale = float(reference_logits.grad.abs().max())
    assert float((ours.grad.double() - reference_logits.grad).abs().max()) <= 1e-4 * scale


# -- normalisation ------------------------------------------------------------------------------

@EVERY_CASE
def test_token_count_suffices_exactly_where_the_step_token_count_makes_the_loss_exact(name, options, alpha):
    """A digit term over tokens, MLE (whatever its `normalize`), MixCE and EMO: the step's digit
    count then changes nothing (the division itself, and MLE's value whatever its `normalize`: the
    reference test)."""
    fn = loss_for(name, options)
    exact = name in ("mle", "mixce", "emo") or options.get("normalize") == "tokens"
    assert fn.token_count_suffices == fn.aux_per_token == exact
    logits = make_logits(LABELS, seed=14).detach()
    assert (fn(logits, LABELS, 50, 20).loss == fn(logits, LABELS, 50.0, 30).loss) == exact


# -- option values --------------------------------------------------------------------------------

BAD_OPTIONS = [
    ("del", {"alpha": -1.0}, "del: alpha must be a finite number >= 0 and <= 3.4028.e.38, got -1.0"),
    ("del", {"alpha": float("nan")}, "alpha must be a finite number >= 0 .*, got nan"),
    ("del", {"alpha": "1.0"}, r"alpha must be a finite number >= 0 .*, got '1.0' \(str\)"),  # never a silent float()
    ("ntl-was", {"alpha": True}, r"alpha must be a finite number >= 0 .*, got True \(bool\)"),
    ("dist2", {"tau": 0.0}, "tau must be a finite number > 0"),
    ("dist2", {"normalize": "count"}, "normalize must be one of 'digits', 'tokens', 'weights'"),
    ("dist2", {"point_ends_run": True}, "set place_weight=True"),
    ("del", {"normalize": "weights"}, "normalize must be one of 'digits', 'tokens'"),
    ("mle", {"normalize": "weights"}, "normalize must be one of 'digits', 'tokens'"),
    ("del", {"place_weighting": "linear"}, "place_weighting must be one of"),
    ("del", {"p_weights": "frozen"}, "p_weights must be one of 'attached', 'detached'"),
    ("del", {"sigmoid_input": "mean"}, "sigmoid_input must be one of 'raw', 'centered', got 'mean'"),
    ("mixce", {"eta": 1.5}, "eta must be a finite number >= 0 and <= 1, got 1.5"),
    ("emo", {"form": "official"}, "form must be one of 'adaptive', 'gpt2'"),
    ("emo", {"mode": 3}, "mode must be one of 1, 2"),
    ("emo", {"max_ratio": 0.0}, "max_ratio must be a finite number > 0"),
    ("emo", {"max_ratio": "3"}, "max_ratio must be a finite number > 0"),
    ("emo", {"mode": 2, "max_ratio": 3.0}, "mode 2 has no such ratio"),
    ("ntl-mse", {"reweigh": "yes"}, "reweigh must be True or False"),
    ("ntl-was", {"level": "number"}, "level must be one of"),
    ("ntl-mse", {"level": "token", "reweigh": True}, "reweigh applies to the digit level only"),
    # the default alpha weighs the step's digit mean, a per-token mean the same number several times less
    *[(name, {"normalize": "tokens"}, rf"{name}: normalize=\"tokens\" .* default alpha \({LOSSES[name].default_alpha:g}\) weighs the "
       rf"step's digit mean: pass alpha explicitly, e\.g\. {LOSSES[name].default_alpha:g} x your data's tokens per digit")
      for name in ["del", "ntl-was", "ntl-mse", "dist2"]],
]


@pytest.mark.parametrize("name, options, message", BAD_OPTIONS)
def test_bad_option_values_are_refused_when_built_and_when_set_after(name, options, message):
    """build_loss refuses the value in one line; set on a built objective (the last option, the
    others given) it is refused the same way, and the option keeps its value."""
    extra = {"embedding": embedding()} if name == "emo" else {}
    with pytest.raises(ValueError, match=message) as caught:
        build_loss(name, VOCAB, **options, **extra)
    assert "\n" not in str(caught.value)
    *given, (option, bad) = options.items()
    if options.get("normalize") != "tokens":  # that one is refused only while alpha is the default
        loss_fn = build_loss(name, VOCAB, **dict(given), **extra)
        before = getattr(loss_fn, option)
        with pytest.raises(ValueError, match=message):
            setattr(loss_fn, option, bad)
        assert getattr(loss_fn, option) == before


def test_options_set_after_construction_take_effect():
    logits = make_logits(LABELS).detach()
    loss_fn = build_loss("del", VOCAB)
    loss_fn.alpha, loss_fn.sigmoid_input = 3.0, "centered"
    assert "alpha=3.0" in repr(loss_fn) and "sigmoid_input='centered'" in repr(loss_fn)
    fresh = build_loss("del", VOCAB, alpha=3.0, sigmoid_input="centered")(logits, LABELS)
    assert torch.equal(loss_fn(logits, LABELS).loss, fresh.loss)
    emo = build_loss("emo", VOCAB, embedding=embedding(), mode=2)
    emo.max_ratio = None  # what mode 2 takes
    assert emo.max_ratio is None


def test_emo_ratio_floor_is_1e6_and_the_cap_bounds_it():
    """mode 1's ratio nll / d: d is floored at 1e-6 (the official code's clamp), so where the mass
    sits on the target's own embedding (d = 0) the ratio is nll * 1e6, finite; max_ratio caps it.
    mode 2 floors the nll instead. Hand values."""
    nll = torch.tensor([0.5, 2.0, 0.3])
    cost = torch.tensor([0.0, 0.25, 1e-9])
    torch.testing.assert_close(emo_ratio(nll, cost, 1, None), torch.tensor([0.5e6, 8.0, 0.3e6]))
    torch.testing.assert_close(emo_ratio(nll, cost, 1, 3.0), torch.tensor([3.0, 3.0, 3.0]))
    torch.testing.assert_close(emo_ratio(torch.tensor([0.0, 1.0]), torch.tensor([0.2, 0.5]), 2, None), torch.tensor([0.2e6, 0.5]))
    leaf = torch.tensor([1.0], requires_grad=True)
    assert not emo_ratio(leaf, leaf * 0.5, 1, None).requires_grad  # detached: no gradient through it


# -- inputs of the Python API ---------------------------------------------------------------------


def nan_at(row: int, column: int) -> torch.Tensor:
    logits = make_logits(LABELS).detach()
    logits[row, column, 4] = float("nan")
    return logits


META = torch.empty(*LABELS.shape, WIDTH, device="meta")
# (the failing call of loss_fn = build_loss("del", VOCAB), the error, what its one line says)
BAD_CALLS = {
    "shapes": (lambda fn: fn(torch.randn(2, 5, WIDTH), torch.zeros(2, 4, dtype=torch.long)), ValueError, r"do not match.*already aligned"),
    "float labels": (lambda fn: fn(torch.randn(2, 5, WIDTH), torch.zeros(2, 5)), TypeError, "integer tensor"),
    "a head narrower than the ids": (lambda fn: fn(torch.randn(2, 5, 8), torch.zeros(2, 5, dtype=torch.long)), ValueError, "needs at least 13"),
    "a label past the head": (lambda fn: fn(torch.randn(1, 2, WIDTH), torch.tensor([[1, WIDTH]])), ValueError, "outside the logit width"),
    "logits on meta": (lambda fn: fn(META, LABELS), ValueError, "del: .*logits on meta, labels on cpu"),
    "labels on meta": (lambda fn: fn(make_logits(LABELS), LABELS.to("meta")), ValueError, "del: .*logits on cpu, labels on meta"),
    "both on meta": (lambda fn: fn(META, LABELS.to("meta")), ValueError, "del: .*meta device holds no values"),
    "NaN at a scored position": (lambda fn: fn(nan_at(0, 3), LABELS), FloatingPointError, "NaN or inf at 1 scored position"),
    "NaN at an ignored position": (lambda fn: fn(nan_at(1, 2), LABELS), FloatingPointError,
                                   f"NaN or inf at 1 ignored position.*flat position {LABELS.shape[1] + 2}.*attention mask"),
    **{f"{count}={value!r}": (lambda fn, c=count, v=value: fn(make_logits(LABELS), LABELS, **{c: v}), error, says.replace("COUNT", count))
       for value, error, says in [
           ("100", TypeError, "COUNT must be a number or a one-element tensor.*got '100' \\(str\\)"),
           (True, TypeError, "got True \\(bool\\)"),
           ([100], TypeError, "got \\[100\\] \\(list\\)"),
           (float("nan"), ValueError, "COUNT must be a finite count"),
           (torch.tensor([100, 5]), ValueError, "must be a scalar"),
           (1, ValueError, "COUNT=1 is smaller than the"),
       ] for count in ("num_items_in_batch", "num_digits_in_batch")},
}


@pytest.mark.parametrize("case", BAD_CALLS)
def test_a_bad_call_is_one_clear_error(case):
    call, error, says = BAD_CALLS[case]
    with pytest.raises(error, match=says) as caught:
        call(build_loss("del", VOCAB))
    assert "\n" not in str(caught.value)


def test_check_finite_false_lets_a_nan_at_an_ignored_position_through():
    out = build_loss("del", VOCAB, check_finite=False)(nan_at(1, 2), LABELS)
    assert float(out.loss) == pytest.approx(float(build_loss("del", VOCAB)(make_logits(LABELS).detach(), LABELS).loss))
