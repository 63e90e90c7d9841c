"""Learning speed as time-to-event data: when did a run first "learn the task"?

Each run is checked on a small held-out slice every few hundred optimizer steps (see
`numloss.compare.learning`). Its outcome is a pair (step, learnt): `learnt` True and `step` the
first check that met the criterion (an event), or `learnt` False and `step` the last check done
(censored: it had not learnt by then). Runs of one grid share their horizon (max_steps), so the
censoring is at one time, but nothing below assumes that except `median_interval`, which says so.

- `learnt_by_step`: the Kaplan-Meier estimate of the share of runs that have learnt by each step
  (with no censoring before the horizon it is simply the share of runs);
- `median_steps` / `median_interval`: the median steps-to-learn and its distribution-free 95 %
  interval (order statistics of the binomial, exact for any continuous distribution, conservative
  for steps on a grid of checks);
- `logrank`: the log-rank test that several objectives have one learning curve, on the whole
  curves (not on a final-step pass count). Its chi-square p is the usual large-sample one; with
  the few runs per objective of a comparison `logrank_permutation_p` gives the exact-in-law
  alternative (a seeded Monte Carlo over relabellings of the runs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """One run: the step of the first check that met the criterion, or of its last check."""

    step: int
    learnt: bool


def _check(outcomes: Sequence[Outcome]) -> None:
    for o in outcomes:
        if o.step < 0:
            raise ValueError(f"an outcome's step must be >= 0, got {o}")


def learnt_by_step(outcomes: Sequence[Outcome]) -> list[tuple[int, float]]:
    """[(step, share learnt by that step)] at every event step, from the Kaplan-Meier estimate
    (1 - S(t)); starts at (0, 0.0). Runs censored at a step are at risk at that step (an event
    and a censoring at the same step: the event counts first)."""
    _check(outcomes)
    curve = [(0, 0.0)]
    survival = 1.0
    at_risk = len(outcomes)
    for step in sorted({o.step for o in outcomes}):
        events = sum(1 for o in outcomes if o.step == step and o.learnt)
        leaving = sum(1 for o in outcomes if o.step == step)
        if events:
            survival *= 1 - events / at_risk
            curve.append((step, 1 - survival))
        at_risk -= leaving
    return curve


def share_learnt(outcomes: Sequence[Outcome], step: int) -> float:
    """The Kaplan-Meier share of runs learnt by `step` (NaN for no runs)."""
    if not outcomes:
        return float("nan")
    share = 0.0
    for at, value in learnt_by_step(outcomes):
        if at <= step:
            share = value
    return share


def median_steps(outcomes: Sequence[Outcome]) -> float:
    """The first step by which at least half the runs have learnt (Kaplan-Meier); inf when fewer
    than half ever did (the median is beyond the horizon), NaN for no runs."""
    if not outcomes:
        return float("nan")
    for step, share in learnt_by_step(outcomes):
        if share >= 0.5 - 1e-12:
            return float(step)
    return math.inf


def _order_statistic_ranks(n: int, level: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (l, u) with P(l <= B < u) >= level for B ~ Binomial(n, 1/2): then
    [T_(l), T_(u)] covers the median with probability >= level. None when n is too small."""
    tail = (1 - level) / 2
    below = 0.0
    lower = 0  # largest rank l with P(B < l) <= tail
    for k in range(n + 1):
        below += math.comb(n, k) / 2**n
        if below > tail + 1e-15:
            break
        lower = k + 1
    if lower < 1:
        return None
    return lower, n + 1 - lower


def median_interval(outcomes: Sequence[Outcome], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free `level` interval of the median steps-to-learn: [T_(l), T_(u)] of the
    sorted steps-to-learn, a run that never learnt counting as infinitely late. Valid when every
    censored run was censored at or after every event (one horizon for the grid: a grid's runs
    share max_steps); ValueError otherwise. (nan, nan) below 6 runs, where no such interval
    reaches 95 %; an upper end of inf: the median may lie beyond the horizon."""
    _check(outcomes)
    events = [o.step for o in outcomes if o.learnt]
    censored = [o.step for o in outcomes if not o.learnt]
    if events and censored and min(censored) < max(events):
        raise ValueError(
            "median_interval needs one censoring horizon (a run stopped unlearnt before another learnt); "
            "use runs with the same max_steps"
        )
    ranks = _order_statistic_ranks(len(outcomes), level)
    if ranks is None:
        return float("nan"), float("nan")
    times = sorted([float(s) for s in events] + [math.inf] * len(censored))
    low, high = ranks
    return times[low - 1], times[high - 1]


# -- the log-rank test ----------------------------------------------------------------------------
def logrank_statistic(groups: Sequence[Sequence[Outcome]]) -> tuple[float, int]:
    """(chi-square statistic, degrees of freedom) of the k-sample log-rank test.

    At each event step t with n runs at risk (n_j in group j) and d events (d_j): observed O_j =
    sum d_j, expected E_j = sum d n_j / n, covariance V_jk = sum d (n - d) / (n - 1) * n_j / n *
    ([j == k] - n_k / n). The statistic is (O - E)' V^-1 (O - E) over the first k - 1 groups.
    Groups without runs are dropped; (0.0, 0) when fewer than two groups or no event remain."""
    groups = [list(g) for g in groups if g]
    for g in groups:
        _check(g)
    k = len(groups)
    if k < 2:
        return 0.0, 0
    steps = sorted({o.step for g in groups for o in g if o.learnt})
    observed_minus_expected = [0.0] * k
    covariance = [[0.0] * k for _ in range(k)]
    for step in steps:
        at_risk = [sum(1 for o in g if o.step >= step) for g in groups]
        events = [sum(1 for o in g if o.step == step and o.learnt) for g in groups]
        n, d = sum(at_risk), sum(events)
        for j in range(k):
            observed_minus_expected[j] += events[j] - d * at_risk[j] / n
        if n < 2:
            continue
        scale = d * (n - d) / (n - 1)
        for j in range(k):
            for m in range(k):
                covariance[j][m] += scale * at_risk[j] / n * ((j == m) - at_risk[m] / n)
    size = k - 1
    vector = observed_minus_expected[:size]
    matrix = [row[:size] for row in covariance[:size]]
    solution = _solve(matrix, vector)
    if solution is None:  # no information (e.g. every event at a step where all runs were at risk alone)
        return 0.0, 0
    return sum(a * b for a, b in zip(vector, solution, strict=True)), size


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """x with matrix @ x = vector (Gaussian elimination with partial pivoting); None if singular."""
    n = len(vector)
    a = [list(row) + [value] for row, value in zip(matrix, vector, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularized upper incomplete gamma Q(df/2, x/2)
    (series below a + 1, Lentz's continued fraction above, as in Numerical Recipes 6.2)."""
    if df < 1:
        raise ValueError(f"chi2_sf: df must be >= 1, got {df}")
    if x <= 0:
        return 1.0
    a, z = df / 2, x / 2
    log_prefix = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1:  # P(a, z) by its series; Q = 1 - P
        term = total = 1 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= z / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = z + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return min(1.0, math.exp(log_prefix) * h)


def logrank(groups: Sequence[Sequence[Outcome]]) -> float:
    """Large-sample p of the log-rank test that `groups` share one learning curve (NaN when it
    has nothing to test: fewer than two non-empty groups or no run learnt)."""
    statistic, df = logrank_statistic(groups)
    return chi2_sf(statistic, df) if df else float("nan")


def logrank_permutation_p(
    groups: Sequence[Sequence[Outcome]], permutations: int = 20_000, seed: int = 0
) -> float:
    """Monte Carlo permutation p of the log-rank statistic: the share of random relabellings of
    the pooled runs into groups of the same sizes whose statistic is at least the observed one
    (the observed labelling counted once, so p > 0). Seeded: the same inputs give the same p."""
    groups = [list(g) for g in groups if g]
    observed, df = logrank_statistic(groups)
    if not df:
        return float("nan")
    pooled = [o for g in groups for o in g]
    sizes = [len(g) for g in groups]
    rng = random.Random(seed)
    at_least = 1
    for _ in range(permutations):
        rng.shuffle(pooled)
        split, start = [], 0
        for size in sizes:
            split.append(pooled[start : start + size])
            start += size
        if logrank_statistic(split)[0] >= observed * (1 - 1e-9):
            at_least += 1
    return at_least / (permutations + 1)


# -- seed-stratified log-rank (paired designs) ----------------------------------------------------
def _stratified_sums(strata: Sequence[tuple[Sequence[Outcome], Sequence[Outcome]]]) -> tuple[float, float]:
    """(sum of O - E, sum of V) of group a over the strata, each stratum with its own risk sets."""
    total, variance = 0.0, 0.0
    for a, b in strata:
        _check(a)
        _check(b)
        for step in sorted({o.step for g in (a, b) for o in g if o.learnt}):
            n_a = sum(1 for o in a if o.step >= step)
            n = n_a + sum(1 for o in b if o.step >= step)
            d_a = sum(1 for o in a if o.step == step and o.learnt)
            d = d_a + sum(1 for o in b if o.step == step and o.learnt)
            total += d_a - d * n_a / n
            if n > 1:
                variance += d * (n - d) / (n - 1) * n_a / n * (1 - n_a / n)
    return total, variance


def stratified_logrank_statistic(strata: Sequence[tuple[Sequence[Outcome], Sequence[Outcome]]]) -> float:
    """Chi-square statistic (1 df) of the two-sample log-rank test stratified by `strata`.

    Each stratum (a seed, whose runs share data order and initialisation) is a pair (group a's
    runs, group b's runs); O - E and its variance V of group a are summed over the strata, each
    with its own risk sets, and the statistic is (sum O - E)^2 / sum V, so a seed's own luck
    cancels out. 0.0 when there is no information (no events, or zero variance)."""
    total, variance = _stratified_sums(strata)
    return total * total / variance if variance > 1e-12 else 0.0


def stratified_logrank(strata: Sequence[tuple[Sequence[Outcome], Sequence[Outcome]]]) -> float:
    """Large-sample p of the seed-stratified log-rank test (NaN when it has no information)."""
    total, variance = _stratified_sums(strata)
    return chi2_sf(total * total / variance, 1) if variance > 1e-12 else float("nan")


def logrank_exact_p(groups: Sequence[Sequence[Outcome]], limit: int = 200_000) -> float:
    """Exact permutation p of the two-sample log-rank statistic: the share of all splits of the
    pooled runs into groups of the observed sizes whose statistic is at least the observed one.
    For small grids (C(n, k) <= `limit` splits; ValueError above: use `logrank_permutation_p`)."""
    from itertools import combinations

    groups = [list(g) for g in groups if g]
    if len(groups) != 2:
        raise ValueError(f"logrank_exact_p: needs two non-empty groups, got {len(groups)}")
    observed, df = logrank_statistic(groups)
    if not df:
        return float("nan")
    pooled = groups[0] + groups[1]
    k = len(groups[0])
    if math.comb(len(pooled), k) > limit:
        raise ValueError(f"logrank_exact_p: {math.comb(len(pooled), k)} splits exceed {limit}; use logrank_permutation_p")
    at_least = total = 0
    for chosen in combinations(range(len(pooled)), k):
        picked = set(chosen)
        a = [pooled[i] for i in chosen]
        b = [o for i, o in enumerate(pooled) if i not in picked]
        total += 1
        at_least += logrank_statistic([a, b])[0] >= observed * (1 - 1e-9)
    return at_least / total
