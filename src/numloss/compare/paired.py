"""Seed-paired statistics: seed s gives every objective the same data, order and initialisation,
so the per-seed difference (objective - baseline) removes the seed's own luck. Paired t, Holm,
the exact power of the paired t test, McNemar's exact test and the check-curve area, on scipy
and statsmodels; tests/test_compare_paired.py checks them by simulation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import optimize, special, stats
from statsmodels.stats.contingency_tables import mcnemar


@dataclass(frozen=True)
class PairedTest:
    """The paired t test of per-seed differences: n seeds, mean difference, its interval, p."""

    n: int
    mean: float
    sd: float
    ci: tuple[float, float]
    p: float


def paired_t(differences: Sequence[float], level: float = 0.95) -> PairedTest:
    """Two-sided one-sample t test that the mean of `differences` is 0, with its `level` interval.

    NaN interval and p below 2 differences; a zero spread gives p 1 for a zero mean, else 0
    (scipy returns NaN there, a degenerate case a comparison of identical runs does reach)."""
    xs = [float(d) for d in differences]
    n = len(xs)
    if n == 0:
        return PairedTest(0, float("nan"), float("nan"), (float("nan"), float("nan")), float("nan"))
    mean = statistics.fmean(xs)
    if n < 2:
        return PairedTest(1, mean, float("nan"), (float("nan"), float("nan")), float("nan"))
    sd = statistics.stdev(xs)
    if sd == 0.0:
        return PairedTest(n, mean, 0.0, (mean, mean), 1.0 if mean == 0 else 0.0)
    # scipy.special's t distribution, not stats.ttest_1samp: the same values without its
    # per-call argument machinery (the power simulations run tens of thousands of tests)
    se = sd / math.sqrt(n)
    p = 2.0 * special.stdtr(n - 1, -abs(mean / se))
    half = special.stdtrit(n - 1, 0.5 + level / 2) * se
    return PairedTest(n, mean, sd, (mean - half, mean + half), float(min(1.0, p)))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (same order as given; NaN stays NaN and is not counted).

    Rejecting every hypothesis whose adjusted p is <= alpha keeps the family-wise error at alpha.
    Own loop: statsmodels' `multipletests` runs a full gc.collect() on every call (seconds in a
    process that holds torch), and the simulations call Holm thousands of times."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None and not math.isnan(p))
    adjusted = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (len(indexed) - rank) * p))
        adjusted[i] = running
    return adjusted


def paired_t_power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test at level `alpha` with `n` pairs when the differences
    have mean `effect` and standard deviation `sd`: P(|T| > t_crit) under the noncentral t with
    df n - 1 and noncentrality effect sqrt(n) / sd.

    scipy's noncentral t, not statsmodels' TTestPower: the lower tail is taken as the upper tail
    at -ncp, because nct.cdf(-crit) is NaN where it underflows (TTestPower returns NaN there)."""
    if n < 2:
        return float("nan")
    if sd <= 0:
        return 1.0 if effect != 0 else alpha
    df, ncp = n - 1, effect * math.sqrt(n) / sd
    crit = stats.t.isf(alpha / 2, df)
    return float(min(1.0, stats.nct.sf(crit, df, ncp) + stats.nct.sf(crit, df, -ncp)))


def minimum_detectable_effect(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The mean difference the paired t test with `n` pairs detects with `power`.

    Solved with brentq to 1e-12 (statsmodels' `solve_power` stops near 1e-6)."""
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    if sd <= 0:
        return 0.0
    high = 1.0
    while paired_t_power(n, high * sd, sd, alpha) < power:
        high *= 2.0
    size = optimize.brentq(
        lambda d: paired_t_power(n, d * sd, sd, alpha) - power, 0.0, high, xtol=1e-12
    )
    return size * sd


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p: of the discordant seeds (`only_a`: yes for a, no for b, and the
    reverse), are the two directions equally likely? A binomial(only_a + only_b, 1/2) test."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"mcnemar_exact_p: counts must be >= 0, got {only_a}, {only_b}")
    return float(mcnemar([[0, only_a], [only_b, 0]], exact=True).pvalue)


def paired_values(
    baseline: Mapping[int, float], other: Mapping[int, float]
) -> list[tuple[int, float, float]]:
    """(seed, baseline value, other value) for the seeds both have, in seed order (finite values
    only)."""
    return [
        (seed, float(baseline[seed]), float(other[seed]))
        for seed in sorted(set(baseline) & set(other))
        if all(v is not None and math.isfinite(v) for v in (baseline[seed], other[seed]))
    ]


def check_curve_area(checks: Sequence[Sequence[float]]) -> float:
    """The area under a run's check curve ([[step, exact match], ...]) divided by the steps it
    spans: the mean check exact match over training by the trapezoid rule (NaN without checks; a
    single check is its own value). Higher: learnt earlier or better."""
    points = sorted((float(s), float(v)) for s, v in checks)
    if not points:
        return float("nan")
    if len(points) == 1 or points[-1][0] == points[0][0]:
        return points[-1][1]
    area = sum(
        (s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:], strict=False)
    )
    return area / (points[-1][0] - points[0][0])
