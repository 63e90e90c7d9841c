"""`numloss train`: a resume tied to its inputs, the recovery of a folder killed before its first
whole save, Ctrl-C, and a save_only_model checkpoint. Tiny model, 4 steps (see test_train_faults)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch

import test_train_faults
from numloss.config import ConfigError
from numloss.train import INPUTS_FILE, main, run_training
from test_train_faults import (
    RUN,
    TINY,
    assert_same_weights,
    cli,
    config,
    logged_steps,
    one_line,
    train_killed_after,
    wait_until_paused,
    weights,
)

# fixtures shared with test_train_faults: the uninterrupted 4-step run, a model load that fails the
# test, and one torch thread in-process (as every `cli` run): a resume finished in-process is bitwise
reference, no_model_loads, one_thread = test_train_faults.reference, test_train_faults.no_model_loads, test_train_faults.one_thread


def _data(path: Path, shift: int = 0) -> Path:
    path.write_text("".join(json.dumps({"instruction": f"{a} + {a + shift} =", "output": str(2 * a + shift)}) + "\n"
                            for a in range(16)), encoding="utf-8")
    return path


def test_resume_after_the_data_file_changed_is_refused_naming_it(tmp_path, monkeypatch, caplog) -> None:
    data, out = _data(tmp_path / "train.jsonl"), tmp_path / "run"
    train_killed_after(config(out, "--data.source", str(data)), 2)
    inputs = json.loads((out / INPUTS_FILE).read_text())
    assert inputs["data_sha256"].startswith("sha256:") and "model_sha256" not in inputs
    stat = data.stat()
    _data(data, shift=1)  # the same path, other contents, the old time restored
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    import numloss.train.build as train

    real = train.load_model_for
    monkeypatch.setattr(train, "load_model_for", lambda *a, **k: pytest.fail("loaded before the refusal"))
    with pytest.raises(ConfigError) as caught:
        run_training(config(out, "--data.source", str(data), "--train.resume", "true"))
    line = one_line(caught.value)
    assert "the training data" in line and "changed (sha256:" in line and "--resume-changed" in line
    monkeypatch.setattr(train, "load_model_for", real)
    with caplog.at_level("WARNING", logger="numloss.train"):
        result = run_training(config(out, "--data.source", str(data), "--train.resume", "true",
                                     "--train.resume_changed", "true"))
    assert result.global_step == 4 and "continuing although the training data" in caplog.text
    assert json.loads((out / INPUTS_FILE).read_text())["data_sha256"] != inputs["data_sha256"]


def test_a_run_without_inputs_json_resumes_as_before(tmp_path) -> None:
    out = tmp_path / "run"
    train_killed_after(config(out), 2)
    (out / INPUTS_FILE).unlink()  # a run folder of an older numloss
    assert run_training(config(out, "--train.resume", "true")).global_step == 4


def test_a_save_only_model_checkpoint_is_not_resumed_silently(tmp_path, no_model_loads) -> None:
    out = tmp_path / "run"
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    from numloss.checkpoints import write_marker
    from numloss.config import dump_config

    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 4}))
    write_marker(checkpoint, 2)
    (out / "config.yaml").write_text(dump_config(config(out)))
    with pytest.raises(ConfigError) as caught:
        run_training(config(out, "--train.resume", "true"))
    line = one_line(caught.value)
    assert "no optimizer or scheduler state" in line and "save_only_model" in line and "--resume-changed" in line


@pytest.mark.parametrize(("point", "extra"), [
    pytest.param("checkpoint-1-files-written", (), id="first-checkpoint"),
    # slow: the same recovery (the folder's first whole save never finished) from a run without checkpoints
    pytest.param("final-files-written", ("--train.save_steps", "0"), id="final-without-checkpoints", marks=pytest.mark.slow),
])
def test_a_kill_before_the_first_whole_save_is_continued_by_the_named_command(tmp_path, reference, point, extra,
                                                                             capsys) -> None:
    out = tmp_path / "run"
    killed = cli(out, *extra, env={"NUMLOSS_FAULT_POINT": point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    capsys.readouterr()
    # the refused --resume in-process: `numloss train`'s own entry point, without another process's imports
    assert main([str(TINY), "--train.output_dir", str(out), *RUN, *extra, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert "run the same command without --resume" in line, err[-2000:]
    # the command it names, in-process (the reference's threads: weights compare bit for bit)
    assert run_training(config(out, *extra)).global_step == 4
    assert_same_weights(reference / "final", out / "final")
    assert logged_steps(out) == [1, 2, 3, 4]


def test_ctrl_c_prints_one_line_naming_the_checkpoint_and_resume_is_bitwise(tmp_path, reference) -> None:
    out, release = tmp_path / "run", tmp_path / "release"
    process = cli(out, env={"NUMLOSS_FAULT_POINT": "pause:checkpoint-2-marked", "NUMLOSS_FAULT_FILE": str(release)},
                  wait=False)
    wait_until_paused(process, release)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("numloss train: interrupted;") and "checkpoint-2" in line and "--resume" in line
    # the command the line names, in-process at the CLI's one thread (as the reference: bit for bit)
    assert main([str(TINY), "--train.output_dir", str(out), *RUN, "--resume"]) == 0
    for name, tensor in weights(reference / "final").items():
        assert torch.equal(tensor, weights(out / "final")[name]), name
    assert logged_steps(out) == [1, 2, 3, 4]
