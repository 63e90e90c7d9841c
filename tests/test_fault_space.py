"""Faults found by red-teaming the save paths, each tested over its whole space, in-process:

- an unterminated last line of items.jsonl is cut as a torn write only when it is one (every
  prefix of a results file resumes; a foreign file reached through --out is refused, never cut);
- a second driver on one compare output folder leaves a run another process trains alone (every
  run of a grid, held in turn);
- `--also-to` copies are written whole (a write failing at every byte count keeps the old copy);
- a second `numloss eval` into a held --out stops in one line naming the holder;
- every atomic writer with a folder in the way names that folder; every step of an atomic write
  (write, fsync of the file and of its folder, rename) failing names the file and keeps the old one;
- torch.save and safetensors cut off at every byte are read as a full disk;
- a lock file that is a symlink is refused by every command, its target untouched;
- SIGTERM is Ctrl-C (one line, the same exit), at every point of a save (test_train_faults'
  subprocess case sends the real signal).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from faultrun import file_size_limit
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.store import ResultsFile


def _record(i: int) -> dict:
    return {"model": "m", "benchmark": "b", "protocol": "numloss", "id": str(i), "settings": "s", "kind": "number",
            "gold": str(i), "style": "s", "output": f"é {i}", "prediction": str(i), "correct": i % 2 == 0}


# -- items.jsonl: what counts as a torn tail ---------------------------------------------------------
def test_every_prefix_of_a_results_file_resumes_to_the_whole_file(tmp_path, monkeypatch) -> None:
    """A kill mid-append leaves any prefix of the file: the whole records before it are read, the
    torn rest is cut on the next append, and appending the missing records gives the file back."""
    import numloss.evaluate.store

    monkeypatch.setattr(numloss.evaluate.store.os, "fsync", lambda fd: None)  # 700 appends: not the disk's speed
    records = [_record(i) for i in range(4)]
    whole = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    path = tmp_path / "items.jsonl"
    for cut in range(len(whole) + 1):
        path.write_bytes(whole[:cut])
        store = ResultsFile(path)
        kept = store.records()
        assert kept == records[: len(kept)], cut
        store.append(records[len(kept):])
        assert store.records() == records, cut
        assert path.read_bytes() == whole[: len(path.read_bytes())] and len(path.read_bytes()) >= len(whole) - 1, cut


FOREIGN_TAILS = [b"my notes", b"x", b"[1, 2]", b"\"a string\"", b"42", b"# a comment", b"id,output", b"\xff\xfe"]


@pytest.mark.parametrize("tail", FOREIGN_TAILS)
@pytest.mark.parametrize("before", [b"", json.dumps(_record(0)).encode() + b"\n"], ids=["alone", "after-a-record"])
def test_an_unterminated_last_line_that_is_no_record_is_refused_never_cut(tail, before, tmp_path) -> None:
    """A file numloss did not write (items.jsonl a symlink to the user's notes, say) is not cut
    as a torn write: the read names the line and nothing changes."""
    outside = tmp_path / "notes.txt"
    outside.write_bytes(before + tail)
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "items.jsonl"
    link.symlink_to(outside)
    store = ResultsFile(link)
    with pytest.raises(BenchmarkError, match=r"items\.jsonl:\d+: "):
        store.records()
    with pytest.raises(BenchmarkError):
        store.append([_record(1)])
    assert outside.read_bytes() == before + tail


@pytest.mark.parametrize("tail", [b"{", b"{\"model\": \"m\", \"outp", "{\"output\": \"é".encode()[:-1], b"\0" * 9, b"  {"])
def test_what_a_kill_or_a_crash_leaves_is_a_torn_record(tail) -> None:
    from numloss.evaluate.store import torn_record

    assert torn_record(tail)


# -- compare: one process per run --------------------------------------------------------------------
def _tiny_grid(tmp_path: Path):
    from numloss.compare.config import compare_config_from_dict
    from test_compare_faults import _mapping

    mapping = _mapping(tmp_path / "out", records_dir=str(tmp_path / "records"))
    mapping["objectives"], mapping["seeds"] = ["mle", "del"], [0, 1]
    return compare_config_from_dict(mapping)


def test_a_run_another_process_trains_is_left_to_it_for_every_run_of_a_grid(tmp_path) -> None:
    """Two drivers on one output folder (pretrained shards started twice): the second skips the
    run the first holds, never clearing its folder, and trains the others."""
    import shutil

    from grid_driver import run_order, run_pretrained_grid

    from numloss.compare.runner import Grid
    from test_compare_pretrained_grid import _fake_run

    compare = _tiny_grid(tmp_path)
    keys = run_order(compare)
    for held in keys:
        for folder in (tmp_path / "records", compare.output_dir):
            shutil.rmtree(folder, ignore_errors=True)
        run_dir = compare.output_dir / "runs" / held.name
        run_dir.mkdir(parents=True)
        (run_dir / "checkpoint-1").mkdir()  # the other process's run in progress
        with Grid(compare, None).claim(held):
            run = _fake_run()
            status = run_pretrained_grid(compare, baseline=False, run=run, log=lambda _: None)
        assert (run_dir / "checkpoint-1").is_dir(), f"{held.name}: the other process's run was cleared"
        assert held.name not in run.calls and status["busy"] == [held.name]
        assert sorted(run.calls) == sorted(k.name for k in keys if k != held)


def test_with_jobs_the_runs_another_process_holds_never_reach_the_pool(tmp_path, monkeypatch) -> None:
    """`--jobs 2` claims every run before the pool starts: for each held subset of a grid's runs
    (none to all), the held ones are skipped and said, their folders kept, and only the rest are
    handed to the workers (the pool is stubbed: what reaches it is the property)."""
    import itertools
    from contextlib import ExitStack

    from grid_driver import run_order

    from numloss.compare.runner import Grid

    compare = _tiny_grid(tmp_path)
    keys = run_order(compare)
    for size in range(len(keys) + 1):
        for held in itertools.combinations(keys, size):
            pooled: list[list[str]] = []
            monkeypatch.setattr(Grid, "_run_parallel",
                                lambda self, pending, *rest, pooled=pooled: pooled.append([k.name for k in pending]))
            said: list[str] = []
            for key in held:  # the other process's runs in progress
                (compare.output_dir / "runs" / key.name / "checkpoint-1").mkdir(parents=True, exist_ok=True)
            grid = Grid(compare, None)
            with ExitStack() as other:
                for key in held:
                    other.enter_context(Grid(compare, None).claim(key))
                grid.run(keys, lambda *a: None, jobs=2, say=said.append)
            rest = [k.name for k in keys if k not in held]
            assert pooled == ([rest] if rest else []), (held, pooled)
            assert [k.name for k in grid.busy] == [k.name for k in held]
            assert len(said) == len(held) and all("skipped" in line for line in said), said
            for key in held:
                assert (compare.output_dir / "runs" / key.name / "checkpoint-1").is_dir(), f"{key.name} was cleared"
            # the claims of a grid end with it: a second grid may claim every run again
            with ExitStack() as again:
                for key in keys:
                    again.enter_context(grid.claim(key))


def test_copies_to_also_to_are_whole_or_the_old_one_at_every_failing_byte(tmp_path) -> None:
    """A full quota mid-copy (a file-size limit at every byte count) keeps the copy already there."""
    from grid_driver import _copy

    record = tmp_path / "records" / "r.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"hash": "new", "items": "10" * 20}))
    out = tmp_path / "OUT"
    out.mkdir()
    old = json.dumps({"hash": "old", "items": "01" * 20})
    for limit in range(len(record.read_bytes())):
        (out / "r.json").write_text(old)
        with file_size_limit(limit), pytest.raises(OSError):
            _copy(record, [out])
        assert (out / "r.json").read_text() == old, limit
    _copy(record, [out])
    assert (out / "r.json").read_bytes() == record.read_bytes()
    assert [p.name for p in out.iterdir()] == ["r.json"], "no temporary left"


# -- eval: one writer per --out ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["evaluate", "score-outputs"])
def test_a_second_eval_into_a_held_out_is_one_line_naming_the_holder(mode, tmp_path, capsys) -> None:
    from numloss.evaluate import cli
    from numloss.rundir import hold_run_dir
    from test_eval_faults import QUIET

    out = tmp_path / "out"
    out.mkdir()
    items = out / "items.jsonl"
    items.write_text(json.dumps(_record(0)) + "\n")
    argv = (["tiny", "--benchmarks", "synthetic:arithmetic", "--limit", "2", "--max-new-tokens", "2"] if mode == "evaluate"
            else ["--score-outputs", str(items)]) + ["--out", str(out), *QUIET]
    with hold_run_dir(out, "numloss eval"):
        status = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and f"pid {os.getpid()}" in err[0] and "numloss eval" in err[0], err
    assert items.read_text() == json.dumps(_record(0)) + "\n"


# -- a folder where a file belongs -------------------------------------------------------------------
@pytest.mark.parametrize("writer", ["write_bytes_atomic", "write_text_atomic", "write_json_atomic"])
def test_every_atomic_writer_names_the_folder_in_its_way(writer, tmp_path) -> None:
    import numloss.atomic

    target = tmp_path / "results.json"
    (target / "inside").mkdir(parents=True)
    payload = b"{}" if writer == "write_bytes_atomic" else "{}" if writer == "write_text_atomic" else {}
    with pytest.raises(IsADirectoryError) as caught:
        getattr(numloss.atomic, writer)(target, payload)
    assert caught.value.filename == str(target)
    assert (target / "inside").is_dir() and [p.name for p in tmp_path.iterdir()] == ["results.json"]


# -- SIGTERM -----------------------------------------------------------------------------------------
def test_sigterm_is_an_interrupt_once_and_the_old_handler_comes_back() -> None:
    from numloss.interrupt import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next bytecode
    assert signal.getsignal(signal.SIGTERM) == before


#: where a `numloss train` save can be interrupted: (owner module path, attribute), each wrapped
SAVE_POINTS = {
    "model": ("transformers.trainer:Trainer", "save_model"),
    "optimizer": ("transformers.trainer:Trainer", "_save_optimizer_and_scheduler"),
    "rng": ("transformers.trainer:Trainer", "_save_rng_state"),
    "trainer-state": ("transformers.trainer_callback:TrainerState", "save_to_json"),
    "marker": ("numloss.checkpoints", "write_marker"),
    "atomic-file": ("numloss.atomic", "write_bytes_atomic"),
    "final-commit": ("numloss.train.run", "commit_final"),
}


def _owner(spec: str):
    import importlib

    module, _, name = spec.partition(":")
    owner = importlib.import_module(module)
    return getattr(owner, name) if name else owner


def _signal_at(monkeypatch, point: str, nth: int | None) -> dict[str, int]:
    """Send SIGTERM to this process as the `nth` call of `point` starts (None: count only)."""
    import numloss.train.callbacks

    spec, name = SAVE_POINTS[point]
    owners = [_owner(spec)] + ([numloss.train.callbacks] if name == "write_marker" else [])
    calls = {"n": 0}
    for owner in owners:
        real = getattr(owner, name)

        def wrapped(*args, _real=real, **kwargs):
            calls["n"] += 1
            if calls["n"] == nth:
                os.kill(os.getpid(), signal.SIGTERM)
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)
    return calls


# slow: two tiny runs per call (about 30 calls); fast: final-commit here, test_sigterm_is_an_interrupt_once...
# (the handler) and test_train_faults' Ctrl-C case (the path an interrupt takes out of a save)
@pytest.mark.parametrize("point", [p if p == "final-commit" else pytest.param(p, marks=pytest.mark.slow)
                                   for p in SAVE_POINTS])
def test_sigterm_at_every_call_of_every_save_point_is_one_line_and_resumes_bitwise(point, tmp_path, monkeypatch,
                                                                                   capsys, train_reference) -> None:
    """`numloss train` sent SIGTERM as each save starts (every call of it in a 4-step run, until
    a run makes fewer calls and finishes): exit 130 and one line naming what to run; that command
    ends on the uninterrupted run's weights."""
    import itertools

    import torch

    from faultrun import RUN, TINY, logged_steps, weights
    from numloss.train import main

    torch.set_num_threads(1)  # a resume is bitwise at one thread count
    for nth in itertools.count(1):
        out = tmp_path / f"{point}-{nth}"
        capsys.readouterr()
        with monkeypatch.context() as patch:
            calls = _signal_at(patch, point, nth)
            status = main([str(TINY), "--train.output_dir", str(out), *RUN])
        if status == 0:  # the run made fewer calls than nth: every call was interrupted once
            assert calls["n"] == nth - 1 and nth > 1, f"{point} is no save point of a run any more"
            break
        assert status == 130, nth
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
    import torch
    from safetensors.torch import save_file

    from numloss.train.errors import disk_full_error

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


def _lockers(tmp_path: Path) -> dict:
    """Every command's way of holding its folder, by name: (context manager factory, folder)."""
    from numloss.compare.runner import Grid, RunKey, hold_output_dir
    from numloss.evaluate.cli import hold_out
    from numloss.rundir import hold_run_dir

    grid = _tiny_grid(tmp_path / "grid")
    key = RunKey(grid.objectives[0], grid.seeds[0])
    return {
        "train": (lambda: hold_run_dir(tmp_path / "run", "numloss train"), tmp_path / "run"),
        "eval": (lambda: hold_out(str(tmp_path / "eval")), tmp_path / "eval"),
        "compare": (lambda: hold_output_dir(tmp_path / "compare"), tmp_path / "compare"),
        "compare-run": (lambda: Grid(grid, None).claim(key), grid.output_dir / "runs" / ".claims" / key.name),
    }


@pytest.mark.parametrize("command", ["train", "eval", "compare", "compare-run"])
def test_a_lock_file_that_is_a_symlink_is_refused_and_its_target_untouched(command, tmp_path) -> None:
    """The holder's record is written into the lock file: never through a link to a file outside."""
    from numloss.config import ConfigError
    from numloss.rundir import LOCK_NAME, RunDirLockError

    hold, folder = _lockers(tmp_path)[command]
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / LOCK_NAME).symlink_to(victim)
    with pytest.raises((RunDirLockError, ConfigError, ValueError), match="symbolic link") as caught:
        with hold():
            pass
    assert "\n" not in str(caught.value)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("step", ["write", "fsync", "replace", "fsync-folder"])
@pytest.mark.parametrize("errno_name", ["EIO", "ENOSPC", "EDQUOT", "EINVAL", "EROFS", "ENOTSUP"])
def test_every_step_of_an_atomic_write_failing_names_the_file_and_keeps_the_old_one(step, errno_name, tmp_path,
                                                                                   monkeypatch) -> None:
    """Each step of an atomic write failing (the write, the file's fsync, the rename, then the
    folder's fsync): an OSError naming the file, the old one kept, no temporary left. The folder's
    fsync comes after the rename: a lost write-back (EIO, ENOSPC, EDQUOT) names the folder, never
    a write reported done; a folder that cannot be fsynced (EINVAL, EROFS, ENOTSUP) is no error."""
    import builtins
    import errno

    import numloss.atomic

    number = getattr(errno, errno_name)
    target = tmp_path / "config.yaml"
    target.write_text("old")
    real_fsync, real_open, fsyncs = os.fsync, builtins.open, []

    def fail(*args, **kwargs):
        raise OSError(number, os.strerror(number), *([str(args[0])] if step == "replace" else []))

    def fsync(fd):  # the file's, then the folder's
        fsyncs.append(fd)
        return fail() if len(fsyncs) == (2 if step == "fsync-folder" else 1) else real_fsync(fd)

    class Failing:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            fail()

    if step == "write":
        monkeypatch.setattr(builtins, "open", lambda *a, **k: Failing(real_open(*a, **k)) if "wb" in a else real_open(*a, **k))
    else:
        monkeypatch.setattr(numloss.atomic.os, "replace" if step == "replace" else "fsync", fail if step == "replace" else fsync)
    if step == "fsync-folder" and number not in numloss.atomic.LOST_WRITE_ERRNOS:
        numloss.atomic.write_text_atomic(target, "new")
        assert target.read_text() == "new" and len(fsyncs) == 2
        return
    with pytest.raises(OSError) as caught:
        numloss.atomic.write_text_atomic(target, "new")
    monkeypatch.undo()
    folder = step == "fsync-folder"
    assert caught.value.errno == number and caught.value.filename == str(tmp_path if folder else target)
    assert target.read_text() == ("new" if folder else "old") and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]
