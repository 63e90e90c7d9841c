"""numloss.compare.stats: the intervals by hand, the exact tests by hand and by brute-force enumeration."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from numloss.compare.stats import fisher_exact_p, mann_whitney_p, seed_interval, wilson_interval


def test_wilson_interval() -> None:
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    low, high = wilson_interval(0, 2000)
    assert low == 0.0 and 0 < high < 0.002, "no items right still has a non-zero upper bound"
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_seed_interval_by_hand() -> None:
    low, high = seed_interval([0.5, 0.6, 0.7])  # mean 0.6, sd 0.1, t(0.975, 2) = 4.302653
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert (low, high) == pytest.approx((0.6 - half, 0.6 + half))
    assert seed_interval([0.0, 0.9, 0.95, 1.0, 0.99])[1] == 1.0, "clipped to [0, 1]"
    assert all(math.isnan(x) for x in seed_interval([0.4])), "one seed has no spread to measure"
    assert all(math.isnan(x) for x in seed_interval([float("nan"), 0.4]))


def _u_statistic(x: list[float], y: list[float]) -> float:
    return sum((a > b) + 0.5 * (a == b) for a in x for b in y)


def _mann_whitney_by_enumeration(x: list[float], y: list[float]) -> float:
    """Every split of the pooled values into |x| and |y|, one by one (the definition, slowly)."""
    pooled, n = x + y, len(x)
    centre = len(x) * len(y) / 2
    observed = abs(_u_statistic(x, y) - centre)
    splits = extreme = 0
    for chosen in itertools.combinations(range(len(pooled)), n):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        splits += 1
        extreme += abs(_u_statistic([pooled[i] for i in chosen], rest) - centre) >= observed - 1e-9
    return extreme / splits


def test_mann_whitney_by_hand() -> None:
    # Three below three: only the two most extreme of the C(6,3) = 20 splits are as extreme.
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    # {1,2} vs {3}: rank sums 3, 4, 5 over the three splits, mean 4; observed 3 -> 3 and 5 count.
    assert mann_whitney_p([1, 2], [3]) == pytest.approx(2 / 3)
    assert mann_whitney_p([5, 5], [5, 5]) == 1.0  # all tied: no evidence at all


@pytest.mark.parametrize("seed", range(8))
def test_mann_whitney_matches_enumeration_with_ties(seed: int) -> None:
    rng = random.Random(seed)
    x = [float(rng.randint(0, 5)) for _ in range(rng.randint(2, 6))]
    y = [float(rng.randint(0, 5)) for _ in range(rng.randint(2, 6))]
    assert mann_whitney_p(x, y) == pytest.approx(_mann_whitney_by_enumeration(x, y), abs=1e-12)
    assert mann_whitney_p(x, y) == pytest.approx(mann_whitney_p(y, x), abs=1e-12)


def test_mann_whitney_ten_seeds_fully_separated() -> None:
    # 10 vs 10, every value of one above the other: 2 / C(20,10).
    assert mann_whitney_p(list(range(10, 20)), list(range(10))) == pytest.approx(2 / math.comb(20, 10))


def test_mann_whitney_bad_input() -> None:
    assert math.isnan(mann_whitney_p([], [1.0]))
    with pytest.raises(ValueError, match="NaN"):
        mann_whitney_p([1.0, float("nan")], [2.0])


def _fisher_by_enumeration(hits_a: int, total_a: int, hits_b: int, total_b: int) -> float:
    """Every way to place the hits among the labelled runs, equally likely under the null."""
    runs, hits = total_a + total_b, hits_a + hits_b
    counts: dict[int, int] = {}
    for chosen in itertools.combinations(range(runs), hits):
        in_a = sum(i < total_a for i in chosen)
        counts[in_a] = counts.get(in_a, 0) + 1
    ways = sum(counts.values())
    observed = counts[hits_a]
    return sum(c for c in counts.values() if c <= observed) / ways


def test_fisher_by_hand() -> None:
    # 5 of 5 against 2 of 5: tables k = 2..5 have 10, 50, 50, 10 of 120 arrangements; k = 2 and 5 count.
    assert fisher_exact_p(5, 5, 2, 5) == pytest.approx(20 / 120)
    assert fisher_exact_p(3, 3, 0, 3) == pytest.approx(2 / 20)
    assert fisher_exact_p(2, 4, 2, 4) == pytest.approx(1.0)  # the most likely table: no evidence


@pytest.mark.parametrize("case", [(1, 5, 4, 5), (7, 10, 3, 10), (0, 3, 3, 6), (2, 2, 0, 1), (8, 10, 3, 10)])
def test_fisher_matches_enumeration(case: tuple[int, int, int, int]) -> None:
    assert fisher_exact_p(*case) == pytest.approx(_fisher_by_enumeration(*case), abs=1e-12)


def test_fisher_bad_input() -> None:
    with pytest.raises(ValueError, match="hits <= total"):
        fisher_exact_p(6, 5, 0, 5)
