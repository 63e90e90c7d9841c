"""Results tied to what produced them: model weights, gold answers and protocol settings are
matched by content, and a mismatch is refused in one line that says what changed. Records written
before these fields existed are accepted (they carry no hash to compare)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from numloss.evaluate import evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.generate import Generation
from numloss.evaluate.store import ResultsFile, folder_identity
from numloss.identity import file_sha256, folder_sha256, model_sha256
from test_compare_faults import _mapping, _one_line_error, _write
from test_eval_faults import ok, one_line, save_tiny, tiny_eval


class Fixed:
    """Answers every question with `answer`; names itself so its records carry an identity."""

    def __init__(self, answer: str = "5", identity: str = "fixed") -> None:
        self.answer, self.identity, self.prompts = answer, identity, []

    def generate(self, prompts, max_new_tokens=None):
        self.prompts += prompts
        return [Generation(f"The answer is {self.answer}.\n\nQuestion: more", 4) for _ in prompts]


def _bench(path: Path, answers: list[int]) -> str:
    path.write_text("".join(json.dumps({"question": f"What is {a} + 0?", "answer": a}) + "\n" for a in answers), encoding="utf-8")
    return f"file:{path}"


def _run(generator, bench: str, results: Path, **kw):
    return evaluate(generator, bench, protocol="numloss", results_file=results, digit_stats=False,
                    program_of_thought=False, allow_unisolated=True, **kw)


def _replace_in_place(model: Path) -> None:
    """Save another tiny model (seed 1) over `model`: the same names and sizes, the times set back."""
    times = {p.name: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in model.iterdir()}
    save_tiny(model, seed=1)
    for name, (atime, mtime) in times.items():
        os.utime(model / name, ns=(atime, mtime))


# -- the hash itself ---------------------------------------------------------------------------------
def test_a_file_copied_over_with_its_time_restored_hashes_anew(tmp_path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"a" * 64)
    first = file_sha256(path)
    stat = path.stat()
    with open(path, "r+b") as handle:  # same inode, same size, then the time set back
        handle.write(b"b" * 64)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_ino == stat.st_ino
    assert file_sha256(path) != first
    assert folder_sha256(tmp_path) != folder_sha256(tmp_path, (".bin",))
    assert model_sha256("tiny") is None


# -- eval ----------------------------------------------------------------------------------------------
def test_eval_refuses_saved_verdicts_of_changed_gold_answers(tmp_path) -> None:
    bench = _bench(tmp_path / "set.jsonl", [5, 5])
    results = tmp_path / "items.jsonl"
    assert _run(Fixed(), bench, results).accuracy(bench) == 1.0
    # the same questions, their answers edited
    (tmp_path / "set.jsonl").write_text("".join(json.dumps({"question": "What is 5 + 0?", "answer": 7}) + "\n"
                                                for _ in range(2)))
    with pytest.raises(ValueError, match=r"gold answer of .* changed \('5' then, '7' now"):
        _run(Fixed(), bench, results)
    fresh = _run(Fixed(), bench, tmp_path / "fresh.jsonl")
    assert fresh.accuracy(bench) == 0.0, "a fresh evaluation gives the new answers' verdicts"
    assert _run(Fixed(), bench, results, overwrite=True).accuracy(bench) == 0.0


def test_eval_refuses_records_of_the_other_stop_cut_mode(tmp_path) -> None:
    bench = _bench(tmp_path / "set.jsonl", [5, 5])
    results = tmp_path / "items.jsonl"
    _run(Fixed(), bench, results, cut_at_stop=False)
    assert {r["cut_at_stop"] for r in ResultsFile(results).records()} == {False}
    with pytest.raises(BenchmarkError, match=r"cut_at_stop False then, True now"):
        _run(Fixed(), bench, results, cut_at_stop=True)
    _run(Fixed(), bench, results, cut_at_stop=True, overwrite=True)
    assert {r["cut_at_stop"] for r in ResultsFile(results).records()} == {True}


def test_records_without_the_new_fields_are_still_resumed(tmp_path) -> None:
    bench = _bench(tmp_path / "set.jsonl", [5, 5])
    results = tmp_path / "items.jsonl"
    _run(Fixed(), bench, results)
    old = [{k: v for k, v in r.items() if k not in ("cut_at_stop", "model_sha256")} for r in ResultsFile(results).records()]
    results.write_text("".join(json.dumps(r) + "\n" for r in old))
    generator = Fixed()
    _run(generator, bench, results)
    assert generator.prompts == [], "an old record without the fields is resumed, not redone"


def test_eval_refuses_a_model_replaced_in_place_with_sizes_and_times_restored(tmp_path, capsys) -> None:
    model, out = tmp_path / "model", tmp_path / "out"
    save_tiny(model, seed=0)
    ok(tiny_eval(str(model), out), capsys)
    records = ResultsFile(out / "items.jsonl").records()
    assert {r["model_sha256"] for r in records} == {model_sha256(str(model))}
    identity = folder_identity(model)
    _replace_in_place(model)
    assert folder_identity(model) == identity, "names, sizes and times alone cannot tell the two apart"
    capsys.readouterr()
    line = one_line(tiny_eval(str(model), out), capsys)
    assert "weights of" in line and "changed (sha256:" in line and "--overwrite" in line
    assert ResultsFile(out / "items.jsonl").records() == records


def test_score_outputs_refuses_a_file_mixing_two_models(tmp_path) -> None:
    bench = _bench(tmp_path / "set.jsonl", [5, 5])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _run(Fixed(identity="model-a"), bench, first)
    _run(Fixed(identity="model-b"), bench, second)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(first.read_text() + second.read_text())
    with pytest.raises(BenchmarkError, match=r"holds the outputs of 2 models .*model-a.*model-b"):
        score_outputs(mixed)
    assert score_outputs(first).accuracy(bench) == 1.0


@pytest.mark.parametrize("records", [[["benchmark", "gsm8k"]], "not a list".split(), [None], {"benchmark": "x"}, 5])
def test_score_outputs_given_other_than_records_is_one_error(records) -> None:
    with pytest.raises(BenchmarkError, match="mapping|iterable"):
        score_outputs(records)


def test_rescoring_does_not_replace_an_evaluations_report(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    ok(tiny_eval("tiny", out), capsys)
    report = (out / "results.json").read_bytes()
    line = one_line(["--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec"], capsys)
    assert "holds the report of an evaluation of tiny" in line and "--overwrite" in line
    assert (out / "results.json").read_bytes() == report
    ok(["--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec", "--overwrite"], capsys)
    kept = list(out.glob("results.json.overwritten-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == report
    assert "scored_from" in json.loads((out / "results.json").read_text())
    # re-scoring the same file into its own report again is no replacement of another's
    ok(["--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec"], capsys)


# -- compare -------------------------------------------------------------------------------------------
def _compare(tmp_path: Path, out: Path, *extra: str) -> int:
    from numloss.compare import main as compare_main

    return compare_main([_write(tmp_path / "c.yaml", _mapping(out)), "--no-progress", *extra])


def test_compare_refuses_a_finished_run_of_a_model_replaced_in_place(tmp_path, capsys) -> None:
    model, out = tmp_path / "model", tmp_path / "out"
    save_tiny(model, seed=0)
    assert _compare(tmp_path, out, "--model", str(model)) == 0
    result = json.loads((out / "runs" / "mle-s0" / "result.json").read_text())
    assert result["model_sha256"] == model_sha256(str(model)) and result["data_sha256"].startswith("sha256:")
    _replace_in_place(model)
    capsys.readouterr()
    line = _one_line_error(capsys, _compare(tmp_path, out, "--model", str(model)))
    assert "mle-s0" in line and "the model's weights changed (sha256:" in line and "move" in line
    assert json.loads((out / "runs" / "mle-s0" / "result.json").read_text()) == result, "nothing replaced"


def test_compare_refuses_a_finished_run_of_other_training_data_and_accepts_one_without_hashes(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert _compare(tmp_path, out) == 0
    path = out / "runs" / "mle-s0" / "result.json"
    result = json.loads(path.read_text())
    assert "model_sha256" not in result, "'tiny' has no weight files: its weights follow from the hashed config"
    path.write_text(json.dumps({**result, "data_sha256": "sha256:" + "0" * 64}))
    capsys.readouterr()
    line = _one_line_error(capsys, _compare(tmp_path, out))
    assert "the training data changed (sha256:000000000000 then" in line
    # a result written before the fields existed is reused as it always was
    path.write_text(json.dumps({k: v for k, v in result.items() if k not in ("data_sha256", "model_sha256")}))
    assert _compare(tmp_path, out, "--report-only") == 0
    assert "data_sha256" not in json.loads(path.read_text())


def test_report_only_of_a_slice_does_not_replace_the_fuller_report(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert _compare(tmp_path, out) == 0
    data = json.loads((out / "results.json").read_text())
    data["runs"].append({**data["runs"][0], "label": "del"})  # the fuller report of a larger grid
    (out / "results.json").write_text(json.dumps(data))
    before = (out / "results.json").read_bytes(), (out / "report.md").read_bytes()
    capsys.readouterr()
    line = _one_line_error(capsys, _compare(tmp_path, out, "--report-only", "--objectives", "mle"))
    assert "reports 2 runs and this --report-only selects 1" in line
    assert ((out / "results.json").read_bytes(), (out / "report.md").read_bytes()) == before
    assert _compare(tmp_path, out, "--objectives", "mle") == 0  # a training slice keeps the fuller one aside
    (kept,) = out.glob("previous-report-*")
    assert (kept / "results.json").read_bytes() == before[0]
