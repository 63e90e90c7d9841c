"""numloss.compare.paired: hand-worked values, published power figures, and simulations: on
synthetic seeds with a known effect the paired analysis finds it at the computed power; on a null
it rejects at its nominal rate (alone and, with Holm, as a family)."""

from __future__ import annotations

import math
import random

import pytest
from grid_analysis import seeds_for_power

from numloss.compare.paired import (
    check_curve_area,
    holm,
    mcnemar_exact_p,
    minimum_detectable_effect,
    paired_t,
    paired_t_power,
    paired_values,
)


def test_paired_t_hand_worked() -> None:
    # differences 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5), t = 4.2426 on 4 df
    test = paired_t([1, 2, 3, 4, 5])
    assert test.n == 5 and test.mean == 3 and test.sd == pytest.approx(math.sqrt(2.5))
    # 2 P(T_4 > 4.2426); R's t.test(c(1, 2, 3, 4, 5)): p-value 0.01324, 95 percent CI 3 -+ 2.776445 sqrt(0.5)
    assert test.p == pytest.approx(0.013236, abs=2e-6) and test.ci == pytest.approx((1.036757, 4.963243), abs=1e-6)
    assert math.isnan(paired_t([1.0]).p) and paired_t([]).n == 0
    assert paired_t([2.0, 2.0]).p == 0.0 and paired_t([0.0, 0.0]).p == 1.0


def test_holm_hand_worked() -> None:
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.02, float("nan"), 0.01])
    assert adjusted[0] == pytest.approx(0.02) and adjusted[2] == pytest.approx(0.02) and math.isnan(adjusted[1])


def test_power_matches_published_figures() -> None:
    # G*Power / R power.t.test(n=10, delta=1, sd=1, type="paired"): 0.8031; n=20: 0.9885
    assert paired_t_power(10, 1.0, 1.0, 0.05) == pytest.approx(0.8031, abs=5e-4)
    assert paired_t_power(20, 1.0, 1.0, 0.05) == pytest.approx(0.9885, abs=5e-4)
    assert paired_t_power(10, 0.0, 1.0, 0.05) == pytest.approx(0.05, abs=1e-4)
    assert seeds_for_power(1.0, 1.0, 0.05, 0.8) == 10
    # two pairs (1 df): against a simulation
    rng = random.Random(4)
    rate = sum(paired_t([rng.gauss(3, 1), rng.gauss(3, 1)]).p <= 0.05 for _ in range(4000)) / 4000
    assert paired_t_power(2, 3.0, 1.0, 0.05) == pytest.approx(rate, abs=4 * math.sqrt(rate * (1 - rate) / 4000))
    mde = minimum_detectable_effect(10, 1.0, 0.05, 0.8)
    assert 0.98 < mde < 1.0 and paired_t_power(10, mde, 1.0, 0.05) == pytest.approx(0.8, abs=1e-6)
    # the pre-registered rule: +2.6 points, sd of a difference sqrt(2) x 1.85, alpha 0.05/3
    assert seeds_for_power(2.6, math.sqrt(2) * 1.85, 0.05 / 3) == 14


def _simulate(n: int, effect: float, sd: float, seed_sd: float, experiments: int, seed: int) -> list[tuple[list[float], list[float]]]:
    """Per-seed values of a baseline and an arm; each seed adds its own luck to both (pairing)."""
    rng = random.Random(seed)
    out = []
    for _ in range(experiments):
        luck = [rng.gauss(0, seed_sd) for _ in range(n)]
        base = [50 + u + rng.gauss(0, sd) for u in luck]
        arm = [50 + effect + u + rng.gauss(0, sd) for u in luck]
        out.append((base, arm))
    return out


def test_finds_a_known_effect_at_its_computed_power() -> None:
    n, effect, sd, alpha = 12, 2.6, 1.85, 0.05 / 3
    experiments = _simulate(n, effect, sd, seed_sd=10.0, experiments=1500, seed=1)
    hits = sum(paired_t([a - b for b, a in zip(base, arm, strict=True)]).p <= alpha for base, arm in experiments)
    expected = paired_t_power(n, effect, math.sqrt(2) * sd, alpha)
    se = math.sqrt(expected * (1 - expected) / len(experiments))
    assert abs(hits / len(experiments) - expected) < 4 * se, (hits, expected)
    # the seed's luck (sd 10) would swamp an unpaired comparison; the paired one keeps its power
    assert hits / len(experiments) > 0.6


def test_null_rejects_at_its_nominal_rate() -> None:
    experiments = _simulate(8, 0.0, 2.0, seed_sd=5.0, experiments=4000, seed=2)
    rate = sum(paired_t([a - b for b, a in zip(base, arm, strict=True)]).p <= 0.05 for base, arm in experiments) / 4000
    assert abs(rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / 4000), rate
    # the 95 % interval covers the true difference (0) in 95 % of experiments
    covered = sum(paired_t([a - b for b, a in zip(base, arm, strict=True)]).ci[0] <= 0
                  <= paired_t([a - b for b, a in zip(base, arm, strict=True)]).ci[1] for base, arm in experiments[:1000])
    assert abs(covered / 1000 - 0.95) < 4 * math.sqrt(0.05 * 0.95 / 1000)


def test_holm_holds_the_family_wise_rate_with_a_shared_baseline() -> None:
    rng = random.Random(3)
    families, false = 2000, 0
    for _ in range(families):
        luck = [rng.gauss(0, 5) for _ in range(10)]
        base = [u + rng.gauss(0, 2) for u in luck]
        ps = []
        for _arm in range(3):
            arm = [u + rng.gauss(0, 2) for u in luck]
            ps.append(paired_t([a - b for a, b in zip(arm, base, strict=True)]).p)
        false += any(p <= 0.05 for p in holm(ps))
    rate = false / families
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / families), rate
    assert rate > 0.02, "Holm should not be far more conservative than its level here"


def test_mcnemar_hand_worked() -> None:
    assert mcnemar_exact_p(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact_p(6, 1) == pytest.approx(2 * (1 + 7) / 128)
    assert mcnemar_exact_p(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024, rel=1e-12)
    assert mcnemar_exact_p(3, 3) == 1.0 and mcnemar_exact_p(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)


@pytest.mark.parametrize(("only_a", "only_b"), [(2400, 0), (1100, 1000), (2000, 2000), (5000, 4700), (0, 4000)])
def test_mcnemar_at_item_level_counts(only_a: int, only_b: int) -> None:
    """Seeds x 1,000 items give thousands of discordant pairs (2.0 ** n overflows past 1,023): the
    p is the exact binomial tail, here against the log-space sum and the normal approximation."""
    n, k = only_a + only_b, min(only_a, only_b)
    log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(log_terms)
    expected = min(1.0, 2 * math.exp(top) * sum(math.exp(t - top) for t in log_terms))
    p = mcnemar_exact_p(only_a, only_b)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(expected, rel=1e-9, abs=1e-300)
    if 0.001 < p < 1.0:  # continuity-corrected normal approximation agrees to a few per cent
        z = (abs(only_a - only_b) - 1) / math.sqrt(n)
        assert p == pytest.approx(math.erfc(z / math.sqrt(2)), rel=0.05)


def test_check_curve_area_and_pairing_of_values() -> None:
    assert check_curve_area([[0, 0.0], [100, 1.0]]) == pytest.approx(0.5)
    assert check_curve_area([[400, 0.3], [200, 0.1], [600, 0.3]]) == pytest.approx((200 * 0.2 + 200 * 0.3) / 400)
    assert check_curve_area([[200, 0.4]]) == 0.4 and math.isnan(check_curve_area([]))
    rows = paired_values({0: 1.0, 1: 2.0, 3: float("nan")}, {1: 5.0, 0: 4.0, 2: 9.0, 3: 1.0})
    assert rows == [(0, 1.0, 4.0), (1, 2.0, 5.0)]
