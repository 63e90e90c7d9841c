"""numloss.compare.stats: the intervals by hand, the exact tests by hand and by brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from numloss.compare.stats import fisher_exact_p, seed_interval, wilson_interval


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


@pytest.mark.parametrize("case", [(1, 5, 4, 5), (7, 10, 3, 10), (0, 3, 3, 6), (2, 2, 0, 1), (8, 10, 3, 10), (2, 4, 2, 4)])
def test_fisher_matches_enumeration(case: tuple[int, int, int, int]) -> None:
    assert fisher_exact_p(*case) == pytest.approx(_fisher_by_enumeration(*case), abs=1e-12)
    # by hand: 5 of 5 against 2 of 5: tables k = 2..5 have 10, 50, 50, 10 of 120 arrangements; k = 2 and 5 count
    assert fisher_exact_p(5, 5, 2, 5) == pytest.approx(20 / 120) and fisher_exact_p(3, 3, 0, 3) == pytest.approx(2 / 20)


def test_fisher_bad_input() -> None:
    with pytest.raises(ValueError, match="hits <= total"):
        fisher_exact_p(6, 5, 0, 5)
