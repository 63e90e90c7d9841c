"""API and command-line inputs that used to trace back or be taken silently: each is one error
line (or one exception with one line) before any work. The checkers of numloss.checks are tested
word for word once (CHECKS); each entry point and command then shows it routes through them."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import numloss.digits
from faultrun import ROOT, TINY, one_line
from numloss import DigitVocab, build_loss, patch
from numloss.checks import (
    ArgumentError,
    ArgumentTypeError,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_path,
    check_type,
)
from numloss.compare.config import compare_config_from_dict
from numloss.config import ConfigError
from numloss.evaluate import evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.generate import Generation
from numloss.models.load import check_model_available
from numloss.rundir import hold_run_dir

VOCAB = DigitVocab(list(range(10)), decimal_point_id=10)  # ids within the tiny model's vocabulary


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


def test_a_lone_surrogate_in_a_data_record_is_one_line(tmp_path, capsys, nothing_runs) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"instruction": "1 + 1 =", "output": "2"}\n{"instruction": "bad \\ud800 text", "output": "3"}\n')
    line = one_line(["train", str(TINY), "--data.source", str(data),
                     "--train.output_dir", str(tmp_path / "run")], capsys)
    assert "example 1 has a lone surrogate (U+D800) in its instruction" in line


NAN = float("nan")
#: numloss.checks: a refused value -> its error type and its one line, word for word ({t}: tmp_path,
#: which holds the file f)
CHECKS = [
    (lambda t: check_bool("flag", "false"), ArgumentTypeError, "flag must be True or False, got 'false' (str): pass a bool"),
    (lambda t: check_int("n", True, 1), ArgumentTypeError, "n must be an integer >= 1, got True (bool): pass an int"),
    (lambda t: check_int("n", 3.0), ArgumentTypeError, "n must be an integer, got 3.0 (float): pass an int"),
    (lambda t: check_int("n", 0, 1, 64), ArgumentError, "n must be an integer >= 1 and <= 64, got 0: pass one in range"),
    (lambda t: check_int("n", 10**400, high=9), ArgumentError, "n must be an integer <= 9, got an integer of about 401 digits: pass one in range"),
    (lambda t: check_float("x", "1"), ArgumentTypeError, "x must be a finite number, got '1' (str): pass a number"),
    (lambda t: check_float("x", NAN), ArgumentError, "x must be a finite number, got nan: pass one in range"),
    (lambda t: check_float("x", 0.0, 0, low_open=True), ArgumentError, "x must be a finite number > 0, got 0.0: pass one in range"),
    (lambda t: check_float("x", 10**400, high=1.5), ArgumentError, "x must be a finite number <= 1.5, got an integer of about 401 digits: pass one in range"),
    (lambda t: check_choice("c", 1, [True, "a"]), ArgumentError, "c must be one of True, 'a', got 1 (int): pick one of those"),
    (lambda t: check_type("m", None, int, "a model"), ArgumentTypeError, "m must be a model, got None (NoneType): pass a model"),
    (lambda t: check_path("p", " "), ArgumentTypeError, "p must be a path (a non-blank str or Path), got ' ' (str): pass a path"),
    (lambda t: check_path("p", t, "file"), ArgumentError, "p: {t} is a folder, not a file: pass a file"),
    (lambda t: check_path("p", t / "none", "file"), ArgumentError, "p: {t}/none does not exist: pass an existing file"),
    (lambda t: check_path("p", t / "f", "dir"), ArgumentError, "p: {t}/f is a file, not a folder: pass an existing folder"),
    (lambda t: check_path("p", t / "none", "dir"), ArgumentError, "p: {t}/none does not exist: pass an existing folder"),
    (lambda t: check_path("p", t, "new_file"), ArgumentError, "p: {t} is a folder, not a file: pass a file path"),
    (lambda t: check_path("p", t / "f" / "x.json", "new_file"), ArgumentError,
     "p: {t}/f is a file, not a folder, so {t}/f/x.json cannot be made under it: pass another path (or move the file away)"),
    (lambda t: check_path("p", t / "f", "new_dir"), ArgumentError, "p: {t}/f is a file, not a folder: pass another path (or move the file away)"),
    (lambda t: check_path("p", t / "f" / "a" / "b", "new_dir"), ArgumentError,
     "p: {t}/f is a file, not a folder, so {t}/f/a/b cannot be made under it: pass another path (or move the file away)"),
]


@pytest.mark.parametrize(("call", "kind", "message"), CHECKS, ids=[m.split(",")[0][:50] for _, _, m in CHECKS])
def test_each_checker_refuses_in_its_exact_line(call, kind, message, tmp_path) -> None:
    (tmp_path / "f").write_text("x", encoding="utf-8")
    with pytest.raises(ArgumentError) as caught:  # a ValueError: every command's one line
        call(tmp_path)
    assert type(caught.value) is kind and str(caught.value) == message.format(t=tmp_path)
    assert check_float("x", 2, 0, low_open=True) == 2.0 and check_choice("c", True, [1, True]) is True
    assert check_path("p", tmp_path / "new" / "x", "new_dir") == tmp_path / "new" / "x"


#: a path option given a file, a path under one, a folder nobody may write (/proc refuses even
#: root, as a read-only file system does), or an output folder this process holds (another's: rundir's
#: test) -> the words of the command's one line ({f}: the file)
PATHS = {
    "eval --out under a file": (["eval", "tiny", "--out", "{f}/sub"], "--out: {f} is a file, not a folder, so {f}/sub cannot be made"),
    "eval --out unwritable": (["eval", "tiny", "--quiet", "--out", "/proc/self/numloss-out"], "--out /proc/self/numloss-out: cannot write there"),
    "eval --score-outputs a folder": (["eval", "--score-outputs", "{t}", "--out", "{t}/o"], "records: {t} is a folder, not a file"),
    "eval --score-outputs missing": (["eval", "--score-outputs", "{t}/none.jsonl"], "records: {t}/none.jsonl does not exist"),
    "compare --out a file": (["compare", "{c}", "--out", "{f}"], "the output folder '{f}' is a file: choose another --out"),
    "compare --out under a file": (["compare", "{c}", "--out", "{f}/sub"], "cannot lock '{f}/sub': Not a directory"),
    "compare --out unwritable": (["compare", "{c}", "--no-progress", "--out", "/proc/self/numloss-out"], "must be a writable folder"),
    "demo --out a file": (["demo", "{d}", "--no-progress", "--out", "{f}"], "the output folder '{f}' is a file"),
    "compare held": (["compare", "{c}", "--no-progress"], "'{t}/out' is in use by pid {pid} "),
    "compare --report-only held": (["compare", "{c}", "--no-progress", "--report-only"], "'{t}/out' is in use by pid {pid} "),
    "demo held": (["demo", "{d}", "--no-progress", "--out", "{t}/out"], "'{t}/out' is in use by pid {pid} "),
    "eval held": (["eval", "tiny", "--benchmarks", "synthetic:arithmetic", "--out", "{t}/out"], "'{t}/out' is in use by pid {pid} "),
    "eval --score-outputs held": (["eval", "--score-outputs", "{f}", "--out", "{t}/out"], "'{t}/out' is in use by pid {pid} "),
    "models prepare --cache-dir under a file": (["models", "prepare", "smollm2", "--cache-dir", "{f}/sub"], "--cache-dir: {f} is a file, not a folder"),
    "models path --cache-dir a file": (["models", "path", "smollm2", "--cache-dir", "{f}"], "--cache-dir: {f} is a file, not a folder"),
    "models prepare --cache-dir unwritable": (["models", "prepare", "smollm2", "--cache-dir", "/proc/self/x"], "/proc/self cannot be written"),
    "train output_dir under a file": (["train", "{y}", "--train.output_dir", "{f}/sub"], "train.output_dir '{f}/sub' cannot be written"),
    "train output_dir unwritable": (["train", "{y}", "--train.output_dir", "/proc/self/x"], "('/proc/self' is not a writable folder)"),
    "train held": (["train", "{y}", "--train.output_dir", "{t}/out"], "'{t}/out' is in use by pid {pid} "),
    "train --dry-run held": (["train", "{y}", "--train.output_dir", "{t}/out", "--dry-run"], "'{t}/out' is in use by pid {pid} "),
}


@pytest.fixture
def nothing_runs(monkeypatch) -> None:
    import numloss.train
    import numloss.train.build

    for owner, name in ((numloss.train, "run_training"), (numloss.train.build, "load_model_for")):
        monkeypatch.setattr(owner, name, lambda *a, **k: pytest.fail("the work began although the input was refused"))


@pytest.mark.parametrize("case", PATHS)
def test_a_bad_path_is_one_line_in_every_command(case, tmp_path, capsys, nothing_runs) -> None:
    from test_compare_faults import _mapping, _write  # not at the top: it imports this module

    (tmp_path / "f").write_text("x", encoding="utf-8")
    names = {"t": tmp_path, "f": tmp_path / "f", "c": _write(tmp_path / "c.yaml", _mapping(tmp_path / "out")),
             "d": ROOT / "configs" / "compare-demo.yaml", "y": TINY, "pid": os.getpid()}
    argv, words = PATHS[case]
    out, held = tmp_path / "out", case.endswith("held")
    with hold_run_dir(out, "numloss compare") if held else contextlib.nullcontext():
        line = one_line([a.format(**names) for a in argv], capsys)
    assert words.format(**names) in line, line
    assert (tmp_path / "f").read_text(encoding="utf-8") == "x", "the file in the way is left as it was"
    assert (sorted(os.listdir(out)) if out.exists() else []) == [".numloss.lock"] * held, "the refused command wrote nothing"


# -- API arguments x types: one checker (numloss.checks) for every public entry point ----------------
def _tiny():
    from numloss.models import build_char_tokenizer, build_tiny_model

    return build_tiny_model(build_char_tokenizer(), num_layers=1, hidden_size=16, num_heads=2)


def _rows(n: int, learnt: bool = True):
    return [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [-100, 6 if learnt else -100, -100]}] * n


def _trainer(tmp_path, dataset=None, model="tiny", args=None, **options):
    from transformers import TrainingArguments

    from numloss.hf import NumericTrainer

    if args is None:
        args = TrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], per_device_train_batch_size=2,
                                 use_cpu=True, **options.pop("training", {}))
    return NumericTrainer(loss_fn=_build("del"), model=_tiny() if model == "tiny" else model, args=args,
                          train_dataset=_rows(4) if dataset is None else dataset, **options)


def _evaluate(**given):
    return evaluate(Broken(lambda ps: [Generation("1", 1) for _ in ps]), given.pop("benchmarks", "synthetic:arithmetic"), limit=1, digit_stats=False,
                    program_of_thought=False, **given)


#: (call, the error's type, what its one line must say); each is refused before any work
API_CASES = {
    "build_loss name None": (lambda t: _build(None), TypeError, r"name must be an objective name"),
    "evaluate protocol twice": (lambda t: _evaluate(protocol=["numloss", "numloss"]), ValueError, r"'numloss' is given twice"),
    "evaluate no benchmarks": (lambda t: _evaluate(benchmarks=[]), BenchmarkError, r"benchmarks is empty"),
    **{f"score_outputs records {r!r}": (lambda t, r=r: score_outputs(r), BenchmarkError, "mapping|iterable")
       for r in ([["benchmark", "gsm8k"]], ["not", "a", "list"], [None], {"benchmark": "x"}, 5)},
    "score_outputs a key twice": (lambda t: score_outputs(_records(t, ', "output": "2"')), BenchmarkError, r"outputs.jsonl:1: field 'output' is given twice"),
    "compare torch_threads 1000": (lambda t: compare_config_from_dict({"torch_threads": 1000, "objectives": ["mle"]}), ConfigError, r"torch_threads 1000 is more than this machine's"),
    "evaluate overwrite 'no'": (lambda t: _evaluate(overwrite="no"), TypeError, r"^overwrite must be True or False, got 'no' \(str\): pass a bool$"),
    "evaluate cut_at_stop 1": (lambda t: _evaluate(cut_at_stop=1), TypeError, r"^cut_at_stop must be True or False"),
    "evaluate seed 'x'": (lambda t: _evaluate(seed="x"), TypeError, r"^seed must be an integer >= 0 and <= 4294967295, got 'x'"),
    "evaluate max_new_tokens NaN": (lambda t: _evaluate(max_new_tokens=NAN), TypeError, r"^max_new_tokens must be an integer >= 1, got nan"),
    "evaluate batch_size 2.0": (lambda t: _evaluate(batch_size=2.0), TypeError, r"^batch_size must be an integer"),
    "evaluate benchmarks 5": (lambda t: _evaluate(benchmarks=5), TypeError, r"^benchmarks must be a comma-separated str or a list.* got 5 \(int\)"),
    "evaluate benchmarks [None]": (lambda t: _evaluate(benchmarks=[None]), TypeError, r"^benchmarks\[0\] must be a benchmark name"),
    "evaluate dtype int8": (lambda t: _evaluate(dtype="int8"), ValueError, r"^dtype must be one of 'auto', 'float32', 'bfloat16', 'float16', got 'int8'"),
    "evaluate results under a file": (lambda t: _evaluate(results_file=_file(t) / "items.jsonl"), ValueError, r"^results_file: .*file is a file, not a folder, so .*items\.jsonl cannot be made under it"),
    "evaluate workers 100000": (lambda t: _evaluate(workers=100000), ValueError, r"^--workers \(workers\) must be an integer >= 1 and <= \d+, got 100000"),
    "evaluate program_timeout inf": (lambda t: _evaluate(program_timeout=float("inf")), ValueError, r"^--program-timeout \(program_timeout\) must be a finite number > 0"),
    "score_outputs cut_at_stop 'no'": (lambda t: score_outputs(_records(t), cut_at_stop="no"), TypeError, r"^cut_at_stop must be True or False, got 'no'"),
    "score_outputs seed NaN": (lambda t: score_outputs(_records(t), seed=NAN), TypeError, r"^seed must be an integer"),
    "score_outputs workers 100000": (lambda t: score_outputs(_records(t), workers=100000), ValueError, r"^--workers \(workers\) must be an integer"),
    "patch None": (lambda t: _patch(None), TypeError, r"^numloss.patch: model must be a model instance .* got None \(NoneType\)"),
    "patch a class": (lambda t: _patch(type(_tiny())), TypeError, r"^numloss.patch: model is the class LlamaForCausalLM, not a model: pass an instance"),
    "patch fused 'false'": (lambda t: _patch(_tiny(), fused="false"), TypeError, r"^numloss.patch: fused must be True or False, got 'false'"),
    "place_weights a list": (lambda t: numloss.digits.place_weights([0, 1]), TypeError, r"^place_weights: places must be a torch.Tensor"),
    "place_weights weighting 'x'": (lambda t: numloss.digits.place_weights(torch.tensor([[1, 2]]), "x"), ValueError, r"^place_weighting must be one of 'official', 'continuous', 'none'"),
    "find_digits None": (lambda t: numloss.digits.find_digits(None, VOCAB), TypeError, r"^find_digits: labels must be an integer torch.Tensor"),
    "find_digits vocab None": (lambda t: numloss.digits.find_digits(torch.tensor([[1, 2]]), None), TypeError, r"^find_digits: vocab must be a DigitVocab"),
    "trainer fused 'false'": (lambda t: _trainer(t, fused="false"), TypeError, r"^NumericTrainer: fused must be True or False, got 'false'"),
    "trainer model None": (lambda t: _trainer(t, model=None), TypeError, r"^NumericTrainer: model is None: pass a model"),
    "trainer args a dict": (lambda t: _trainer(t, args={"learning_rate": 1e-3}), TypeError, r"^NumericTrainer: args must be a transformers TrainingArguments"),
    "trainer lr NaN": (lambda t: _trainer(t, training={"learning_rate": NAN}), ValueError, r"^NumericTrainer: args.learning_rate must be a finite number >= 0"),
    "trainer lr 1e300": (lambda t: _trainer(t, training={"learning_rate": 1e300}), ValueError, r"args.learning_rate must be .* got 1e\+300"),
    "trainer accumulation 0": (lambda t: _trainer(t, training={"gradient_accumulation_steps": 0}), ValueError, r"args.gradient_accumulation_steps must be an integer >= 1, got 0"),
    "trainer label smoothing": (lambda t: _trainer(t, training={"label_smoothing_factor": 0.1}), ValueError, r"label_smoothing_factor is 0.1, but loss_fn computes the loss"),
    "trainer empty dataset": (lambda t: _trainer(t, dataset=[]), ValueError, r"^train_dataset is empty"),
    "trainer batch above the data": (lambda t: _trainer(t, dataset=_rows(1)), ValueError, r"global batch .* = 2 is larger than the 1 training examples, so each step would use only 1"),
    "trainer nothing learnt": (lambda t: _trainer(t, dataset=_rows(4, learnt=False)), ValueError, r"every label of the 4 training examples is ignore_index \(-100\): nothing would be learnt"),
    "build_loss check_finite 'no'": (lambda t: _build("del", check_finite="no"), TypeError, r"^del: check_finite must be True or False, got 'no'"),
    "build_loss alpha 1e300": (lambda t: _build("ntl-was", alpha=1e300), ValueError, r"^ntl-was: alpha must be a finite number >= 0 and <= 3.40282e\+38, got 1e\+300"),
    "smollm2 cache_dir a file": (lambda t: check_model_available("smollm2", cache_dir=str(_file(t))), RuntimeError, r"cache_dir: .*file is a file, not a folder"),
}


def _build(name: str, **options):
    return build_loss(name, VOCAB, **options)


def _file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    return tmp_path / "file"


def _records(tmp_path: Path, more: str = "") -> Path:
    path = tmp_path / "outputs.jsonl"
    path.write_text('{"benchmark": "synthetic:arithmetic", "id": "1", "output": "1"' + more + "}\n", encoding="utf-8")
    return path


def _patch(model, fused=False):
    return patch(model, _build("del"), fused=fused)


@pytest.mark.parametrize("case", list(API_CASES))
def test_a_bad_api_argument_is_one_error_naming_it(case, tmp_path) -> None:
    call, kind, words = API_CASES[case]
    with pytest.raises(kind, match=words) as caught:
        call(tmp_path)
    if kind is not RuntimeError:  # ModelUnavailableError: every command catches it by name
        assert isinstance(caught.value, ValueError)  # every command's `except ValueError` makes it its one line
    assert "\n" not in str(caught.value)


def test_patch_of_a_non_lm_is_one_line() -> None:  # a TypeError alone: not a value out of range
    with pytest.raises(TypeError, match="Linear is not a causal language model"):
        _patch(nn.Linear(4, 4))


def test_the_checked_trainer_still_builds(tmp_path) -> None:
    trainer = _trainer(tmp_path, training={"gradient_accumulation_steps": 2})
    assert trainer.fused is False and len(trainer.train_dataset) == 4
