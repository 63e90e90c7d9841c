"""The seed-paired analysis of a grid, from its run records; every number docs/results.md quotes
is computed here (scripts/results_doc.py writes it in). Part of the write-up, not the installed
package: `numloss compare` reports a grid without it.

A graded grid (configs/compare-mul.yaml) trains every run the full budget: continuous endpoints
(`ENDPOINTS`) compared with the baseline by seed (`paired_analysis`), the seed count planned on
the pilot's spread (`seed_plan`). A learnt-or-not grid (configs/compare.yaml) stops runs when they
learn: seed-stratified log-rank and McNemar by seed, beside the unpaired share difference with
its Newcombe interval and the rise Fisher's test would detect (`learning_analysis`); the exact
log-rank test of small grids (`logrank_exact_p`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.proportion import confint_proportions_2indep

from numloss.compare.paired import (
    PairedTest,
    check_curve_area,
    holm,
    mcnemar_exact_p,
    minimum_detectable_effect,
    paired_t,
    paired_t_power,
    paired_values,
)
from numloss.compare.stats import fisher_exact_p
from numloss.compare.survival import Outcome, _check, _survdiff, logrank, logrank_statistic

Runs = Mapping[str, Mapping[int, dict[str, Any]]]  # label -> seed -> record


def seeds_for_power(
    effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_n: int = 500
) -> int:
    """The smallest number of seed pairs whose paired t test has at least `power` (max_n if none
    does)."""
    for n in range(2, max_n + 1):
        if paired_t_power(n, effect, sd, alpha) >= power:
            return n
    return max_n


# -- seed-stratified log-rank (paired designs) ----------------------------------------------------
Strata = Sequence[tuple[Sequence[Outcome], Sequence[Outcome]]]


def _stratified(strata: Strata) -> float:
    """statsmodels' stratified two-sample log-rank chi-square (NaN without information)."""
    a = [o for pair in strata for o in pair[0]]
    b = [o for pair in strata for o in pair[1]]
    _check(a + b)
    labels = [i for i, pair in enumerate(strata) for _ in pair[0]] + [
        i for i, pair in enumerate(strata) for _ in pair[1]
    ]
    return _survdiff([a, b], labels)


def stratified_logrank_statistic(strata: Strata) -> float:
    """Chi-square statistic (1 df) of the two-sample log-rank test stratified by `strata`.

    Each stratum (a seed, whose runs share data order and initialisation) is a pair (group a's
    runs, group b's runs); O - E and its variance V of group a are summed over the strata, each
    with its own risk sets, and the statistic is (sum O - E)^2 / sum V, so a seed's own luck
    cancels out. 0.0 when there is no information (no events, or zero variance)."""
    statistic = _stratified(strata)
    return 0.0 if math.isnan(statistic) else statistic


def stratified_logrank(strata: Strata) -> float:
    """Large-sample p of the seed-stratified log-rank test (NaN when it has no information)."""
    statistic = _stratified(strata)
    return float(stats.chi2.sf(statistic, 1)) if not math.isnan(statistic) else float("nan")


def logrank_exact_p(groups: Sequence[Sequence[Outcome]], limit: int = 200_000) -> float:
    """Exact permutation p of the two-sample log-rank statistic: the share of all splits of the
    pooled runs into groups of the observed sizes whose statistic is at least the observed one.
    For small grids (C(n, k) <= `limit` splits; ValueError above: use `logrank_permutation_p`).
    Own loop: no library has an exact log-rank test."""
    groups = [list(g) for g in groups if g]
    if len(groups) != 2:
        raise ValueError(f"logrank_exact_p: needs two non-empty groups, got {len(groups)}")
    observed, df = logrank_statistic(groups)
    if not df:
        return float("nan")
    pooled = groups[0] + groups[1]
    k = len(groups[0])
    if math.comb(len(pooled), k) > limit:
        raise ValueError(
            f"logrank_exact_p: {math.comb(len(pooled), k)} splits exceed {limit}; use"
            " logrank_permutation_p"
        )
    at_least = total = 0
    for chosen in combinations(range(len(pooled)), k):
        picked = set(chosen)
        a = [pooled[i] for i in chosen]
        b = [o for i, o in enumerate(pooled) if i not in picked]
        total += 1
        at_least += logrank_statistic([a, b])[0] >= observed * (1 - 1e-9)
    return at_least / total


def load_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every run record (`<label>-s<seed>-<hash>.json`) of a records folder, in name order."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(folder).glob("*.json"))]


def by_label(records: Iterable[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """Records keyed by objective label, then seed (a second record of one run is an error)."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for record in records:
        seeds = runs.setdefault(record["label"], {})
        if record["seed"] in seeds:
            raise ValueError(f"two records of {record['label']} seed {record['seed']}: keep one")
        seeds[int(record["seed"])] = record
    return runs


# -- endpoints of one run -------------------------------------------------------------------------
def _in_distribution(run: Mapping[str, Any]) -> Mapping[str, Any]:
    return run["evaluation"]["in_distribution"]


def place_accuracy(run: Mapping[str, Any], place: int) -> float:
    """Accuracy (points) of the generated number at `place` (0 units, 1 tens, ...),
    in-distribution."""
    correct, total = _in_distribution(run)["place_accuracy"].get(str(place), (0, 0))
    return 100.0 * correct / total if total else float("nan")


def endpoint_value(run: Mapping[str, Any], key: str) -> float:
    """One run's value of endpoint `key` (see `ENDPOINTS`; exact match and accuracies in points)."""
    evaluation = _in_distribution(run)
    if key == "exact_match":
        return 100.0 * evaluation["exact_match"]
    if key == "check_auc":
        return 100.0 * check_curve_area((run.get("learning") or {}).get("checks") or [])
    if key.startswith("place_"):
        return place_accuracy(run, int(key.removeprefix("place_")))
    value = evaluation.get(key)
    return float("nan") if value is None else float(value)


@dataclass(frozen=True)
class Endpoint:
    key: str
    title: str
    unit: str
    better: str  # "higher" or "lower"
    primary: bool = False


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("exact_match", "exact match", "points", "higher", primary=True),
    Endpoint("signed_log_mae", "signed-log MAE", "", "lower", primary=True),
    Endpoint("place_3", "thousands-place accuracy", "points", "higher"),
    Endpoint("place_2", "hundreds-place accuracy", "points", "higher"),
    Endpoint("place_1", "tens-place accuracy", "points", "higher"),
    Endpoint("place_0", "units-place accuracy", "points", "higher"),
    Endpoint("digit_entropy", "digit entropy (nats)", "", "neither"),
    Endpoint("check_auc", "area under the check curve", "points", "higher"),
)


# -- the graded grid ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """One arm against the baseline on one endpoint, by seed."""

    arm: str
    endpoint: Endpoint
    seeds: list[int]
    baseline_mean: float
    arm_mean: float
    test: PairedTest
    alpha: float  # the level the detectable effect is computed at
    p_holm: float = float("nan")

    @cached_property
    def mde(self) -> float:
        """The difference this many seeds detect with 80 % power at the observed SD of the
        differences."""
        return minimum_detectable_effect(self.test.n, self.test.sd, self.alpha)


def seed_plan(
    baseline: Mapping[int, dict[str, Any]],
    pilot_seeds: Sequence[int] = (0, 1, 2, 3),
    effect: float = 2.6,
    comparisons: int = 3,
    sd_limit: float = 2.5,
    fallback_seeds: int = 20,
    power: float = 0.8,
) -> dict[str, Any]:
    """The pre-registered seed rule on the pilot: SD s of the baseline's exact match over the pilot
    seeds; seeds per arm = smallest n with `power` for `effect` at alpha 0.05/`comparisons`, the SD
    of a difference taken as sqrt(2) s; above `sd_limit`: two arms x `fallback_seeds`."""
    missing = [s for s in pilot_seeds if s not in baseline]
    if missing:
        raise ValueError(f"seed_plan: pilot seeds {missing} of the baseline have no record yet")
    values = [endpoint_value(baseline[s], "exact_match") for s in pilot_seeds]
    sd = statistics.stdev(values)
    plan: dict[str, Any] = {
        "pilot_seeds": list(pilot_seeds),
        "pilot_values": values,
        "pilot_mean": statistics.fmean(values),
        "sd": sd,
        "effect": effect,
        "power": power,
        "sd_limit": sd_limit,
    }
    if sd > sd_limit:
        plan.update(two_arms=True, seeds=fallback_seeds, alpha=0.05)
    else:
        alpha = 0.05 / comparisons
        plan.update(
            two_arms=False,
            alpha=alpha,
            seeds=seeds_for_power(effect, math.sqrt(2) * sd, alpha, power),
        )
    return plan


def paired_analysis(
    runs: Runs,
    baseline: str,
    arms: Sequence[str],
    endpoints: Sequence[Endpoint] = ENDPOINTS,
    alpha: float = 0.05,
    seeds: Iterable[int] | None = None,
) -> list[Comparison]:
    """Every arm against `baseline` on every endpoint, on the seeds both have (of `seeds`, if
    given): paired t on the per-seed differences (arm - baseline). For the primary endpoints the
    p values are Holm-adjusted over the arms and the detectable effect is at alpha / len(arms)
    (Holm's strictest step); for the others at `alpha`, unadjusted."""
    allowed = None if seeds is None else set(seeds)

    def values(label: str, key: str) -> dict[int, float]:
        return {
            s: endpoint_value(r, key)
            for s, r in runs.get(label, {}).items()
            if allowed is None or s in allowed
        }

    out: list[Comparison] = []
    for endpoint in endpoints:
        group: list[Comparison] = []
        level = alpha / max(1, len(arms)) if endpoint.primary else alpha
        for arm in arms:
            rows = paired_values(values(baseline, endpoint.key), values(arm, endpoint.key))
            test = paired_t([b - a for _, a, b in rows])
            group.append(
                Comparison(
                    arm=arm,
                    endpoint=endpoint,
                    seeds=[s for s, _, _ in rows],
                    baseline_mean=statistics.fmean(a for _, a, _ in rows) if rows else float("nan"),
                    arm_mean=statistics.fmean(b for _, _, b in rows) if rows else float("nan"),
                    test=test,
                    alpha=level,
                )
            )
        if endpoint.primary:
            # an arm without a p yet (too few pairs) still counts in the family, as p = 1: the
            # adjustment stays over all the planned comparisons, never fewer
            raw = [c.test.p if math.isfinite(c.test.p) else 1.0 for c in group]
            adjusted = holm(raw)
            group = [
                replace(c, p_holm=p if math.isfinite(c.test.p) else float("nan"))
                for c, p in zip(group, adjusted, strict=True)
            ]
        out += group
    return out


def complete_seeds(runs: Runs, labels: Sequence[str]) -> list[int]:
    """The seeds every one of `labels` has a record of."""
    sets = [set(runs.get(label, {})) for label in labels]
    return sorted(set.intersection(*sets)) if sets else []


# -- the learnt-or-not grid -----------------------------------------------------------------------
def newcombe_interval(hits_a: int, n_a: int, hits_b: int, n_b: int) -> tuple[float, float, float]:
    """(difference, low, high) of two independent proportions a - b: Newcombe's hybrid score
    interval (method 10), built from the two Wilson intervals."""
    low, high = confint_proportions_2indep(
        hits_a, n_a, hits_b, n_b, method="newcomb", compare="diff"
    )
    return hits_a / n_a - hits_b / n_b, float(low), float(high)


@lru_cache(maxsize=64)
def _fisher_rejections(n_a: int, n_b: int, alpha: float) -> tuple[tuple[int, int], ...]:
    return tuple(
        (x, y)
        for x in range(n_a + 1)
        for y in range(n_b + 1)
        if fisher_exact_p(x, n_a, y, n_b) <= alpha
    )


def fisher_power(n_a: int, p_a: float, n_b: int, p_b: float, alpha: float = 0.05) -> float:
    """Exact power of the two-sided Fisher test of two binomial groups: the probability of its
    rejection region. Own sum: statsmodels' power classes are normal approximations."""
    rejections = _fisher_rejections(n_a, n_b, alpha)
    if not rejections:
        return 0.0
    x, y = (np.array(v) for v in zip(*rejections, strict=True))
    return float(np.sum(stats.binom.pmf(x, n_a, p_a) * stats.binom.pmf(y, n_b, p_b)))


def fisher_detectable_share(
    n_arm: int, n_base: int, p_base: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The share learnt an arm would need (above `p_base`) for Fisher's test to detect it with
    `power` at these run counts (1.0 if not even that)."""
    if fisher_power(n_arm, 1.0, n_base, p_base, alpha) < power:
        return 1.0
    return float(
        optimize.brentq(
            lambda p: fisher_power(n_arm, p, n_base, p_base, alpha) - power, p_base, 1.0, xtol=1e-12
        )
    )


def _outcome(run: Mapping[str, Any]) -> Outcome:
    return Outcome(int(run["learning"]["step"]), bool(run["learning"]["learnt"]))


def learning_analysis(runs: Runs, baseline: str, arms: Sequence[str]) -> list[dict[str, Any]]:
    """Per arm against `baseline`: learnt counts, the unpaired difference in share learnt with its
    Newcombe interval and Fisher p and the share Fisher would detect; by seed, the stratified
    log-rank p, McNemar's discordant counts and exact p, and the paired difference in final exact
    match (points; the runs' own final steps, which differ: early stop) with its interval."""
    base_runs = runs[baseline]
    out = []
    for arm in arms:
        arm_runs = runs[arm]
        seeds = sorted(set(arm_runs) & set(base_runs))
        learnt_arm = sum(_outcome(r).learnt for r in arm_runs.values())
        learnt_base = sum(_outcome(r).learnt for r in base_runs.values())
        n_arm, n_base = len(arm_runs), len(base_runs)
        diff, low, high = newcombe_interval(learnt_arm, n_arm, learnt_base, n_base)
        only_arm = sum(
            _outcome(arm_runs[s]).learnt and not _outcome(base_runs[s]).learnt for s in seeds
        )
        only_base = sum(
            _outcome(base_runs[s]).learnt and not _outcome(arm_runs[s]).learnt for s in seeds
        )
        em = paired_t(
            [
                endpoint_value(arm_runs[s], "exact_match")
                - endpoint_value(base_runs[s], "exact_match")
                for s in seeds
            ]
        )
        out.append(
            {
                "arm": arm,
                "runs": n_arm,
                "learnt": learnt_arm,
                "baseline_runs": n_base,
                "baseline_learnt": learnt_base,
                "share_difference": diff,
                "share_ci": (low, high),
                "fisher_p": fisher_exact_p(learnt_arm, n_arm, learnt_base, n_base),
                "logrank_p": logrank(
                    [
                        [_outcome(r) for r in arm_runs.values()],
                        [_outcome(r) for r in base_runs.values()],
                    ]
                ),
                "detectable_share": fisher_detectable_share(n_arm, n_base, learnt_base / n_base),
                "paired_seeds": len(seeds),
                "stratified_logrank_p": stratified_logrank(
                    [([_outcome(arm_runs[s])], [_outcome(base_runs[s])]) for s in seeds]
                ),
                "only_arm": only_arm,
                "only_baseline": only_base,
                "mcnemar_p": mcnemar_exact_p(only_arm, only_base),
                "exact_match": em,
                "exact_match_mde": minimum_detectable_effect(em.n, em.sd, 0.05),
            }
        )
    return out
