"""Intervals for exact match (Wilson over items, Student t over seeds) and exact tests between
two objectives: with 3-10 seeds and often bimodal outcomes a normal approximation does not hold,
so these tests use exact null distributions. Two-sided and uncorrected.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

# the comparison's intervals, one formula (re-exported)
from numloss.evaluate.metrics import wilson_interval


def finite(values: Sequence[Any]) -> list[float]:
    """The values that are numbers and finite, as floats (None, NaN and inf dropped)."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def exact_match_record(correct: int, n: int) -> dict[str, Any]:
    """A scored set's exact-match fields: n, correct, their share and its Wilson interval."""
    return {
        "n": n,
        "correct": correct,
        "exact_match": correct / n,
        "exact_match_ci95": list(wilson_interval(correct, n)),
    }


def seed_interval(values: Sequence[Any]) -> tuple[float, float]:
    """The 95 % Student t interval of the mean of per-seed values, clipped to [0, 1] (NaN below 2
    seeds)."""
    from scipy import stats  # here: importing this module costs no scipy start-up

    xs = finite(values)
    if len(xs) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    mean = statistics.fmean(xs)
    return max(0.0, mean - half), min(1.0, mean + half)


def fisher_exact_p(hits_a: int, total_a: int, hits_b: int, total_b: int) -> float:
    """Exact two-sided p of Fisher's test that two groups have the same rate of hits.

    For example runs that passed a threshold: `hits_a` of `total_a` runs of one objective against
    `hits_b` of `total_b` of another."""
    if not (0 <= hits_a <= total_a and 0 <= hits_b <= total_b):
        raise ValueError(
            f"fisher_exact_p: need 0 <= hits <= total, got {hits_a}/{total_a} and"
            f" {hits_b}/{total_b}"
        )
    if total_a == 0 or total_b == 0:
        return 1.0
    from scipy import stats  # here: importing this module costs no scipy start-up

    return float(
        stats.fisher_exact([[hits_a, total_a - hits_a], [hits_b, total_b - hits_b]]).pvalue
    )
