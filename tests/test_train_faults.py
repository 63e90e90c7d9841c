"""`numloss train` under faults: kills during saves, damaged checkpoints, two runs in one folder,
a folder holding another run, a resume with other settings, a full disk, and every config key
fed wrong values. Tiny model, 4 steps: each test takes a few seconds."""

from __future__ import annotations

import csv
import errno
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from numloss.config import SECTIONS, ConfigError, all_keys, load_config
from numloss.train import (
    CHECKPOINT_MARKER,
    DiskFullError,
    check_run,
    disk_full_error,
    main,
    run_training,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "fixtures" / "train" / "tiny-test.yaml"
# 4 steps, a checkpoint after each, none rotated away; 16 examples (a 1-layer model: fast); a cosine
# schedule, so a resume that lost the scheduler's state ends elsewhere
RUN = ["--train.max_steps", "4", "--train.save_steps", "1", "--train.save_total_limit", "null",
       "--data.num_examples", "16", "--model.tiny_layers", "1", "--train.lr_scheduler_type", "cosine"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}


def config(out: Path, *overrides: str):
    return load_config(TINY, ["--train.output_dir", str(out), *RUN, *overrides])


class Killed(Exception):
    """Raised by `train_killed_after` where a kill would have ended the run."""


def train_killed_after(config, step: int) -> None:
    """Train `config` and end it right after the checkpoint of `step` is whole, as a kill there would."""
    from transformers import TrainerCallback

    class Kill(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # after numloss's marker (its callbacks run first)
            if state.global_step >= step:
                raise Killed(step)

    with pytest.raises(Killed):
        run_training(config, callbacks=[Kill()])


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def assert_same_weights(a: Path, b: Path) -> None:
    left, right = weights(a), weights(b)
    assert left.keys() == right.keys()
    for key in left:
        torch.testing.assert_close(left[key], right[key], rtol=0, atol=1e-6, msg=key)


def logged_steps(out: Path) -> list[int]:
    return [int(row["step"]) for row in csv.DictReader((out / "log.csv").open())]


def logged_losses(out: Path) -> dict[int, float]:
    return {int(row["step"]): float(row["loss"]) for row in csv.DictReader((out / "log.csv").open())}


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes but the lock file's (a refused run may take and release the lock)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".numloss.lock"}


def cli(out: Path, *extra: str, env: dict[str, str] | None = None, wait: bool = True):
    # faultrun (tests/faultrun.py) runs `numloss train`, killing or pausing it at NUMLOSS_FAULT_POINT
    command = [sys.executable, "-m", "faultrun", "train", str(TINY), "--train.output_dir", str(out), *RUN, *extra]
    # a shell without job control starts background jobs with SIGINT ignored; a terminal's Ctrl-C is not
    process = subprocess.Popen(command, env={**ENV, **(env or {})}, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if not wait:
        return process
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def wait_until_paused(process: subprocess.Popen, release: Path) -> None:
    """Wait until faultrun has paused `process` at its NUMLOSS_FAULT_POINT (it touches RELEASE.paused)."""
    deadline = time.monotonic() + 240
    while not Path(f"{release}.paused").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.05)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The in-process runs on one thread, as the `cli` ones are (OMP_NUM_THREADS=1): a resume is
    bitwise at one thread count, and two thread counts sum in other orders (about 1e-6 apart)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def reference(train_reference: Path) -> Path:
    """The uninterrupted 4-step run every interrupted one must end equal to: conftest's session
    fixture, built once for this module and test_train_safety (which imports this name)."""
    return train_reference


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A run 'killed' right after its step-3 checkpoint (checkpoints 1, 2, 3; no final/)."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    train_killed_after(config(out), 3)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    return out


@pytest.fixture
def no_model_loads(monkeypatch):
    import numloss.train.build as train

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the error was found")

    monkeypatch.setattr(train, "load_model_for", refuse)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


# -- kill points -----------------------------------------------------------------------------------
# slow: a kill after the rename; final-marked covers a resume that finds the run finished.
# slow: a kill while checkpoint-4's files are written; fast covers: test_same_size_corruption_falls_back_
# to_the_newest_intact_checkpoint below (a checkpoint without its marker is set aside; the fallback ends on
# the reference weights and losses, each step logged once) and the two SIGKILLs during final/'s save here
@pytest.mark.parametrize("point", [pytest.param("checkpoint-4-files-written", marks=pytest.mark.slow),
                                   "final-files-written", "final-marked",
                                   pytest.param("final-renamed", marks=pytest.mark.slow)])
def test_a_kill_at_any_point_of_the_last_saves_resumes_to_the_uninterrupted_run(tmp_path, reference, point, caplog):
    """SIGKILL while the last checkpoint is written, after final/'s files, after its marker, after
    its rename: --resume ends with 4 steps (never a 5th), each logged once, the reference weights."""
    out = tmp_path / "run"
    killed = cli(out, env={"NUMLOSS_FAULT_POINT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    with caplog.at_level("WARNING", logger="numloss.train"):
        result = run_training(config(out, "--train.resume", "true"))
    assert result.global_step == 4
    assert result.already_finished == (point in ("final-marked", "final-renamed"))
    assert not (out / "final.partial").exists() and (out / "final" / CHECKPOINT_MARKER).is_file()
    assert_same_weights(reference / "final", out / "final")
    assert logged_steps(out) == [1, 2, 3, 4]
    if point == "checkpoint-4-files-written":
        assert "checkpoint-4 fails its check: it has no completion marker" in caplog.text
    if point == "final-files-written":
        assert "checkpoint-4 is the run's last step; saving it as final/ without training" in caplog.text
    if point == "final-marked":
        assert "completed the save of final/" in caplog.text


# -- damaged checkpoints ---------------------------------------------------------------------------
def flip(path: Path, at: int, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + count] = bytes(b ^ 0xFF for b in data[at : at + count])
    path.write_bytes(bytes(data))


def test_same_size_corruption_falls_back_to_the_newest_intact_checkpoint(tmp_path, stopped, reference, caplog):
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
    assert result.global_step == 4 and logged_losses(out) == pytest.approx(logged_losses(reference), rel=1e-5)
    assert_same_weights(reference / "final", out / "final")
    assert all((out / f"partial-checkpoint-{n}").is_dir() for n in (2, 3, 4))


def test_resume_from_a_named_damaged_checkpoint_is_one_line(tmp_path, stopped, no_model_loads):
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
        with pytest.raises(ConfigError) as caught:
            run_training(config(out, "--train.resume", str(out / name)))
        assert "cannot be resumed from" in one_line(caught.value) and message in str(caught.value), caught.value


# -- two runs, foreign runs, changed settings -------------------------------------------------------
def test_two_trainings_into_one_folder_the_second_is_refused_naming_the_first(tmp_path, reference):
    out, release = tmp_path / "run", tmp_path / "release"
    first = cli(out, env={"NUMLOSS_FAULT_POINT": "pause:locked", "NUMLOSS_FAULT_FILE": str(release)}, wait=False)
    try:
        wait_until_paused(first, release)
        before = snapshot(out)
        with pytest.raises(ConfigError) as caught:
            run_training(config(out, "--train.seed", "1"))
        assert f"in use by pid {first.pid}" in one_line(caught.value) and "numloss train" in str(caught.value)
        with pytest.raises(ConfigError, match=f"in use by pid {first.pid}"):
            check_run(config(out))  # a dry run says so too
        assert snapshot(out) == before  # the refused run wrote nothing
    finally:
        release.touch()
        _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-2000:]
    assert logged_steps(out) == [1, 2, 3, 4]
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["seed"] == 0
    assert_same_weights(reference / "final", out / "final")


def test_a_finished_or_foreign_run_is_never_overwritten_without_overwrite(tmp_path, reference, monkeypatch, capsys):
    import numloss.train.build as train

    out = tmp_path / "run"
    shutil.copytree(reference, out)
    kept = snapshot(out)
    real_load = train.load_model_for
    monkeypatch.setattr(train, "load_model_for", lambda *a, **k: pytest.fail("refusal after the model loaded"))
    cases = {
        ("--train.seed", "1"): "already holds a finished run (final/, step 4) of another config (train.seed 0 -> 1)",
        (): "already holds a finished run (final/, step 4) of this config",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError) as caught:
            run_training(config(out, *overrides))
        assert message in one_line(caught.value) and "--overwrite moves its files" in str(caught.value)
        assert main([str(TINY), "--train.output_dir", str(out), *RUN, *overrides, "--dry-run"]) == 2
        assert message in capsys.readouterr().err
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
    monkeypatch.setattr(train, "load_model_for", real_load)
    result = run_training(config(out, "--train.seed", "1", "--train.overwrite", "true"))
    assert result.global_step == 4
    (aside,) = out.glob("overwritten-*")
    assert snapshot(aside) == kept
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["seed"] == 1
    assert logged_steps(out) == [1, 2, 3, 4]


def test_resume_refuses_changed_settings_that_change_the_run(tmp_path, stopped, reference, caplog):
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
        with pytest.raises(ConfigError) as caught:
            check_run(config(out, "--train.resume", "true", *overrides))
        assert message in one_line(caught.value) and "--resume-changed" in str(caught.value), caught.value
    # a resume whose model shape changed, let through by --resume-changed: one line, no traceback
    with pytest.raises(ConfigError) as caught:
        run_training(config(out, "--train.resume", "true", "--train.resume_changed", "true",
                            "--model.tiny_hidden", "32", "--model.tiny_heads", "2"))
    assert "was saved from a model of another shape" in one_line(caught.value)
    # logging settings may change: the resumed run is the reference run
    result = run_training(config(out, "--train.resume", "true", "--train.logging_steps", "2"))
    assert result.global_step == 4
    assert_same_weights(reference / "final", out / "final")
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
    argv = [str(TINY), "--train.output_dir", str(out), *RUN, "--train.max_steps", "1", *save]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        status = main(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert err[-1].startswith(f"numloss train: disk full at {out / where}") and "; then run the same command" in err[-1], err[-1]
    assert "Traceback" not in "\n".join(err)
    assert not (out / "final").exists()


def test_disk_full_error_reads_every_form_of_a_full_disk(tmp_path):
    where = tmp_path / "checkpoint-3"
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where / "optimizer.pt"))
    assert f"disk full at {where / 'optimizer.pt'}: No space left on device" in str(disk_full_error(enospc, where))
    wrapped = RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: file write failed")
    assert str(disk_full_error(wrapped, where)).startswith(f"disk full at {where}")
    from safetensors import SafetensorError

    serialising = SafetensorError('Error while serializing: I/O error: No space left on device (os error 28)')
    assert isinstance(disk_full_error(serialising, where), DiskFullError)
    assert disk_full_error(ValueError("something else"), where) is None


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
            one_line(error)
            continue
        assert result.global_step >= 1 and (out / "final").is_dir(), argv


def test_resume_from_a_named_checkpoint_of_another_folder_into_an_empty_one(tmp_path, stopped, reference):
    """train.resume PATH into a new output_dir continues PATH's run (compared with the config.yaml
    beside PATH), never a fresh start; its log.csv starts with PATH's logged steps, as its
    log_history.json does."""
    out = tmp_path / "elsewhere"
    with pytest.raises(ConfigError, match="train.learning_rate 0.01 -> 0.02"):
        run_training(config(out, "--train.resume", str(stopped / "checkpoint-3"), "--train.learning_rate", "0.02"))
    result = run_training(config(out, "--train.resume", str(stopped / "checkpoint-3")))
    assert result.global_step == 4 and logged_steps(out) == [1, 2, 3, 4]
    assert_same_weights(reference / "final", out / "final")


def test_a_run_that_diverges_is_one_line_naming_the_step(tmp_path):
    from types import SimpleNamespace

    from numloss.train.errors import train_error

    trainer = SimpleNamespace(state=SimpleNamespace(global_step=3))
    error = train_error(FloatingPointError("del: the loss is not finite although the logits are; alpha=1e+30"),
                        tmp_path, trainer, None)
    assert isinstance(error, ConfigError) and one_line(error).startswith("training stopped at step 3: FloatingPointError: del:")
