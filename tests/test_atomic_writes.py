"""Every file a user keeps is written whole or not at all, and a compare label never escapes --out.

Each writer is driven with an injected write failure (the fsync of its temporary file raises
ENOSPC, as a full disk does): the earlier file must be byte-for-byte as it was, and no temporary
file may be left beside it.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import numloss.atomic
from numloss.atomic import write_json_atomic, write_text_atomic


@pytest.fixture
def disk_full(monkeypatch):
    """Make the next atomic write fail at its fsync, as a full disk would."""

    def fail(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def arm() -> None:
        monkeypatch.setattr(numloss.atomic.os, "fsync", fail)

    return arm


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def assert_rewrite_survives(folder: Path, disk_full, write, *names: str) -> None:
    """`write(0)`, then `write(1)` on a full disk: it raises, `names` keep their bytes, no temporary
    file is left."""
    write(0)
    before = {name: (folder / name).read_bytes() for name in names}
    disk_full()
    with pytest.raises(OSError):
        write(1)
    assert {name: (folder / name).read_bytes() for name in names} == before
    assert _leftovers(folder) == []


def test_the_helper_replaces_whole_files_or_leaves_them_as_they_were(tmp_path, disk_full) -> None:
    target = tmp_path / "a.json"
    write_json_atomic(target, {"x": 1})
    write_json_atomic(target, {"x": 2}, compact=True)
    assert target.read_text() == '{"x":2}\n'
    with pytest.raises(ValueError):  # a payload that cannot be serialised writes nothing
        write_json_atomic(target, {"x": float("nan")}, allow_nan=False)
    disk_full()
    with pytest.raises(OSError) as caught:
        write_text_atomic(target, "a new report that does not fit\n")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert target.read_text() == '{"x":2}\n' and _leftovers(tmp_path) == []


# -- each writer, with a failure injected ------------------------------------------------------------
def _eval_report():
    from numloss.evaluate.api import evaluate

    class Echo:
        identity = "echo"

        def generate(self, prompts, max_new_tokens=None):
            from numloss.evaluate.generate import Generation

            return [Generation("The answer is 3.", 4) for _ in prompts]

    return evaluate(Echo(), "synthetic:arithmetic", limit=2, digit_stats=False, program_of_thought=False)


def test_eval_report_survives_a_failed_rewrite(tmp_path, disk_full) -> None:
    from numloss.evaluate.report import write_report

    report = _eval_report()
    assert_rewrite_survives(tmp_path, disk_full, lambda n: write_report(tmp_path, report), "results.json", "report.md")
    json.loads((tmp_path / "results.json").read_text())  # still valid JSON


def test_eval_items_overwrite_survives_a_failed_rewrite(tmp_path, disk_full) -> None:
    from numloss.evaluate.store import ResultsFile

    path = tmp_path / "items.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    store = ResultsFile(path)
    store.records = lambda: [{"a": 1}, {"a": 2}]  # the type checks are another test's subject
    disk_full()
    with pytest.raises(OSError):
        store.drop(lambda r: r["a"] == 1)
    assert path.read_text() == '{"a": 1}\n{"a": 2}\n'


def _compare_result(label: str = "mle", seed: int = 0) -> dict:
    return {"hash": "0123456789abcdef", "label": label, "seed": seed, "steps": 2, "objective": None,
            "evaluation": {"in_distribution": {"exact_match": 0.5, "n": 2, "correct": 1}}, "seconds": {"total": 1.0},
            "curve": {}, "train_metrics": {}, "learning": None}


def test_a_compare_record_is_written_whole(tmp_path, disk_full) -> None:
    from numloss.compare.runner import record_path, write_record

    disk_full()
    with pytest.raises(OSError):
        write_record(tmp_path, _compare_result())
    assert not record_path(tmp_path, "mle-s0", "0123456789abcdef").exists(), "no torn record"
    assert _leftovers(tmp_path) == []


def test_the_compare_report_survives_a_failed_rewrite(tmp_path, disk_full, monkeypatch) -> None:
    import numloss.compare.report as report

    monkeypatch.setattr(report, "_plots", lambda summary, results, out: [])
    monkeypatch.setattr(report, "aggregate", lambda results: {})
    monkeypatch.setattr(report, "markdown_report", lambda summary, meta, plots: f"# report of {meta['runs']} runs\n")
    assert_rewrite_survives(tmp_path, disk_full, lambda n: report.write_report([_compare_result()], tmp_path, {"runs": n}),
                            "results.json", "report.md")


def test_config_yaml_survives_a_failed_rewrite(tmp_path, disk_full) -> None:
    from numloss.config import Config
    from numloss.train import record_config

    def write(n: int) -> None:
        config = Config()
        config.train.learning_rate = 0.5 + n
        record_config(config, tmp_path, None)

    assert_rewrite_survives(tmp_path, disk_full, write, "config.yaml")


# -- log.csv ---------------------------------------------------------------------------------------
def test_log_csv_resume_drops_a_torn_row_and_later_steps(tmp_path, disk_full) -> None:
    """A resume writes the rows of the checkpoint's log history anew: the interrupted run's later
    rows and its torn last one are gone, appends continue from there, and a failed rewrite keeps
    the file as it was."""
    from numloss.train.callbacks import CSVLogCallback

    def state(history):
        return SimpleNamespace(is_world_process_zero=True, global_step=len(history), log_history=history)

    def steps():
        return [int(r["step"]) for r in csv.DictReader(path.open(encoding="utf-8"))]

    path = tmp_path / "log.csv"
    callback, history = CSVLogCallback(path), []
    callback.on_train_begin(None, state([]), None)
    for step in range(1, 12):
        history.append({"loss": 1.0 / step, "step": step})
        callback.on_log(None, state(history), None, logs={"loss": 1.0 / step})
    assert steps() == list(range(1, 12))
    path.write_text(path.read_text(encoding="utf-8") + "1", encoding="utf-8")  # a kill tore row 12
    callback.on_train_begin(None, state(history[:10] + [{"train_loss": 1.0, "step": 10}]), None)  # from checkpoint-10
    assert steps() == list(range(1, 11))
    callback.on_log(None, state(history), None, logs={"loss": 0.1})
    assert steps() == list(range(1, 12))
    before = path.read_bytes()
    disk_full()
    with pytest.raises(OSError):
        callback.on_train_begin(None, state(history[:3]), None)
    assert path.read_bytes() == before, "a failed resume must not lose the logged steps"
    assert _leftovers(tmp_path) == []


# -- compare labels are names ------------------------------------------------------------------------
@pytest.fixture
def victim(tmp_path) -> Path:
    """A run folder beside the output (tmp_path/a/b), which nothing may reach."""
    (tmp_path / "victim-s0").mkdir()
    (tmp_path / "victim-s0" / "notes.txt").write_text("mine")
    return tmp_path / "victim-s0"


@pytest.mark.parametrize("label", ["../../victim", "a/b", "a\\b", "..", "x..y", ".hidden", "/abs", "", " "])
def test_a_label_that_is_not_a_name_is_refused_and_the_victim_survives(label, tmp_path, victim) -> None:
    from numloss.compare.config import compare_config_from_dict
    from numloss.config import ConfigError

    out = tmp_path / "a" / "b"
    mapping = {"objectives": [{"label": label, "name": "mle"}], "output_dir": str(out),
               "base": {"model": {"name": "tiny"}, "train": {"max_steps": 1}}}
    with pytest.raises(ConfigError) as caught:
        compare_config_from_dict(mapping)
    assert "label" in str(caught.value) and "\n" not in str(caught.value)
    assert (victim / "notes.txt").read_text() == "mine"


def test_clearing_a_run_folder_outside_runs_is_refused(tmp_path, victim) -> None:
    from numloss.compare.runner import _clear_run_dir
    from numloss.config import ConfigError

    out = tmp_path / "a" / "b"
    (out / "runs").mkdir(parents=True)
    with pytest.raises(ConfigError):
        _clear_run_dir(out / "runs" / ".." / ".." / ".." / "victim-s0", print)
    link = out / "runs" / "linked-s0"
    os.symlink(victim, link)
    with pytest.raises(ConfigError):
        _clear_run_dir(link, print)
    assert (victim / "notes.txt").read_text() == "mine"
    interrupted = out / "runs" / "mle-s0"
    interrupted.mkdir()
    _clear_run_dir(interrupted, print)  # an interrupted run inside runs/ is still cleared
    assert not interrupted.exists()
