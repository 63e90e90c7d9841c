"""The comparison statistics by hand, by counting, against published figures and
against scipy and statsmodels called directly (and scipy's log-rank beside the statsmodels one
numloss uses), so a wrong argument order, a one-sided alternative or a swapped group cannot pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
from grid_analysis import newcombe_interval, seeds_for_power
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from numloss.compare.item_paired import discordant, paired_comparison, seed_level_mde, sign_flip_p
from numloss.compare.paired import (
    holm,
    mcnemar_exact_p,
    minimum_detectable_effect,
    paired_t,
    paired_t_power,
)
from numloss.compare.stats import fisher_exact_p, seed_interval, wilson_interval
from numloss.compare.survival import Outcome, logrank


def test_wilson_and_seed_intervals() -> None:
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    low, high = wilson_interval(0, 2000)
    assert low == 0.0 and 0 < high < 0.002, "no items right still has a non-zero upper bound"
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    # the own Wilson formula (z 1.96, not 1.959964) within 1e-5 of statsmodels'
    assert wilson_interval(56, 70) == pytest.approx(proportion_confint(56, 70, method="wilson"), abs=1e-5)
    # the seed interval, exact t quantiles
    low, high = seed_interval([0.5, 0.6, 0.7])  # mean 0.6, sd 0.1, t(0.975, 2) = 4.302653
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert (low, high) == pytest.approx((0.6 - half, 0.6 + half))
    # (the exact quantile above also fails the 3-decimal t table the intervals once used: 4.303)
    assert seed_level_mde(1.0, 8) == pytest.approx((2.364624 + 0.896029) / math.sqrt(8), abs=1e-6)
    assert seed_interval([0.0, 0.9, 0.95, 1.0, 0.99])[1] == 1.0, "clipped to [0, 1]"
    assert all(math.isnan(x) for x in seed_interval([0.4])), "one seed has no spread to measure"
    assert all(math.isnan(x) for x in seed_interval([float("nan"), 0.4]))


def _fisher_by_counting(hits_a: int, total_a: int, hits_b: int, total_b: int) -> float:
    """The ways to place the hits among the labelled runs (equally likely under the null) with k in
    a, counted by binomial coefficients: the tables as likely as the observed one or less."""
    hits = hits_a + hits_b
    ways = [math.comb(total_a, k) * math.comb(total_b, hits - k) for k in range(hits + 1)]
    return sum(w for w in ways if w <= ways[hits_a]) / sum(ways)


@pytest.mark.parametrize("case", [(1, 5, 4, 5), (7, 10, 3, 10), (0, 3, 3, 6), (2, 2, 0, 1), (8, 10, 3, 10), (2, 4, 2, 4)])
def test_fisher_matches_counting(case: tuple[int, int, int, int]) -> None:
    assert fisher_exact_p(*case) == pytest.approx(_fisher_by_counting(*case), abs=1e-12)
    # by hand: 5 of 5 against 2 of 5: tables k = 2..5 have 10, 50, 50, 10 of 120 arrangements; k = 2 and 5 count
    assert fisher_exact_p(5, 5, 2, 5) == pytest.approx(20 / 120) and fisher_exact_p(3, 3, 0, 3) == pytest.approx(2 / 20)
    with pytest.raises(ValueError, match="hits <= total"):
        fisher_exact_p(6, 5, 0, 5)


def test_paired_t_hand_worked_and_as_rs_t_test() -> None:
    # differences 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5), t = 4.2426 on 4 df
    test = paired_t([1, 2, 3, 4, 5])
    assert test.n == 5 and test.mean == 3 and test.sd == pytest.approx(math.sqrt(2.5))
    # 2 P(T_4 > 4.2426); R's t.test(c(1, 2, 3, 4, 5)): p-value 0.01324, 95 percent CI 3 -+ 2.776445 sqrt(0.5)
    assert test.p == pytest.approx(0.013236, abs=2e-6) and test.ci == pytest.approx((1.036757, 4.963243), abs=1e-6)
    assert math.isnan(paired_t([1.0]).p) and paired_t([]).n == 0
    assert paired_t([2.0, 2.0]).p == 0.0 and paired_t([0.0, 0.0]).p == 1.0


def test_holm_hand_worked_and_statsmodels() -> None:
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.02, float("nan"), 0.01])
    assert adjusted[0] == pytest.approx(0.02) and adjusted[2] == pytest.approx(0.02) and math.isnan(adjusted[1])
    ps = [0.01, 0.04, 0.03, 0.2, 0.001]
    assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), rel=1e-12)


@pytest.mark.parametrize(("only_a", "only_b"), [(2, 8), (9, 1), (40, 61), (700, 820), (2400, 0), (1100, 1000),
                                                (2000, 2000), (5000, 4700), (0, 4000)])
def test_mcnemar_is_the_exact_two_sided_binomial(only_a: int, only_b: int) -> None:
    """Seeds x 1,000 items give thousands of discordant pairs (2.0 ** n overflows past 1,023)."""
    expected = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar_exact_p(only_a, only_b) == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert 0.0 <= mcnemar_exact_p(only_a, only_b) <= 1.0
    # by hand: the binomial tails of 5, 7 and 10 discordant seeds
    assert mcnemar_exact_p(0, 5) == pytest.approx(2 / 32) and mcnemar_exact_p(6, 1) == pytest.approx(2 * (1 + 7) / 128)
    assert mcnemar_exact_p(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024, rel=1e-12)
    assert mcnemar_exact_p(3, 3) == 1.0 and mcnemar_exact_p(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)


def test_power_is_the_two_sided_noncentral_t_and_matches_published_figures() -> None:
    # G*Power / R power.t.test(n=10, delta=1, sd=1, type="paired"): 0.8031; n=20: 0.9885
    assert paired_t_power(10, 1.0, 1.0, 0.05) == pytest.approx(0.8031, abs=5e-4)
    assert paired_t_power(20, 1.0, 1.0, 0.05) == pytest.approx(0.9885, abs=5e-4)
    assert paired_t_power(10, 0.0, 1.0, 0.05) == pytest.approx(0.05, abs=1e-4)
    assert seeds_for_power(1.0, 1.0, 0.05, 0.8) == 10
    # the pre-registered rule: +2.6 points, sd of a difference sqrt(2) x 1.85, alpha 0.05/3
    assert seeds_for_power(2.6, math.sqrt(2) * 1.85, 0.05 / 3) == 14
    n, effect, sd = 8, 0.7, 1.0
    crit, ncp = stats.t.ppf(0.975, n - 1), effect * math.sqrt(n) / sd
    both_tails = stats.nct.sf(crit, n - 1, ncp) + stats.nct.cdf(-crit, n - 1, ncp)
    assert paired_t_power(n, effect, sd) == pytest.approx(both_tails, rel=1e-9)
    mde = minimum_detectable_effect(10, 1.0, 0.05, 0.8)
    assert 0.98 < mde < 1.0 and paired_t_power(10, mde, 1.0, 0.05) == pytest.approx(0.8, abs=1e-6)
    mde = minimum_detectable_effect(8, 2.5)
    assert paired_t_power(8, mde, 2.5) == pytest.approx(0.8, abs=1e-9)
    assert mde / 2.5 == pytest.approx(minimum_detectable_effect(8, 1.0), rel=1e-9), "scales with the SD"


def test_newcombe_matches_the_paper() -> None:
    # Newcombe (1998), Stat Med 17: 873, table II, 56/70 - 48/80, method 10: 0.0524 to 0.3339
    diff, low, high = newcombe_interval(56, 70, 48, 80)
    assert diff == pytest.approx(0.2) and (low, high) == pytest.approx((0.0524, 0.3339), abs=1e-4)


def test_logrank_agrees_with_scipys_independent_implementation() -> None:
    a = [Outcome(200, True), Outcome(400, True), Outcome(600, True), Outcome(800, False), Outcome(800, False)]
    b = [Outcome(400, True), Outcome(800, False), Outcome(800, False), Outcome(800, False), Outcome(600, True)]

    def censored(group: list[Outcome]) -> stats.CensoredData:
        return stats.CensoredData(uncensored=[o.step for o in group if o.learnt],
                                  right=[o.step for o in group if not o.learnt])

    assert logrank([a, b]) == pytest.approx(stats.logrank(censored(a), censored(b)).pvalue, rel=1e-9)


def test_sign_flip_discordant_counts_and_item_level_pins() -> None:
    # 5 positive differences: only the all-plus and all-minus patterns are as extreme: 2 / 32
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.1]) == pytest.approx(2 / 32)
    assert sign_flip_p([0.1, 0.2, 0.3, 0.4]) == pytest.approx(2 / 16) and sign_flip_p([0.1, -0.1]) == 1.0
    assert sign_flip_p([0.3]) == 1.0, "one pair: both sign patterns are as extreme"
    assert discordant("1100", "1010") == (1, 1)
    with pytest.raises(ValueError, match="lengths"):
        discordant("10", "1")
    out = paired_comparison({0: "1101", 1: "1110", 2: "0111"}, {0: "0100", 1: "1000", 2: "0011"})
    assert (out["b"], out["c"]) == (5, 0) and out["mcnemar_p"] == pytest.approx(2 / 32)
    diffs = [0.5, 0.5, 0.25]
    half = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert out["ci95"] == pytest.approx([np.mean(diffs) - half, np.mean(diffs) + half], rel=1e-12)
