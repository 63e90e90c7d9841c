"""`numloss compare` under faults and careless input: every bad value is one line
(never a traceback, never "not given"), a finished run is never deleted, the output folder has one
writer, corrupted records are named and refused, killing the parent kills its workers, and SIGTERM is
Ctrl-C (one line, status 130, the workers ended, no run waited for)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import numloss.train
import test_api_inputs
from faultrun import ENV, Killed, alive, one_line
from numloss.compare import build_parser
from numloss.compare import main as compare_main
from numloss.compare.config import (
    DEFAULTS,
    EvaluationSettings,
    ObjectiveSpec,
    compare_config_from_dict,
)
from numloss.compare.learning import LearningCheck
from numloss.compare.runner import RecordError, read_record, run_grid
from numloss.compare.task import ArithmeticTask, Distribution
from numloss.compare.word_task import WordProblemTask
from numloss.config import ConfigError

nothing_runs = test_api_inputs.nothing_runs  # a fixture: no training, no model loaded


def _mapping(out: Path, **extra) -> dict:
    return {
        "base": {
            "model": {"name": "tiny", "tiny_layers": 1, "tiny_hidden": 32, "tiny_heads": 2},
            "data": {"max_length": 32},
            "train": {"max_steps": 2, "per_device_train_batch_size": 8, "learning_rate": 1e-3, "logging_steps": 1,
                      "report_to": ["none"], "save_steps": 0, "bf16": False, "progress_bar": False},
        },
        "task": {"train_size": 16, "test_size": 8, "train": {"digits": 2}},
        "objectives": ["mle"],
        "seeds": [0],
        "evaluation": {"batch_size": 64, "teacher_forced_batch_size": 64, "embeddings": False},
        "torch_threads": 1,
        "output_dir": str(out),
    } | extra


def _write(path: Path, mapping: dict) -> str:
    path.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    return str(path)


# -- command-line values: a given value is checked, never read as "not given" ---------------------

def _options():
    """Every option of `numloss compare` that takes a value, from its parser."""
    for action in build_parser()._actions:
        if action.option_strings and action.nargs is None and action.type in (int, None) and action.dest != "help":
            if action.const is None and not isinstance(action.default, bool):
                yield action.option_strings[0], action.type


NUMERIC = [option for option, kind in _options() if kind is int]
TEXT = [option for option, kind in _options() if kind is None]


def test_the_options_are_enumerated() -> None:
    assert {"--max_steps", "--jobs", "--threads"} <= set(NUMERIC)
    assert {"--objectives", "--seeds", "--model", "--out", "--records"} <= set(TEXT)


@pytest.mark.parametrize(("option", "value", "words"), [(o, v, v) for o in NUMERIC for v in ("0", "-1")]
                         + [(o, "", "empty") for o in TEXT] + [("--out", v, "empty") for v in (" ", ",", " , ")])
def test_zero_negative_or_empty_values_are_refused(option, value, words, tmp_path, capsys, nothing_runs) -> None:
    config = _write(tmp_path / "c.yaml", _mapping(tmp_path / "out"))
    line = one_line(["compare", config, option, value], capsys)
    assert option in line and words in line
    assert not (tmp_path / "out").exists(), "nothing is written for a refused command"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seeds", "3,1,3"], ["--seeds", "repeated: 3"]),  # not side by side
        (["--seeds", "4294967296"], ["--seeds", "4294967296"]),
        (["--seeds", "0,x"], ["--seeds", "0,x"]),
        (["--objectives", "mle,del,mle"], ["--objectives", "mle"]),
        (["--objectives", "ntl_was,ntl-was"], ["ntl_was", "ntl-was", "same objective"]),
        (["--objectives", "mle,MLE"], ["'mle'", "'MLE'", "same objective"]),
        (["--model", str(Path("/nonexistent/model"))], ["model.name: ", "/nonexistent/model"]),  # as the config's
        (["--threads", "100000"], ["--threads", "100000", "cores"]),
        (["--smoke"], ["task.data_dir", "/nonexistent/benchmarks"]),  # with the word-problem task below
    ],
)
def test_repeated_seeds_objectives_and_missing_models_are_refused(argv, words, tmp_path, capsys, nothing_runs) -> None:
    mapping = _mapping(tmp_path / "out")
    if argv == ["--smoke"]:  # a benchmark folder that is not there fails before training, not after it
        mapping["task"] = {"kind": "word_problems", "data_dir": "/nonexistent/benchmarks"}
    config = _write(tmp_path / "c.yaml", mapping)
    line = one_line(["compare", config, *argv], capsys)
    assert all(word in line for word in words), line


# -- the configuration file: every key, wrong types and values ------------------------------------

WRONG = [None, True, False, 0, -1, 1, 2.5, float("nan"), float("inf"), -(10**12), 10**12, "", "abc", "1",
         [], [1], ["a"], {}, {"a": 1}]


def _paths(mapping: dict) -> list[tuple]:
    """Every key of a comparison config (enumerated from compare/config.py's dataclasses)."""
    paths: list[tuple] = [(key,) for key in DEFAULTS]
    paths += [("evaluation", f) for f in EvaluationSettings.__dataclass_fields__]
    paths += [("learning", f) for f in LearningCheck.__dataclass_fields__]
    paths += [("objectives", 1, f) for f in ObjectiveSpec.__dataclass_fields__]
    paths += [("objectives", 1), ("seeds", 0), ("seeds", 1)]
    paths += [("base", section) for section in ("model", "data", "train", "lora")]
    if mapping["task"].get("kind") == "word_problems":
        paths += [("task", f) for f in WordProblemTask.__dataclass_fields__ if f != "extra"]
    else:
        paths += [("task", f) for f in ArithmeticTask.__dataclass_fields__]
        paths += [("task", "train", f) for f in Distribution.__dataclass_fields__]
    return paths


def _set(mapping: dict, path: tuple, value) -> None:
    target = mapping
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _valid_or_one_line(mapping: dict) -> None:
    """The property: a ConfigError of one line, or a config every run of which can be set up."""
    signal.alarm(20)  # a hang (10**digits of a huge digits) fails the test instead of blocking it
    try:
        try:
            compare = compare_config_from_dict(copy.deepcopy(mapping), "grid.yaml")
        except ConfigError as error:
            assert "\n" not in str(error) and str(error).startswith("grid.yaml"), repr(error)
            return
        assert compare.seeds and len(set(compare.seeds)) == len(compare.seeds)
        assert all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in compare.seeds)
        assert all(isinstance(getattr(compare.evaluation, f), int) and getattr(compare.evaluation, f) >= 1
                   for f in ("batch_size", "teacher_forced_batch_size"))
        assert isinstance(compare.evaluation.embeddings, bool) and isinstance(compare.output_dir, Path)
        assert all(s.alpha is None or isinstance(s.alpha, float) for s in compare.objectives)
        compare.task.describe()
        for spec in compare.objectives:  # the first seed's configs were validated by compare_config_from_dict
            compare.run_hash(compare.run_config(spec, compare.seeds[-1], Path("r"), Path("t.jsonl")))
        if isinstance(compare.task, ArithmeticTask) and compare.task.test_size <= 100:
            assert all(len(items) == compare.task.test_size for items in compare.task.test_sets().values())
            if compare.learning is not None:
                try:
                    compare.task.check_set(compare.learning.slice_size)
                except ValueError as error:  # run_grid turns it into a ConfigError before training
                    assert "\n" not in str(error)
    finally:
        signal.alarm(0)


def _grid_mappings() -> list[dict]:
    arithmetic = _mapping(Path("out"), objectives=["mle", {"label": "d", "name": "del", "alpha": 0.3}], seeds=[0, 1],
                          learning={"every": 2, "slice_size": 4, "threshold": 0.5, "stop_early": True, "batch_size": 4})
    words = copy.deepcopy(arithmetic)
    words["task"] = {"kind": "word_problems", "train_size": 8, "benchmark_limit": 3, "max_new_tokens": 12,
                     "eval_batch_size": 8}
    return [arithmetic, words]


@pytest.mark.parametrize("grid", _grid_mappings(), ids=["arithmetic", "word_problems"])
def test_every_config_key_with_a_wrong_value_is_one_line_or_valid(grid) -> None:
    for path in _paths(grid):
        for value in WRONG:
            mapping = copy.deepcopy(grid)
            _set(mapping, path, copy.deepcopy(value))
            try:
                _valid_or_one_line(mapping)
            except Exception as error:  # noqa: BLE001 - name the case that broke
                raise AssertionError(f"{'.'.join(map(str, path))} = {value!r}: {type(error).__name__}: {error}") from error


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.data())
def test_random_combinations_of_wrong_values_are_one_line_or_valid(data) -> None:
    """Two to four keys set wrong at once (Hypothesis shrinks a failure to the fewest)."""
    grid = data.draw(st.sampled_from(_grid_mappings()))
    mapping = copy.deepcopy(grid)
    changes = st.lists(st.tuples(st.sampled_from(_paths(grid)), st.sampled_from(WRONG)), min_size=2, max_size=4)
    for path, value in data.draw(changes):
        with contextlib.suppress(KeyError, IndexError, TypeError):  # a parent was replaced by an earlier change
            _set(mapping, path, copy.deepcopy(value))
    _valid_or_one_line(mapping)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"objectives": [{"name": "del", "alpha": "abc"}]}, ["objectives[0].alpha: expected a finite number", "abc"]),
        (None, ["comparison config", "does not exist"]),
        ({"learning": {"slice_size": 10**6}}, ["slice_size"]),  # found when drawing the check slice
        (b"seeds: [0]\n# caf\xe9\n", ["not UTF-8"]),  # read by load_yaml: test_io_helpers' table has the rest
        (b"[1, 2]\n", ["top level must be a mapping"]),
    ],
)
def test_yaml_errors_are_one_line_naming_the_file_before_any_training(change, words, tmp_path, capsys, nothing_runs) -> None:
    """A bad value, a bad file (as bytes) or none: one line naming the file, and no run started."""
    path = tmp_path / "c.yaml"
    if isinstance(change, bytes):
        path.write_bytes(change)
    elif change is not None:
        _write(path, _mapping(tmp_path / "out") | change)
    line = one_line(["compare", str(path), "--no-progress"], capsys)
    assert str(path) in line and all(word in line for word in words), line
    assert not list((tmp_path / "out").glob("runs/*")), "no run was started"


# -- the output folder: one writer (test_api_inputs' PATHS table), nothing finished deleted --------

def test_a_finished_or_garbled_run_is_kept_aside_and_the_training_file_is_the_set_the_run_trains_on(
        compare_recorded, tmp_path, capsys, monkeypatch) -> None:
    """Another --steps keeps the finished run (and its model) in superseded/, and says so; a
    result.json that is no result is moved aside (superseded/<run>-unreadable) and the run redone;
    data/train-s<seed>.jsonl is rewritten when the task changed under the output folder."""
    root, _, _ = compare_recorded
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    old = json.loads((out / "runs" / "mle-s0" / "result.json").read_text())
    config = _write(tmp_path / "c.yaml", _mapping(out, records_dir=str(tmp_path / "records")))
    capsys.readouterr()
    assert compare_main([config, "--no-progress", "--no-records", "--steps", "3"]) == 0
    err = capsys.readouterr().err
    aside = out / "superseded" / f"mle-s0-{old['hash']}"
    assert f"kept as {aside}" in err
    assert json.loads((aside / "result.json").read_text()) == old
    assert (aside / "final").is_dir(), "the finished run's model is kept too"
    assert json.loads((out / "runs" / "mle-s0" / "result.json").read_text())["steps"] == 3
    assert not (tmp_path / "records").exists()
    # and again: the second superseded copy does not overwrite the first
    assert compare_main([config, "--no-progress", "--no-records", "--steps", "2"]) == 0
    assert len(list((out / "superseded").iterdir())) == 2
    (out / "runs" / "mle-s0" / "result.json").write_text("[1, 2]")
    assert len((out / "data" / "train-s0.jsonl").read_text().splitlines()) == 16
    seen = []

    def stop(config, *args, examples=None, **kwargs):  # as a kill would, once the training set is seen
        seen.append([json.dumps({"instruction": e.instruction, "output": e.output}) for e in examples])
        raise Killed

    monkeypatch.setattr(numloss.train, "run_training", stop)
    mapping = _mapping(out)
    mapping["task"]["train_size"] = 12
    with pytest.raises(Killed):
        run_grid(compare_config_from_dict(mapping), progress=False)
    assert (out / "superseded" / "mle-s0-unreadable" / "result.json").read_text() == "[1, 2]"
    assert (out / "data" / "train-s0.jsonl").read_text().splitlines() == seen[0] and len(seen[0]) == 12


CORRUPTIONS = {
    "truncated": lambda text: text[: len(text) // 2],
    "wrong hash": lambda text: json.dumps({**json.loads(text), "hash": "0" * 16}),
    "a list": lambda text: json.dumps([json.loads(text)]),
    "not UTF-8": lambda text: text.replace('"hash"', '"h\udcffash"', 1),
    "no evaluation": lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "evaluation"}),
    "evaluation a string": lambda text: json.dumps({**json.loads(text), "evaluation": "x"}),
    "another run": lambda text: json.dumps({**json.loads(text), "seed": 7}),
}


# each corruption through read_record; compare and compare --report-only read records through it
@pytest.mark.parametrize(("corruption", "argv"), [(c, None) for c in CORRUPTIONS] + [("truncated", []), ("truncated", ["--report-only"])])
def test_a_corrupted_record_is_named_in_one_line(corruption, argv, compare_recorded, tmp_path, capsys, nothing_runs) -> None:
    root, _, record = compare_recorded
    bad = tmp_path / "records" / record.name
    bad.parent.mkdir()
    bad.write_bytes(corrupted := CORRUPTIONS[corruption](record.read_text()).encode("utf-8", "surrogateescape"))
    if argv is None:
        with pytest.raises(RecordError) as caught:
            read_record(bad.parent, *record.stem.rsplit("-", 1))  # mle-s0, its hash
        line = str(caught.value)
    else:
        config = _write(tmp_path / "c.yaml", _mapping(tmp_path / "fresh-checkout", records_dir=str(bad.parent)))
        line = one_line(["compare", config, "--no-progress", *argv], capsys)
    assert str(bad) in line and "\n" not in line and "git checkout" in line and "delete it" in line, line
    assert bad.read_bytes() == corrupted, "a refused record is left as it is"


# -- workers die with their parent --------------------------------------------------------------

@contextlib.contextmanager
def _two_job_compare(tmp_path: Path, command: str = "compare", progress: tuple[str, ...] = ("--no-progress",)):
    """`numloss COMMAND --jobs 2` in its own process group, SIGINT at its default as in a terminal's foreground job (`make
    test-all &` passes it on ignored), two workers training 100000-step runs; yields (parent, config, workers), cleans up."""
    out = tmp_path / "out"
    mapping = _mapping(out, objectives=["mle", "ntl-was"], jobs=2, learning=None)
    mapping["base"]["train"]["max_steps"] = 100000
    config = _write(tmp_path / "c.yaml", mapping)
    with (tmp_path / "stderr").open("wb") as err:  # not a pipe, which could fill; PYTHONFAULTHANDLER: SIGABRT dumps stacks
        parent = subprocess.Popen([sys.executable, "-m", "numloss", command, config, *progress], start_new_session=True,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                                  env={**ENV, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.DEVNULL, stderr=err)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        logs = [out / "runs" / name / "log.csv" for name in ("mle-s0", "ntl-was-s0")]
        while not all(log.is_file() for log in logs):  # both train: past their imports and first step
            assert parent.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        workers = {child.pid for child in psutil.Process(parent.pid).children(recursive=True)}
        assert len(workers) >= 2, workers
        yield parent, config, workers
    finally:
        if parent.poll() is None:  # still running, a test failed (or hung): where it is, shown with the failure
            parent.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):  # no dump in 30 s: on to the clean-up regardless
                parent.wait(30)
            print((tmp_path / "stderr").read_text().split("\nExtension modules")[0][-8000:])
        parent.kill()
        for pid in workers:  # never leave a run training on a shared machine
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _outlived(workers: set[int], seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in workers if alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
@pytest.mark.parametrize("command, how", [("compare", "kill"), ("compare", "term"), ("demo", "ctrl-c")],
                         ids=["compare-sigkill", "compare-sigterm", "demo-ctrl-c"])
def test_a_killed_or_interrupted_two_job_compare_ends_its_workers(command, how, tmp_path, capsys) -> None:
    """SIGKILL of the parent kills its workers (PR_SET_PDEATHSIG). `kill PID` reaches the parent
    only, Ctrl-C the whole process group (workers included): either way the parent ends its training
    workers, exits 130 with one line naming what was kept, and waits for no run; no worker prints a
    traceback of its own."""
    ctrl_c = how == "ctrl-c"
    with _two_job_compare(tmp_path, command, progress=() if ctrl_c else ("--no-progress",)) as (parent, config, workers):
        if how == "kill":  # and a second compare into the same folder, while the first trains, stops naming it
            line = one_line(["compare", config, "--no-progress", "--objectives", "mle"], capsys)
            assert f"pid {parent.pid}" in line and "in use" in line
            parent.send_signal(signal.SIGKILL)
            parent.wait()
            assert not _outlived(workers), "workers outlived their killed parent"
            return
        time.sleep(1)  # a step or two reported
        os.kill(-parent.pid if ctrl_c else parent.pid, signal.SIGINT if ctrl_c else signal.SIGTERM)  # -pid: the group
        status = parent.wait(timeout=60)  # the runs train for 100000 steps: waiting for them would time out
        err = (tmp_path / "stderr").read_text()
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == 130, err[-3000:]
        assert lines[-1].startswith(f"numloss {command}: interrupted; every finished run is kept in"), err[-3000:]
        assert not any(word in err for word in ("Traceback", "KeyboardInterrupt", "BrokenProcessPool")), err[-3000:]
        if ctrl_c:  # the bar counts the steps the workers report, out of both runs' steps
            assert re.search(r"\b[1-9]\d*/200000 ", err), err[-3000:]
        assert not _outlived(workers), "workers outlived an interrupted compare"


def test_a_run_trained_but_not_scored_is_scored_without_training_again(tmp_path, monkeypatch, capsys) -> None:
    """A process that died after training (out of memory while scoring) left final/ and no result:
    the same grid again scores that final/; a grid of other settings trains anew, its steps on the
    grid's one bar (the run's own per-log lines kept off it)."""
    out = tmp_path / "out"
    (old,) = run_grid(compare_config_from_dict(_mapping(out)), progress=False)
    (out / "runs" / "mle-s0" / "result.json").unlink()
    real, trained = numloss.train.run_training, []

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        trained.append(not result.already_finished)
        return result

    monkeypatch.setattr(numloss.train, "run_training", spy)
    (again,) = run_grid(compare_config_from_dict(_mapping(out)), progress=False)
    assert trained == [False], "the finished final/ was trained again"
    assert again["hash"] == old["hash"] and again["curve"] == old["curve"]  # the first training's log
    assert {name: ev["examples"] for name, ev in again["evaluation"].items()} == {
        name: ev["examples"] for name, ev in old["evaluation"].items()}, "not the same trained model"
    (out / "runs" / "mle-s0" / "result.json").unlink()
    mapping = _mapping(out)
    mapping["base"]["train"]["max_steps"] = 3
    capsys.readouterr()
    (longer,) = run_grid(compare_config_from_dict(mapping), progress=True)
    assert trained == [False, True] and longer["steps"] == 3
    shown = capsys.readouterr()
    assert "3/3" in shown.err and "scoring mle-s0" in shown.err and "step 1/3" not in shown.out
