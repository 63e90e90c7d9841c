"""numloss.compare.survival: Kaplan-Meier, the median interval and the log-rank test by hand (its
exact and seed-stratified forms in scripts/grid_analysis.py)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest
from grid_analysis import logrank_exact_p, stratified_logrank, stratified_logrank_statistic

from numloss.compare.survival import (
    Outcome,
    learnt_by_step,
    logrank,
    logrank_permutation_p,
    logrank_statistic,
    median_interval,
    median_steps,
)

L = lambda step: Outcome(step, True)  # noqa: E731 - learnt at `step`
C = lambda step: Outcome(step, False)  # noqa: E731 - not learnt by its last check at `step`

A = [L(200), L(400), C(800)]
B = [L(400), C(800), C(800)]


def test_learnt_by_step_by_hand() -> None:
    # A: 1 of 3 at risk learns at 200 (S = 2/3), 1 of the 2 left at 400 (S = 1/3)
    assert learnt_by_step(A) == [(0, 0.0), (200, pytest.approx(1 / 3)), (400, pytest.approx(2 / 3))]
    # censoring before an event shrinks the risk set: 4 runs, one censored at 100, then 1 of 3 learns
    curve = learnt_by_step([C(100), L(300), L(500), C(900)])
    assert curve == [(0, 0.0), (300, pytest.approx(1 / 3)), (500, pytest.approx(1 - (2 / 3) * (1 / 2)))]


def test_median_steps() -> None:
    assert median_steps(A) == 400.0  # 2/3 >= 1/2 first at 400
    assert median_steps(B) == math.inf  # only 1 of 3 ever learnt
    assert median_steps([L(100), L(300)]) == 100.0  # exactly half by 100
    assert math.isnan(median_steps([]))


def test_median_interval_ranks_by_hand() -> None:
    # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so ranks 2 and 9
    runs = [L(100 * k) for k in range(1, 9)] + [C(1000), C(1000)]
    assert median_interval(runs) == (200.0, math.inf)
    runs = [L(100 * k) for k in range(1, 11)]
    assert median_interval(runs) == (200.0, 900.0)
    # n = 20: P(B <= 5) = 21700/2^20 = 0.0207 <= 0.025 < P(B <= 6) = 0.0577: ranks 6 and 15
    runs = [L(10 * k) for k in range(1, 21)]
    assert median_interval(runs) == (60.0, 150.0)
    assert all(math.isnan(x) for x in median_interval([L(1)] * 5)), "5 runs cannot give 95 %"
    assert median_interval([L(1)] * 6) == (1.0, 1.0)  # P(B < 1) = 1/64 <= 0.025
    with pytest.raises(ValueError, match="one censoring horizon"):
        median_interval([C(100), L(200)] * 3)


def test_median_interval_coverage_by_simulation() -> None:
    rng = random.Random(0)
    covered = 0
    for _ in range(2000):
        steps = [rng.expovariate(1.0) for _ in range(12)]  # true median ln 2
        low, high = median_interval([L(s) for s in steps])
        covered += low <= math.log(2) <= high
    assert covered / 2000 >= 0.95


def test_logrank_two_groups_by_hand() -> None:
    # step 200: at risk 3 + 3, one event (A): O - E = 1 - 1 * 3/6 = 0.5, V = 1 * 5/5 * 1/2 * 1/2 = 0.25
    # step 400: at risk 2 + 3, events 1 + 1: O - E = 1 - 2 * 2/5 = 0.2, V = 2 * 3/4 * 2/5 * 3/5 = 0.36
    expected = (0.5 + 0.2) ** 2 / (0.25 + 0.36)
    statistic, df = logrank_statistic([A, B])
    assert df == 1 and statistic == pytest.approx(expected)
    assert logrank_statistic([B, A])[0] == pytest.approx(expected), "symmetric in the groups"
    assert logrank([A, B]) == pytest.approx(math.erfc(math.sqrt(expected / 2)))


def test_logrank_k_groups() -> None:
    groups = [[L(100), L(200), C(900)], [L(300), L(600), C(900), C(900)], [L(100), L(100), L(300)]]
    statistic, df = logrank_statistic(groups)
    assert df == 2 and statistic > 0
    # the quadratic form does not depend on which group is left out (here: on the order)
    for order in ([1, 2, 0], [2, 0, 1]):
        assert logrank_statistic([groups[i] for i in order])[0] == pytest.approx(statistic)
    # identical groups: O = E at every step
    same = [[L(100), L(300), C(900)]] * 3
    assert logrank_statistic(same)[0] == pytest.approx(0.0, abs=1e-12)
    assert logrank(same) == pytest.approx(1.0)
    assert math.isnan(logrank([A])) and math.isnan(logrank([[C(9)], [C(9)]])), "nothing to test"


def test_logrank_separates_clearly_different_curves() -> None:
    fast = [L(200)] * 10
    slow = [C(3200)] * 10
    assert logrank([fast, slow]) < 1e-4
    p = logrank_permutation_p([fast, slow], permutations=2000)
    # only the labellings that put the ten learnt runs in one group are as extreme: 2 / C(20, 10)
    assert p == pytest.approx(1 / 2001, abs=2 / 2001)
    assert logrank_permutation_p([A, B], permutations=500) > 0.2


def test_permutation_p_is_exact_on_a_tiny_case() -> None:
    """Against the enumeration of every split of 4 runs into 2 + 2 (6 splits)."""
    runs = [L(100), L(200), C(900), C(900)]
    observed = logrank_statistic([runs[:2], runs[2:]])[0]
    splits = list(itertools.combinations(range(4), 2))
    extreme = sum(
        logrank_statistic([[runs[i] for i in s], [runs[i] for i in range(4) if i not in s]])[0] >= observed - 1e-12
        for s in splits
    )
    exact = extreme / len(splits)
    assert logrank_permutation_p([runs[:2], runs[2:]], permutations=20_000, seed=1) == pytest.approx(exact, abs=0.01)


def test_stratified_logrank_hand_worked() -> None:
    # two seeds; in each, a learnt at 200 and b had not by 400: per stratum O - E = 1/2, V = 1/4
    stratum = ([Outcome(200, True)], [Outcome(400, False)])
    assert stratified_logrank_statistic([stratum, stratum]) == pytest.approx(1.0**2 / 0.5)
    assert stratified_logrank([stratum, stratum]) == pytest.approx(math.erfc(math.sqrt(2.0 / 2)))  # chi2(1) tail at 2
    # both learn at the same check: no information in that stratum
    tie = ([Outcome(200, True)], [Outcome(200, True)])
    assert stratified_logrank_statistic([tie]) == 0.0 and math.isnan(stratified_logrank([tie]))
    assert stratified_logrank_statistic([stratum, tie]) == pytest.approx(0.5**2 / 0.25)


def test_stratified_logrank_of_one_stratum_is_the_plain_one() -> None:
    rng = random.Random(7)
    for _ in range(50):
        groups = [[Outcome(200 * rng.randint(1, 8), rng.random() < 0.5) for _ in range(rng.randint(1, 6))] for _ in range(2)]
        assert stratified_logrank_statistic([(groups[0], groups[1])]) == pytest.approx(logrank_statistic(groups)[0], abs=1e-9)


def test_stratified_logrank_reproduces_the_recorded_addition_grid() -> None:
    """The seed-stratified p against MLE that two independent recomputations of the records gave
    (DEL a0.3 0.76, NTL-WAS 0.29, DEL + l1 0.083)."""
    outcomes = {}
    for path in (Path(__file__).resolve().parents[1] / "results" / "compare").glob("*.json"):
        run = json.loads(path.read_text())
        outcomes[run["label"], run["seed"]] = Outcome(int(run["learning"]["step"]), bool(run["learning"]["learnt"]))
    for label, expected in (("del-a0.3", 0.76), ("ntl-was", 0.29), ("del-l1", 0.083)):
        strata = [([outcomes[label, s]], [outcomes["mle", s]]) for s in range(20)]
        assert stratified_logrank(strata) == pytest.approx(expected, abs=0.005), label


def test_logrank_exact_p_enumerates_every_split() -> None:
    # one run each: both splits give the same statistic, so p = 1
    assert logrank_exact_p([[L(200)], [C(400)]]) == 1.0
    # three early learners against three that never learnt: only the observed split and its mirror
    # are as extreme, 2 of C(6, 3) = 20
    assert logrank_exact_p([[L(200)] * 3, [C(800)] * 3]) == pytest.approx(2 / 20)
    rng = random.Random(11)
    groups = [[Outcome(200 * rng.randint(1, 6), rng.random() < 0.6) for _ in range(5)] for _ in range(2)]
    assert logrank_exact_p(groups) == pytest.approx(logrank_permutation_p(groups, 20_000, seed=1), abs=0.02)
    with pytest.raises(ValueError):
        logrank_exact_p([[L(200)] * 20, [C(800)] * 20], limit=1000)


def test_logrank_exact_p_reproduces_the_recorded_chunked_grid() -> None:
    """The exact p of the two-digit chunked grid that two recomputations gave (DEL 0.032, NTL-WAS 0.079)."""
    outcomes: dict[str, list[Outcome]] = {}
    for path in (Path(__file__).resolve().parents[1] / "results" / "compare-chunked-2digit").glob("*.json"):
        run = json.loads(path.read_text())
        outcomes.setdefault(run["label"], []).append(Outcome(int(run["learning"]["step"]), bool(run["learning"]["learnt"])))
    assert logrank_exact_p([outcomes["del-a0.3"], outcomes["mle"]]) == pytest.approx(0.032, abs=5e-4)
    assert logrank_exact_p([outcomes["ntl-was"], outcomes["mle"]]) == pytest.approx(0.079, abs=5e-4)
