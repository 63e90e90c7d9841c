"""Intervals for exact match (Wilson over items, Student t over seeds) and exact tests between
two objectives: with 3-10 seeds and often bimodal outcomes a normal approximation does not hold,
so these tests use exact null distributions. Two-sided and uncorrected.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from numloss.evaluate.metrics import wilson_interval  # noqa: F401 - the comparison's intervals, one formula


def finite(values: Sequence[Any]) -> list[float]:
    """The values that are numbers and finite, as floats (None, NaN and inf dropped)."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def seed_interval(values: Sequence[Any]) -> tuple[float, float]:
    """The 95 % Student t interval of the mean of per-seed values, clipped to [0, 1] (NaN below 2 seeds)."""
    from scipy import stats  # here: importing this module costs no scipy start-up

    xs = finite(values)
    if len(xs) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    mean = statistics.fmean(xs)
    return max(0.0, mean - half), min(1.0, mean + half)


def mann_whitney_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Exact two-sided p of the Mann-Whitney U test that x and y come from one distribution.

    Own code: scipy's exact method ignores ties and its permutation method cannot enumerate
    C(40, 20) splits, while per-seed exact matches tie often and grids reach 20 seeds an arm.

    Under the null every split of the pooled values into groups of len(x) and len(y) is equally
    likely; p is the share of splits whose rank sum lies at least as far from its mean as the
    observed one. Ties get mid-ranks. Exact for any sizes (a count over rank sums, not over the
    splits themselves); NaN if either sample is empty.
    """
    xs, ys = [float(v) for v in x], [float(v) for v in y]
    if not xs or not ys:
        return float("nan")
    if any(math.isnan(v) for v in xs + ys):
        raise ValueError("mann_whitney_p: a value is NaN; drop the runs that have no result first")
    pooled = sorted(xs + ys)
    # Doubled mid-ranks are integers: rank sums can be counted exactly in a table.
    doubled_rank: dict[float, int] = {}
    start = 0
    while start < len(pooled):
        end = start
        while end + 1 < len(pooled) and pooled[end + 1] == pooled[start]:
            end += 1
        doubled_rank[pooled[start]] = start + end + 2  # 2 x mean of the 1-based ranks start+1..end+1
        start = end + 1
    ranks = [doubled_rank[v] for v in pooled]
    n = len(xs)
    # ways[k][s]: number of k-element subsets of the pooled values with doubled rank sum s.
    ways: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(n)]
    for rank in ranks:
        for k in range(n, 0, -1):
            for total, count in ways[k - 1].items():
                ways[k][total + rank] = ways[k].get(total + rank, 0) + count
    mean = n * (len(pooled) + 1)  # doubled expected rank sum of x
    observed = abs(sum(doubled_rank[v] for v in xs) - mean)
    extreme = sum(count for total, count in ways[n].items() if abs(total - mean) >= observed)
    return extreme / math.comb(len(pooled), n)


def fisher_exact_p(hits_a: int, total_a: int, hits_b: int, total_b: int) -> float:
    """Exact two-sided p of Fisher's test that two groups have the same rate of hits.

    For example runs that passed a threshold: `hits_a` of `total_a` runs of one objective against
    `hits_b` of `total_b` of another."""
    if not (0 <= hits_a <= total_a and 0 <= hits_b <= total_b):
        raise ValueError(f"fisher_exact_p: need 0 <= hits <= total, got {hits_a}/{total_a} and {hits_b}/{total_b}")
    if total_a == 0 or total_b == 0:
        return 1.0
    from scipy import stats  # here: importing this module costs no scipy start-up

    return float(stats.fisher_exact([[hits_a, total_a - hits_a], [hits_b, total_b - hits_b]]).pvalue)
