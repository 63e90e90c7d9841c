"""The `numloss` entry point: dispatch, help, unknown commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from faultrun import one_line
from numloss.cli import COMMANDS, main


def test_help_names_every_command_and_version_prints_it(capsys):  # an unknown command: test_fault_environment
    import numloss

    assert main(["--help"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in COMMANDS)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"numloss {numloss.__version__}"


def test_bench_lists_the_scripts(capsys):
    assert main(["bench", "--help"]) == 0
    assert "losses" in capsys.readouterr().out
    assert main(["bench", "nosuch"]) == 2


def test_help_into_a_closed_pipe_has_no_traceback():
    """`numloss train --help | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    done = subprocess.run(
        f"{sys.executable} -m numloss train --help | head -1", shell=True, capture_output=True, text=True
    )
    assert done.stdout.startswith("usage: numloss train")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_threads_is_one_flag_for_train_eval_and_compare():
    from numloss.compare import build_parser, resolve
    from numloss.evaluate.cli import build_parser as eval_parser
    from numloss.train import pop_threads

    assert pop_threads(["a.yaml", "--threads", "2", "--train.max_steps", "2"]) == (2, ["a.yaml", "--train.max_steps", "2"])
    assert pop_threads(["--threads=1"]) == (1, [])  # within the cores of any CI machine
    assert eval_parser().parse_args(["tiny", "--threads", "2"]).threads == 2
    demo = Path(__file__).resolve().parents[1] / "configs" / "compare-demo.yaml"
    compare = resolve(build_parser().parse_args([str(demo), "--threads", "2"]))
    assert compare.torch_threads == 2


def test_eval_checks_the_tokenizer_before_the_model_loads(monkeypatch, capsys):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    import numloss.models.load as load

    letters = Tokenizer(models.WordLevel({"<unk>": 0, "</s>": 1, "a": 2}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=letters, unk_token="<unk>", eos_token="</s>")
    monkeypatch.setattr(load, "load_tokenizer", lambda *a, **k: tokenizer)

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the tokenizer was checked")

    monkeypatch.setattr(load, "load_model_and_tokenizer", refuse)
    assert "--no-digit-stats" in one_line(["eval", "tiny", "--benchmarks", "synthetic:arithmetic", "--limit", "1"], capsys)
