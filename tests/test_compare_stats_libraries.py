"""The comparison statistics stand on scipy and statsmodels: a few values pinned against those
libraries called directly, against an independent implementation (scipy's log-rank beside the
statsmodels one numloss uses) and against published figures, so a wrong argument order, a
one-sided alternative or a swapped group cannot pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
from grid_analysis import newcombe_interval
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from numloss.compare.item_paired import paired_comparison, seed_level_mde, sign_flip_p
from numloss.compare.paired import (
    holm,
    mcnemar_exact_p,
    minimum_detectable_effect,
    paired_t,
    paired_t_power,
)
from numloss.compare.stats import fisher_exact_p, seed_interval, wilson_interval
from numloss.compare.survival import Outcome, logrank


def test_paired_t_is_scipys_one_sample_t() -> None:
    diffs = [0.3, -0.1, 0.8, 0.5, 0.2, 0.9]
    reference = stats.ttest_1samp(diffs, 0.0)
    test = paired_t(diffs)
    assert test.p == pytest.approx(reference.pvalue, rel=1e-12)
    assert test.ci == pytest.approx(tuple(reference.confidence_interval(0.95)), rel=1e-12)


def test_t_quantiles_are_exact_not_tabled() -> None:
    # the intervals used a 3-decimal table (t(0.975, 7) = 2.365); now scipy's 2.364624
    low, high = seed_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    half = stats.t.ppf(0.975, 7) * np.std([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], ddof=1) / math.sqrt(8)
    assert (low, high) == pytest.approx((0.45 - half, 0.45 + half), rel=1e-12)
    assert stats.t.ppf(0.975, 7) == pytest.approx(2.364624, abs=1e-6)
    assert seed_level_mde(1.0, 8) == pytest.approx((2.364624 + 0.896029) / math.sqrt(8), abs=1e-6)


def test_holm_is_statsmodels() -> None:
    ps = [0.01, 0.04, 0.03, 0.2, 0.001]
    assert holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), rel=1e-12)
    assert holm(ps) == pytest.approx([0.04, 0.09, 0.09, 0.2, 0.005])


def test_mcnemar_is_the_two_sided_binomial() -> None:
    for only_a, only_b in [(2, 8), (9, 1), (40, 61), (700, 820)]:
        expected = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
        assert mcnemar_exact_p(only_a, only_b) == pytest.approx(expected, rel=1e-9)


def test_power_is_the_two_sided_noncentral_t() -> None:
    n, effect, sd = 8, 0.7, 1.0
    crit, ncp = stats.t.ppf(0.975, n - 1), effect * math.sqrt(n) / sd
    both_tails = stats.nct.sf(crit, n - 1, ncp) + stats.nct.cdf(-crit, n - 1, ncp)
    assert paired_t_power(n, effect, sd) == pytest.approx(both_tails, rel=1e-9)
    mde = minimum_detectable_effect(8, 2.5)
    assert paired_t_power(8, mde, 2.5) == pytest.approx(0.8, abs=1e-9)
    assert mde / 2.5 == pytest.approx(minimum_detectable_effect(8, 1.0), rel=1e-9), "scales with the SD"


def test_newcombe_matches_the_paper() -> None:
    # Newcombe (1998), Stat Med 17: 873, table II, 56/70 - 48/80, method 10: 0.0524 to 0.3339
    diff, low, high = newcombe_interval(56, 70, 48, 80)
    assert diff == pytest.approx(0.2) and (low, high) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    # the own Wilson formula (z 1.96, not 1.959964) within 1e-5 of statsmodels'
    assert wilson_interval(56, 70) == pytest.approx(proportion_confint(56, 70, method="wilson"), abs=1e-5)


def test_fisher_is_scipys() -> None:
    assert fisher_exact_p(12, 20, 5, 20) == pytest.approx(stats.fisher_exact([[12, 8], [5, 15]]).pvalue, rel=1e-12)


def test_logrank_agrees_with_scipys_independent_implementation() -> None:
    a = [Outcome(200, True), Outcome(400, True), Outcome(600, True), Outcome(800, False), Outcome(800, False)]
    b = [Outcome(400, True), Outcome(800, False), Outcome(800, False), Outcome(800, False), Outcome(600, True)]

    def censored(group: list[Outcome]) -> stats.CensoredData:
        return stats.CensoredData(uncensored=[o.step for o in group if o.learnt],
                                  right=[o.step for o in group if not o.learnt])

    assert logrank([a, b]) == pytest.approx(stats.logrank(censored(a), censored(b)).pvalue, rel=1e-9)


def test_sign_flip_and_item_level_pins() -> None:
    # 5 positive differences: only the all-plus and all-minus patterns are as extreme: 2 / 32
    assert sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.1]) == pytest.approx(2 / 32)
    assert sign_flip_p([0.3]) == 1.0, "one pair: both sign patterns are as extreme"
    out = paired_comparison({0: "1101", 1: "1110", 2: "0111"}, {0: "0100", 1: "1000", 2: "0011"})
    assert (out["b"], out["c"]) == (5, 0) and out["mcnemar_p"] == pytest.approx(2 / 32)
    diffs = [0.5, 0.5, 0.25]
    half = stats.t.ppf(0.975, 2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert out["ci95"] == pytest.approx([np.mean(diffs) - half, np.mean(diffs) + half], rel=1e-12)
