"""Results tied to what produced them: model weights, gold answers and protocol settings are
matched by content, and a mismatch is refused in one line that says what changed. Records written
before these fields existed are accepted (they carry no hash to compare)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from faultrun import one_line
from numloss.cli import main
from numloss.evaluate import evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.store import ResultsFile, folder_identity
from numloss.identity import file_sha256, folder_sha256, model_sha256
from test_compare_faults import _mapping, _write
from test_eval_faults import Echo, ok, save_tiny, tiny_eval


def _bench(path: Path, answers: list[int], question: str = "What is {} + 0?") -> str:
    path.write_text("".join(json.dumps({"question": question.format(a), "answer": a}) + "\n" for a in answers),
                    encoding="utf-8")
    return f"file:{path}"


def _run(generator, bench: str, results: Path, **kw):
    return evaluate(generator, bench, protocol="numloss", results_file=results, digit_stats=False, limit=2,
                    max_new_tokens=2, program_of_thought=False, allow_unisolated=True, **kw)


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
def _strip(t: Path, *fields: str) -> None:
    """The results file without `fields`, as numloss wrote it before they existed."""
    rows = ResultsFile(t / "items.jsonl").records()
    (t / "items.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k not in fields}) + "\n"
                                           for r in rows))


def _nudge(t: Path, generator) -> None:
    with torch.no_grad():
        next(generator[0].parameters()).view(-1)[0] += 1.0  # one weight changed, in place


#: what changed between two runs into one results file -> (first run's options, the change, second
#: run's options, the one error naming it; None: the saved records are still resumed)
CHANGES = {
    "gold answers": ({}, lambda t, g: _bench(t / "set.jsonl", [7, 7], question="What is 5 + 0?"), {},
                     r"gold answer of .* changed \('5' then, '7' now"),
    # ids are positions: another seed's (or an edited file's) records under the same ids are other questions'
    "seed": ({"seed": 1}, None, {"seed": 2}, r"saved with another question.*another --seed"),
    "stop-cut mode": ({"cut_at_stop": False}, None, {"cut_at_stop": True}, r"cut_at_stop False then, True now"),
    "no model identity": ({}, lambda t, g: _strip(t, "model_identity"), {}, "carry no model identity"),
    "weights in memory": ({}, _nudge, {}, "may be another model's outputs"),
    "records of an older numloss": ({}, lambda t, g: _strip(t, "cut_at_stop", "model_sha256"), {}, None),
}


@pytest.mark.parametrize("change", CHANGES)
def test_saved_records_of_another_input_are_refused_and_overwrite_redoes_them(change, tmp_path) -> None:
    from numloss.models.load import load_model_and_tokenizer

    first, edit, second, message = CHANGES[change]
    bench = "synthetic:arithmetic" if change == "seed" else _bench(tmp_path / "set.jsonl", [5, 5])
    generator = load_model_and_tokenizer("tiny") if change == "weights in memory" else Echo("5", identity="echo")
    results = tmp_path / "items.jsonl"
    _run(generator, bench, results, **first)
    if edit is not None:
        edit(tmp_path, generator)
    if message is None:  # records without the fields are resumed, not redone
        echo = Echo("5")
        _run(echo, bench, results, **second)
        assert echo.prompts == []
        return
    with pytest.raises(BenchmarkError, match=message):
        _run(generator, bench, results, **second)
    redone = _run(generator, bench, results, overwrite=True, **second)
    fresh = _run(generator, bench, tmp_path / "fresh.jsonl", **second)
    assert [r.to_json() for r in redone.items["numloss"][bench]] == [r.to_json() for r in fresh.items["numloss"][bench]]


def test_a_model_saved_anew_at_the_same_path_is_refused_and_overwrite_moves_its_records_aside(tmp_path, capsys) -> None:
    model, out = tmp_path / "model", tmp_path / "out"
    save_tiny(model, seed=0)
    ok(tiny_eval(str(model), out), capsys)
    first = ResultsFile(out / "items.jsonl").records()
    assert len(first) == 2 and {r["model_identity"] for r in first} == {folder_identity(model)}
    assert {r["model_sha256"] for r in first} == {model_sha256(str(model))}
    ok(tiny_eval(str(model), out), capsys)  # the same model: resumed, nothing added
    assert ResultsFile(out / "items.jsonl").records() == first
    _replace_in_place(model)
    assert folder_identity(model) == first[0]["model_identity"], "names, sizes and times cannot tell the two apart"
    capsys.readouterr()  # save_pretrained's progress lines
    line = one_line(["eval", *tiny_eval(str(model), out)], capsys)
    assert "weights of" in line and "changed (sha256:" in line and "--overwrite" in line
    save_tiny(model, seed=1)  # saved anew: new times
    capsys.readouterr()
    line = one_line(["eval", *tiny_eval(str(model), out)], capsys)
    assert "may be another model's outputs" in line and "--overwrite" in line and str(out / "items.jsonl") in line
    assert ResultsFile(out / "items.jsonl").records() == first  # refused: nothing written
    _, err = ok(tiny_eval(str(model), out, "--overwrite"), capsys)
    (aside,) = out.glob("items.jsonl.overwritten-*")
    assert f"moved 2 earlier records of {model} to {aside}" in err
    assert ResultsFile(aside).records() == first  # the old outputs are kept, aside
    now = ResultsFile(out / "items.jsonl").records()
    assert len(now) == 2 and {r["model_identity"] for r in now} == {folder_identity(model)} != {first[0]["model_identity"]}


def test_score_outputs_refuses_a_file_mixing_two_models(tmp_path) -> None:
    bench = _bench(tmp_path / "set.jsonl", [5, 5])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _run(Echo("5", identity="model-a"), bench, first)
    _run(Echo("5", identity="model-b"), bench, second)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(first.read_text() + second.read_text())
    with pytest.raises(BenchmarkError, match=r"holds the outputs of 2 models .*model-a.*model-b"):
        score_outputs(mixed)
    assert score_outputs(first).accuracy(bench) == 1.0


def test_rescoring_does_not_replace_an_evaluations_report(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    ok(tiny_eval("tiny", out), capsys)
    report = (out / "results.json").read_bytes()
    line = one_line(["eval", "--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec"], capsys)
    assert "holds the report of an evaluation of tiny" in line and "--overwrite" in line
    assert (out / "results.json").read_bytes() == report
    ok(["--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec", "--overwrite"], capsys)
    kept = list(out.glob("results.json.overwritten-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == report
    assert "scored_from" in json.loads((out / "results.json").read_text())
    # re-scoring the same file into its own report again is no replacement of another's
    ok(["--score-outputs", str(out / "items.jsonl"), "--out", str(out), "--allow-unisolated-exec"], capsys)


# -- compare -------------------------------------------------------------------------------------------
def _compare(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["compare", _write(tmp_path / "c.yaml", _mapping(out)), "--no-progress", *extra]


def test_compare_refuses_a_finished_run_of_a_model_replaced_in_place(tmp_path, capsys) -> None:
    model, out = tmp_path / "model", tmp_path / "out"
    save_tiny(model, seed=0)
    assert main(_compare(tmp_path, out, "--model", str(model))) == 0
    result = json.loads((out / "runs" / "mle-s0" / "result.json").read_text())
    assert result["model_sha256"] == model_sha256(str(model)) and result["data_sha256"].startswith("sha256:")
    _replace_in_place(model)
    capsys.readouterr()
    line = one_line(_compare(tmp_path, out, "--model", str(model)), capsys)
    assert "mle-s0" in line and "the model's weights changed (sha256:" in line and "move" in line
    assert json.loads((out / "runs" / "mle-s0" / "result.json").read_text()) == result, "nothing replaced"


def test_compare_refuses_a_run_of_other_training_data_reuses_one_without_hashes_and_keeps_the_fuller_report(
        compare_recorded, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(compare_recorded[0] / "out", out)
    path = out / "runs" / "mle-s0" / "result.json"
    result = json.loads(path.read_text())
    assert "model_sha256" not in result, "'tiny' has no weight files: its weights follow from the hashed config"
    path.write_text(json.dumps({**result, "data_sha256": "sha256:" + "0" * 64}))
    capsys.readouterr()
    line = one_line(_compare(tmp_path, out), capsys)
    assert "the training data changed (sha256:000000000000 then" in line
    # a result written before the fields existed is reused as it always was
    path.write_text(json.dumps({k: v for k, v in result.items() if k not in ("data_sha256", "model_sha256")}))
    assert main(_compare(tmp_path, out, "--report-only")) == 0
    assert "data_sha256" not in json.loads(path.read_text())
    # a --report-only of a slice does not replace the fuller report
    data = json.loads((out / "results.json").read_text())
    data["runs"].append({**data["runs"][0], "label": "del"})  # the fuller report of a larger grid
    (out / "results.json").write_text(json.dumps(data))
    before = (out / "results.json").read_bytes(), (out / "report.md").read_bytes()
    capsys.readouterr()
    line = one_line(_compare(tmp_path, out, "--report-only", "--objectives", "mle"), capsys)
    assert "reports 2 runs and this --report-only selects 1" in line
    assert ((out / "results.json").read_bytes(), (out / "report.md").read_bytes()) == before
    assert main(_compare(tmp_path, out, "--objectives", "mle")) == 0  # a training slice keeps the fuller one aside
    (kept,) = out.glob("previous-report-*")
    assert (kept / "results.json").read_bytes() == before[0]
