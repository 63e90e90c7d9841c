"""Fault injection for `numloss eval`: every bad input is one line and a
non-zero exit, never a traceback or a silent wrong result; resume refuses another model's outputs.

The record faults are generated over every field and a set of wrong values of every JSON type, not
only the examples the issues list.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from faultrun import one_line
from numloss.evaluate import api, cli, evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError, load_benchmark
from numloss.evaluate.generate import Generation
from numloss.evaluate.store import (
    RESULT_REQUIRED,
    RESULT_TYPES,
    ResultsFile,
    check_output_record,
    check_result_record,
    folder_identity,
)
from numloss.models import load

FIXTURES = Path(__file__).parent / "fixtures" / "benchmarks"
QUIET = ["--quiet", "--no-digit-stats", "--allow-unisolated-exec"]
# one value of every JSON type, and the edge cases a hand edit produces
JSON_VALUES = [None, True, False, 0, -1, 1.5, float("nan"), "", "x", "1", [], [1], ["a", "b"], {}, {"answer": 2}]


def ok(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    rc = cli.main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return captured.out, captured.err


class Echo:
    """A generator that answers `answer` to everything and counts its prompts; an `identity` is
    recorded as its records' model identity (none: resume checks no identity)."""

    def __init__(self, answer: str = "1", identity: str | None = None) -> None:
        self.answer, self.identity, self.prompts = answer, identity, []

    def generate(self, prompts, max_new_tokens=None):
        self.prompts += prompts
        return [Generation(f"The answer is {self.answer}", 4) for _ in prompts]


def tiny_eval(model: str, out: Path, *extra: str) -> list[str]:
    return [model, "--benchmarks", "synthetic:arithmetic", "--limit", "2", "--max-new-tokens", "2", "--out", str(out), *QUIET, *extra]


def save_tiny(folder: Path, seed: int = 0, **size: int) -> None:
    from numloss.models import tiny

    tokenizer = tiny.build_char_tokenizer()
    tiny.build_tiny_model(tokenizer, seed=seed, **size).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


# ---------------------------------------------------------------- the model's identity


def test_folder_identity_changes_with_any_file_and_only_then(tmp_path):
    for name in ("model.safetensors", "config.json", "tokenizer.json", "adapter_model.safetensors"):
        (tmp_path / name).write_bytes(b"0" * 10)
    base = folder_identity(tmp_path)
    assert folder_identity(tmp_path) == base
    grow = lambda p: p.write_bytes(p.read_bytes() + b"1")  # noqa: E731
    touch = lambda p: os.utime(p, ns=(0, p.stat().st_mtime_ns + 1))  # noqa: E731
    for target in sorted(tmp_path.iterdir()):
        for change in (grow, touch):
            change(target)
            assert folder_identity(tmp_path) != base, (target.name, change)
            base = folder_identity(tmp_path)
    (tmp_path / "extra.bin").write_bytes(b"")  # a new file
    assert folder_identity(tmp_path) != base


# ---------------------------------------------------------------- options: one line each


def _file(t: Path, name: str, text: str) -> Path:
    (t / name).write_text(text)
    return t / name


#: bad input through the command line -> the words its one line holds: each reaches a different check
BAD_INPUT = {
    # --device through evaluate's check (every refused device: the API's device test)
    "device bogus": (lambda t: tiny_eval("tiny", t / "out", "--device=bogus"), ["--device", "bogus", "cpu"]),
    **{f"option {' '.join(argv)}": (lambda t, argv=argv: ["tiny", *argv], ["--help"])  # not the usage
       for argv in (["--workers", "abc"], ["--protocol", "paper"], ["--limit"], ["--no-such-option"])},
    # --out and --score-outputs through numloss.checks: test_api_inputs' PATHS table
    "items.jsonl a folder": (lambda t: (t / "items.jsonl").mkdir() or tiny_eval("tiny", t), ["is a folder"]),
    "out empty": (lambda t: tiny_eval("tiny", t, "--out="), ["--out is empty"]),
    "no file under --data-dir": (lambda t: ["tiny", "--benchmarks", "simuleq", "--data-dir", str(t)],
                                 ["simuleq", "simuleq/simuleq.json"]),
    "no model folder": (lambda t: [str(t / "no-model"), "--benchmarks", "gsm8k", "--data-dir", str(FIXTURES)],
                        ["not found", "no such folder"]),
    "unknown model": (lambda t: tiny_eval("no-such-model-xyz", t), ["no-such-model-xyz", "cache"]),
    "vllm not here": (lambda t: ["tiny", "--benchmarks", "gsm8k", "--data-dir", str(FIXTURES), "--backend", "vllm"],
                      ["vllm"]),
    "empty file set": (lambda t: ["tiny", "--benchmarks", "file:" + str(_file(t, "e.jsonl", "\n")), *QUIET],
                       ["no records", "'question', 'answer' and optionally"]),  # said whole
    "null answer": (lambda t: ["tiny", "--benchmarks", "file:" + str(_file(t, "n.jsonl", json.dumps({"question": "q", "answer": None}))), *QUIET],
                    ["n.jsonl:1: field 'answer' is null"]),  # not "missing"
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_saying_what_is_wrong(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out
    argv, words = BAD_INPUT[case]
    line = one_line(["eval", *argv(tmp_path)], capsys)
    assert all(w in line for w in words), line
    assert not [p for p in tmp_path.rglob("items.jsonl") if p.is_file()]  # refused before any item


NUMERIC_OPTIONS = ("--workers", "--batch-size", "--max-new-tokens", "--threads", "--program-timeout", "--limit",
                   "--tensor-parallel", "--seed")
NUMERIC_VALUES = ("0", "-1", "1.5", "nan", "inf", "1e309", "abc", "", "99999999999")
#: (option, value) -> what its line says beyond the option's name
WORDS = {("--threads", "0"): "--threads must be a positive integer, got 0",
         ("--threads", "-1"): "--threads must be a positive integer, got -1",
         ("--seed", "-1"): "--seed must be in [0, 2**32)", ("--seed", "99999999999"): "--seed must be in [0, 2**32)"}


def test_every_numeric_option_is_a_run_or_one_line_naming_it(tmp_path, capsys):
    """NUMERIC_VALUES give a valid run or one line naming the option; never 0 read as "not given"."""
    runs = 0
    for option in NUMERIC_OPTIONS:
        for value in NUMERIC_VALUES:
            if option == "--max-new-tokens" and value == "99999999999":
                continue  # valid (capped at the protocol's 1500 tokens), and slow with the tiny model
            line = one_line(["eval", *tiny_eval("tiny", tmp_path / "out", f"{option}={value}")], capsys, may_run=True)
            runs += line is None
            assert line is None or WORDS.get((option, value), option) in line, (option, value, line)
    assert 4 <= runs <= 12, runs  # --seed 0, --batch-size and --program-timeout large (--seed beyond 2**32 is refused)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interrupt_is_one_line_saying_what_is_kept(how, tmp_path, capsys, monkeypatch):
    class Interrupted:
        def generate(self, prompts, max_new_tokens=None):
            if how == "sigterm":  # `kill PID` mid-generation: numloss eval's main makes it Ctrl-C
                os.kill(os.getpid(), signal.SIGTERM)
            raise KeyboardInterrupt

    monkeypatch.setattr(api, "_generator", lambda *args: (None, None, Interrupted()))
    line = one_line(["eval", *tiny_eval("tiny", tmp_path)], capsys, status=130)
    assert "interrupted" in line and "re-run resumes" in line


def test_a_full_disk_while_appending_results_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    def full(self, records):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(ResultsFile, "append", full)
    line = one_line(["eval", *tiny_eval("tiny", tmp_path)], capsys)
    assert f"cannot read or write {tmp_path / 'items.jsonl'}: No space left on device" in line


@pytest.mark.parametrize("device", ["bogus", "", "tpu", "cpu:x", "-1", "cuda:99", "cuda"])
def test_the_api_refuses_a_bad_device_before_loading_the_model(device, monkeypatch):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is here")
    monkeypatch.setattr(load, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises((ValueError, RuntimeError), match=rf"^--device '?{re.escape(device)}'?[ :;]") as caught:
        evaluate("tiny", "synthetic:arithmetic", limit=1, device=device, digit_stats=False)
    assert "\n" not in str(caught.value) and "cpu" in str(caught.value)  # the way out


# ---------------------------------------------------------------- the results file, fault-injected


def fits(value, types: tuple[type, ...]) -> bool:
    """Whether a field of `types` takes `value` (bool is no int, an int is a number)."""
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types) or (isinstance(value, int) and float in types)


SCORED = ("benchmark", "id", "output", "fallback_output", "question", "seed", "set_size")
#: a record's checker -> (its fields' types, the fields it needs): a results record read to resume,
#: a record to score (where null counts as missing)
RECORD_CHECKS = {check_result_record: (RESULT_TYPES, RESULT_REQUIRED),
                 check_output_record: ({k: (*RESULT_TYPES[k], type(None)) for k in SCORED}, SCORED[:3])}


def test_every_wrong_field_type_in_a_record_is_refused_naming_where_and_the_field(tmp_path):
    """The file and line are named by the reader: the CLI tests below."""
    path = tmp_path / "items.jsonl"
    evaluate(Echo(), "synthetic:arithmetic", results_file=path, limit=1, digit_stats=False, allow_unisolated=True)
    (good,) = ResultsFile(path).records()
    cases = 0
    for check, (types, required) in RECORD_CHECKS.items():
        for key, kinds in types.items():
            for value in [v for v in JSON_VALUES if not fits(v, kinds)]:
                with pytest.raises(BenchmarkError, match=rf"^here: field '{key}' must be"):
                    check({**good, key: value}, "here")
                cases += 1
        for key in required:
            with pytest.raises(BenchmarkError, match=rf"^here: missing field '{key}'"):
                check({k: v for k, v in good.items() if k != key}, "here")
    with pytest.raises(BenchmarkError, match="field 'kind' must be"):
        check_result_record({**good, "kind": "letters"}, "here")
    assert cases > 3 * len(RESULT_TYPES)


def test_a_bad_results_record_stops_the_cli_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    ok(tiny_eval("tiny", out), capsys)
    path = out / "items.jsonl"
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], json.dumps({**json.loads(text[1]), "correct": "yes"})]) + "\n")  # every field: above
    assert "items.jsonl:2: field 'correct'" in one_line(["eval", *tiny_eval("tiny", out)], capsys)
    for garbage in ("[1, 2]", '"text"', "{broken", "null"):
        path.write_text("\n".join([garbage, text[1]]) + "\n")
        assert "items.jsonl:1:" in one_line(["eval", *tiny_eval("tiny", out)], capsys)


# ---------------------------------------------------------------- non-UTF-8 bytes name the file and line


#: where a JSON-lines file enters -> (its lines, the file's name, the command reading it)
UTF8_ENTRIES = {
    "benchmark under --data-dir": (lambda: (FIXTURES / "gsm8k.jsonl").read_bytes().splitlines(), "data/gsm8k.jsonl",
                                   lambda f: ["tiny", "--benchmarks", "gsm8k", "--data-dir", str(f.parent), *QUIET]),
    "file: set": (lambda: [json.dumps({"question": f"q{i}", "answer": i}).encode() for i in range(5)], "mine.jsonl",
                  lambda f: ["tiny", "--benchmarks", f"file:{f}", *QUIET]),
    "records to score": (lambda: [json.dumps({"benchmark": "gsm8k", "id": i, "output": "1"}).encode() for i in range(5)],
                         "records.jsonl", lambda f: ["--score-outputs", str(f), "--data-dir", str(FIXTURES)]),
}


@pytest.mark.parametrize("entry", UTF8_ENTRIES)  # each kind of bad byte: test_io_helpers' read_utf8 table
def test_a_non_utf8_byte_anywhere_names_the_file_and_line(entry, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out
    lines, name, argv = UTF8_ENTRIES[entry]
    rows, rng, path = lines(), random.Random(entry), tmp_path / name
    n = rng.randrange(len(rows))
    at = rng.randrange(len(rows[n]))
    rows[n] = rows[n][:at] + b"\xff" + rows[n][at:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"\n".join(rows) + b"\n")
    line = one_line(["eval", *argv(path)], capsys)
    assert f"{path}:{n + 1}:" in line and "not UTF-8" in line


# ---------------------------------------------------------------- --score-outputs on numloss's own items.jsonl


@pytest.mark.parametrize("seed", [None, 7])
def test_score_outputs_reads_its_own_items_jsonl_of_a_synthetic_set_of_any_size_and_seed(seed, tmp_path, capsys):
    path = tmp_path / "items.jsonl"
    report = evaluate(Echo(), "synthetic:mix", results_file=path, limit=160, seed=seed, digit_stats=False, allow_unisolated=True)
    again = score_outputs(path, allow_unisolated=True)
    ours, theirs = report.items["numloss"]["synthetic:mix"], again.items["numloss"]["synthetic:mix"]
    assert [(r.id, r.question, r.gold, r.correct) for r in theirs] == [(r.id, r.question, r.gold, r.correct) for r in ours]
    # a file written before seeds and sizes were recorded: ids give the size, the default seed
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("seed", "set_size")}) + "\n"
                           for r in ResultsFile(path).records()))
    rescored = score_outputs(old, allow_unisolated=True, seed=seed).items["numloss"]["synthetic:mix"]  # --seed for them
    assert [r.question for r in rescored] == [r.question for r in ours]
    line = one_line(["eval", "--score-outputs", str(path), "--seed", "3", "--out", str(tmp_path / "scored")], capsys)
    assert "not --seed 3" in line
    evaluate(Echo(), "synthetic:mix", results_file=tmp_path / "3.jsonl", limit=2, seed=3, digit_stats=False)
    (tmp_path / "two.jsonl").write_text(path.read_text() + (tmp_path / "3.jsonl").read_text())
    with pytest.raises(BenchmarkError, match="2 seeds"):
        score_outputs(tmp_path / "two.jsonl")


def test_every_malformed_record_to_score_is_one_line(tmp_path, capsys):
    """Each field score_outputs reads, given each value its checker lets through (every other: the
    test above), one it refuses, or left out: refused in one line naming the file, the line and the
    field, or scored (exit 0)."""
    path = tmp_path / "items.jsonl"
    good = {"benchmark": "gsm8k", "id": 0, "output": "The answer is 7", "fallback_output": None}
    refused = 0
    for key, kinds in RECORD_CHECKS[check_output_record][0].items():
        wrong = [v for v in JSON_VALUES if not fits(v, kinds)]
        for value in [*(v for v in JSON_VALUES if fits(v, kinds)), *wrong[:1], "__missing__"]:
            record = {k: v for k, v in good.items() if k != key} if value == "__missing__" else {**good, key: value}
            path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
            argv = ["eval", "--score-outputs", str(path), "--data-dir", str(FIXTURES), "--out", str(tmp_path / "o"), "--allow-unisolated-exec"]
            line = one_line(argv, capsys, may_run=True)
            refused += line is not None
            assert line is None or f"{path}:2:" in line or "no item with id" in line or "unknown benchmark" in line, line
    assert refused >= 10


# ---------------------------------------------------------------- messages


def test_an_unknown_model_online_is_one_line_naming_what_was_looked_for(tmp_path, capsys, monkeypatch):
    """Online, transformers raises a many-line OSError after trying the hub: one line instead."""
    monkeypatch.setattr(load, "_offline", lambda: False)

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your internet connection\n" * 10)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", unreachable)
    line = one_line(["eval", *tiny_eval("no-such-model-xyz", tmp_path)], capsys)  # tiny_eval: --no-digit-stats, no tokenizer check
    assert "not found" in line and "local folder" in line and "Hugging Face cache" in line and "couldn't connect" in line


def test_every_malformed_file_set_record_is_one_error_or_a_well_formed_item(tmp_path):
    good = {"question": "What is 2 + 2?", "answer": "4"}
    path = tmp_path / "set.jsonl"
    refused = 0
    fields = {"question": JSON_VALUES, "answer": JSON_VALUES, "options": JSON_VALUES + [["a", "b", "c", "d", "e", "f"]],
              "id": JSON_VALUES, "kind": JSON_VALUES + ["choice", "letters"]}
    for key, values in fields.items():
        for value in [*values, "__missing__"]:
            record = {k: v for k, v in good.items() if k != key} if value == "__missing__" else {**good, key: value}
            path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
            try:
                bench = load_benchmark(f"file:{path}")
            except BenchmarkError as error:
                assert f"{path}:2:" in str(error) and "\n" not in str(error), str(error)
                refused += 1
                continue
            item = bench.items[1]  # accepted: then it is a well-formed item, not a str() of something
            assert item.question.strip() and item.answer.strip() and item.kind in ("number", "choice", "math"), (key, value, item)
            assert item.answer.lower() not in ("nan", "inf", "-inf", "none", "[]", "{}", "true", "false"), (key, value, item)
            assert all(isinstance(o, str) and not o.startswith(("[", "{")) for o in item.options), (key, value, item)
    assert refused >= 40  # through the command line, one line: BAD_INPUT's "null answer"
