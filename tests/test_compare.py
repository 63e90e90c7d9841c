"""`numloss compare` end to end on a two-objective, few-step grid of a very small tiny model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from unittest import mock

import pytest

import numloss.compare.learning as learning
import numloss.digits as digits
import numloss.train
from numloss.compare import build_parser, resolve, run_comparison
from numloss.compare.config import compare_config_from_dict, load_compare_config, select_objectives
from numloss.compare.report import REPORT_FILES, learning_table
from numloss.compare.runner import StepBar, record_path, run_grid
from numloss.compare.summary import _learning_entry
from numloss.config import ConfigError
from numloss.demo import main as demo_main
from test_compare_faults import _mapping as faults_mapping
from test_compare_faults import _write

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _mapping(out, embeddings: bool = True, **extra) -> dict:
    """test_compare_faults' tiny grid: here 3 steps of two objectives, 40 training and 24 held-out items."""
    mapping = faults_mapping(out, **{"objectives": ["mle", {"label": "del-a0.3", "name": "del", "alpha": 0.3}]} | extra)
    mapping["base"]["train"]["max_steps"] = 3
    mapping["task"] = {"train_size": 40, "test_size": 24}
    mapping["evaluation"]["embeddings"] = embeddings
    return mapping


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    compare = compare_config_from_dict(_mapping(out))
    summary = run_comparison(compare, progress=False, print_table=False)
    return compare, summary, out


def test_grid_trains_and_reports_every_objective(finished) -> None:
    compare, summary, out = finished
    assert list(summary) == ["mle", "del-a0.3"]
    assert set(REPORT_FILES) - {"learnt_by_step.png"} <= {p.name for p in out.iterdir()}  # no learning checks here
    data = json.loads((out / "results.json").read_text())
    assert [r["label"] for r in data["runs"]] == ["mle", "del-a0.3"]
    for run in data["runs"]:
        assert run["steps"] == 3
        assert run["curve"]["step"][-1] == 3
        for name in ("in_distribution", "longer", "decimals"):
            ev = run["evaluation"][name]
            assert ev["n"] == 24 and 0.0 <= ev["exact_match"] <= 1.0
            assert ev["exact_match_ci95"][0] <= ev["exact_match"] <= ev["exact_match_ci95"][1]
            assert 0.0 < ev["digit_entropy"] <= 2.3026
            assert sum(ev["digit_entropy_histogram"]["counts"]) > 0
    # (both objectives start from one initial model and see the same data: test_compare_pairing.py)
    # DEL trains with a non-zero digit term; MLE has none
    aux = {r["label"]: r["curve"]["aux"][-1] for r in data["runs"]}
    assert aux["mle"] == 0.0 and aux["del-a0.3"] > 0.0
    report = (out / "report.md").read_text()
    assert "| mle | 1 |" in report and "| del-a0.3 | 1 |" in report


def test_an_interrupted_run_is_redone_alone(finished, monkeypatch) -> None:
    compare, _, out = finished
    (out / "runs" / "del-a0.3-s0" / "result.json").unlink()  # as if killed before it finished
    spy = mock.Mock(wraps=numloss.train.run_training)
    monkeypatch.setattr(numloss.train, "run_training", spy)
    results = run_grid(compare, progress=False)
    assert [call.args[0].objective.name for call in spy.call_args_list] == ["del"]
    assert (out / "runs" / "del-a0.3-s0" / "result.json").is_file()
    assert [r["label"] for r in results] == ["mle", "del-a0.3"]


def test_jobs_give_the_same_results_reported_as_they_finish(tmp_path) -> None:
    """Three runs trained in two worker processes (jobs=2) equal the same runs trained in one
    process (jobs=1, where the first run's evaluation in inference mode must not break the next
    run's training, as a cached number table once did), in grid order, on a chunking tokenizer; the
    first result reaches on_result (the progress bar) before the last run has finished."""
    def comparable(result: dict) -> dict:
        timing = ("seconds", "finished_at", "train_metrics")  # train_metrics: runtime, samples/s
        assert result["train_metrics"]["train_loss"] > 0 and result["steps"] == 3
        return {k: v for k, v in result.items() if k not in timing} | {
            "evaluation": {name: {k: v for k, v in ev.items() if k != "seconds"} for name, ev in result["evaluation"].items()}
        }

    digits._number_table.cache_clear()
    grids, reported = {}, {}
    for jobs in (1, 2):
        mapping = _mapping(tmp_path / f"jobs{jobs}", embeddings=False, torch_threads=1, jobs=jobs,
                           learning={"every": 2, "slice_size": 8, "threshold": 1.0})  # checks run in the workers too
        mapping["base"]["model"]["tiny_digits_per_token"] = 3
        mapping["objectives"] = [*mapping["objectives"], "ntl-was"]
        seen = reported[jobs] = []
        grids[jobs] = run_grid(compare_config_from_dict(mapping), progress=False, on_result=lambda r, seen=seen: seen.append(time.time()))
    assert [(r["label"], r["seed"]) for r in grids[2]] == [("mle", 0), ("del-a0.3", 0), ("ntl-was", 0)]
    for one, two in zip(grids[1], grids[2], strict=True):
        assert comparable(one) == comparable(two)
    finished = [p.stat().st_mtime for p in (tmp_path / "jobs2" / "runs").glob("*/result.json")]
    assert len(reported[2]) == len(finished) == 3
    assert min(reported[2]) < max(finished), "the first result was only reported after the last run finished"


@pytest.mark.parametrize(("change", "message"), [
    ({"objectives": [{"name": "dell"}]}, "unknown objective 'dell'"),
    ({"objectives": ["mle", "mle"]}, "unique"),
    ({"base": {"train": {"learning_rat": 1}}}, "did you mean 'train.learning_rate'"),
    ({"jobs": 0}, "jobs: expected an integer >= 1"),
    ({"learning": {"threshold": 1.5}}, "learning.threshold"),
])
def test_config_errors_name_the_key(change, message, tmp_path) -> None:
    with pytest.raises(ConfigError, match=message):
        compare_config_from_dict(_mapping(tmp_path) | change)


def test_objectives_are_selected_by_label_or_name(tmp_path) -> None:
    compare = compare_config_from_dict(_mapping(tmp_path))
    assert [s.label for s in select_objectives(compare, ["del", "ntl-was"])] == ["del-a0.3", "ntl-was"]
    with pytest.raises(ConfigError, match="neither a label"):
        select_objectives(compare, ["nope"])


def test_shipped_configs_load_and_state_dels_alpha() -> None:
    """Every DEL arm of a comparison names its alpha, so a change of the default never reaches a grid."""
    configs = sorted(CONFIGS.glob("compare*.yaml"))
    assert configs, "configs/compare*.yaml are missing"
    for path in configs:
        compare = load_compare_config(path)
        assert all(s.alpha is not None for s in compare.objectives if s.name == "del"), f"{path.name}: DEL's default alpha"
        # held-out items per set: 2,000 for the tiny model's arithmetic, 1,000 for the chunked numbers,
        # 200 for SmolLM2 on CPU (12 runs of a 135M model on 2 cores), as each config says; and 200
        # real items per benchmark where the GPU config scores on them
        minimum = 1000 if path.name.startswith("compare-chunked") else 200 if compare.base["model"]["name"] == "smollm2" else 2000
        assert compare.task.test_size >= minimum, f"{path.name}: held-out sets of at least {minimum} items"
        assert not getattr(compare.task, "benchmarks", ()) or compare.task.benchmark_limit >= 200, path.name


def test_demo_is_the_default_grid_cut_down(tmp_path) -> None:
    full = load_compare_config(CONFIGS / "compare.yaml")
    demo = load_compare_config(CONFIGS / "compare-demo.yaml")
    # (what the default grid holds is its records': test_compare_records.py)
    # the demo: MLE, DEL, NTL-WAS x 4 seeds with the grid's learning checks; a subset
    # of the grid with the same task and training, so its runs are the grid's runs (same hash)
    assert [s.name for s in demo.objectives] == ["mle", "del", "ntl-was"] and len(demo.seeds) == 4
    by_label = {s.label: s for s in full.objectives}
    assert {s.label for s in demo.objectives} <= set(by_label) and set(demo.seeds) <= set(full.seeds)
    for spec in demo.objectives:
        for seed in demo.seeds:
            demo_config = demo.run_config(spec, seed, tmp_path / "demo", tmp_path / "train.jsonl")
            full_config = full.run_config(by_label[spec.label], seed, tmp_path / "full", tmp_path / "train.jsonl")
            assert demo.run_hash(demo_config) == full.run_hash(full_config), spec.label


def test_demo_worked_example_still_prints(capsys) -> None:
    assert demo_main(["--worked-example"]) == 0
    printed = capsys.readouterr().out
    assert "objective" in printed and "del" in printed and "ntl-was" in printed


def test_learning_checks_are_recorded_and_stop_a_run_early(tmp_path, monkeypatch) -> None:
    """Checks every 2 steps; a run that meets the threshold at a check stops there, a run that never
    does is censored at its last check (the last step), and both records say so."""
    mapping = _mapping(tmp_path, embeddings=False, learning={"every": 2, "slice_size": 10, "threshold": 0.5})
    mapping["base"]["train"]["max_steps"] = 7
    compare = compare_config_from_dict(mapping)
    check = compare.task.check_set(10)
    tests = {e.instruction for items in compare.task.test_sets().values() for e in items}
    assert not tests & {e.instruction for e in check}, "the check slice is not a test item"
    scores = [0.1, 0.2, 0.3, 0.4] + [0.1, 0.6]  # mle's checks, then del's (one process, in grid order)

    def fake_score(model, tokenizer, prompts, golds, *args, **kwargs):
        assert len(prompts) == len(golds) == 10
        return scores.pop(0)

    monkeypatch.setattr(learning, "score_slice", fake_score)
    results = {r["objective"]["name"]: r for r in run_grid(compare, progress=False)}
    mle, dele = results["mle"]["learning"], results["del"]["learning"]
    assert mle["checks"] == [[2, 0.1], [4, 0.2], [6, 0.3], [7, 0.4]], "every 2 steps and at the last step"
    assert mle["learnt"] is False and mle["step"] == 7 and results["mle"]["steps"] == 7
    assert dele["checks"] == [[2, 0.1], [4, 0.6]] and dele["learnt"] is True and dele["step"] == 4
    assert results["del"]["steps"] == 4, "stopped at the check that met the threshold"
    assert results["del"]["evaluation"]["in_distribution"]["n"] == 24, "and was evaluated as usual"
    # the training set holds no check question
    train = (tmp_path / "data" / "train-s0.jsonl").read_text()
    assert not any(f'"{e.instruction}"' in train for e in check)


def test_learning_check_scores_the_real_model(finished, tmp_path, monkeypatch) -> None:
    """Unmocked: the checks run greedy decoding mid-training, on the model in eval mode, and hand
    it back in training mode; they do not disturb training (the finished grid's mle run, the same
    without checks, logged the same losses)."""
    real = learning.score_slice
    modes: list[tuple[bool, bool]] = []

    def spying(model, *args, **kwargs):
        before = model.training
        value = real(model, *args, **kwargs)
        modes.append((before, model.training))
        return value

    monkeypatch.setattr(learning, "score_slice", spying)
    mapping = _mapping(tmp_path, embeddings=False, objectives=["mle"],
                       learning={"every": 1, "slice_size": 8, "threshold": 1.0, "stop_early": True})
    (checked,) = run_grid(compare_config_from_dict(mapping), progress=False)
    assert [c[0] for c in checked["learning"]["checks"]] == [1, 2, 3]
    assert all(0.0 <= c[1] <= 1.0 for c in checked["learning"]["checks"])
    assert checked["learning"]["learnt"] is False and checked["steps"] == 3
    assert modes == [(True, True)] * 3
    unchecked = json.loads((finished[2] / "runs" / "mle-s0" / "result.json").read_text())
    assert unchecked["curve"]["loss"] == checked["curve"]["loss"]


def test_the_run_hash_changes_with_a_setting_only(tmp_path) -> None:
    """A changed setting is not reused; where a run is written does not change its hash, and a grid
    runs in slices across sessions: a key written out at its default value (as a field added to the
    configs later would be) must not orphan the finished runs."""
    spec = compare_config_from_dict(_mapping(tmp_path)).objectives[0]

    def run_hash(mapping: dict, where=tmp_path) -> str:
        other = compare_config_from_dict(mapping)
        return other.run_hash(other.run_config(spec, 0, where / "r", where / "t.jsonl"))

    reference = run_hash(_mapping(tmp_path))
    assert run_hash(_mapping(tmp_path / "elsewhere"), tmp_path / "y") == reference, "where a run is written"
    explicit = _mapping(tmp_path)
    explicit["base"]["train"]["max_grad_norm"] = 1.0  # the default
    explicit["task"]["test_seed"] = 1234  # the default
    assert run_hash(explicit) == reference
    explicit["base"]["train"]["max_grad_norm"] = 0.5
    assert run_hash(explicit) != reference
    assert run_hash(_mapping(tmp_path, learning={"every": 200})) != reference


def test_records_carry_a_grid_into_a_new_checkout(finished, monkeypatch, tmp_path) -> None:
    """--report-only reports the finished runs and trains nothing; records_dir (kept in git) holds
    every finished run; a fresh output_dir (a new checkout, where runs/ is gone) finds them there and
    trains nothing, and the report names each run's machine."""
    compare, _, out = finished
    monkeypatch.setattr(numloss.train, "run_training", lambda *a, **k: pytest.fail("a finished or recorded run was trained again"))
    compare.seeds = [0, 1]  # seed 1 was never run: it is left out, not trained
    results = run_grid(compare, progress=False, finished_only=True)
    assert [(r["label"], r["seed"]) for r in results] == [("mle", 0), ("del-a0.3", 0)]
    compare.seeds = [0]
    empty = compare_config_from_dict(_mapping(tmp_path / "none"))
    with pytest.raises(ConfigError, match="no finished runs"):
        run_comparison(empty, progress=False, print_table=False, finished_only=True)
    records = tmp_path / "records"
    compare.records_dir = records
    try:
        first = run_grid(compare, progress=False)  # the finished runs are found in out and recorded
    finally:
        compare.records_dir = None
    files = sorted(p.name for p in records.iterdir())
    assert files == sorted(f"{r['label']}-s{r['seed']}-{r['hash']}.json" for r in first)
    assert all(r["machine"]["cpu"] and r["machine"]["torch"] for r in first)
    fresh = compare_config_from_dict(_mapping(tmp_path / "new-checkout", records_dir=str(records)))
    again = run_grid(fresh, progress=False)
    assert [r["hash"] for r in again] == [r["hash"] for r in first]
    assert again[0]["evaluation"] == json.loads(json.dumps(first[0]["evaluation"]))
    run_comparison(fresh, progress=False, print_table=False, finished_only=True)
    report = (tmp_path / "new-checkout" / "report.md").read_text()
    assert "torch " in report and "runs made on" not in report  # one machine: its line, without counts

    # another machine's record: the report counts runs per machine
    other = dict(first[1])
    other["machine"] = {**other["machine"], "cpu": "Other CPU", "vector_extension": "AVX2"}
    record_path(records, f"{other['label']}-s{other['seed']}", other["hash"]).write_text(json.dumps(other))
    run_comparison(fresh, progress=False, print_table=False, finished_only=True)
    report = (tmp_path / "new-checkout" / "report.md").read_text()
    assert "runs made on " in report and "Other CPU (AVX2" in report and "(1 runs)" in report


def test_the_step_bar_counts_every_run_s_steps_from_the_start(capsys) -> None:
    """The grid's bar is in training steps (its ETA moves from the first step), its total is every
    run's steps before any trains, and a run's last step says it is being scored."""
    bar = StepBar(10)
    for name in ("mle-s0", "del-s0"):
        bar(name, 0)
    assert bar.bar.total == 20 and bar.bar.n == 0
    bar("mle-s0", 3)
    bar("del-s0", 5)
    bar("mle-s0", 2)  # a late report of an earlier step counts nothing twice
    assert bar.bar.n == 8
    bar("mle-s0", 10)
    bar.close()
    err = capsys.readouterr().err
    assert bar.bar.n == 15 and "15/20" in err and "scoring mle-s0" in err


def test_overridden_runs_stay_out_of_the_records(tmp_path) -> None:
    config = _write(tmp_path / "grid.yaml", _mapping(tmp_path / "out", records_dir=str(tmp_path / "rec")))

    def records(*options: str):
        return resolve(build_parser().parse_args([config, *options])).records_dir

    assert records() == tmp_path / "rec" and records("--out", str(tmp_path / "o")) == tmp_path / "rec"
    assert records("--steps", "2") is None and records("--smoke") is None and records("--no-records") is None
    assert records("--steps", "2", "--records", str(tmp_path / "x")) == tmp_path / "x"


def test_the_learning_table_says_whether_runs_stopped_where_they_learnt() -> None:
    def run(seed: int, learnt: bool, step: int, steps: int, **recorded) -> dict:
        return {"seed": seed, "steps": steps, "max_steps": 400,
                "learning": {"learnt": learnt, "step": step, "threshold": 0.6, "every": 200, **recorded}}

    early = _learning_entry([run(0, True, 200, 200), run(1, False, 400, 400)])  # an old record: read off
    late = _learning_entry([run(0, True, 200, 400), run(1, False, 400, 400)])
    told = _learning_entry([run(0, False, 400, 400, stop_early=False)])
    unknown = _learning_entry([run(0, False, 400, 400)])
    assert (early["stop_early"], late["stop_early"], told["stop_early"], unknown["stop_early"]) == (True, False, False, None)
    text = {name: " ".join(learning_table({"mle": {"learning": entry}}))
            for name, entry in (("early", early), ("late", late), ("unknown", unknown))}
    assert "it stops there" in text["early"] and "it trains on to the last step" in text["late"]
    assert "stops there" not in text["unknown"] and "trains on" not in text["unknown"]
