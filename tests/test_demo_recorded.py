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


def test_the_shipped_recorded_runs_are_the_records_trimmed() -> None:
    """The package's copy (what a wheel install's demo shows) is results/compare/'s records, trimmed;
    after the records change: python -c "from numloss.demo import export_recorded_runs; export_recorded_runs()"."""
    from numloss.demo import shipped_recorded_runs, trim_record

    demo = load_compare_config(ROOT / "configs" / "compare-demo.yaml")
    from_records = {label: {seed: trim_record(r) for seed, r in seeds.items()}
                    for label, seeds in recorded_runs(demo, ROOT / "configs" / "compare.yaml").items()}
    shipped = shipped_recorded_runs(demo)
    assert shipped == from_records, "the shipped copy is stale: run export_recorded_runs() (see this docstring)"
    fresh = {"mle": (3, 4), "del-a0.3": (1, 4), "ntl-was": (3, 4)}
    assert recorded_table(shipped, fresh) == recorded_table(recorded_runs(demo, ROOT / "configs" / "compare.yaml"), fresh)


def test_a_record_of_another_config_is_not_shown_from_the_shipped_copy(tmp_path, monkeypatch) -> None:
    import json

    import numloss.demo as demo_module

    demo = load_compare_config(ROOT / "configs" / "compare-demo.yaml")
    shipped = json.loads((ROOT / "src" / "numloss" / "recorded" / "demo-runs.json").read_text())
    shipped["mle"]["0"]["hash"] = "0" * 16  # another config's run
    path = tmp_path / "recorded" / "demo-runs.json"
    path.parent.mkdir()
    path.write_text(json.dumps(shipped))
    monkeypatch.setattr(demo_module, "packaged", lambda relative: tmp_path / relative)
    runs = demo_module.shipped_recorded_runs(demo)
    assert 0 not in runs["mle"] and len(runs["mle"]) == 19 and len(runs["ntl-was"]) == 20
