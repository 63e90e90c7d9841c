"""Metrics: numeric distance, place accuracy, teacher-forced digit statistics."""

import math

import pytest
import torch

from numloss.digits import DigitVocab
from numloss.evaluate.metrics import (
    MAX_DIGIT_ENTROPY,
    accuracy,
    digits_by_place,
    entropy_histogram,
    macc,
    numeric_distance,
    place_accuracy,
    signed_log,
    teacher_forced_digit_stats,
)
from test_eval_generate import scrambled_tiny_model


def test_accuracy_and_macc():
    assert accuracy([True, False, True, True]) == 0.75
    assert math.isnan(accuracy([]))
    assert macc({"a": 0.5, "b": 1.0, "c": float("nan")}) == 0.75


def test_numeric_distance():
    d = numeric_distance([10.0, None, -2.0, 100.0], [12.0, 5.0, 2.0, 100.0])
    assert (d.count, d.missing) == (3, 1)
    assert d.mae == pytest.approx((2 + 4 + 0) / 3)
    expected = (abs(math.log1p(10) - math.log1p(12)) + abs(-math.log1p(2) - math.log1p(2))) / 3
    assert d.signed_log_mae == pytest.approx(expected)
    assert signed_log(-9.0) == pytest.approx(-math.log(10))
    assert signed_log(0.0) == 0.0
    empty = numeric_distance([None], [1.0])
    assert math.isnan(empty.mae) and empty.missing == 1
    with pytest.raises(ValueError, match="length"):
        numeric_distance([1.0], [1.0, 2.0])


def test_digits_by_place():
    assert digits_by_place("120") == {2: 1, 1: 2, 0: 0}
    assert digits_by_place("0.50") == {0: 0, -1: 5}
    assert digits_by_place(-3.25) == {0: 3, -1: 2, -2: 5}
    assert digits_by_place("1,234") == {3: 1, 2: 2, 1: 3, 0: 4}
    assert digits_by_place(1e20) == {20: 1, **{i: 0 for i in range(20)}}
    with pytest.raises(ValueError, match="not a number"):
        digits_by_place("abc")


def test_place_accuracy_aligns_by_place_value():
    # gold 142: pred 42 misses the hundreds (absent) but gets tens and units
    # gold 3.14: pred 3.1 gets units and first decimal, misses the second decimal
    # gold 7: pred None is wrong everywhere; gold 50: pred -50 is right (sign ignored)
    table = {e.place: e for e in place_accuracy([42.0, 3.1, None, -50.0], ["142", "3.14", "7", "50"])}
    # tens: 4 vs 4, 5 vs 5; units: 2, 3, 0 right, 7 missing
    assert {p: (e.correct, e.total) for p, e in table.items()} == {2: (0, 1), 1: (2, 2), 0: (3, 4), -1: (1, 1), -2: (0, 1)}
    assert table[0].accuracy == 0.75


def test_entropy_histogram():
    counts, edges = entropy_histogram([0.0, 0.01, MAX_DIGIT_ENTROPY, 1.0], bins=10)
    assert sum(counts) == 4 and counts[0] == 2 and counts[-1] == 1
    assert edges[0] == 0 and edges[-1] == pytest.approx(MAX_DIGIT_ENTROPY)


def test_teacher_forced_digit_stats_match_a_manual_computation():
    model, tokenizer = scrambled_tiny_model()
    prompts = ["Q: 40+2?\nA:", "Q: pi to two places?\nA:"]
    answers = [" The answer is 42.", " 3.14"]
    stats = teacher_forced_digit_stats(model, tokenizer, prompts, answers, batch_size=2)
    assert stats.count == 5 and stats.places == [1, 0, 0, -1, -2]
    # by hand, for the second item, one sequence at a time (no padding)
    ids = tokenizer(prompts[1])["input_ids"] + tokenizer(answers[1], add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    vocab = DigitVocab.from_tokenizer(tokenizer)
    start = len(tokenizer(prompts[1])["input_ids"])
    digit_positions = [start + j for j, c in enumerate(answers[1]) if c.isdigit()]  # one token per char
    p = torch.softmax(logits[[pos - 1 for pos in digit_positions]][:, list(vocab.digit_ids)], -1)
    manual = (-(p * p.log()).sum(-1)).tolist()
    assert stats.entropies[2:] == pytest.approx(manual, abs=1e-5)
    assert all(0 <= e <= MAX_DIGIT_ENTROPY + 1e-6 for e in stats.entropies)
    assert stats.accuracy == sum(stats.correct) / 5
    assert {e.place for e in stats.per_place} == {1, 0, -1, -2}


def test_teacher_forced_digit_stats_see_a_confident_model():
    model, tokenizer = scrambled_tiny_model()
    seven = DigitVocab.from_tokenizer(tokenizer).digit_ids[7]
    with torch.no_grad():  # make token "7" overwhelmingly likely everywhere
        model.model.norm.weight.zero_()
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
        model.lm_head.bias[seven] = 50.0
    stats = teacher_forced_digit_stats(model, tokenizer, ["Q:", "Q:"], ["77", "71"])
    assert stats.correct == [True, True, True, False]
    assert max(stats.entropies) < 1e-6 and stats.accuracy == 0.75
    with pytest.raises(ValueError, match="length"):
        teacher_forced_digit_stats(model, tokenizer, ["a"], ["1", "2"])
