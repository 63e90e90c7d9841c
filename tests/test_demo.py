"""The default `numloss demo`: fresh one-seed runs of grid a's recipe beside grid a's records.

- the recorded grid it prints is results/compare-smollm2-words-centered/'s, rendered by
  scripts/results_doc.py into the package, with the numbers docs/results-pretrained.md quotes;
- its fresh runs never rank the objectives: one seed says whether these trained models differ on
  these items, nothing more;
- the whole code path runs (the demo config shrunk by --smoke to the tiny model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import results_doc  # scripts/ (pytest's pythonpath): the write-up is not installed

import numloss.compare.runner as runner
from numloss.demo import RECORDED_GRID, main
from numloss.package_data import RECORDED_GRID_TEXT, packaged

ROOT = Path(__file__).resolve().parents[1]
RANK_WORDS = re.compile(r"\b(better|worse|beats?|wins?|outperforms?|rank(s|ed)? (first|last|above|below))\b", re.I)


def test_the_recorded_grid_the_demo_prints_is_the_records_and_quotes_the_docs_numbers() -> None:
    """The package's recorded text (what the demo prints, from a checkout or a wheel) is
    scripts/results_doc.py's rendering of results/compare-smollm2-words-centered/ (stale: run the
    script), with the numbers docs/results-pretrained.md quotes and no path of the machine."""
    rec = results_doc.Records()
    lines = results_doc.demo_recorded(rec)
    shipped = json.loads(packaged(RECORDED_GRID_TEXT).read_text(encoding="utf-8"))
    assert shipped == {"lines": lines}, "the shipped copy is stale: run python scripts/results_doc.py"
    state = results_doc._three_arm_state(rec, RECORDED_GRID)
    assert lines[0].endswith(f"from results/{RECORDED_GRID}/:") and str(ROOT) not in "".join(lines)
    done = len(state["planned"]) - len(state["missing"])
    assert lines[1].lstrip().startswith(f"{done} of {len(state['planned'])} runs recorded")
    for (arm, against), c in state["comparisons"].items():
        row = next(line for line in lines if line.lstrip().startswith(f"{arm} - {against} "))
        assert f"{100 * c['mean_diff']:+.1f}" in row and f"[{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]" in row
        if "mcnemar_p_holm" in c and state["complete"]:
            assert results_doc._grid_reading(arm, against, c) in row
        elif "mcnemar_p_holm" in c:
            assert "no verdict (interim)" in row
    for label, arm in state["summary"]["sets"]["heldout"]["arms"].items():
        if label != "untrained":
            assert any(line.split()[:1] == [label] and f"{100 * arm['mean']:.1f} %" in line for line in lines), label
    assert any(line.startswith("Recorded trace of digit_logit_mean") for line in lines)


def _run(label: str, bits: str, trace: list[float]) -> dict:
    return {"label": label, "seed": 0, "evaluation": {"heldout": {"items": bits, "exact_match": bits.count("1") / len(bits)}},
            "curve": {"step": [1.0, 5.0, 10.0], "digit_logit_mean": trace, "pushdown_share": [0.0, 0.5, 0.9]},
            "seconds": {"cpu": 1.0}}


@pytest.mark.parametrize("trained", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["given-runs", "tiny-model"])
def test_the_demo_prints_its_fresh_runs_then_the_recorded_grid(trained, tmp_path, capsys, monkeypatch) -> None:
    """main's default path: the fresh table and traces, then grid a. Given finished runs, a large,
    significant difference on one seed's items is reported as that: these models differ on these
    items (McNemar p), not as one objective above another. Trained: configs/compare-demo-smollm2.yaml's
    code path with --smoke (the tiny model, 2 steps, 16 items)."""
    def finished(compare, progress=True):
        assert compare.learning is None and [s.label for s in compare.objectives] == ["mle", "del-a0.3", "del-centered-a0.3"]
        return [_run("mle", "1" * 300 + "0" * 100, [30, 30, 31]), _run("del-a0.3", "1" * 150 + "0" * 250, [30, 13, -3]),
                _run("del-centered-a0.3", "1" * 299 + "0" * 101, [30, 30, 31])]

    if not trained:
        monkeypatch.setattr(runner, "run_grid", finished)
    status = main([str(ROOT / "configs" / "compare-demo-smollm2.yaml"), "--smoke", "--no-progress", "--out", str(tmp_path / "demo")])
    out = capsys.readouterr().out
    assert status == 0, out
    fresh, _, recorded = out.partition("\nRecorded: grid a")
    for label in ("mle", "del-a0.3", "del-centered-a0.3"):
        assert re.search(rf"^  {re.escape(label)} +\d+\.\d % \[\d+\.\d, \d+\.\d\] \(\d+ of \d+\)", fresh, re.M), label
    assert "this seed's items" in fresh and "One seed cannot say" in fresh and not RANK_WORDS.search(fresh), fresh
    assert "Fresh trace of digit_logit_mean" in fresh and "Fresh trace of pushdown_share" in fresh
    assert "runs recorded" in recorded and "del-a0.3 - mle" in recorded and "Recorded trace of digit_logit_mean" in recorded
    if not trained:  # the difference and its test are there
        assert "-37.5 points" in fresh and "(150 of 400)" in fresh and "< 0.001" in fresh and "-3.0" in fresh


def test_the_help_names_the_default_config(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # argparse would wrap the name at its hyphens
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: configs/compare-demo-smollm2.yaml," in text and "configs/compare.yaml," not in text


@pytest.mark.parametrize("config", ["compare-demo-smollm2.yaml", "compare-demo.yaml"])
def test_the_packaged_demo_configs_are_the_checkouts(config) -> None:
    assert packaged(f"configs/{config}").read_bytes() == (ROOT / "configs" / config).read_bytes()
