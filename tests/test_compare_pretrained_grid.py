"""The grid driver of the pretrained arm and the GPU plan (scripts/grid_driver.py): records as
runs finish, a failing run recorded while the rest go on, a time budget, shards, and a grid killed
mid-run that leaves its finished records valid and continues from them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grid_driver
import pytest
from grid_driver import (
    BASELINE,
    baseline_hash,
    load_records,
    run_order,
    run_pretrained_grid,
    summarise,
)

from numloss.compare import build_parser, resolve
from numloss.compare.runner import grid_test_sets, read_record

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "compare-smollm2-words.yaml"


def _smoke(tmp_path: Path, seeds: str = "0,1"):
    args = build_parser().parse_args([str(CONFIG), "--smoke", "--out", str(tmp_path / "grid"), "--seeds", seeds,
                                      "--records", str(tmp_path / "records")])
    compare = resolve(args)
    assert compare.base["data"]["max_length"] >= 256, "--smoke: the tiny model reads characters"
    return compare


def _fake_run(fail: set[str] | None = None, seconds: float = 0.0):
    """A stand-in for run_one: a record with per-item verdicts, no training; raises for `fail`."""
    calls: list[str] = []

    def run(compare, key, examples, test_sets, train_file, progress_bar=True):
        calls.append(key.name)
        if key.name in (fail or set()):
            raise RuntimeError(f"injected failure in {key.name}")
        time.sleep(seconds)
        config = compare.run_config(key.spec, key.seed, compare.output_dir / "runs" / key.name, train_file)
        n = len(test_sets["heldout"])
        bits = "".join("1" if (i + key.seed + len(key.spec.label)) % 3 else "0" for i in range(n))
        return {"hash": compare.run_hash(config), "label": key.spec.label, "seed": key.seed, "steps": 0,
                "objective": {"name": key.spec.name}, "seconds": {}, "curve": {}, "train_metrics": {}, "learning": None,
                "evaluation": {"heldout": {"n": n, "exact_match": bits.count("1") / n, "items": bits}}}

    run.calls = calls
    return run


def test_seed_major_order_so_a_cut_grid_leaves_whole_paired_sets_and_shards_split_it(tmp_path) -> None:
    compare = _smoke(tmp_path)
    assert [k.name for k in run_order(compare)] == [
        "mle-s0", "del-a0.3-s0", "ntl-was-s0", "mle-s1", "del-a0.3-s1", "ntl-was-s1"]
    seen = []
    for index in range(3):
        run = _fake_run()
        run_pretrained_grid(compare, baseline=False, shard=(index, 3), run=run, log=lambda _: None)
        seen += run.calls
    assert sorted(seen) == sorted(k.name for k in run_order(compare)), "no run twice, none left out"
    assert len(load_records(compare)) == 3


def test_a_failing_run_is_recorded_and_the_rest_go_on(tmp_path) -> None:
    compare = _smoke(tmp_path)
    run = _fake_run(fail={"del-a0.3-s0"})
    out = tmp_path / "OUT"
    status = run_pretrained_grid(compare, baseline=False, also_to=[out], run=run, log=lambda _: None)
    assert status["failed"] == ["del-a0.3-s0"] and len(status["finished"]) == 5
    failure = json.loads(next((tmp_path / "records").glob("FAILED-del-a0.3-s0-*.json")).read_text())
    assert failure["failed"] and "injected failure" in failure["error"] and "Traceback" in failure["traceback"]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (tmp_path / "records").iterdir())
    # started again: only the failed run is tried, and its failure record goes once it succeeds
    again = _fake_run()
    status = run_pretrained_grid(compare, baseline=False, run=again, log=lambda _: None)
    assert again.calls == ["del-a0.3-s0"] and len(status["skipped"]) == 5
    assert not list((tmp_path / "records").glob("FAILED-*"))
    summary = summarise(compare)["sets"]["heldout"]
    assert set(summary["versus_reference"]) == {"del-a0.3", "ntl-was"}
    assert summary["versus_reference"]["del-a0.3"]["seeds"] == [0, 1]


def test_budget_starts_no_run_that_would_not_finish_and_says_what_is_left(tmp_path) -> None:
    compare = _smoke(tmp_path)
    run = _fake_run(seconds=0.3)
    lines: list[str] = []
    status = run_pretrained_grid(compare, budget_s=0.5, baseline=False, run=run, log=lines.append)
    assert status["finished"] == ["mle-s0"], "the first run always starts: it times the rest"
    assert status["left"] == ["del-a0.3-s0", "ntl-was-s0", "mle-s1", "del-a0.3-s1", "ntl-was-s1"]
    assert lines[-1].startswith("left (budget 0.5 s")


@pytest.mark.slow  # fast: test_a_failing_run_is_recorded_and_the_rest_go_on (a restart runs only what is missing)
def test_grid_killed_mid_run_keeps_its_finished_records_and_continues(tmp_path) -> None:
    """The real path (training and scoring on the tiny model), killed with SIGKILL as a timed-out
    device call would be, after its first records: those are complete and valid, nothing else is
    half-written, and the next start trains only what is missing."""
    records, out = tmp_path / "records", tmp_path / "OUT"
    command = [sys.executable, str(ROOT / "scripts" / "grid_driver.py"), str(CONFIG), "--smoke", "--no-progress",
               "--out", str(tmp_path / "grid"), "--seeds", "0,1", "--records", str(records), "--also-to", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and len(list(records.glob("*-s[01]-*.json"))) < 3:
            assert process.poll() is None, process.stdout.read().decode()[-3000:]
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    compare = _smoke(tmp_path)
    finished = {p.name for p in records.iterdir()}
    kept = [n for n in finished if not n.endswith(".tmp")]  # a kill mid-write leaves only a .tmp
    assert 3 <= len(kept) < 7, kept
    for name in kept:
        record = json.loads((records / name).read_text())  # complete JSON, not a torn write
        assert name.endswith(f"-{record['hash']}.json") and "heldout" in record["evaluation"]
        assert (out / name).read_text() == (records / name).read_text(), "the $OUT copy is the record"
    assert read_record(records, f"{BASELINE}-s0", baseline_hash(compare)) is not None, "the baseline came first"
    before = {n: (records / n).read_text() for n in kept}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    after = {p.name for p in records.iterdir() if not p.name.endswith(".tmp")}
    assert len(after) == 7 and all((records / n).read_text() == text for n, text in before.items())
    trained_again = [line for line in done.stdout.splitlines() if line.split(":")[0] in {n.rsplit("-", 1)[0] for n in kept}]
    assert not trained_again, trained_again
    assert (out / "summary-0.md").is_file() and "| untrained |" in (out / "summary-0.md").read_text()


def test_a_grid_with_learning_checks_gets_the_check_slice_as_numloss_compare_does(tmp_path) -> None:
    """A config with `learning:` (the multiplication testbed) scores every run on the task's check
    slice during training; the driver hands the runs the same sets `numloss compare` does (the
    check slice missing ended every run at its first check with an empty max())."""
    args = build_parser().parse_args([str(ROOT / "configs" / "compare-mul-centered.yaml"), "--smoke", "--out",
                                      str(tmp_path / "grid"), "--seeds", "0", "--records", str(tmp_path / "records")])
    compare = resolve(args)
    assert compare.learning is not None
    seen: list[dict] = []

    def run(compare, key, examples, test_sets, train_file, progress_bar=True):
        seen.append(test_sets)
        raise RuntimeError("stop after the sets were seen")

    run_pretrained_grid(compare, baseline=False, run=run, log=lambda _: None)
    expected = grid_test_sets(compare)
    assert seen and all(sets.keys() == expected.keys() and "check" in sets for sets in seen)
    assert [e.instruction for e in seen[0]["check"]] == [e.instruction for e in expected["check"]]


@pytest.mark.parametrize("config", ["compare.yaml", "compare-mul.yaml", "compare-demo.yaml"])
def test_a_task_without_per_item_verdicts_is_refused_before_any_run(config, tmp_path, capsys) -> None:
    # its summary's paired tests need the per-item verdicts only arith_words records keep: a
    # multiplication grid used to train every run and then stop with a KeyError
    status = grid_driver.main([str(ROOT / "configs" / config), "--smoke", "--out", str(tmp_path / "grid")])
    err = capsys.readouterr().err
    assert status == 2 and "needs task.kind arith_words" in err and "numloss compare" in err
    assert not (tmp_path / "grid" / "runs").exists()


def test_sigterm_stops_the_grid_in_one_line_that_says_how_to_continue(tmp_path, capsys, monkeypatch) -> None:
    """A scheduler's `kill PID` is Ctrl-C: status 130 and one line naming what was kept, no traceback;
    the records written before it stay."""
    def terminated(compare, **options):
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would, mid-grid
        raise AssertionError("SIGTERM did not stop the grid")

    monkeypatch.setattr(grid_driver, "run_pretrained_grid", terminated)
    status = grid_driver.main([str(CONFIG), "--smoke", "--out", str(tmp_path / "grid"), "--records", str(tmp_path / "records")])
    err = capsys.readouterr().err.strip()
    assert status == 130 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith("numloss compare: interrupted; every finished run is kept in") and str(tmp_path / "records") in err
    # (the handler put back: test_fault_space.py::test_sigterm_at_every_call_of_every_save_point_is_one_line_and_resumes_bitwise)
    assert not (tmp_path / "grid" / "summary-0.md").exists(), "an interrupted grid writes no summary"
