"""Faults at every save point of `numloss eval`, `compare` and `train`, each followed by the
command a user runs next: a write failure (EIO), a full disk (ENOSPC) or Ctrl-C (SIGINT, raised
as KeyboardInterrupt where the save happens). Asserted: one line, no traceback, nothing that was
written before lost or torn, and the next command's result equal to an uninterrupted run's.

(Kills, SIGKILL in a subprocess, are test_train_faults': the library holds
no fault hooks; tests/faultrun.py wraps its functions.)
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import numloss.atomic
import numloss.compare.report
import numloss.train
import numloss.train.folder
import numloss.train.run
from faultrun import RUN, TINY, at_call
from numloss.compare import main as compare_main
from numloss.compare import runner
from numloss.evaluate import cli
from numloss.evaluate.store import ResultsFile
from test_compare_faults import _mapping, _write
from test_eval_faults import tiny_eval

# each case trains or evaluates twice (the fault, then the next command); test_atomic_writes
# covers every writer's failure in milliseconds
pytestmark = pytest.mark.slow

FAULTS = {
    "write-failure": lambda: OSError(errno.EIO, "Input/output error"),
    "disk-full": lambda: OSError(errno.ENOSPC, "No space left on device"),
    "sigint": lambda: KeyboardInterrupt(),
}


def _run(main, argv: list[str], capsys, fault: str | None = None) -> int:
    """`main(argv)`'s exit status, with no traceback; with `fault` injected, a failure (130 for
    Ctrl-C) said in one line."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err[-2000:]
    lines = [line for line in captured.err.splitlines() if line.startswith("numloss")]
    assert fault is None or (status != 0 and len(lines) == 1 and (fault != "sigint" or status == 130)), (status, lines)
    return status


# -- eval ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def eval_reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("eval-reference") / "out"
    assert cli.main(tiny_eval("tiny", out, "--batch-size", "1")) == 0
    return {"items": (out / "items.jsonl").read_text().splitlines(), "report": json.loads((out / "results.json").read_text())}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("point", ["second-batch", "report"])
def test_eval_fault_then_the_same_command(point, fault, tmp_path, capsys, monkeypatch, eval_reference) -> None:
    out = tmp_path / "out"
    argv = tiny_eval("tiny", out, "--batch-size", "1")
    owner, name, nth = (ResultsFile, "append", 2) if point == "second-batch" else (numloss.atomic, "write_bytes_atomic", 1)
    with monkeypatch.context() as patch:
        at_call(patch, [owner], name, nth, FAULTS[fault])
        _run(cli.main, argv, capsys, fault)
    kept = (out / "items.jsonl").read_text().splitlines()
    assert kept == eval_reference["items"][: len(kept)], "what was written before the fault is intact"
    assert not (out / "results.json").exists() or json.loads((out / "results.json").read_text())
    assert _run(cli.main, argv, capsys) == 0  # the user's next command: the same one
    assert [json.loads(x)["output"] for x in (out / "items.jsonl").read_text().splitlines()] == \
        [json.loads(x)["output"] for x in eval_reference["items"]]
    report, reference = json.loads((out / "results.json").read_text()), eval_reference["report"]
    assert report["benchmarks"] == reference["benchmarks"] and report["macc"] == reference["macc"]
    assert not list(out.glob(".*.tmp")), "no temporary file left behind"


# -- compare ---------------------------------------------------------------------------------------
def _compare(tmp_path: Path, out: Path, capsys, fault: str | None = None) -> int:
    """test_compare_faults' tiny grid into `out`, its records in tmp_path/records (the twin of
    conftest's compare_recorded, the uninterrupted run)."""
    config = _write(tmp_path / "c.yaml", _mapping(out, records_dir=str(tmp_path / "records")))
    return _run(compare_main, [config, "--no-progress"], capsys, fault)


def _outcome(result: dict) -> dict:
    """What a run produced, without its times and machine."""
    return {k: v for k, v in result.items() if k not in ("seconds", "finished_at", "machine", "train_metrics")} | {
        "evaluation": {name: {k: v for k, v in scores.items() if k != "seconds"} for name, scores in result["evaluation"].items()}}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("point", ["result", "record", "report"])
def test_compare_fault_then_the_same_command(point, fault, tmp_path, capsys, monkeypatch, compare_recorded) -> None:
    reference = json.loads((compare_recorded[0] / "out" / "runs" / "mle-s0" / "result.json").read_text())
    out = tmp_path / "out"
    owner, name = {"result": (runner, "_write_json_atomic"), "record": (runner, "write_record"),
                   "report": (numloss.compare.report, "write_report")}[point]
    with monkeypatch.context() as patch:
        at_call(patch, [owner], name, 1, FAULTS[fault])
        _compare(tmp_path, out, capsys, fault)
    for path in [*out.rglob("*.json"), *(tmp_path / "records").glob("*.json")]:
        json.loads(path.read_text())  # nothing torn
    assert _compare(tmp_path, out, capsys) == 0  # the user's next command: the same one
    result = json.loads((out / "runs" / "mle-s0" / "result.json").read_text())
    assert _outcome(result) == _outcome(reference)
    (record,) = (tmp_path / "records").glob("*.json")
    assert _outcome(json.loads(record.read_text())) == _outcome(reference)
    assert json.loads((out / "results.json").read_text())["runs"][0]["hash"] == reference["hash"]


# -- train -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("point", ["config.yaml", "log_history.json"])
def test_train_fault_at_its_own_files_then_resume(point, fault, tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "run"
    argv = [str(TINY), "--train.output_dir", str(out), *RUN]
    owner, name = (numloss.train.folder, "record_config") if point == "config.yaml" else (numloss.train.run, "write_json_atomic")
    with monkeypatch.context() as patch:
        at_call(patch, [owner], name, 1, FAULTS[fault])
        _run(numloss.train.main, argv, capsys, fault)
    # the next command: the one the line names (--resume when a checkpoint is whole; else the same)
    resume = ["--resume"] if list(out.glob("checkpoint-*/numloss_checkpoint.json")) else []
    assert _run(numloss.train.main, [*argv, *resume], capsys) == 0
    assert (out / "final" / "numloss_checkpoint.json").is_file()
    assert json.loads((out / "log_history.json").read_text())
