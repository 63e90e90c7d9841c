"""Seed-paired statistics: a comparison whose arms share their seeds is analysed by seed.

Seed s gives every objective the same training data, data order and initialisation, so the
per-seed difference (objective - baseline) removes the seed's own luck from the comparison. This
module holds what the pre-registered analysis of docs/results.md needs, in plain Python (no
SciPy in the environment):

* `paired_t`: the mean per-seed difference, its Student t interval and two-sided p;
* `holm`: Holm's step-down adjustment of several p values (family-wise error at alpha);
* `paired_t_power`, `seeds_for_power`, `minimum_detectable_effect`: the exact power of the
  two-sided paired t test (noncentral t, by quadrature over the variance), the seed count a
  planned effect needs and the effect a given seed count detects;
* `mcnemar_exact_p`: the exact paired test of a yes/no outcome (learnt or not) by seed;
* `check_curve_area`: the area under a run's learning-check curve (mean exact match over training).

`tests/test_compare_paired.py` checks them against hand-worked values and by simulation: on
synthetic seeds with a known effect the test finds it at the computed power, and on a null it
rejects at its nominal rate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_EPS = 1e-15


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (bisection on `t_sf`; exact to ~1e-10; cached)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p}")
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        if 1.0 - t_sf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True)
class PairedTest:
    """The paired t test of per-seed differences: n seeds, mean difference, its interval, p."""

    n: int
    mean: float
    sd: float
    ci: tuple[float, float]
    p: float

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "ci95": list(self.ci), "p": self.p}


def paired_t(differences: Sequence[float], level: float = 0.95) -> PairedTest:
    """Two-sided one-sample t test that the mean of `differences` is 0, with its `level` interval.

    NaN interval and p below 2 differences; a zero spread gives p 1 for a zero mean, else 0."""
    xs = [float(d) for d in differences]
    n = len(xs)
    if n == 0:
        return PairedTest(0, float("nan"), float("nan"), (float("nan"), float("nan")), float("nan"))
    mean = statistics.fmean(xs)
    if n < 2:
        return PairedTest(1, mean, float("nan"), (float("nan"), float("nan")), float("nan"))
    sd = statistics.stdev(xs)
    se = sd / math.sqrt(n)
    if se == 0.0:
        return PairedTest(n, mean, 0.0, (mean, mean), 1.0 if mean == 0 else 0.0)
    t = mean / se
    p = min(1.0, 2.0 * t_sf(abs(t), n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * se
    return PairedTest(n, mean, sd, (mean - half, mean + half), p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values (same order as given; NaN stays NaN and is not counted).

    Rejecting every hypothesis whose adjusted p is <= alpha keeps the family-wise error at alpha."""
    indexed = [(p, i) for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    indexed.sort()
    m = len(indexed)
    adjusted = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def paired_t_power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test at level `alpha` with `n` pairs when the differences
    have mean `effect` and standard deviation `sd`: P(|T| > t_crit) under the noncentral t with
    df n-1 and noncentrality effect*sqrt(n)/sd, integrated over the chi-square of the variance."""
    if n < 2:
        return float("nan")
    if sd <= 0:
        return 1.0 if effect != 0 else alpha
    df = n - 1
    crit = t_quantile(1.0 - alpha / 2.0, df)
    ncp = effect * math.sqrt(n) / sd
    # T = (Z + ncp) / S with S = sqrt(V / df), V ~ chi2(df):
    # P(|T| > c) = E_S[P(Z > c S - ncp) + P(Z < -c S - ncp)], integrated over S (Simpson's rule);
    # the density of S, 2 df s chi2_pdf(df s^2), is finite at 0 for every df (chi2's is not for df 1)
    top = math.sqrt((df + 12.0 * math.sqrt(2.0 * df) + 40.0) / df)
    steps = 1200  # even
    width = top / steps
    log_norm = -(df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0)
    total = 0.0
    for k in range(steps + 1):
        s = max(k * width, 1e-12)
        v = df * s * s
        density = 2.0 * df * s * math.exp(log_norm + (df / 2.0 - 1.0) * math.log(v) - v / 2.0)
        inner = 1.0 - _normal_cdf(crit * s - ncp) + _normal_cdf(-crit * s - ncp)
        weight = 1 if k in (0, steps) else (4 if k % 2 else 2)
        total += weight * density * inner
    return min(1.0, total * width / 3.0)


def seeds_for_power(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 500) -> int:
    """The smallest number of seed pairs whose paired t test has at least `power` (max_n if none does)."""
    for n in range(2, max_n + 1):
        if paired_t_power(n, effect, sd, alpha) >= power:
            return n
    return max_n


def minimum_detectable_effect(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The mean difference the paired t test with `n` pairs detects with `power` (bisection)."""
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    low, high = 0.0, max(sd, _EPS)
    while paired_t_power(n, high, sd, alpha) < power:
        high *= 2.0
    for _ in range(36):
        mid = (low + high) / 2
        if paired_t_power(n, mid, sd, alpha) < power:
            low = mid
        else:
            high = mid
    return high


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p: of the discordant seeds (`only_a`: yes for a, no for b, and the
    reverse), are the two directions equally likely? A binomial(only_a + only_b, 1/2) test."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"mcnemar_exact_p: counts must be >= 0, got {only_a}, {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    # integer true division: exact and correctly rounded at any n (2.0 ** n overflows past n = 1023,
    # which an item-level test over seeds x 1,000 items reaches)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)
    return min(1.0, 2.0 * tail)


def paired_values(baseline: Mapping[int, float], other: Mapping[int, float]) -> list[tuple[int, float, float]]:
    """(seed, baseline value, other value) for the seeds both have, in seed order (finite values only)."""
    rows = []
    for seed in sorted(set(baseline) & set(other)):
        a, b = baseline[seed], other[seed]
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            continue
        rows.append((seed, float(a), float(b)))
    return rows


def check_curve_area(checks: Sequence[Sequence[float]]) -> float:
    """The area under a run's check curve ([[step, exact match], ...]) divided by the steps it
    spans: the mean check exact match over training by the trapezoid rule (NaN without checks; a
    single check is its own value). Higher: learnt earlier or better."""
    points = sorted((float(s), float(v)) for s, v in checks)
    if not points:
        return float("nan")
    if len(points) == 1 or points[-1][0] == points[0][0]:
        return points[-1][1]
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(points, points[1:], strict=False))
    return area / (points[-1][0] - points[0][0])
