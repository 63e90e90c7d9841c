"""Number tokens of any length: the table learnt by behaviour, places over chunked numbers, the
per-slot digit logits (against a slow loop, value and gradient, gradcheck in float64)."""

from __future__ import annotations

import csv
import json
import re
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from faultrun import TINY
from numloss.digits import DigitVocab, DigitVocabError, digit_coverage, find_digits, split_digits
from numloss.losses.number_tokens import bucket_logsumexp, slot_logits
from numloss.train import main
from test_digits import slots_by_reference, wordlevel
from tokenizer_styles import encode, gpt2_style, llama3_style

# -- the table, by behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize("style", [llama3_style, gpt2_style])
def test_number_tokens_are_learnt_and_write_their_digits(style):
    tok = style()
    vocab = DigitVocab.from_tokenizer(tok)
    for token_id, digits, spaced in vocab.number_tokens:
        assert tok.decode([token_id]) == (" " if spaced else "") + digits
    if style is llama3_style:  # all 1110 number tokens, the ten digits first
        table = vocab.number_table()
        groups = [(length, spaced, columns.numel()) for length, spaced, columns in table.groups]
        assert groups == [(1, False, 10), (2, False, 100), (3, False, 1000)] and table.complete == (True,) * 3
        assert table.width == 1110 and tok.convert_ids_to_tokens(table.columns[:10].tolist()) == list("0123456789")
    else:  # spaced and irregular number tokens, every merged one among them
        kinds = {(len(d), s) for _, d, s in vocab.number_tokens}
        assert (1, True) in kinds and (2, False) in kinds and (3, True) in kinds
        merged = {t for t in tok.get_vocab() if len(t) > 1 and t.isdigit()}
        assert merged and merged <= {tok.convert_ids_to_tokens(i) for i, _, _ in vocab.number_tokens}


@pytest.mark.parametrize("style", [llama3_style, gpt2_style])
def test_refuse_mode_names_the_families_the_tokens_and_split_digits(style):
    with pytest.raises(DigitVocabError) as error:
        DigitVocab.from_tokenizer(style(), multi_digit="refuse")
    message = str(error.value)
    assert re.search(r"Llama-1/2, Mistral, Qwen2.5, DeepSeek, SmolLM2.*Llama-3, tiktoken cl100k/o200k.*GPT-2.*multi_digit='slots'.*split_digits", message)
    multi = re.search(r"multi-digit tokens \(([^)]*)\)", message).group(1)
    assert all(len(t.strip("'").lstrip("Ġ")) > 1 for t in multi.split(", "))  # no spaced single digit among them
    assert ("digit tokens with a leading word marker ('Ġ" in message) == (style is gpt2_style)


def test_single_mode_keeps_ten_digits_and_counts_the_rest_as_unscored():
    vocab = DigitVocab.from_tokenizer(llama3_style(), allow_multi_digit=True)
    assert vocab.number_tokens == () and len(vocab.unscored_digit_tokens) == 1100
    assert DigitVocab.from_tokenizer(llama3_style(), multi_digit="single") == vocab
    single = DigitVocab.from_tokenizer(gpt2_style(), allow_multi_digit=True)
    assert [gpt2_style().decode([i]) for i in single.digit_ids] == list("0123456789")
    assert single.digit_ids == DigitVocab.from_tokenizer(gpt2_style()).digit_ids and single.number_tokens == ()


def test_split_digits_makes_a_chunking_tokenizer_single_digit_by_behaviour():
    tok = split_digits(gpt2_style.__wrapped__())
    ids = tok(" 1234.5", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["Ġ", "1", "2", "3", "4", ".", "5"]
    vocab = DigitVocab.from_tokenizer(tok, multi_digit="refuse")  # accepted: it emits single digits
    assert vocab.number_tokens == () and vocab.unscored_digit_tokens  # the merges stay unreachable
    chunked = split_digits(llama3_style.__wrapped__())
    assert chunked.convert_ids_to_tokens(chunked("12345", add_special_tokens=False)["input_ids"]) == list("12345")
    with pytest.raises(TypeError, match="fast tokenizer"):
        split_digits(object())


def test_digits_mixed_with_other_characters_warn():
    tok = wordlevel([*"0123456789.,- ", "3,", "42"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DigitVocab.from_tokenizer(tok)  # no probe emits "3," here: no warning
    tok.add_tokens(["3,"])  # now "3,141" is written "3," "1" "4" "1"
    with pytest.warns(UserWarning, match="digits inside tokens that also hold other characters"):
        DigitVocab.from_tokenizer(tok)


# -- places over the whole number -------------------------------------------------------------------


@pytest.mark.parametrize(
    "style, text, expected",  # (slot, digit, place) of every digit slot
    [
        (llama3_style, "12345", [(0, 1, 4), (1, 2, 3), (2, 3, 2), (0, 4, 1), (1, 5, 0)]),  # "123" "45"
        (llama3_style, "1234.5", [(0, 1, 3), (1, 2, 2), (2, 3, 1), (0, 4, 0), (0, 5, -1)]),  # "123" "4" "." "5"
        (llama3_style, "3.14159", [(0, 3, 0), (0, 1, -1), (1, 4, -2), (2, 1, -3), (0, 5, -4), (1, 9, -5)]),
        (llama3_style, "1000000", [(j, d, 6 - i) for i, (j, d) in enumerate([(0, 1), (1, 0), (2, 0), (0, 0), (1, 0), (2, 0), (0, 0)])]),
        # a leading-space token starts a new number: "12" "34" "." "5" "+" "Ġ4" "2"
        (gpt2_style, "x=1234.5+ 42", [(0, 1, 3), (1, 2, 2), (0, 3, 1), (1, 4, 0), (0, 5, -1), (0, 4, 1), (0, 2, 0)]),
        (gpt2_style, " 100 100", [(0, 1, 2), (1, 0, 1), (2, 0, 0)] * 2),  # "Ġ100" "Ġ100": two numbers
    ],
)
def test_hand_worked_places_over_chunks(style, text, expected):
    digits = find_digits(encode(style(), text), DigitVocab.from_tokenizer(style()))
    assert list(zip(digits.slot.tolist(), digits.target.tolist(), digits.place.tolist(), strict=True)) == expected


NUMBER = st.tuples(st.sampled_from(["x=", "a ", ""]), st.integers(0, 10**7 - 1), st.none() | st.integers(0, 999))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from([llama3_style, gpt2_style]), st.lists(NUMBER, min_size=1, max_size=24), st.integers(0, 2**16))
def test_vectorised_slots_match_the_row_scanning_reference(style, numbers, mask_seed):
    """Numbers end at ignored positions (a tenth of them, drawn) and at row ends (four a row)."""
    tok = style()
    words = [f"{lead}{whole}" + ("" if decimals is None else f".{decimals}") for lead, whole, decimals in numbers]
    labels = encode(tok, *[" ".join(words[i : i + 4]) for i in range(0, len(words), 4)])
    labels[torch.rand(labels.shape, generator=torch.Generator().manual_seed(mask_seed)) < 0.1] = -100
    vocab = DigitVocab.from_tokenizer(tok)
    digits = find_digits(labels, vocab)
    fields = (digits.index, digits.slot, digits.target, digits.place)
    assert list(zip(*(field.tolist() for field in fields), strict=True)) == slots_by_reference(labels, vocab)


def test_digit_coverage_counts_digits_inside_unscored_tokens():
    tok = llama3_style()
    labels = encode(tok, "x=12345.5", "7 apples")
    assert digit_coverage(labels, DigitVocab.from_tokenizer(tok)) == (7, 7)
    # single mode: "12345.5" is written "123" "45" "." "5", so none of it is scored (its places are
    # unknown); the "7" of the second row is
    assert digit_coverage(labels, DigitVocab.from_tokenizer(tok, multi_digit="single")) == (1, 7)
    assert digit_coverage(torch.full((1, 2), -100), DigitVocab.from_tokenizer(tok)) == (0, 0)


# -- slot logits ----------------------------------------------------------------------------------
# (against token-by-token sums, value and gradient: the slow reference of tests/test_losses.py on
# its chunking vocabulary, complete and incomplete groups, spaced and unspaced; there too the
# objectives on number tokens in every dtype, on empty batches, and single digits scoring exactly
# as with ten digits; the fused path: tests/test_fused.py)


def test_bucket_logsumexp_survives_far_apart_buckets_and_empty_ones():
    x = torch.tensor([[0.0, -200.0, -201.0, 50.0]])
    z, support = bucket_logsumexp(x, torch.tensor([0, 1, 1, 3]))
    assert support.tolist() == [True, True, False, True] + [False] * 6
    assert float(z[0, 1]) == pytest.approx(-200 + torch.log1p(torch.exp(torch.tensor(-1.0))).item(), abs=1e-5)
    assert torch.isfinite(z).all() and float(torch.softmax(z, -1)[0, 2]) == 0.0


def test_complete_groups_are_recognised_and_duplicates_are_pooled():
    assert not all(DigitVocab.from_tokenizer(gpt2_style()).number_table().complete[1:])
    # 100 two-digit tokens plus a second spelling of "42" (spaced and unspaced kept apart)
    two = [(10 + v, f"{v:02d}", False) for v in range(100)]
    vocab = DigitVocab(range(10), None, two + [(200, "42", True), (201, "4", True)])
    table = vocab.number_table()
    assert table.complete == (True, True, False, False)
    labels = torch.tensor([[52]])  # "42", unspaced
    digits = find_digits(labels, vocab, 202)
    x = torch.randn(1, table.width, dtype=torch.float64)
    z, _ = slot_logits(x, digits, table)
    unspaced = x[0, 10:110].view(10, 10)
    torch.testing.assert_close(z[0], torch.logsumexp(unspaced, dim=1))
    torch.testing.assert_close(z[1], torch.logsumexp(unspaced, dim=0))


# -- training end to end with a chunking tokenizer -----------------------------------------------


@pytest.mark.parametrize("objective", [["--objective.name", "del", "--objective.alpha", "1.0"], ["--objective.name", "ntl-was", "--objective.options", "{level: token}"]])
def test_numloss_train_runs_with_a_chunked_number_tokenizer(tmp_path, objective):
    out = tmp_path / "run"
    argv = [str(TINY), "--train.output_dir", str(out), "--model.tiny_digits_per_token", "3", *objective]
    assert main(argv) == 0
    tok = AutoTokenizer.from_pretrained(out / "final")
    assert tok.convert_ids_to_tokens(tok("12345", add_special_tokens=False)["input_ids"]) == ["123", "45"]
    assert len(DigitVocab.from_tokenizer(tok).number_tokens) == 1100
    rows = list(csv.DictReader((out / "log.csv").open()))
    assert rows and all(float(r["aux"]) > 0 and float(r["digit_entropy"]) > 0 for r in rows)
    history = [e for e in json.loads((out / "log_history.json").read_text()) if "loss" in e]
    assert history and all(e["digit_share"] == 1.0 for e in history)  # every label digit is scored
    if objective[1] == "del":  # one step per log: loss = ce + aux (alpha 1)
        assert float(rows[0]["loss"]) == pytest.approx(float(rows[0]["ce"]) + float(rows[0]["aux"]), rel=1e-4)


def test_byte_fallback_and_special_tokens_count_the_digits_they_write():
    # SentencePiece-like pieces: byte fallbacks, a word marker, and special tokens
    tok = wordlevel([*"0123456789", ".", "a", "▁", "<0x0A>", "<0x35>", "<0x41>"])
    tok.add_special_tokens({"additional_special_tokens": ["<s>", "<extra_id_12>"]})
    vocab, ids = DigitVocab.from_tokenizer(tok), tok.get_vocab()
    # <0x35> writes "5" (one unscored digit); <0x0A> (newline), <0x41> ("A") and the specials none
    assert vocab.unscored_digit_tokens == ((ids["<0x35>"], 1),)
    newline, special = ids["<0x0A>"], ids["<extra_id_12>"]
    labels = torch.tensor([[ids["4"], ids["2"], newline, ids["<0x41>"], special, ids["<s>"], ids["7"]]])
    assert digit_coverage(labels, vocab) == (3, 3)
    assert digit_coverage(torch.tensor([[ids["4"], ids["<0x35>"]]]), vocab) == (0, 2)


@pytest.mark.parametrize(
    "text, kept",
    [
        ("12345", ""),  # "12" "34" "5": the 5 is not the units of "12345"'s first tokens
        (" 3.14", ""),  # "Ġ3" "." "1" "4": 1 and 4 are decimals of an unscored integer part
        ("x 12.5", ""),  # "Ġ12" "." "5"
        ("it is 4123", ""),  # "Ġ4" "12" "3"
        ("5 123", "5"),  # "5" then a new word "Ġ12" "3": the 5 is a number of its own
        ("x=7+8.5", "785"),  # single digits only: every digit scored, places as ever
        ("7 and 8.5", "7"),  # "Ġ8" "." "5": the 8 is a spaced token, unscored in single mode
    ],
)
def test_single_mode_scores_no_digit_of_a_number_written_partly_in_merged_tokens(text, kept):
    tok = gpt2_style()
    vocab = DigitVocab.from_tokenizer(tok, multi_digit="single")
    labels = encode(tok, text)
    digits = find_digits(labels, vocab)
    assert "".join(str(int(d)) for d in digits.target) == kept
    if kept == "785":
        assert digits.place.tolist() == [0, 0, -1]
    # whatever is scored has the places a single-digit tokenizer gives the same number
    slots = find_digits(labels, DigitVocab.from_tokenizer(tok))
    for index, place in zip(digits.index.tolist(), digits.place.tolist(), strict=True):
        assert place in slots.place[slots.index == index].tolist()


def test_a_number_touching_a_mixed_token_is_not_scored():
    vocab = DigitVocab(list(range(10)), decimal_point_id=10, unscored_digit_tokens=[(11, 2), (12, 1, True)])
    # "2" "1st"(11): the 2 is the tens of 21, not units; "5" then a spaced "Ġ3rd"(12): 5 stands alone
    labels = torch.tensor([[2, 11, 13, 5, 12, 13, 4, 10, 2]])
    digits = find_digits(labels, vocab)
    assert digits.target.tolist() == [5, 4, 2] and digits.place.tolist() == [0, 0, -1]
