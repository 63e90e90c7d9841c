"""Report formatting: aggregation over seeds, the Wilson interval, marks only where significant, the files."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
from PIL import Image

import numloss.compare.summary as summary_module
from numloss.compare.embeddings import neighbour_order_score
from numloss.compare.report import (
    REPORT_FILES,
    exact_match_text,
    markdown_table,
    paired_table,
    text_table,
    write_report,
)
from numloss.compare.stats import fisher_exact_p, seed_interval, wilson_interval
from numloss.compare.summary import aggregate, significant_labels
from numloss.compare.survival import Outcome, logrank
from numloss.compare.task import TEST_SETS


def _evaluation(em: float, mae: float, n: int = 100) -> dict:
    return {
        "n": n,
        "correct": round(em * n),
        "exact_match": em,
        "mae": mae,
        "signed_log_mae": mae / 10,
        "median_abs_error": mae / 2,
        "digit_accuracy": 0.5 + em / 2,
        "digit_entropy": 1.0 - em,
        "integer_place_accuracy": em,
        "decimal_place_accuracy": float("nan") if em < 0.1 else em,
        "place_accuracy": {"1": [round(em * n), n], "0": [n // 2, n], "-1": [1, 2]},
        "digit_entropy_histogram": {"counts": [1, 2, 3, 4], "edges": [0.0, 0.5, 1.0, 1.5, 2.0]},
    }


def _result(label: str, seed: int, em: float, mae: float) -> dict:
    return {
        "label": label,
        "objective": {"name": label.split("-")[0], "alpha": None, "options": {}},
        "seed": seed,
        "seconds": {"train": 10.0},
        "train_metrics": {"tokens_per_second": 1000.0},
        "evaluation": {name: _evaluation(em, mae) for name in TEST_SETS},
        "curve": {"step": [1, 2], "loss": [2.0, 1.0], "ce": [2.0, 1.0], "aux": [0.0, 0.0], "digit_entropy": [2.0, 1.5]},
        "embeddings": {"before": [[float(k), 1.0, 0.0] for k in range(10)], "after": [[1.0, float(k), k * k / 9] for k in range(10)]},
    }


def _with_interval(correct: int, n: int = 100) -> str:
    """A share as the report prints it: percent and its Wilson interval ("30.0 [21.9, 39.6]")."""
    low, high = wilson_interval(correct, n)
    return f"{100 * correct / n:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


RESULTS = [
    _result("mle", 0, 0.30, 5.0),
    _result("mle", 1, 0.40, 7.0),
    _result("del", 0, 0.50, 6.0),
    _result("del", 1, 0.60, 8.0),
]
#: five seeds, del 20-24 points above mle on the same seed (seed luck: the shifts), lower MAE
SHIFTS = [0.0, 0.1, -0.1, 0.2, -0.2]
FIVE = [_result("mle", s, 0.3 + d, 9.0) for s, d in enumerate(SHIFTS)]
FIVE += [_result("del", s, 0.5 + d + 0.01 * s, 4.0) for s, d in enumerate(SHIFTS)]


def test_aggregate_mean_std_and_the_interval_over_items_and_seeds() -> None:
    summary = aggregate(RESULTS)
    assert list(summary) == ["mle", "del"]
    em = summary["mle"]["sets"]["in_distribution"]["exact_match"]
    assert em["mean"] == pytest.approx(0.35) and em["std"] == pytest.approx(math.sqrt(0.005))
    assert summary["mle"]["seeds"] == [0, 1]
    # the items part pools both seeds (70 of 200); the seeds part, seed_interval's (by hand: test_compare_stats)
    metrics = summary["mle"]["sets"]["in_distribution"]
    assert metrics["exact_match_ci95_items"] == pytest.approx(wilson_interval(70, 200))
    assert metrics["exact_match_ci95_seeds"] == pytest.approx(seed_interval([0.3, 0.4]))
    assert metrics["exact_match_ci95"] == pytest.approx(seed_interval([0.3, 0.4])), "the hull of the two"
    # a metric that is NaN for some seeds averages the others
    assert summary["mle"]["sets"]["in_distribution"]["decimal_place_accuracy"]["mean"] == pytest.approx(0.35)
    # one seed: the items' interval alone; two seeds that agree exactly: no seed spread, the items' is left
    one = aggregate([_result("mle", 0, 0.30, 5.0)])["mle"]["sets"]["in_distribution"]
    assert one["exact_match_ci95"] == pytest.approx(wilson_interval(30, 100))
    assert all(math.isnan(x) for x in one["exact_match_ci95_seeds"])
    same = aggregate([_result("mle", 0, 0.5, 5.0), _result("mle", 1, 0.5, 5.0)])["mle"]["sets"]["in_distribution"]
    assert same["exact_match_ci95_seeds"] == pytest.approx([0.5, 0.5])
    assert same["exact_match_ci95"] == pytest.approx(wilson_interval(100, 200))


def test_every_accuracy_column_carries_its_interval_built_as_exact_matchs() -> None:
    """Issue 49: TF digit acc and the place accuracies print their 95 % interval: the Wilson
    interval of the digits pooled over seeds hulled with the seed t interval (one seed: Wilson alone;
    no counts kept: the seed interval alone); a run's exact match on the console its Wilson interval."""

    def hull(*intervals):
        ends = [i for i in intervals if math.isfinite(i[0])]
        return [min(i[0] for i in ends), max(i[1] for i in ends)]

    two = aggregate(RESULTS)["mle"]["sets"]["in_distribution"]  # place counts: [em n, n], [n/2, n], [1, 2]
    assert two["integer_place_accuracy"]["ci95"] == pytest.approx(hull(wilson_interval(170, 400), seed_interval([0.3, 0.4])))
    assert two["decimal_place_accuracy"]["ci95"] == pytest.approx(hull(wilson_interval(2, 4), seed_interval([0.3, 0.4])))
    assert two["digit_accuracy"]["ci95"] == pytest.approx(seed_interval([0.65, 0.7])), "no digit counts kept"
    one = _result("mle", 0, 0.3, 5.0)
    one["evaluation"]["in_distribution"]["teacher_forced_place_accuracy"] = {"1": [60, 100], "0": [70, 100]}
    summary = aggregate([one])
    assert summary["mle"]["sets"]["in_distribution"]["digit_accuracy"]["ci95"] == pytest.approx(wilson_interval(130, 200))
    for table in (markdown_table(summary, "in_distribution"), text_table(summary, "in_distribution")):
        header, row = (re.split(r" *\| *| {2,}", line.strip(" |")) for line in (table.splitlines()[0], table.splitlines()[-1]))
        cells = dict(zip(header, row, strict=True))
        for title in ("TF digit acc %", "int place acc %", "dec place acc %"):
            assert re.fullmatch(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", cells[title]), (title, cells[title])
        assert cells["TF digit acc %"] == _with_interval(130, 200)
    # the progress bar's and the pretrained driver's line per finished run
    assert exact_match_text(_evaluation(0.3, 5.0)) == _with_interval(30).replace(" ", "% ", 1)
    assert exact_match_text({"exact_match": 0.5, "n": 4}) == "50.0%", "no counts kept: no interval"


def test_report_shows_every_run_and_the_embedding_order(tmp_path) -> None:
    results = [*copy.deepcopy(RESULTS), _result("ntl", 1, 0.9, 1.0)]  # ntl seed 0 missing: an empty cell
    results[-1]["curve"]["ce"] = [3.0] * 5 + [0.2] * 10  # final ce: the last 10 logged steps only
    # a record is written with sorted keys, its first set "decimals": the run's cells still show in-distribution's
    results[-1]["evaluation"] = dict(sorted({**results[-1]["evaluation"], "decimals": _evaluation(0.1, 1.0)}.items()))
    summary = write_report(results, tmp_path, {"config": "x.yaml"})
    report = (tmp_path / "report.md").read_text()
    assert "| objective | seed 0 | seed 1 |" in report
    assert f"| mle | {_with_interval(30)} / 1.500 | {_with_interval(40)} / 1.500 |" in report
    assert f"| del | {_with_interval(50)} / 1.500 | {_with_interval(60)} / 1.500 |" in report
    assert f"| ntl |  | {_with_interval(90)} / 0.200 |" in report
    assert summary["ntl"]["per_seed"] == [{"seed": 1, "exact_match": 0.9, "final_ce": pytest.approx(0.2),
                                           "exact_match_ci95": pytest.approx(list(wilson_interval(90, 100)))}]
    before = neighbour_order_score(RESULTS[0]["embeddings"]["before"])
    after = neighbour_order_score(RESULTS[0]["embeddings"]["after"])
    assert summary["mle"]["embedding_order"]["after"] == {"mean": pytest.approx(after), "std": 0.0}
    assert f"| mle | {before:+.3f} ± 0.000 | {after:+.3f} ± 0.000 |" in report
    assert f"| ntl | {neighbour_order_score(results[-1]['embeddings']['before']):+.3f} | " in report  # one seed: no ±
    # runs without embeddings (evaluation.embeddings: false) leave the section out
    for r in results:
        r["embeddings"] = {}
    write_report(results, tmp_path, {"config": "x.yaml"})
    assert "## Digit embeddings" not in (tmp_path / "report.md").read_text()


def test_table_marks_only_a_significant_paired_difference() -> None:
    # two seeds: nothing is marked, whatever the means (a few seeds rank nothing)
    table = markdown_table(aggregate(RESULTS), "in_distribution")
    lines = table.splitlines()
    assert lines[0].startswith("| objective | seeds | exact match % | exact match 95% CI | MAE |")
    assert "**" not in table and "55.0 ± 7.1" in lines[3] and "[" in lines[2]
    assert " *" not in text_table(aggregate(RESULTS), "in_distribution")
    assert paired_table(aggregate(RESULTS[:2])) == [], "one objective: nothing to pair"
    # five seeds, del always ~20 points above mle on the same seed, lower MAE: only its exact match is marked
    five = FIVE + [_result("emo", s, 0.3 + d + (0.05 if s % 2 else -0.05), 9.0) for s, d in enumerate(SHIFTS)]
    summary = aggregate(five)
    assert significant_labels(summary, "in_distribution") == {"del"}
    rows = {line.split("|")[1].strip(): line for line in markdown_table(summary, "in_distribution").splitlines()[2:]}
    assert rows["del"].count("**") == 2 and rows["del"].split("|")[3].strip().startswith("**")
    assert "**" not in rows["mle"] and "**" not in rows["emo"], "the baseline and a non-difference are never marked"
    assert " *" in text_table(summary, "in_distribution").splitlines()[3]
    # the paired table by seed: differences 20, 21, 22, 23, 24 points: mean 22, sd 1.58, t interval 22 +- 2.776 x 0.707
    row = next(line for line in paired_table(summary) if line.startswith("| del |"))
    assert row.startswith("| del | 5 | +22.0 [+20.0, +24.0] | 0.000 | 0.000 |"), row
    # the same values without the pairing (seeds relabelled at random): the seed luck swamps it
    shuffled = [_result("mle", s, 0.3 + d, 9.0) for s, d in enumerate(SHIFTS)]
    shuffled += [_result("del", s, 0.5 + d, 4.0) for s, d in zip([0, 1, 2, 3, 4], [0.2, -0.2, 0.1, 0.0, -0.1], strict=True)]
    assert significant_labels(aggregate(shuffled), "in_distribution") == set()


def _with_learning(result: dict, step: int, learnt: bool) -> dict:
    result = copy.deepcopy(result)
    result["max_steps"] = 1000
    result["learning"] = {"checks": [[step, 0.9 if learnt else 0.1]], "learnt": learnt, "step": step,
                          "threshold": 0.8, "every": 250, "slice_size": 50}
    return result


def test_learning_speed_section(tmp_path) -> None:
    """Pass counts, the curve at quarters of the horizon, medians and the log-rank tests, by hand;
    and every file and section a full report writes."""
    mle = [_with_learning(_result("mle", s, 0.3, 5.0), 1000, False) for s in range(3)]
    mle.append(_with_learning(_result("mle", 3, 0.9, 5.0), 750, True))
    fast = [_with_learning(_result("del", s, 0.9, 5.0), 250 * (1 + s % 2), True) for s in range(4)]
    summary = write_report(mle + fast, tmp_path, {"config": "x.yaml", "machine": "TEST-CPU (AVX2), torch 9"})
    entry = summary["del"]["learning"]
    assert entry["learnt"] == 4 and entry["runs"] == 4 and entry["median_steps"] == 250.0
    assert summary["mle"]["learning"]["median_steps"] == math.inf
    expected = logrank([[Outcome(250, True), Outcome(500, True)] * 2,
                        [Outcome(1000, False)] * 3 + [Outcome(750, True)]])
    assert entry["vs_baseline"]["logrank_p"] == pytest.approx(expected)
    assert 0 < entry["vs_baseline"]["logrank_permutation_p"] <= 1
    assert entry["vs_baseline"]["fisher_p"] == pytest.approx(fisher_exact_p(4, 4, 1, 4))
    report = (tmp_path / "report.md").read_text()
    assert "## Learning speed" in report
    assert "| objective | runs | learnt by the end | by 250 | by 500 | by 750 | by 1000 |" in report
    assert "| mle | 4 | 1 of 4 | 0 % | 0 % | 25 % | 25 % | > horizon n/a | - | - | - |" in report
    assert f"| del | 4 | 4 of 4 | 50 % | 100 % | 100 % | 100 % | 250 n/a | {expected:.3f} |" in report
    # every table names the machine
    assert report.count("_Machine: TEST-CPU (AVX2), torch 9._") == 1 + 3 + 1
    # the per-run table gives the step each run learnt at
    run = f"{_with_interval(30)} / 1.500 / -"
    assert f"| mle | {run} | {run} | {run} | {_with_interval(90)} / 1.500 / 750 |" in report
    assert all(name in report for name in ("In-distribution", "Longer numbers", "Decimals", "![accuracy_mae](accuracy_mae.png)"))
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data) == {"meta", "summary", "runs"} and len(data["runs"]) == 8 and summary["del"]["sets"]["longer"]["items"] == 400
    assert data["summary"]["del"]["sets"]["in_distribution"]["exact_match"]["mean"] == pytest.approx(0.9)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(REPORT_FILES), "a full report writes every file it names"


def _png_panels(path) -> list[dict]:
    with Image.open(path) as image:
        return json.loads(image.text["Description"])


def test_a_one_seed_report_prints_no_spread_and_its_plots_say_one_seed(tmp_path, monkeypatch) -> None:
    """One seed has no spread: no `± 0`, a note saying so, plot titles that say one seed; the
    learnt-by columns are steps a check ran at; plain log-axis labels; 12 arms' legend readable."""
    monkeypatch.setattr(summary_module, "PERMUTATIONS", 50)  # the tests' p values are not read here
    labels = [f"arm-{i}" for i in range(12)]
    runs = [_with_learning(_result(label, 0, 0.05 * i, 533.0 + i), 200 * (1 + i % 3), i % 2 == 0)
            for i, label in enumerate(labels)]
    for run in runs:
        run["curve"]["ce"] = [4.8, 4.5]  # under one decade: matplotlib would write 4.6 x 10^0
        run["evaluation"]["in_distribution"]["answer_nll"] = 0.9
        run["embeddings"] = {}  # their plots are another test's
        run["evaluation"] = {"in_distribution": run["evaluation"]["in_distribution"]}
    write_report(runs, tmp_path, {"config": "x.yaml", "seeds": [0]})
    report = (tmp_path / "report.md").read_text()
    assert "One seed: no spread" in report and "±" not in report.split("## Objectives")[0].split("interval")[-1]
    assert "| arm-1 | 1 | 5.0 | [" in report and "| 534 |" in report  # the value alone, not 534 ± 0
    assert "answer NLL" in report and "| 0.900 |" in report
    assert "checked at steps 200, 400, 600" in report and "every 250" not in report
    assert "| by 200 | by 400 | by 600 |" in report
    exact, mae = _png_panels(tmp_path / "accuracy_mae.png")
    assert "one seed" in exact["title"] and exact["ylim"][0] >= 0 and "one seed" in mae["title"]
    ce, _ = _png_panels(tmp_path / "training_curves.png")
    assert "one seed" in ce["title"] and ce["yscale"] == "log"
    assert ce["yticklabels"] and all(float(t.replace("\u2212", "-")) > 0 for t in ce["yticklabels"]), ce
    (curve,) = _png_panels(tmp_path / "learnt_by_step.png")
    assert len(curve["legend"]) == 12 and curve["legend_fontsize"] >= 8
    assert "checked at steps 200, 400, 600" in curve["title"]
