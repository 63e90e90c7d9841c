"""DigitVocab, number runs, place indices and place weights."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from numloss.digits import DigitVocab, find_digits, place_weights
from reference.definitions import ref_place_weight, ref_slots_row
from test_losses import VOCAB, WIDTH, batch  # '_' an ignored position
from tokenizer_styles import single_digit_style


def places(*rows: str) -> list[list[int | None]]:
    """Per row and position: the place `find_digits` gives a digit there, None elsewhere."""
    labels = batch(*rows)
    digits = find_digits(labels, VOCAB, WIDTH)
    flat: list[int | None] = [None] * labels.numel()
    for index, place in zip(digits.index.tolist(), digits.place.tolist(), strict=True):
        flat[index] = place
    return [flat[r * labels.shape[1] : (r + 1) * labels.shape[1]] for r in range(len(rows))]


def slots_by_reference(labels: torch.Tensor, vocab: DigitVocab) -> list[tuple[int, int, int, int]]:
    """(flat position, slot, digit, place) of every digit slot, from the row-scanning loop."""
    tokens = {i: (str(k), False) for k, i in enumerate(vocab.digit_ids)}
    tokens.update({i: (d, s) for i, d, s in vocab.number_tokens})
    out = []
    for b, row in enumerate(labels.tolist()):
        for t, slots in enumerate(ref_slots_row(row, tokens, vocab.decimal_point_id)):
            out += [(b * labels.shape[1] + t, j, digit, place) for j, digit, place, _ in slots]
    return out


def wordlevel(tokens: list[str]) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(["<unk>", *tokens])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


# -- DigitVocab ---------------------------------------------------------------------------------


def test_from_wordlevel_tokenizer_finds_digits_and_point_in_order_and_a_missing_point_is_none():
    tok = wordlevel(list("ab.9876543210"))
    vocab = DigitVocab.from_tokenizer(tok)
    assert [tok.convert_ids_to_tokens(i) for i in vocab.digit_ids] == list("0123456789")
    assert tok.convert_ids_to_tokens(vocab.decimal_point_id) == "."
    assert DigitVocab.from_tokenizer(wordlevel(list("ab0123456789"))).decimal_point_id is None


def test_sentencepiece_like_tokenizer_with_split_digits_is_accepted():
    tok = single_digit_style()
    vocab = DigitVocab.from_tokenizer(tok)
    ids = tok("x 3.14", add_special_tokens=False)["input_ids"]
    assert [vocab.digit_ids.index(i) for i in ids if i in vocab.digit_ids] == [3, 1, 4]
    assert vocab.decimal_point_id in ids


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: DigitVocab.from_tokenizer(wordlevel(list("ab.012345689"))), r"digit\(s\) 7.*Llama-1/2, Mistral, Qwen2.5, DeepSeek, SmolLM2"),
        (lambda: DigitVocab([1, 2, 3]), "exactly 10"),
        (lambda: DigitVocab([1] * 10), "distinct"),
        (lambda: DigitVocab(range(10), decimal_point_id=3), "distinct from the digits"),
        (lambda: DigitVocab(range(10), None, [(20, "7", False)]), "bare single digit"),
        (lambda: DigitVocab(range(10), None, [(20, "7a", False)]), "ASCII digits"),
        (lambda: DigitVocab(range(10), None, [(3, "12", False)]), "used twice"),
        (lambda: DigitVocab(range(10), None, [(20, "12", False)]).check_width(15), "needs at least 21"),
        (lambda: DigitVocab(range(91, 101)).check_width(50), "needs at least 101"),  # another model's logits
        (lambda: DigitVocab.from_tokenizer(wordlevel(list("0123456789")), multi_digit="x"), "multi_digit must be one of"),
        (lambda: find_digits(torch.tensor([[1, 25]]), VOCAB, WIDTH), "outside the logit width 20"),
    ],
)
def test_bad_vocabularies_and_labels_are_one_line_errors(build, message):
    with pytest.raises(ValueError, match=message) as caught:
        build()
    assert "\n" not in str(caught.value)


# -- places -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12345", [4, 3, 2, 1, 0]),
        ("3.14159", [0, None, -1, -2, -3, -4, -5]),
        ("42.", [1, 0, None]),
        (".25", [None, 1, 0]),  # the point has no digit before it: an integer
        ("100.25", [2, 1, 0, None, -1, -2]),
        ("1.2.3", [0, None, -1, None, -3]),  # only the first point counts; i = -(j - m)
        ("x=12+7", [None, None, 1, 0, None, 0]),
        ("0.5", [0, None, -1]),
    ],
)
def test_hand_worked_places(text, expected):
    assert places(text) == [expected]


def test_empty_and_digitless_batches():
    for labels in (torch.empty(0, 0, dtype=torch.long), torch.empty(3, 0, dtype=torch.long), batch("abc", "___")):
        assert find_digits(labels, VOCAB, WIDTH).count == 0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.text(alphabet="0123456789" * 3 + "..." + "ab_", min_size=1, max_size=40), min_size=1, max_size=7))
def test_vectorised_digits_match_the_row_scanning_reference(rows):
    labels = batch(*rows)
    digits = find_digits(labels, VOCAB, WIDTH)
    fields = (digits.index, digits.slot, digits.target, digits.place)
    assert list(zip(*(field.tolist() for field in fields), strict=True)) == slots_by_reference(labels, VOCAB)
    assert torch.equal(digits.rows, digits.index)


# -- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighting", ["official", "continuous", "none"])
def test_weights_match_the_formula_and_the_design_examples(weighting):
    places_ = torch.arange(-6, 7)
    expected = [ref_place_weight(i, weighting) for i in places_.tolist()]
    assert place_weights(places_, weighting).tolist() == pytest.approx(expected, rel=1e-6)
    # the design's official examples, and no jump between units and first decimal when continuous
    assert place_weights(torch.tensor([4, 3, 2, 1, 0])).tolist() == [10, 8, 6, 4, 2]
    assert place_weights(torch.tensor([0, -1, -2])).tolist() == pytest.approx([2, 0.9612, 0.9423], abs=1e-4)
    units, first_decimal = place_weights(torch.tensor([0, -1]), "continuous").tolist()
    assert units == 2.0 and first_decimal == pytest.approx(2 / 1.02)
    with pytest.raises(ValueError, match="place_weighting must be one of"):
        place_weights(torch.tensor([0]), "linear")
