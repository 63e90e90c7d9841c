"""numloss.compare.paired by simulation (its hand-worked values and published figures:
test_compare_stats.py): on synthetic seeds with a known effect the paired analysis finds it at the
computed power; on a null it rejects at its nominal rate (alone and, with Holm, as a family)."""

from __future__ import annotations

import math
import random

import pytest

from numloss.compare.paired import check_curve_area, holm, paired_t, paired_t_power, paired_values


@pytest.mark.parametrize(("n", "effect", "sd", "seed_sd", "alpha", "experiments"), [
    (2, 3.0, 1 / math.sqrt(2), 0.0, 0.05, 4000),  # one df
    # the pre-registered design: the seed's luck (sd 10, left out of the power) would swamp an
    # unpaired comparison; the paired one keeps its power
    (12, 2.6, 1.85, 10.0, 0.05 / 3, 1500),
    (8, 0.0, 2.0, 5.0, 0.05, 4000),  # a null: power is the level
])
def test_rejects_at_its_computed_power_and_covers_the_true_difference(n, effect, sd, seed_sd, alpha, experiments) -> None:
    """Per-seed values of a baseline and an arm, each seed adding its own luck to both (pairing):
    the paired t rejects at paired_t_power's rate and its 95 % interval covers the effect 95 % of
    the time (the published figures and scipy's noncentral t: test_compare_stats.py)."""
    rng = random.Random(n)
    rejected = covered = 0
    for _ in range(experiments):
        luck = [rng.gauss(0, seed_sd) for _ in range(n)]
        test = paired_t([(50 + effect + u + rng.gauss(0, sd)) - (50 + u + rng.gauss(0, sd)) for u in luck])
        rejected += test.p <= alpha
        covered += test.ci[0] <= effect <= test.ci[1]
    power = paired_t_power(n, effect, math.sqrt(2) * sd, alpha)
    for rate, expected in ((rejected / experiments, power), (covered / experiments, 0.95)):
        assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / experiments), (rate, expected)


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
