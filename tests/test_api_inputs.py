"""API and command-line inputs that used to trace back or be taken silently: each is one error
line (or one exception with one line) before any work, and Ctrl-C in compare and demo is one line
and exit 130."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.nn as nn

from numloss.config import ConfigError
from numloss.evaluate import evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.generate import Generation

SRC = str(Path(__file__).resolve().parents[1] / "src")
ROOT = Path(__file__).resolve().parents[1]


def _vocab():
    from numloss.digits import DigitVocab
    from numloss.models.load import load_tokenizer

    return DigitVocab.from_tokenizer(load_tokenizer("tiny"))


def test_build_loss_of_no_name_and_patch_of_a_non_lm_are_one_line() -> None:
    from numloss import build_loss, patch

    with pytest.raises(TypeError, match="name must be an objective name"):
        build_loss(None, _vocab())
    with pytest.raises(TypeError, match="Linear is not a causal language model"):
        patch(nn.Linear(4, 4), build_loss("del", _vocab()))


class Broken:
    """A generator that returns `make(prompts)`."""

    def __init__(self, make) -> None:
        self.make = make

    def generate(self, prompts, max_new_tokens=None):
        return self.make(prompts)


@pytest.mark.parametrize(("make", "words"), [
    (lambda ps: [Generation("1", 1)] * (len(ps) - 1), "returned 1 results for 2 prompts"),
    (lambda ps: [Generation(None, 1) for _ in ps], "whose text is a string"),
    (lambda ps: ["The answer is 1" for _ in ps], "a plain str"),
    (lambda ps: None, "returned NoneType"),
], ids=["fewer", "none-text", "strings", "none"])
@pytest.mark.parametrize("cut", [True, False], ids=["cut", "uncut"])
def test_evaluate_refuses_a_generator_that_does_not_return_one_generation_per_prompt(make, words, cut) -> None:
    with pytest.raises(ValueError, match=words) as caught:
        evaluate(Broken(make), "synthetic:arithmetic", limit=2, digit_stats=False, program_of_thought=False,
                 cut_at_stop=cut, batch_size=2)
    assert "\n" not in str(caught.value) and "Broken" in str(caught.value)


def test_duplicate_protocols_and_an_empty_benchmark_list_are_refused() -> None:
    echo = Broken(lambda ps: [Generation("1", 1) for _ in ps])
    with pytest.raises(ValueError, match="'numloss' is given twice"):
        evaluate(echo, "synthetic:arithmetic", protocol=["numloss", "numloss"], limit=1, digit_stats=False)
    with pytest.raises(BenchmarkError, match="benchmarks is empty"):
        evaluate(echo, [], digit_stats=False)


def test_a_record_with_a_key_given_twice_is_named(tmp_path) -> None:
    path = tmp_path / "outputs.jsonl"
    path.write_text('{"benchmark": "synthetic:arithmetic", "id": "1", "output": "1", "output": "2"}\n')
    with pytest.raises(BenchmarkError, match=r"outputs.jsonl:1: field 'output' is given twice"):
        score_outputs(path)


def _eval_line(argv: list[str], capsys) -> str:
    from test_eval_faults import one_line

    return one_line(argv, capsys)


@pytest.mark.parametrize(("extra", "words"), [
    (["--seed", "-1"], "--seed must be in [0, 2**32)"),
    (["--seed", str(2**40)], "--seed must be in [0, 2**32)"),
    (["--workers", "100000"], "--workers 100000: at most"),
    (["--out", ""], "--out is empty"),
])
def test_eval_numbers_out_of_range_are_one_line(extra, words, tmp_path, capsys) -> None:
    line = _eval_line(["tiny", "--benchmarks", "synthetic:arithmetic", "--out", str(tmp_path / "o"), *extra], capsys)
    assert words in line


def test_a_compare_torch_threads_beyond_the_cores_is_refused() -> None:
    from numloss.compare.config import compare_config_from_dict

    with pytest.raises(ConfigError, match="torch_threads 1000 is more than this machine's"):
        compare_config_from_dict({"torch_threads": 1000, "objectives": ["mle"]})


def test_a_lone_surrogate_in_a_data_record_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    import numloss.train as train
    import numloss.train.build

    monkeypatch.setattr(numloss.train.build, "load_model_for", lambda *a, **k: pytest.fail("the model loaded before the error"))
    data = tmp_path / "d.jsonl"
    data.write_text('{"instruction": "1 + 1 =", "output": "2"}\n{"instruction": "bad \\ud800 text", "output": "3"}\n')
    status = train.main([str(ROOT / "tests/fixtures/train/tiny-test.yaml"), "--data.source", str(data),
                         "--train.output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and "example 1 has a lone surrogate (U+D800) in its instruction" in err[-1], err[-3:]


# -- models --cache-dir ------------------------------------------------------------------------------
def test_models_cache_dir_a_file_or_read_only_is_one_line(tmp_path, capsys) -> None:
    from numloss.models.cli import main

    a_file = tmp_path / "file"
    a_file.write_text("x")
    for command in ("prepare", "path"):
        assert main([command, "smollm2", "--cache-dir", str(a_file / "sub")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is a file, not a folder" in err[0]
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert main(["prepare", "smollm2", "--cache-dir", str(locked / "cache")]) == 2
        assert "cannot be written" in capsys.readouterr().err
    finally:
        locked.chmod(stat.S_IRWXU)


# -- demo --out and Ctrl-C -------------------------------------------------------------------------
def _demo(argv: list[str], capsys) -> tuple[int, list[str]]:
    from numloss.demo import main

    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return status, [line for line in captured.err.splitlines() if line.strip()]


def test_demo_out_a_file_or_a_held_folder_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    import numloss.train

    monkeypatch.setattr(numloss.train, "run_training", lambda *a, **k: pytest.fail("trained although refused"))
    config = str(ROOT / "configs" / "compare-demo.yaml")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    status, err = _demo([config, "--no-progress", "--out", str(a_file)], capsys)
    assert status == 2 and len(err) == 1 and "is a file" in err[0], err
    out, ready = tmp_path / "held", tmp_path / "ready"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, time\nfrom numloss.rundir import hold_run_dir\n"
         f"with hold_run_dir({str(out)!r}, 'numloss compare'):\n    pathlib.Path({str(ready)!r}).touch()\n    time.sleep(60)\n"],
        env={**os.environ, "PYTHONPATH": SRC})
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts python slowly
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        status, err = _demo([config, "--no-progress", "--out", str(out)], capsys)
        assert status == 2 and len(err) == 1 and f"pid {holder.pid}" in err[0], err
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("command", ["compare", "demo"])
def test_ctrl_c_in_compare_and_demo_is_one_line_and_exit_130(command, tmp_path, capsys, monkeypatch) -> None:
    import numloss.compare.runner as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_one", interrupted)
    from numloss.compare import main as compare_main
    from test_compare_faults import _mapping, _write

    config = _write(tmp_path / "c.yaml", _mapping(tmp_path / "out"))
    if command == "compare":
        status = compare_main([config, "--no-progress"])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    else:
        status, err = _demo([config, "--no-progress"], capsys)
    assert status == 130 and len(err) == 1, err
    assert err[0].startswith(f"numloss {command}: interrupted; every finished run is kept in") and "same command" in err[0]
    assert json.dumps(err)  # one plain line
