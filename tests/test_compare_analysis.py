"""scripts/grid_analysis.py on synthetic run records: the paired analysis finds a known effect,
leaves a null alone, adjusts with Holm and pairs by seed; the seed rule of the pre-registration;
the detectable share of the learnt-or-not grid."""

from __future__ import annotations

import math
import random

import pytest
from grid_analysis import (
    ENDPOINTS,
    by_label,
    complete_seeds,
    endpoint_value,
    fisher_detectable_share,
    fisher_power,
    paired_analysis,
    seed_plan,
)


def _run(label: str, seed: int, em: float, slog: float = 0.04, places=None, checks=None) -> dict:
    places = places or {"3": [1600, 1630], "2": [900, 2000], "1": [560, 2000], "0": [1990, 2000]}
    return {"label": label, "seed": seed,
            "evaluation": {"in_distribution": {"exact_match": em / 100, "signed_log_mae": slog, "place_accuracy": places,
                                               "digit_entropy": 0.85}},
            "learning": {"checks": checks or [[200, 0.0], [3200, em / 100]], "learnt": False, "step": 3200}}


def _grid(effects: dict[str, float], seeds: int, rng: random.Random) -> dict:
    records = []
    for s in range(seeds):
        luck = rng.gauss(0, 8)  # a seed's own luck, shared by its arms: pairing removes it
        records.append(_run("mle", s, 15 + luck + rng.gauss(0, 1.3), 0.04 - luck / 1000))
        for label, effect in effects.items():
            records.append(_run(label, s, 15 + luck + effect + rng.gauss(0, 1.3), 0.04 - (luck + effect) / 1000))
    return by_label(records)


def test_endpoints_of_a_run() -> None:
    run = _run("mle", 0, 14.1, checks=[[200, 0.0], [400, 0.1], [600, 0.1]])
    assert endpoint_value(run, "exact_match") == pytest.approx(14.1)
    assert endpoint_value(run, "place_2") == pytest.approx(45.0) and endpoint_value(run, "place_3") == pytest.approx(1600 / 16.3)
    assert endpoint_value(run, "check_auc") == pytest.approx(100 * (200 * 0.05 + 200 * 0.1) / 400)
    assert endpoint_value(run, "digit_entropy") == 0.85 and endpoint_value(run, "signed_log_mae") == 0.04
    assert math.isnan(endpoint_value(run, "place_4"))


def test_paired_analysis_finds_a_known_effect_and_leaves_the_null() -> None:
    runs = _grid({"helps": 3.0, "null-a": 0.0, "null-b": 0.0}, seeds=14, rng=random.Random(5))
    comparisons = paired_analysis(runs, "mle", ["helps", "null-a", "null-b"])
    em = {c.arm: c for c in comparisons if c.endpoint.key == "exact_match"}
    assert em["helps"].test.n == 14 and em["helps"].seeds == list(range(14))
    assert em["helps"].p_holm <= 0.05 and em["helps"].test.ci[0] <= 3.0 <= em["helps"].test.ci[1]
    assert em["null-a"].p_holm > 0.05 and em["null-b"].p_holm > 0.05
    # Holm over the three arms: the adjusted p is at least the raw one, and the smallest is 3x
    assert all(c.p_holm >= c.test.p for c in em.values())
    assert min(em.values(), key=lambda c: c.test.p).p_holm == pytest.approx(3 * min(c.test.p for c in em.values()))
    # the detectable effect is at alpha 0.05/3 for a primary endpoint and at 0.05 for a secondary one
    assert em["helps"].alpha == pytest.approx(0.05 / 3) and 0 < em["helps"].mde < 3.0
    secondary = [c for c in comparisons if not c.endpoint.primary]
    assert secondary and all(c.alpha == 0.05 and math.isnan(c.p_holm) for c in secondary)
    # signed-log MAE falls where exact match rises (lower is better)
    slog = next(c for c in comparisons if c.endpoint.key == "signed_log_mae" and c.arm == "helps")
    assert slog.test.mean < 0 and slog.p_holm <= 0.05
    assert {c.endpoint.key for c in comparisons} == {e.key for e in ENDPOINTS}


def test_pairing_uses_only_the_seeds_both_have() -> None:
    runs = _grid({"arm": 1.0}, seeds=5, rng=random.Random(1))
    del runs["arm"][2]
    em = next(c for c in paired_analysis(runs, "mle", ["arm"]) if c.endpoint.key == "exact_match")
    assert em.seeds == [0, 1, 3, 4] and complete_seeds(runs, ["mle", "arm"]) == [0, 1, 3, 4]
    only = next(c for c in paired_analysis(runs, "mle", ["arm"], seeds=[0, 1]) if c.endpoint.key == "exact_match")
    assert only.seeds == [0, 1]
    # an arm with too few pairs for a p still counts in the Holm family (as p = 1)
    runs["late"] = {0: runs["arm"][0]}
    em = {c.arm: c for c in paired_analysis(runs, "mle", ["arm", "late"]) if c.endpoint.key == "exact_match"}
    assert math.isnan(em["late"].p_holm) and em["arm"].p_holm == pytest.approx(min(1.0, 2 * em["arm"].test.p))


def test_seed_plan_follows_the_preregistered_rule() -> None:
    calm = {s: _run("mle", s, v) for s, v in enumerate([14.1, 15.3, 16.75, 11.85])}
    plan = seed_plan(calm)
    assert plan["sd"] == pytest.approx(2.0724, abs=1e-4) and plan["seeds"] == 17 and not plan["two_arms"]
    wild = {s: _run("mle", s, v) for s, v in enumerate([10.0, 15.0, 20.0, 12.0])}
    plan = seed_plan(wild)
    assert plan["sd"] > 2.5 and plan["two_arms"] and plan["seeds"] == 20 and plan["alpha"] == 0.05
    with pytest.raises(ValueError, match="pilot seeds"):
        seed_plan({0: calm[0]})


def test_detectable_share() -> None:
    # (the share interval, newcombe_interval: test_compare_stats.py::test_newcombe_matches_the_paper)
    share = fisher_detectable_share(20, 20, 0.35)
    assert fisher_power(20, share, 20, 0.35) == pytest.approx(0.8, abs=1e-3) and 0.7 < share < 0.9
    assert fisher_power(20, 0.35, 20, 0.35) <= 0.05, "Fisher's test is conservative under the null"
