"""Evaluation metrics, as a Python API (`numloss compare` reuses them): accuracy and mACC, the
Wilson interval, MAE and signed-log MAE, accuracy by digit place, and the teacher-forced digit
entropy and accuracy at the gold answer's digits (docs/evaluation.md, "Metrics").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import torch

from numloss.digits import IGNORE_INDEX, DigitVocab, find_digits

MAX_DIGIT_ENTROPY = math.log(10.0)


def wilson_interval(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a binomial proportion (sound near 0 and 1, unlike p +-
    2se).

    Own formula, not statsmodels': `numloss eval` reports it and needs no scipy or statsmodels
    (tests/test_compare_stats_libraries.py checks it against statsmodels' proportion_confint)."""
    if total <= 0:
        return float("nan"), float("nan")
    p = correct / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy(correct: Sequence[bool]) -> float:
    """Fraction of True in `correct`; NaN for an empty list (no items is not 0% right)."""
    return sum(map(bool, correct)) / len(correct) if correct else float("nan")


def macc(per_benchmark: dict[str, float]) -> float:
    """Mean accuracy over benchmarks, each weighted equally (benchmarks with NaN are skipped)."""
    values = [v for v in per_benchmark.values() if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def signed_log(x: float) -> float:
    """sign(x) * log1p(|x|): a log scale that is defined at 0 and for negatives."""
    return math.copysign(math.log1p(abs(x)), x)


@dataclass(frozen=True)
class NumericDistance:
    """MAE and signed-log MAE over `count` scored pairs; `missing` items had no prediction."""

    mae: float
    signed_log_mae: float
    count: int
    missing: int
    top_share: float = float("nan")  # the largest single error's share of the summed absolute error


def numeric_distance(preds: Sequence[float | None], golds: Sequence[float]) -> NumericDistance:
    """Distance between predicted and gold numbers; None (or non-finite) predictions are missing."""
    if len(preds) != len(golds):
        raise ValueError(f"preds and golds differ in length: {len(preds)} vs {len(golds)}")
    pairs = [
        (float(p), float(g))
        for p, g in zip(preds, golds, strict=True)
        if p is not None and math.isfinite(p)
    ]
    missing = len(preds) - len(pairs)
    if not pairs:
        return NumericDistance(float("nan"), float("nan"), 0, missing)
    errors = [abs(p - g) for p, g in pairs]
    total = sum(errors)
    mae = total / len(pairs)
    slog = sum(abs(signed_log(p) - signed_log(g)) for p, g in pairs) / len(pairs)
    # one degenerate prediction (a number of 255 digits) can be the whole MAE: reports say so
    share = (
        max(errors) / total if total > 0 and math.isfinite(total) else (1.0 if total > 0 else 0.0)
    )
    return NumericDistance(mae, slog, len(pairs), missing, share)


def digits_by_place(number: float | str) -> dict[int, int]:
    """The digits of |number| keyed by place (units 0, tens 1, first decimal -1), written in plain
    decimal without leading or trailing zeros ("0.50" -> {0: 0, -1: 5}); floats through repr."""
    try:
        d = Decimal(
            repr(number) if isinstance(number, float) else str(number).replace(",", "").strip()
        )
    except InvalidOperation:
        raise ValueError(f"not a number: {number!r}") from None
    if not d.is_finite():
        raise ValueError(f"not a finite number: {number!r}")
    text = format(abs(d), "f")
    integer, _, decimals = text.partition(".")
    integer = integer.lstrip("0") or "0"
    decimals = decimals.rstrip("0")
    places = {len(integer) - 1 - j: int(c) for j, c in enumerate(integer)}
    places.update({-(j + 1): int(c) for j, c in enumerate(decimals)})
    return places


@dataclass(frozen=True)
class PlaceAccuracy:
    """At one digit place: how many items have a gold digit there and how many got it right."""

    place: int
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else float("nan")


def place_accuracy(
    preds: Sequence[float | str | None], golds: Sequence[float | str]
) -> list[PlaceAccuracy]:
    """Accuracy by digit place (`digits_by_place`, signs ignored), highest place first: at each
    place where the gold has a digit (leading digit to last non-zero decimal), an item is right
    when the prediction has the same digit there; no digit there, or no prediction, is wrong."""
    if len(preds) != len(golds):
        raise ValueError(f"preds and golds differ in length: {len(preds)} vs {len(golds)}")
    places, right = [], []
    for pred, gold in zip(preds, golds, strict=True):
        pred_digits = {}
        if pred is not None and not (isinstance(pred, float) and not math.isfinite(pred)):
            pred_digits = digits_by_place(pred)
        for place, digit in digits_by_place(gold).items():
            places.append(place)
            right.append(pred_digits.get(place) == digit)
    return by_place(places, right)


def by_place(places: Sequence[int], right: Sequence[bool]) -> list[PlaceAccuracy]:
    """Per digit place, highest first: how many of `places` are that place and how many of those
    are `right`."""
    total = Counter(places)
    hits = Counter(place for place, ok in zip(places, right, strict=True) if ok)
    return [PlaceAccuracy(p, hits[p], total[p]) for p in sorted(total, reverse=True)]


@dataclass
class DigitStats:
    """Teacher-forced statistics at the digit positions of the gold answers.

    `accuracy`: fraction of digits whose greedy (full-vocabulary argmax) token is the gold digit.
    `entropies`, `places`, `correct`: one entry per digit position. `per_place`: accuracy by place.
    """

    accuracy: float
    entropies: list[float]
    places: list[int]
    correct: list[bool]
    per_place: list[PlaceAccuracy] = field(default_factory=list)

    @property
    def mean_entropy(self) -> float:
        return sum(self.entropies) / len(self.entropies) if self.entropies else float("nan")

    @property
    def count(self) -> int:
        return len(self.entropies)


def _rows(tokenizer: Any, prompt: str, answer: str) -> tuple[list[int], int]:
    """Token ids of prompt + answer and the index where the answer starts."""
    prompt_ids = list(tokenizer(prompt)["input_ids"])
    answer_ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
    if not answer_ids:
        raise ValueError(f"answer {answer!r} tokenizes to nothing")
    return prompt_ids + answer_ids, len(prompt_ids)


def _padded(rows: list[tuple[list[int], int]], pad: int) -> tuple[torch.Tensor, ...]:
    """(input ids, attention mask, labels) of a batch of `_rows`, right-padded; only the answer
    tokens are labelled, aligned so that position t predicts token t + 1."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for r, (ids, start) in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        attention[r, : len(ids)] = 1
        labels[r, start - 1 : len(ids) - 1] = torch.tensor(ids[start:])
    return input_ids, attention, labels


def _measure(
    logits: torch.Tensor, labels: torch.Tensor, vocab: DigitVocab, table: Any
) -> tuple[list, list, list]:
    """(entropies, correct, places) at the digit positions of `labels` (see the caller)."""
    from numloss.losses.number_tokens import slot_logits

    device = table.columns.device  # where the caller put the number table: the model's device
    flat = logits.reshape(-1, logits.shape[-1]).float()
    digits = find_digits(labels.to(device), vocab, width=logits.shape[-1])
    if digits.count == 0:
        return [], [], []
    at = flat[digits.rows]
    z, _ = slot_logits(at[:, table.columns], digits, table)
    log_p = torch.log_softmax(z, dim=-1)
    entropies = (-(log_p.exp() * log_p).sum(-1)).tolist()
    # the top token, as a column of the number table (-1: not a number token)
    column_of = torch.full((flat.shape[-1],), -1, dtype=torch.long, device=device)
    column_of[table.columns] = torch.arange(table.width, device=device)
    top = column_of[at.argmax(-1)][digits.row_of]
    safe = top.clamp_min(0)
    same_group = (top >= 0) & (table.group[safe] == table.group[digits.column])
    correct = (same_group & (table.digits[safe, digits.slot] == digits.target)).tolist()
    return entropies, correct, digits.place.tolist()


@torch.no_grad()
def teacher_forced_digit_stats(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    answers: Sequence[str],
    batch_size: int = 8,
    vocab: DigitVocab | None = None,
) -> DigitStats:
    """Feed each prompt + gold answer (tokenized on its own) to `model`; at each digit of the
    answer, the entropy of the digit distribution and whether the top token is right. A digit of a
    multi-digit number token is measured on its slot marginal (`numloss.losses.number_tokens`):
    right when the top token is of the target's group with that digit in that slot."""
    if len(prompts) != len(answers):
        raise ValueError(f"prompts and answers differ in length: {len(prompts)} vs {len(answers)}")
    vocab = vocab or DigitVocab.from_tokenizer(tokenizer)
    pad = tokenizer.pad_token_id
    pad = (tokenizer.eos_token_id or 0) if pad is None else pad
    device = next(model.parameters()).device
    table = vocab.number_table(device)
    was_training = model.training
    model.eval()
    entropies: list[float] = []
    places: list[int] = []
    correct: list[bool] = []
    try:
        for b in range(0, len(prompts), batch_size):
            pairs = zip(prompts[b : b + batch_size], answers[b : b + batch_size], strict=True)
            input_ids, attention, labels = _padded([_rows(tokenizer, p, a) for p, a in pairs], pad)
            logits = model(
                input_ids=input_ids.to(device), attention_mask=attention.to(device)
            ).logits
            for into, more in zip(
                (entropies, correct, places), _measure(logits, labels, vocab, table), strict=True
            ):
                into += more
    finally:
        model.train(was_training)
    return DigitStats(accuracy(correct), entropies, places, correct, by_place(places, correct))


def entropy_histogram(entropies: Sequence[float], bins: int = 20) -> tuple[list[int], list[float]]:
    """Counts of digit entropies in `bins` equal bins over [0, ln 10], and the bin edges."""
    edges = [MAX_DIGIT_ENTROPY * i / bins for i in range(bins + 1)]
    counts = [0] * bins
    for e in entropies:
        counts[min(bins - 1, max(0, int(e / MAX_DIGIT_ENTROPY * bins)))] += 1
    return counts, edges
