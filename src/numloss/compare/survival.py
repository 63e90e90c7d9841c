"""Learning speed as time-to-event data: when did a run first "learn the task"?

A run's outcome is (step, learnt): the first check that met the criterion (an event), or the
last check done (censored). Kaplan-Meier share learnt by step, the median steps-to-learn with
its distribution-free interval (order statistics; it alone assumes one censoring horizon), and
log-rank tests on the whole curves: chi-square and seeded permutation (few runs per objective;
the exact and seed-stratified tests of docs/results.md are in scripts/grid_analysis.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats
from statsmodels.duration.survfunc import survdiff


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
    # the largest l with P(B < l) <= the tail: how many values of B have P(B <= k) <= the tail
    lower = int(np.sum(stats.binom.cdf(np.arange(n + 1), n, 0.5) <= (1 - level) / 2 + 1e-15))
    return (lower, n + 1 - lower) if lower >= 1 else None


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
            "median_interval needs one censoring horizon (a run stopped unlearnt before another"
            " learnt); use runs with the same max_steps"
        )
    ranks = _order_statistic_ranks(len(outcomes), level)
    if ranks is None:
        return float("nan"), float("nan")
    times = sorted([float(s) for s in events] + [math.inf] * len(censored))
    low, high = ranks
    return times[low - 1], times[high - 1]


# -- the log-rank test ----------------------------------------------------------------------------
def _survdiff(groups: Sequence[Sequence[Outcome]], strata: Sequence[int] | None = None) -> float:
    """statsmodels' log-rank chi-square of `groups` (one list of runs each, flattened in order);
    NaN when the test has no information (no event, or a singular variance)."""
    times = [o.step for g in groups for o in g]
    events = [float(o.learnt) for g in groups for o in g]
    labels = [j for j, g in enumerate(groups) for _ in g]
    if not any(events):
        return float("nan")
    try:
        statistic, _ = survdiff(
            np.array(times),
            np.array(events),
            np.array(labels),
            strata=None if strata is None else np.array(strata),
        )
    except np.linalg.LinAlgError:
        return float("nan")
    return float(statistic)


@lru_cache(maxsize=65_536)
def _statistic(groups: tuple[tuple[Outcome, ...], ...]) -> float:
    """The k-sample statistic of groups given as sorted tuples: the permutation tests below meet
    the same split of tied outcomes many times, and one survdiff call costs about 0.3 ms."""
    return _survdiff(groups)


def logrank_statistic(groups: Sequence[Sequence[Outcome]]) -> tuple[float, int]:
    """(chi-square statistic, degrees of freedom) of the k-sample log-rank test (statsmodels'
    `survdiff`). Groups without runs are dropped; (0.0, 0) when fewer than two groups remain or
    the test has no information (no run learnt)."""
    groups = [list(g) for g in groups if g]
    for g in groups:
        _check(g)
    if len(groups) < 2:
        return 0.0, 0
    statistic = _statistic(tuple(tuple(sorted(g, key=_key)) for g in groups))
    return (0.0, 0) if math.isnan(statistic) else (statistic, len(groups) - 1)


def _key(o: Outcome) -> tuple[int, bool]:
    return o.step, o.learnt


def logrank(groups: Sequence[Sequence[Outcome]]) -> float:
    """Large-sample p of the log-rank test that `groups` share one learning curve (NaN when it
    has nothing to test: fewer than two non-empty groups or no run learnt)."""
    statistic, df = logrank_statistic(groups)
    return float(stats.chi2.sf(statistic, df)) if df else float("nan")


def logrank_permutation_p(
    groups: Sequence[Sequence[Outcome]], permutations: int = 20_000, seed: int = 0
) -> float:
    """Monte Carlo permutation p of the log-rank statistic: the share of random relabellings of
    the pooled runs into groups of the same sizes whose statistic is at least the observed one
    (the observed labelling counted once, so p > 0). Seeded: the same inputs give the same p.
    Own loop: no library has a permutation log-rank test."""
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
