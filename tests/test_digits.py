"""DigitVocab, number runs, place indices and place weights."""

from __future__ import annotations

import random

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from numloss.digits import (
    DigitVocab,
    DigitVocabError,
    find_digits,
    label_classes,
    number_places,
    place_weights,
)
from reference import classes_of, ref_place_weight, ref_places_row
from tokenizer_styles import gpt2_style, single_digit_style

CHARS = list("0123456789.") + list("abcxyz +-=")
CHAR_ID = {c: i for i, c in enumerate(CHARS)}
VOCAB = DigitVocab(range(10), 10)

def char_labels(*rows: str) -> torch.Tensor:
    """Labels of char rows; '_' is an ignored position, other unknown chars map to 'x'."""
    width = max(map(len, rows))
    labels = torch.full((len(rows), width), -100)
    for r, text in enumerate(rows):
        for t, c in enumerate(text):
            labels[r, t] = -100 if c == "_" else CHAR_ID.get(c, CHAR_ID["x"])
    return labels


def places_of(text: str) -> list[int | None]:
    labels = char_labels(text)
    places = number_places(label_classes(labels, VOCAB, len(CHARS)))[0].tolist()
    classes = label_classes(labels, VOCAB, len(CHARS))[0].tolist()
    return [p if 0 <= c < 10 else None for p, c in zip(places, classes, strict=True)]


# -- DigitVocab ---------------------------------------------------------------------------------


def wordlevel(tokens: list[str]) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(["<unk>", *tokens])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def test_from_wordlevel_tokenizer_finds_digits_and_point_in_order():
    tokens = list("ab.9876543210")
    tok = wordlevel(tokens)
    vocab = DigitVocab.from_tokenizer(tok)
    assert [tok.convert_ids_to_tokens(i) for i in vocab.digit_ids] == list("0123456789")
    assert tok.convert_ids_to_tokens(vocab.decimal_point_id) == "."


def test_missing_digit_is_named_in_the_error():
    with pytest.raises(DigitVocabError, match=r"digit\(s\) 7.*Llama-1/2, Mistral, Qwen2.5, DeepSeek, SmolLM2"):
        DigitVocab.from_tokenizer(wordlevel(list("ab.012345689")))


def test_missing_point_is_allowed_and_recorded_as_none():
    vocab = DigitVocab.from_tokenizer(wordlevel(list("ab0123456789")))
    assert vocab.decimal_point_id is None


def test_byte_level_bpe_with_multi_digit_merges_is_learnt_or_refused_with_the_way_out():
    tok = gpt2_style()
    merged = [t for t in tok.get_vocab() if len(t) > 1 and t.isdigit()]
    assert merged, "the fixture must actually merge digits"
    with pytest.raises(DigitVocabError, match="multi-digit tokens.*GPT-2.*multi_digit='slots'.*split_digits"):
        DigitVocab.from_tokenizer(tok, multi_digit="refuse")
    vocab = DigitVocab.from_tokenizer(tok)  # default: every number token, scored per digit slot
    assert {tok.convert_ids_to_tokens(i) for i, _, _ in vocab.number_tokens} >= set(merged)
    single = DigitVocab.from_tokenizer(tok, allow_multi_digit=True)
    assert [tok.decode([i]) for i in single.digit_ids] == list("0123456789")
    assert single.digit_ids == vocab.digit_ids and single.number_tokens == ()


def test_sentencepiece_like_tokenizer_with_split_digits_is_accepted():
    tok = single_digit_style()
    vocab = DigitVocab.from_tokenizer(tok)
    ids = tok("x 3.14", add_special_tokens=False)["input_ids"]
    digits = [i for i in ids if i in vocab.digit_ids]
    assert [vocab.digit_ids.index(i) for i in digits] == [3, 1, 4]
    assert vocab.decimal_point_id in ids


def test_plain_constructor_validates():
    with pytest.raises(DigitVocabError, match="exactly 10"):
        DigitVocab([1, 2, 3])
    with pytest.raises(DigitVocabError, match="distinct"):
        DigitVocab([1] * 10)
    with pytest.raises(DigitVocabError, match="distinct from the digits"):
        DigitVocab(range(10), decimal_point_id=3)


def test_width_check_catches_logits_of_another_model():
    with pytest.raises(ValueError, match="needs at least 101"):
        DigitVocab(range(91, 101)).check_width(50)


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
    assert places_of(text) == expected


def test_runs_end_at_row_boundaries_and_ignored_positions():
    labels = char_labels("ab123", "45abc", "12_34", "9.5_7")
    places = number_places(label_classes(labels, VOCAB, len(CHARS))).tolist()
    assert places[0][2:] == [2, 1, 0]  # not continued by row 1's "45"
    assert places[1][:2] == [1, 0]
    assert places[2] == [1, 0, 0, 1, 0]  # the ignored position splits 1234
    assert places[3] == [0, 0, -1, 0, 0]


def test_mixed_batch_and_find_digits_targets():
    labels = char_labels("abc", "7.25", "__", "x9")
    digits = find_digits(labels, VOCAB, len(CHARS))
    width = labels.shape[1]
    assert digits.index.tolist() == [1 * width + 0, 1 * width + 2, 1 * width + 3, 3 * width + 1]
    assert digits.target.tolist() == [7, 2, 5, 9]
    assert digits.place.tolist() == [0, -1, -2, 0]


def test_empty_and_digitless_batches():
    assert find_digits(torch.empty(0, 0, dtype=torch.long), VOCAB, 20).count == 0
    assert find_digits(torch.empty(3, 0, dtype=torch.long), VOCAB, 20).count == 0
    assert find_digits(char_labels("abc", "___"), VOCAB, len(CHARS)).count == 0


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_places_match_the_row_scanning_reference(seed):
    rng = random.Random(seed)
    alphabet = "0123456789" * 3 + "..." + "ab_"
    rows = ["".join(rng.choice(alphabet) for _ in range(40)) for _ in range(7)]
    labels = char_labels(*rows)
    places = number_places(label_classes(labels, VOCAB, len(CHARS)))
    for b, row in enumerate(labels.tolist()):
        expected = ref_places_row(classes_of(row, list(range(10)), 10))
        for t, want in enumerate(expected):
            if want is not None:
                assert int(places[b, t]) == want, (rows[b], t)


def test_labels_outside_the_logit_width_are_an_error():
    with pytest.raises(ValueError, match="outside the logit width 12"):
        label_classes(torch.tensor([[1, 15]]), VOCAB, 12)


# -- weights ------------------------------------------------------------------------------------


def test_official_weights_of_the_design_examples():
    assert place_weights(torch.tensor([4, 3, 2, 1, 0])).tolist() == [10, 8, 6, 4, 2]
    assert place_weights(torch.tensor([0, -1, -2])).tolist() == pytest.approx([2, 0.9612, 0.9423], abs=1e-4)


@pytest.mark.parametrize("weighting", ["official", "continuous", "none"])
def test_weights_match_the_formula(weighting):
    places = torch.arange(-6, 7)
    expected = [ref_place_weight(i, weighting) for i in places.tolist()]
    assert place_weights(places, weighting).tolist() == pytest.approx(expected, rel=1e-6)


def test_continuous_weights_have_no_jump_at_the_point():
    units, first_decimal = place_weights(torch.tensor([0, -1]), "continuous").tolist()
    assert units == 2.0 and first_decimal == pytest.approx(2 / 1.02)


def test_unknown_weighting_is_an_error():
    with pytest.raises(ValueError, match="place_weighting must be one of"):
        place_weights(torch.tensor([0]), "linear")
