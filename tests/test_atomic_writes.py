"""Every file a user keeps is written whole or not at all, and a compare label never escapes --out.

The atomic helper fails at each of its steps; each writer is driven with an injected write failure
(the fsync of its temporary file raises ENOSPC, as a full disk does): its folder must be
byte-for-byte as it was, with no temporary file and no torn new one left.
"""

from __future__ import annotations

import errno
import itertools
import os
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest
from grid_driver import _copy

import numloss.atomic
import numloss.compare.report as compare_report
from faultrun import file_size_limit, logged_steps, snapshot
from numloss.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from numloss.compare.config import compare_config_from_dict
from numloss.compare.runner import _clear_run_dir, write_record
from numloss.config import Config, ConfigError
from numloss.evaluate.api import evaluate
from numloss.evaluate.report import write_report
from numloss.evaluate.store import ResultsFile
from numloss.train import record_config
from numloss.train.callbacks import CSVLogCallback
from test_eval_faults import Echo


@pytest.fixture
def fail_at(monkeypatch):
    """`fail_at(step, number)`: the next atomic write fails at `step` (its file's "fsync", the
    "replace", or its folder's "fsync-folder") with OSError `number`; by default as a full disk."""

    def arm(step: str = "fsync", number: int = errno.ENOSPC) -> None:
        real_fsync, fsyncs = os.fsync, []

        def fsync(fd: int) -> None:  # the file's, then the folder's
            fsyncs.append(fd)
            if len(fsyncs) == (2 if step == "fsync-folder" else 1):
                raise OSError(number, os.strerror(number))
            real_fsync(fd)

        def replace(source, _) -> None:  # a failed rename names its source, the temporary
            raise OSError(number, os.strerror(number), str(source))

        monkeypatch.setattr(numloss.atomic.os, step.removesuffix("-folder"), replace if step == "replace" else fsync)

    return arm


def assert_rewrite_survives(folder: Path, fail_at, write) -> None:
    """`write(0)`, then `write(1)` on a full disk: it raises and leaves the folder as it was (no
    file changed, torn or added, no temporary)."""
    write(0)
    before = snapshot(folder)
    fail_at()
    with pytest.raises(OSError):
        write(1)
    assert snapshot(folder) == before


def test_the_helper_writes_compact_json_and_refuses_nan_or_a_folder_in_the_way_writing_nothing(tmp_path) -> None:
    target = tmp_path / "a.json"
    write_json_atomic(target, {"x": 1})
    write_json_atomic(target, {"x": 2}, compact=True)
    assert target.read_text() == '{"x":2}\n'
    with pytest.raises(ValueError):  # a payload that cannot be serialised writes nothing
        write_json_atomic(target, {"x": float("nan")}, allow_nan=False)
    assert snapshot(tmp_path) == {"a.json": b'{"x":2}\n'}
    folder = tmp_path / "results.json"
    (folder / "inside").mkdir(parents=True)
    for write, payload in ((write_bytes_atomic, b"{}"), (write_text_atomic, "{}"), (write_json_atomic, {})):
        with pytest.raises(IsADirectoryError) as caught:  # the error names the folder in the way
            write(folder, payload)
        assert caught.value.filename == str(folder)
    assert (folder / "inside").is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "results.json"]


@pytest.mark.parametrize(("step", "errno_name"), [("write", "EFBIG"), *itertools.product(
    ["fsync", "replace", "fsync-folder"], ["EIO", "ENOSPC", "EDQUOT", "EINVAL", "EROFS", "ENOTSUP"])])
def test_every_step_of_an_atomic_write_failing_names_the_file_and_keeps_the_old_one(step, errno_name, tmp_path,
                                                                                   fail_at, monkeypatch) -> None:
    """Each step of an atomic write failing (the write, cut by a real file-size limit; the file's
    fsync; the rename; then the folder's fsync): an OSError naming the file, the old one kept, no
    temporary left. The folder's fsync comes after the rename: a lost write-back (EIO, ENOSPC,
    EDQUOT) names the folder, never a write reported done; a folder that cannot be fsynced (EINVAL,
    EROFS, ENOTSUP) is no error."""
    number = getattr(errno, errno_name)
    target = tmp_path / "config.yaml"
    target.write_text("old")
    if step != "write":
        fail_at(step, number)
    lost = step != "fsync-folder" or number in numloss.atomic.LOST_WRITE_ERRNOS
    with file_size_limit(1) if step == "write" else nullcontext(), pytest.raises(OSError) if lost else nullcontext() as caught:
        write_text_atomic(target, "new")
    monkeypatch.undo()
    folder = step == "fsync-folder"
    assert not lost or caught.value.errno == number and caught.value.filename == str(tmp_path if folder else target)
    assert target.read_text() == ("new" if folder else "old") and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


# -- each writer, with a failure injected ------------------------------------------------------------
def _compare_result(label: str = "mle", seed: int = 0) -> dict:
    return {"hash": "0123456789abcdef", "label": label, "seed": seed, "steps": 2, "objective": None,
            "evaluation": {"in_distribution": {"exact_match": 0.5, "n": 2, "correct": 1}}, "seconds": {"total": 1.0},
            "curve": {}, "train_metrics": {}, "learning": None}


def _eval_report(folder: Path, monkeypatch):
    report = evaluate(Echo("3"), "synthetic:arithmetic", limit=2, digit_stats=False, program_of_thought=False)
    return lambda n: write_report(folder, report)


def _eval_items(folder: Path, monkeypatch):
    store = ResultsFile(folder / "items.jsonl")
    store.records = lambda: [{"a": 1}, {"a": 2}]  # the type checks are another test's subject
    store.path.write_text('{"a": 1}\n{"a": 2}\n')
    return lambda n: n and store.drop(lambda r: r["a"] == 1)  # --overwrite's rewrite


def _compare_report(folder: Path, monkeypatch):
    monkeypatch.setattr(compare_report, "draw_plots", lambda summary, results, out: [])
    monkeypatch.setattr(compare_report, "aggregate", lambda results: {})
    monkeypatch.setattr(compare_report, "markdown_report", lambda summary, meta, plots: f"# report of {meta['runs']} runs\n")
    return lambda n: compare_report.write_report([_compare_result()], folder, {"runs": n})


def _compare_record(folder: Path, monkeypatch):
    return lambda n: write_record(folder, _compare_result(seed=n))  # a new record: none torn


def _also_to_copy(folder: Path, monkeypatch):
    for n in (0, 1):  # a record, then a newer one of the same name
        (folder / f"r{n}").mkdir()
        (folder / f"r{n}" / "r.json").write_text(f'{{"hash": {n}}}')
    return lambda n: _copy(folder / f"r{n}" / "r.json", [folder / "OUT"])


def _config_yaml(folder: Path, monkeypatch):
    def write(n: int) -> None:
        config = Config()
        config.train.learning_rate = 0.5 + n
        record_config(config, folder, None)

    return write


@pytest.mark.parametrize("writer", [_eval_report, _eval_items, _compare_report, _compare_record, _also_to_copy,
                                    _config_yaml])
def test_each_writer_keeps_the_old_file_when_a_rewrite_fails(writer, tmp_path, fail_at, monkeypatch) -> None:
    assert_rewrite_survives(tmp_path, fail_at, writer(tmp_path, monkeypatch))


# -- log.csv ---------------------------------------------------------------------------------------
def test_log_csv_resume_drops_a_torn_row_and_later_steps(tmp_path, fail_at) -> None:
    """A resume writes the rows of the checkpoint's log history anew: the interrupted run's later
    rows and its torn last one are gone, appends continue from there, and a failed rewrite keeps
    the file as it was."""

    def state(history):
        return SimpleNamespace(is_world_process_zero=True, global_step=len(history), log_history=history)

    path = tmp_path / "log.csv"
    callback, history = CSVLogCallback(path), []
    callback.on_train_begin(None, state([]), None)
    for step in range(1, 12):
        history.append({"loss": 1.0 / step, "step": step})
        callback.on_log(None, state(history), None, logs={"loss": 1.0 / step})
    assert logged_steps(tmp_path) == list(range(1, 12))
    path.write_text(path.read_text(encoding="utf-8") + "1", encoding="utf-8")  # a kill tore row 12
    callback.on_train_begin(None, state(history[:10] + [{"train_loss": 1.0, "step": 10}]), None)  # from checkpoint-10
    assert logged_steps(tmp_path) == list(range(1, 11))
    callback.on_log(None, state(history), None, logs={"loss": 0.1})
    assert logged_steps(tmp_path) == list(range(1, 12))
    resume = lambda n: callback.on_train_begin(None, state(history[:3] if n else history), None)  # noqa: E731
    assert_rewrite_survives(tmp_path, fail_at, resume)  # a failed resume loses no logged step


# -- compare labels are names ------------------------------------------------------------------------
@pytest.fixture
def victim(tmp_path) -> Path:
    """A run folder beside the output (tmp_path/a/b), which nothing may reach."""
    (tmp_path / "victim-s0").mkdir()
    (tmp_path / "victim-s0" / "notes.txt").write_text("mine")
    return tmp_path / "victim-s0"


@pytest.mark.parametrize("label", ["../../victim", "a/b", "a\\b", "..", "x..y", ".hidden", "/abs", "", " "])
def test_a_label_that_is_not_a_name_is_refused_and_the_victim_survives(label, tmp_path, victim) -> None:
    out = tmp_path / "a" / "b"
    mapping = {"objectives": [{"label": label, "name": "mle"}], "output_dir": str(out),
               "base": {"model": {"name": "tiny"}, "train": {"max_steps": 1}}}
    with pytest.raises(ConfigError) as caught:
        compare_config_from_dict(mapping)
    assert "label" in str(caught.value) and "\n" not in str(caught.value)
    assert (victim / "notes.txt").read_text() == "mine"


def test_clearing_a_run_folder_outside_runs_is_refused(tmp_path, victim) -> None:
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
