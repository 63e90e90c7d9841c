"""`numloss train` under faults: kills during saves (SIGKILL and Ctrl-C through tests/faultrun.py),
damaged checkpoints, a folder holding another run, a resume with other settings or changed
inputs, the recovery of a folder killed before its first whole save, a save_only_model
checkpoint, a full disk, and every config key fed wrong values (a second run into a held folder:
test_api_inputs' held rows). Tiny model, 4 steps: each test takes a few seconds."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

import numloss.train.build
from faultrun import (
    RUN,
    TINY,
    assert_same_weights,
    cli,
    config,
    file_size_limit,
    logged_losses,
    logged_steps,
    one_line,
    snapshot,
    train_killed_after,
    wait_until_paused,
)
from numloss.checkpoints import write_marker
from numloss.config import SECTIONS, ConfigError, all_keys, dump_config, load_config
from numloss.train import (
    CHECKPOINT_MARKER,
    INPUTS_FILE,
    DiskFullError,
    check_run,
    disk_full_error,
    main,
    run_training,
)
from numloss.train.errors import train_error


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The in-process runs on one thread, as the `cli` ones are (OMP_NUM_THREADS=1): a resume is
    bitwise at one thread count, and two thread counts sum in other orders (about 1e-6 apart)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A run 'killed' right after its step-3 checkpoint (checkpoints 1, 2, 3; no final/)."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    train_killed_after(config(out), 3)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    return out


def train(out: Path, *overrides: str) -> list[str]:
    """`numloss train`'s argv of `config(out, *overrides)`, for faultrun.one_line."""
    return ["train", str(TINY), "--train.output_dir", str(out), *RUN, *overrides]


@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the error was found")

    monkeypatch.setattr(numloss.train.build, "load_model_for", refuse)


# -- kill points -----------------------------------------------------------------------------------
# slow: a kill after the rename; final-marked covers a resume that finds the run finished.
# slow: a kill while checkpoint-4's files are written; fast covers: test_same_size_corruption_falls_back_
# to_the_newest_intact_checkpoint below (a checkpoint without its marker is set aside; the fallback ends on
# the reference weights and losses, each step logged once) and the two SIGKILLs during final/'s save here.
# slow: a run without checkpoints killed in final/'s save: the same recovery as from a first checkpoint.
# pause:...: Ctrl-C (SIGINT to the paused process), which prints one line naming the checkpoint and --resume
@pytest.mark.parametrize(("point", "extra", "said"), [
    pytest.param("pause:checkpoint-2-marked", (), "continuing from checkpoint-2", id="ctrl-c"),
    pytest.param("checkpoint-1-files-written", (), "killed before a whole save", id="first-checkpoint"),
    pytest.param("final-files-written", ("--train.save_steps", "0"), "killed before a whole save",
                 id="final-without-checkpoints", marks=pytest.mark.slow),
    pytest.param("checkpoint-4-files-written", (), "checkpoint-4 fails its check: it has no completion marker",
                 marks=pytest.mark.slow),
    ("final-files-written", (), "checkpoint-4 is the run's last step; saving it as final/ without training"),
    ("final-marked", (), "completed the save of final/"),
    pytest.param("final-renamed", (), "already finished (step 4)", marks=pytest.mark.slow),
])
def test_a_kill_at_a_save_point_is_continued_by_the_command_it_names(tmp_path, train_reference, point, extra, said,
                                                                    capsys, caplog):
    """SIGKILL (or Ctrl-C) at a save point, then --resume in-process (`numloss train`'s own entry
    point, at the reference's one thread). Before the folder's first whole save it is refused in
    one line naming the same command without --resume, which starts again; after it, it ends
    with 4 steps (never a 5th; a finished run left as it is). Each step logged once, the
    reference weights bit for bit."""
    out, release = tmp_path / "run", tmp_path / "release"
    if point.startswith("pause:"):
        process = cli(out, env={"NUMLOSS_FAULT_POINT": point, "NUMLOSS_FAULT_FILE": str(release)}, wait=False)
        wait_until_paused(process, release)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
        line = err.strip().splitlines()[-1]
        assert line.startswith("numloss train: interrupted;") and "checkpoint-2" in line and "--resume" in line
    else:
        killed = cli(out, *extra, env={"NUMLOSS_FAULT_POINT": point})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    argv = train(out, *extra)[1:]
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="numloss.train"):
        status, printed = main([*argv, "--resume"]), capsys.readouterr()
        if "before a whole save" in said:
            line = printed.err.strip().splitlines()[-1]
            assert status == 2 and "run the same command without --resume" in line, printed.err[-2000:]
            status, printed = main(argv), capsys.readouterr()
    assert status == 0 and "Traceback" not in printed.err and said in caplog.text, printed.err[-2000:]
    finished = point in ("final-marked", "final-renamed")
    assert ("already finished (4 steps)" if finished else "done, 4 steps") in printed.out
    assert not (out / "final.partial").exists() and (out / "final" / CHECKPOINT_MARKER).is_file()
    assert_same_weights(train_reference / "final", out / "final")
    assert logged_steps(out) == [1, 2, 3, 4]


# -- damaged checkpoints ---------------------------------------------------------------------------
def flip(path: Path, at: int, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + count] = bytes(b ^ 0xFF for b in data[at : at + count])
    path.write_bytes(bytes(data))


def test_same_size_corruption_falls_back_to_the_newest_intact_checkpoint(tmp_path, stopped, train_reference, caplog):
    """Newer checkpoints killed while saving (no marker) or changed since (same size, other bytes)
    are set aside; the resume from the newest whole one ends on the uninterrupted run's weights,
    each step logged once with its loss."""
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    (out / "checkpoint-4").mkdir()  # killed while saving: files, but no completion marker
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"\0" * 10)
    size = (out / "checkpoint-3" / "model.safetensors").stat().st_size
    flip(out / "checkpoint-3" / "model.safetensors", size // 2)  # 64 bytes of weights
    state = out / "checkpoint-2" / "trainer_state.json"
    state.write_bytes(b"\0" * state.stat().st_size)  # zeroed, same size
    with caplog.at_level("WARNING", logger="numloss.train"):
        result = run_training(config(out, "--train.resume", "true"))
    assert "checkpoint-4 fails its check: it has no completion marker" in caplog.text
    assert "checkpoint-3 fails its check: model.safetensors changed since it was saved" in caplog.text
    assert "checkpoint-2 fails its check: trainer_state.json changed since it was saved" in caplog.text
    assert "falling back to checkpoint-1, the newest intact checkpoint" in caplog.text
    assert result.global_step == 4 and logged_losses(out) == pytest.approx(logged_losses(train_reference), rel=1e-5)
    assert_same_weights(train_reference / "final", out / "final")
    assert all((out / f"partial-checkpoint-{n}").is_dir() for n in (2, 3, 4))


def test_resume_from_a_damaged_or_a_model_only_checkpoint_is_one_line(tmp_path, stopped, no_model_loads, capsys):
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    # truncated, with its marker: the marker's sizes
    model = out / "checkpoint-3" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:1000])
    # a same-size corrupt safetensors header in a checkpoint without a marker: the structure check
    header = out / "checkpoint-2" / "model.safetensors"
    flip(header, 8, 16)
    (out / "checkpoint-2" / CHECKPOINT_MARKER).unlink()
    # a zeroed trainer_state.json, no marker
    state = out / "checkpoint-1" / "trainer_state.json"
    state.write_bytes(b"\0" * state.stat().st_size)
    (out / "checkpoint-1" / CHECKPOINT_MARKER).unlink()
    expected = {
        "checkpoint-3": "model.safetensors is damaged",
        "checkpoint-2": "model.safetensors: not a whole safetensors file",
        "checkpoint-1": "trainer_state.json is not valid JSON",
    }
    for name, message in expected.items():
        line = one_line(train(out, "--train.resume", str(out / name)), capsys)
        assert "cannot be resumed from" in line and message in line, line
    # a save_only_model checkpoint (weights alone) is not resumed silently without its optimizer
    only = tmp_path / "only" / "checkpoint-2"
    only.mkdir(parents=True)
    (only / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 4}))
    write_marker(only, 2)
    (only.parent / "config.yaml").write_text(dump_config(config(only.parent)))
    line = one_line(train(only.parent, "--train.resume", "true"), capsys)
    assert "no optimizer or scheduler state" in line and "save_only_model" in line and "--resume-changed" in line


# -- foreign runs, changed settings ---------------------------------------------------------------
def test_a_finished_or_foreign_run_is_never_overwritten_without_overwrite(tmp_path, train_reference, no_model_loads,
                                                                         monkeypatch, capsys):
    out = tmp_path / "run"
    shutil.copytree(train_reference, out)
    kept = snapshot(out)
    cases = {
        ("--train.seed", "1"): "already holds a finished run (final/, step 4) of another config (train.seed 0 -> 1)",
        (): "already holds a finished run (final/, step 4) of this config",
    }
    for overrides, message in cases.items():
        for dry in ((), ("--dry-run",)):
            line = one_line(train(out, *overrides, *dry), capsys)
            assert message in line and "--overwrite moves its files" in line
    # --resume of the finished run says so and leaves every file as it is (snapshot below)
    assert main(train(out, "--resume")[1:]) == 0 and "already finished (4 steps)" in capsys.readouterr().out
    # Trainer files without numloss's config.yaml: foreign too
    trainer_only = tmp_path / "trainer-only"
    (trainer_only / "checkpoint-500").mkdir(parents=True)
    (trainer_only / "trainer_state.json").write_text("{}")
    with pytest.raises(ConfigError, match="whose settings are unknown: it has no config.yaml"):
        run_training(config(trainer_only))
    with pytest.raises(ConfigError, match="--overwrite and --resume contradict"):
        run_training(config(out, "--train.overwrite", "true", "--train.resume", "true"))
    assert snapshot(out) == kept
    # --overwrite moves the old run aside, byte for byte, and trains a new one
    monkeypatch.undo()  # the model may load now
    result = run_training(config(out, "--train.seed", "1", "--train.overwrite", "true"))
    assert result.global_step == 4
    (aside,) = out.glob("overwritten-*")
    assert snapshot(aside) == kept
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["seed"] == 1
    assert logged_steps(out) == [1, 2, 3, 4]


def test_resume_refuses_changed_settings_that_change_the_run(tmp_path, stopped, train_reference, caplog, capsys):
    out = tmp_path / "run"
    shutil.copytree(stopped, out)
    refused = {
        ("--objective.alpha", "0.5"): "objective.alpha None -> 0.5",
        ("--objective.name", "ntl-was"): "objective.name 'del' -> 'ntl-was'",
        ("--objective.options.place_weighting", "continuous"): "objective.options.place_weighting '(unset)' -> 'continuous'",
        ("--train.learning_rate", "0.02"): "train.learning_rate 0.01 -> 0.02",
        ("--train.seed", "3"): "train.seed 0 -> 3",
        ("--data.num_examples", "17"): "data.num_examples 16 -> 17",
        ("--model.tiny_hidden", "32", "--model.tiny_heads", "2"): "model.tiny_hidden 64 -> 32",
        ("--train.max_steps", "5"): "train.max_steps 4 -> 5",
    }
    for overrides, message in refused.items():
        line = one_line(train(out, "--train.resume", "true", *overrides, "--dry-run"), capsys)
        assert message in line and "--resume-changed" in line, line
    # a resume whose model shape changed, let through by --resume-changed: one line, no traceback
    line = one_line(train(out, "--train.resume", "true", "--train.resume_changed", "true",
                          "--model.tiny_hidden", "32", "--model.tiny_heads", "2"), capsys)
    assert "was saved from a model of another shape" in line
    # logging settings may change, and a folder of an older numloss (no inputs.json) resumes as
    # before: the resumed run is the reference run
    (out / INPUTS_FILE).unlink()
    result = run_training(config(out, "--train.resume", "true", "--train.logging_steps", "2"))
    assert result.global_step == 4
    assert_same_weights(train_reference / "final", out / "final")
    # --resume-changed continues under the new settings and keeps the old config.yaml
    again = tmp_path / "again"
    shutil.copytree(stopped, again)
    with caplog.at_level("WARNING", logger="numloss.train"):
        run_training(config(again, "--train.resume", "true", "--train.resume_changed", "true", "--train.learning_rate", "0.02"))
    assert "continuing under new settings: train.learning_rate 0.01 -> 0.02" in caplog.text
    assert yaml.safe_load((again / "config-before-step-3.yaml").read_text())["train"]["learning_rate"] == 0.01
    assert yaml.safe_load((again / "config.yaml").read_text())["train"]["learning_rate"] == 0.02


# -- a full disk -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("limit", "where"), [(150_000, "checkpoint-1"), (350_000, "checkpoint-1"), (150_000, "final.partial")],
                         ids=["safetensors", "torch.save", "final"])
def test_a_full_disk_during_a_save_is_one_line_naming_the_path(tmp_path, capsys, limit, where):
    """RLIMIT_FSIZE stops a write with EFBIG as a full disk does with ENOSPC: model.safetensors
    (~240 kB) fails under 150 kB in safetensors' writer, optimizer.pt (~490 kB) under 350 kB in
    torch.save ("enforce fail ... file write failed")."""
    out = tmp_path / "run"
    save = ["--train.save_steps", "0"] if where == "final.partial" else []
    with file_size_limit(limit):
        status = main(train(out, "--train.max_steps", "1", *save)[1:])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"numloss train: disk full at {out / where}") and "; then run the same command" in err[-1], err[-1]
    assert not (out / "final").exists()


def test_train_error_names_a_full_disks_file_and_a_diverged_step_and_nothing_else(tmp_path):
    """(torch.save's and safetensors' own errors at every byte: test_fault_space.)"""
    trainer, saved = SimpleNamespace(state=SimpleNamespace(global_step=3)), tmp_path / "checkpoint-3" / "optimizer.pt"
    full = train_error(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(saved)), tmp_path, trainer, None)
    assert isinstance(full, DiskFullError) and f"disk full at {saved}: No space left on device" in str(full)
    assert disk_full_error(ValueError("something else"), tmp_path) is None
    error = train_error(FloatingPointError("del: the loss is not finite although the logits are; alpha=1e+30"),
                        tmp_path, trainer, None)
    assert isinstance(error, ConfigError) and "\n" not in str(error)
    assert str(error).startswith("training stopped at step 3: FloatingPointError: del:")


# -- every config key, wrong values ------------------------------------------------------------------
WRONG = ["-1", "0", "2", "-0.5", ".nan", ".inf", "1e309", "abc", "''", "[1, 2]", "{a: 1}", "true", "null",
         "18446744073709551616", "/no/such/path", "'1.5'"]


def test_every_config_key_given_wrong_values_is_one_line_or_a_valid_run(tmp_path):
    """Each key of every config section (enumerated from the dataclasses) x every wrong type and
    value above: load_config and then every check of a dry run either refuse it in one line (a
    ConfigError) or pass; a seeded sample of what passes then trains (1 step)."""
    rng = random.Random(0)
    keys = [key for key in all_keys() if key not in ("train.output_dir",)]
    assert len(keys) >= 55 and {key.split(".")[0] for key in keys if "." in key} == set(SECTIONS)
    out = tmp_path / "run"
    base = ["--train.output_dir", str(out), "--train.max_steps", "1", "--data.num_examples", "8",
            "--model.tiny_layers", "1"]
    passed: list[tuple[str, list[str]]] = []
    failures: list[str] = []
    for key in keys:
        for value in WRONG:
            argv = [*base, f"--{key}", value]
            try:
                check_run(load_config(TINY, argv))
            except ConfigError as error:
                if not str(error) or "\n" in str(error):
                    failures.append(f"--{key} {value}: not one line: {error!r}")
                continue
            except Exception as error:  # noqa: BLE001 - the property: nothing but a ConfigError
                failures.append(f"--{key} {value}: {type(error).__name__}: {error}")
                continue
            passed.append((key, argv))
    assert not failures, "\n".join(failures)
    assert len(passed) > 20
    # runs of 1 step (a config asking for 2**64 steps is valid, and would not end)
    runnable = [argv for key, argv in passed if key not in ("train.max_steps", "train.num_train_epochs")]
    for argv in rng.sample(runnable, 4):
        shutil.rmtree(out, ignore_errors=True)
        try:
            result = run_training(load_config(TINY, argv))
        except ConfigError as error:
            assert "\n" not in str(error), argv
            continue
        assert result.global_step >= 1 and (out / "final").is_dir(), argv


def test_resume_from_a_named_checkpoint_of_another_folder_into_an_empty_one(tmp_path, stopped, train_reference):
    """train.resume PATH into a new output_dir continues PATH's run (compared with the config.yaml
    beside PATH), never a fresh start; its log.csv starts with PATH's logged steps, as its
    log_history.json does."""
    out = tmp_path / "elsewhere"
    with pytest.raises(ConfigError, match="train.learning_rate 0.01 -> 0.02"):
        run_training(config(out, "--train.resume", str(stopped / "checkpoint-3"), "--train.learning_rate", "0.02"))
    result = run_training(config(out, "--train.resume", str(stopped / "checkpoint-3")))
    assert result.global_step == 4 and logged_steps(out) == [1, 2, 3, 4]
    assert_same_weights(train_reference / "final", out / "final")


# -- a resume tied to its inputs -------------------------------------------------------------------
def _data(path: Path, shift: int = 0) -> Path:
    path.write_text("".join(json.dumps({"instruction": f"{a} + {a + shift} =", "output": str(2 * a + shift)}) + "\n"
                            for a in range(16)), encoding="utf-8")
    return path


def test_resume_after_the_data_file_changed_is_refused_naming_it(tmp_path, monkeypatch, caplog, capsys) -> None:
    data, out = _data(tmp_path / "train.jsonl"), tmp_path / "run"
    train_killed_after(config(out, "--data.source", str(data)), 2)
    capsys.readouterr()  # the training's progress bars
    inputs = json.loads((out / INPUTS_FILE).read_text())
    assert inputs["data_sha256"].startswith("sha256:") and "model_sha256" not in inputs
    stat = data.stat()
    _data(data, shift=1)  # the same path, other contents, the old time restored
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with monkeypatch.context() as patch:
        patch.setattr(numloss.train.build, "load_model_for", lambda *a, **k: pytest.fail("loaded before the refusal"))
        line = one_line(train(out, "--data.source", str(data), "--train.resume", "true"), capsys)
    assert "the training data" in line and "changed (sha256:" in line and "--resume-changed" in line
    with caplog.at_level("WARNING", logger="numloss.train"):
        result = run_training(config(out, "--data.source", str(data), "--train.resume", "true",
                                     "--train.resume_changed", "true"))
    assert result.global_step == 4 and "continuing although the training data" in caplog.text
    assert json.loads((out / INPUTS_FILE).read_text())["data_sha256"] != inputs["data_sha256"]
