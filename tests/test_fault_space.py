"""Faults found by red-teaming the save paths, each tested over its whole space, in-process:

- an unterminated last line of items.jsonl is cut as a torn write only when it is one (every
  prefix of a results file resumes; a foreign file reached through --out is refused, never cut);
- a second driver on one compare output folder leaves the runs another process trains alone
  (every subset of a grid's runs held);
- torch.save and safetensors cut off at every byte are read as a full disk;
- SIGTERM is Ctrl-C once (one line, the same exit, the old handler back after), at every point
  of a save (test_train_faults' subprocess case sends the real signal).

(Every step of an atomic write failing, and each writer, `--also-to` copies among them:
test_atomic_writes; a second command into a held folder: test_api_inputs' held rows; a lock file
that is a symlink: test_rundir.)
"""

from __future__ import annotations

import itertools
import json
import os
import pkgutil
import shutil
import signal
from contextlib import ExitStack

import pytest
import torch
from grid_driver import run_order, run_pretrained_grid
from safetensors.torch import save_file

import numloss.evaluate.store
import numloss.train.callbacks
from faultrun import RUN, TINY, at_call, file_size_limit, logged_steps, weights
from numloss.compare.config import compare_config_from_dict
from numloss.compare.runner import Grid
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.store import ResultsFile
from numloss.train import main
from numloss.train.errors import disk_full_error
from test_compare_faults import _mapping
from test_compare_pretrained_grid import _fake_run


def _record(i: int) -> dict:
    return {"model": "m", "benchmark": "b", "protocol": "numloss", "id": str(i), "settings": "s", "kind": "number",
            "gold": str(i), "style": "s", "output": f"é {i}", "prediction": str(i), "correct": i % 2 == 0}


# -- items.jsonl: what counts as a torn tail ---------------------------------------------------------
#: unterminated last lines numloss never writes (items.jsonl a symlink to the user's notes, say)
FOREIGN_TAILS = [b"my notes", b"x", b"[1, 2]", b"\"a string\"", b"42", b"# a comment", b"id,output", b"\xff\xfe"]


def test_an_unterminated_last_line_is_cut_only_when_it_is_a_torn_record(tmp_path, monkeypatch) -> None:
    """A kill mid-append leaves any prefix of a record after the whole ones (a crash, zeros): the
    whole records are read, the next append cuts the torn rest, and appending the missing record
    gives the whole file back. Any other last line (a file numloss did not write, reached through
    a symlink) is refused naming its line, and never cut."""
    monkeypatch.setattr(numloss.evaluate.store.os, "fsync", lambda fd: None)  # 400 appends: not the disk's speed
    first, second = (json.dumps(_record(i), ensure_ascii=False).encode() + b"\n" for i in range(2))
    (tmp_path / "out").mkdir()
    link, outside = tmp_path / "out" / "items.jsonl", tmp_path / "notes.txt"
    link.symlink_to(outside)
    for before in (b"", first):
        for tail in [second[:cut] for cut in range(len(second))] + [b"\0" * 9, b"  {"]:
            outside.write_bytes(before + tail)
            store, whole = ResultsFile(link), [_record(0)] * bool(before) + [_record(1)]
            kept = store.records()  # the last record whole but for its newline is kept
            assert kept == whole[: len(kept)] and len(kept) >= len(whole) - 1, tail
            store.append(whole[len(kept):])
            assert store.records() == whole and outside.read_bytes() in (before + second, before + second[:-1]), tail
        for tail in FOREIGN_TAILS:
            outside.write_bytes(before + tail)
            store = ResultsFile(link)
            with pytest.raises(BenchmarkError, match=r"items\.jsonl:\d+: "):
                store.records()
            with pytest.raises(BenchmarkError):
                store.append([_record(1)])
            assert outside.read_bytes() == before + tail


# -- compare: one process per run --------------------------------------------------------------------
def _tiny_grid(tmp_path):
    mapping = _mapping(tmp_path / "out", records_dir=str(tmp_path / "records"))
    mapping["objectives"], mapping["seeds"] = ["mle", "del"], [0, 1]
    return compare_config_from_dict(mapping)


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_runs_another_process_holds_are_left_to_it_for_every_held_subset_of_a_grid(jobs, tmp_path,
                                                                                      monkeypatch) -> None:
    """Two drivers on one output folder (pretrained shards started twice; `--jobs 2` claims every
    run before its pool starts): for each subset of a grid's runs another process holds (none to
    all), the held ones are skipped and said, their folders never cleared, and only the rest are
    trained (jobs 1: the grid driver with a stand-in run, which claims each run as it reaches it,
    so one held run at a time covers it; jobs 2: the pool is stubbed, what reaches it is the
    property). The claims end with the pass: the next may claim every run."""
    compare = _tiny_grid(tmp_path)
    keys = run_order(compare)
    sizes = range(len(keys) + 1) if jobs == 2 else (0, 1)
    for held in itertools.chain.from_iterable(itertools.combinations(keys, n) for n in sizes):
        for folder in (tmp_path / "records", compare.output_dir / "runs"):
            shutil.rmtree(folder, ignore_errors=True)
        for key in held:  # the other process's runs in progress
            (compare.output_dir / "runs" / key.name / "checkpoint-1").mkdir(parents=True)
        run, said, grid = _fake_run(), [], Grid(compare, None)
        monkeypatch.setattr(Grid, "_run_parallel", lambda self, pending, *rest, run=run: run.calls.extend(k.name for k in pending))
        with ExitStack() as other:
            for key in held:
                other.enter_context(Grid(compare, None).claim(key))
            if jobs == 1:
                busy = run_pretrained_grid(compare, baseline=False, run=run, log=said.append)["busy"]
            else:
                grid.run(keys, lambda *a: None, jobs=2, say=said.append)
                busy = [k.name for k in grid.busy]
        assert busy == [k.name for k in held] and sorted(run.calls) == sorted(k.name for k in keys if k not in held)
        assert all(name in " ".join(said) for name in busy), said
        for key in held:
            assert (compare.output_dir / "runs" / key.name / "checkpoint-1").is_dir(), f"{key.name} was cleared"
        with ExitStack() as again:
            for key in keys:
                again.enter_context(grid.claim(key))


# -- SIGTERM -----------------------------------------------------------------------------------------
#: where a `numloss train` save can be interrupted: (owner, attribute), each wrapped
SAVE_POINTS = {
    "model": ("transformers.trainer:Trainer", "save_model"),
    "optimizer": ("transformers.trainer:Trainer", "_save_optimizer_and_scheduler"),
    "rng": ("transformers.trainer:Trainer", "_save_rng_state"),
    "trainer-state": ("transformers.trainer_callback:TrainerState", "save_to_json"),
    "marker": ("numloss.checkpoints", "write_marker"),  # and the callbacks' binding of it
    "atomic-file": ("numloss.atomic", "write_bytes_atomic"),
    "final-commit": ("numloss.train.run", "commit_final"),
}


# slow: two tiny runs per call (about 30 calls); fast: final-commit here (the handler) and
# test_train_faults' Ctrl-C case (the path an interrupt takes out of a save)
@pytest.mark.parametrize("point", [p if p == "final-commit" else pytest.param(p, marks=pytest.mark.slow)
                                   for p in SAVE_POINTS])
def test_sigterm_at_every_call_of_every_save_point_is_one_line_and_resumes_bitwise(point, tmp_path, monkeypatch,
                                                                                   capsys, train_reference) -> None:
    """`numloss train` sent SIGTERM as each save starts (every call of it in a 4-step run, until
    a run makes fewer calls and finishes): exit 130 and one line naming what to run, the old
    SIGTERM handler back; that command ends on the uninterrupted run's weights."""
    torch.set_num_threads(1)  # a resume is bitwise at one thread count
    handler = signal.getsignal(signal.SIGTERM)
    for nth in itertools.count(1):
        out = tmp_path / f"{point}-{nth}"
        capsys.readouterr()
        with monkeypatch.context() as patch:
            owner, name = SAVE_POINTS[point]
            owners = [pkgutil.resolve_name(owner)] + ([numloss.train.callbacks] if name == "write_marker" else [])
            calls = at_call(patch, owners, name, nth, lambda: os.kill(os.getpid(), signal.SIGTERM))
            status = main([str(TINY), "--train.output_dir", str(out), *RUN])
        if status == 0:  # the run made fewer calls than nth: every call was interrupted once
            assert calls["n"] == nth - 1 and nth > 1, f"{point} is no save point of a run any more"
            break
        assert status == 130 and signal.getsignal(signal.SIGTERM) == handler, nth
        err = capsys.readouterr().err
        line = [x for x in err.splitlines() if x.startswith("numloss train")]
        assert len(line) == 1 and "interrupted" in line[0] and "Traceback" not in err, (nth, err[-1500:])
        resume = ["--resume"] if "--resume" in line[0] else []
        assert main([str(TINY), "--train.output_dir", str(out), *RUN, *resume]) == 0, (nth, line)
        final, expected = weights(out / "final"), weights(train_reference / "final")
        assert all(torch.equal(final[k], expected[k]) for k in expected), (point, nth, line)
        assert logged_steps(out) == [1, 2, 3, 4], (point, nth)


@pytest.mark.parametrize("writer", ["torch.save", "safetensors"])
def test_a_write_failing_at_every_byte_of_a_checkpoint_file_is_a_full_disk(writer, tmp_path) -> None:
    """torch.save (optimizer.pt, scheduler.pt, rng_state.pth) and safetensors (the weights) cut
    off by a file-size limit at every point of the file: each error they raise is read as a
    full disk (the run's one line), whatever text the errno was lost in."""
    tensors = {f"t{i}": torch.arange(512, dtype=torch.float32) + i for i in range(4)}
    path = tmp_path / "file"

    def write() -> None:
        torch.save({"state": tensors}, path) if writer == "torch.save" else save_file(tensors, str(path))

    write()
    size = path.stat().st_size
    unread = {}
    for limit in sorted({*range(0, size, 97), *range(0, 80), size - 1}):
        path.unlink(missing_ok=True)  # safetensors removes what it could not finish
        try:
            with file_size_limit(limit):
                write()
        except Exception as error:  # noqa: BLE001 - whatever the writer raises is the case under test
            if disk_full_error(error, path) is None:
                unread[limit] = f"{type(error).__name__}: {error}"[:120]
        else:
            raise AssertionError(f"{writer} wrote {size} bytes under a limit of {limit}")
    assert not unread, unread
