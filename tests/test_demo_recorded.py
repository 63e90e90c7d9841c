"""`numloss demo` prints, beside its fresh seeds, the recorded 20-seed table of the same objectives:
the records it shows are its own runs (same config hash), and it marks an objective only when the
seed-paired difference from MLE is significant."""

from __future__ import annotations

from pathlib import Path

from numloss.compare.config import load_compare_config
from numloss.demo import recorded_runs, recorded_table

ROOT = Path(__file__).resolve().parents[1]


def test_the_recorded_grid_holds_the_demos_runs_and_marks_nothing() -> None:
    demo = load_compare_config(ROOT / "configs" / "compare-demo.yaml")
    runs = recorded_runs(demo, ROOT / "configs" / "compare.yaml")
    assert set(runs) == {s.label for s in demo.objectives}
    assert all(len(seeds) == 20 for seeds in runs.values()), {k: len(v) for k, v in runs.items()}
    lines = recorded_table(runs, {"mle": (3, 4), "del-a0.3": (1, 4), "ntl-was": (3, 4)})
    body = [line for line in lines if line.startswith(("mle", "del-a0.3", "ntl-was"))]
    assert len(body) == 3 and "7 of 20" in body[0] and "3 of 4" in body[0]
    assert not any(line.split()[0].endswith("*") or " * " in line for line in body), "no difference is significant"
    assert "none does" in lines[-1]


def _record(label: str, seed: int, learnt: bool) -> dict:
    return {"label": label, "seed": seed, "learning": {"step": 1000 if learnt else 3200, "learnt": learnt},
            "evaluation": {"in_distribution": {"exact_match": 0.85 if learnt else 0.3}},
            "machine": {"cpu": "test CPU", "vector_extension": "AVX2", "torch": "2", "date": "2026-01-01"}}


def test_a_significant_paired_difference_is_marked() -> None:
    runs = {"mle": {s: _record("mle", s, s < 2) for s in range(20)},
            "better": {s: _record("better", s, True) for s in range(20)},
            "same": {s: _record("same", s, s < 3) for s in range(20)}}
    lines = recorded_table(runs)
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert rows["better"].startswith("better *"), "18 seeds where only it learnt: marked"
    assert not rows["same"].startswith("same *"), "a difference of one seed is not marked"
    assert lines[-1].endswith("p <= 0.05).")
