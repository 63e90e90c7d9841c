"""numloss.compare.paired by simulation (its hand-worked values and published figures:
test_compare_stats.py): on synthetic seeds with a known effect the paired analysis finds it at the
computed power; on a null it rejects at its nominal rate (alone and, with Holm, as a family)."""

from __future__ import annotations

import math
import random

import pytest

from numloss.compare.paired import check_curve_area, holm, paired_t, paired_t_power, paired_values


def test_power_with_two_pairs_matches_a_simulation() -> None:
    """(The published figures and scipy's noncentral t: test_compare_stats.py.) One df, simulated."""
    rng = random.Random(4)
    rate = sum(paired_t([rng.gauss(3, 1), rng.gauss(3, 1)]).p <= 0.05 for _ in range(4000)) / 4000
    assert paired_t_power(2, 3.0, 1.0, 0.05) == pytest.approx(rate, abs=4 * math.sqrt(rate * (1 - rate) / 4000))


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


def test_check_curve_area_and_pairing_of_values() -> None:
    assert check_curve_area([[0, 0.0], [100, 1.0]]) == pytest.approx(0.5)
    assert check_curve_area([[400, 0.3], [200, 0.1], [600, 0.3]]) == pytest.approx((200 * 0.2 + 200 * 0.3) / 400)
    assert check_curve_area([[200, 0.4]]) == 0.4 and math.isnan(check_curve_area([]))
    rows = paired_values({0: 1.0, 1: 2.0, 3: float("nan")}, {1: 5.0, 0: 4.0, 2: 9.0, 3: 1.0})
    assert rows == [(0, 1.0, 4.0), (1, 2.0, 5.0)]
