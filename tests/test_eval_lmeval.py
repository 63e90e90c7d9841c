"""Scoring other harnesses' outputs, stop strings on every output, and the report's JSON.

The lm-eval fixtures (tests/fixtures/lmeval/samples_<task>_<date>.jsonl) are written in the layout
lm_eval/evaluator.py logs with --log_samples: doc_id, doc, target, arguments, resps,
filtered_resps, filter, metrics, doc_hash, prompt_hash, target_hash and the task's metric.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultrun import one_line
from numloss.evaluate import lmeval
from numloss.evaluate.api import evaluate, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError
from numloss.evaluate.cli import main as eval_main
from numloss.evaluate.report import SCHEMA_VERSION, with_interval
from test_eval_faults import Echo

FIXTURES = Path(__file__).parent / "fixtures"
GSM8K_SAMPLES = FIXTURES / "lmeval" / "samples_gsm8k_2024-06-01T12-00-00.123456.jsonl"
MMLU_SAMPLES = FIXTURES / "lmeval" / "samples_mmlu_flan_cot_zeroshot_elementary_mathematics_2024-06-01T12-00-00.123456.jsonl"
DATA = FIXTURES / "benchmarks"


def test_the_fixture_has_the_fields_lm_eval_logs():
    for line in GSM8K_SAMPLES.read_text().splitlines():
        row = json.loads(line)
        assert {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "doc_hash", "prompt_hash", "target_hash"} <= set(row)
        assert isinstance(row["resps"][0][0], str) and isinstance(row["filtered_resps"][0], str)
    # gsm8k, mmlu_flan_cot_zeroshot_* and hellaswag are read from the files' names by the scoring tests below
    assert lmeval.benchmark_of_task("minerva_math_algebra") == "math"


def test_lm_eval_samples_are_matched_and_scored_under_both_protocols():
    report = score_outputs(GSM8K_SAMPLES, data_dir=DATA, allow_unisolated=True)
    assert report.protocols == ["released", "numloss"]  # both, by default, for lm-eval samples
    # doc 0 is our item 0; doc 1 is our item 2 (found by its question); doc 7 is not in our file
    assert report.meta["lm_eval"]["matched"] == {"id": 1, "question": 1, "doc": 1}
    ids = [r.id for r in report.items["numloss"]["gsm8k"]]
    assert ids == ["0", "2", "lm-eval:7"]  # one per document, though lm-eval logs one line per filter
    assert [r.correct for r in report.items["numloss"]["gsm8k"]] == [True, True, False]
    assert [r.correct for r in report.items["released"]["gsm8k"]] == [True, True, False]
    score = report.scores["numloss"]["gsm8k"]
    assert score.mae == pytest.approx(10 / 3)  # 0, 0 and |865 - 875|
    assert score.place_accuracy and report.meta["cut_at_stop"] is False and report.meta["format"] == "lm-eval samples"
    mmlu = score_outputs(MMLU_SAMPLES, data_dir=DATA, allow_unisolated=True)
    assert [r.id for r in mmlu.items["numloss"]["mmlu_math"]] == ["1"]  # lm-eval's doc 0 of its subject is our item 1
    assert mmlu.items["numloss"]["mmlu_math"][0].prediction == "B" and mmlu.scores["numloss"]["mmlu_math"].correct == 1
    own = score_outputs(GSM8K_SAMPLES, protocol="numloss", allow_unisolated=True).items["numloss"]["gsm8k"]
    # without our files, lm-eval's own docs are the items
    assert [(r.id, r.gold) for r in own] == [("lm-eval:0", "7"), ("lm-eval:1", "540"), ("lm-eval:7", "875")]


def _write(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_unmatchable_lm_eval_samples_fail_with_one_line(tmp_path, capsys):
    row = json.loads(GSM8K_SAMPLES.read_text().splitlines()[0])
    loglik = _write(tmp_path, "samples_gsm8k_2024-06-01T12-00-00.jsonl", [{**row, "resps": [[[-1.25, False]]]}])
    assert "no generated text" in one_line(["eval", "--score-outputs", str(loglik), "--allow-unisolated-exec", "--out", str(tmp_path / "o")], capsys)
    bad_doc = _write(tmp_path, "samples_gsm8k_2024-06-01T12-00-01.jsonl", [{**row, "doc": {"text": "no question here"}}])
    assert "doc_id 0" in one_line(["eval", "--score-outputs", str(bad_doc), "--out", str(tmp_path / "o")], capsys)
    other = _write(tmp_path, "samples_hellaswag_2024-06-01T12-00-00.jsonl", [row])
    assert "hellaswag" in one_line(["eval", "--score-outputs", str(other), "--out", str(tmp_path / "o")], capsys)
    unnamed = _write(tmp_path, "outputs.jsonl", [row])
    assert "--outputs-benchmark" in one_line(["eval", "--score-outputs", str(unnamed), "--out", str(tmp_path / "o")], capsys)
    wrong_target = _write(tmp_path, "samples_gsm8k_2024-06-01T12-00-02.jsonl", [{**row, "target": "#### 8"}])
    assert "target" in one_line(["eval", "--score-outputs", str(wrong_target), "--data-dir", str(DATA), "--out", str(tmp_path / "o")], capsys)
    # named explicitly, an unnamed file scores
    assert eval_main(["--score-outputs", str(unnamed), "--outputs-benchmark", "gsm8k", "--allow-unisolated-exec", "--out", str(tmp_path / "o")]) == 0


# ------------------------------------------------------------------ the question is checked


def test_a_record_whose_question_is_not_the_items_is_refused(tmp_path):
    gsm = [json.loads(line) for line in (DATA / "gsm8k.jsonl").read_text().splitlines()]
    good = {"benchmark": "gsm8k", "id": "0", "output": "The answer is 7.", "question": gsm[0]["question"]}
    report = score_outputs([good], data_dir=DATA, allow_unisolated=True)
    assert report.items["numloss"]["gsm8k"][0].correct
    svamp_question = "Jack had 8 pens and Mary had 5 pens. How many pens do they have?"
    wrong = _write(tmp_path, "items.jsonl", [good, {**good, "id": "1", "question": svamp_question}])
    with pytest.raises(BenchmarkError, match=r"items.jsonl:2: the record's question is not the question of gsm8k item 1"):
        score_outputs(wrong, data_dir=DATA)


# ------------------------------------------------------------------ stop strings


def test_every_generators_output_and_every_record_is_cut_at_the_protocols_stops():
    kwargs = {"data_dir": DATA, "protocol": "both", "limit": 2, "digit_stats": False, "allow_unisolated": True, "program_of_thought": False}
    rambling = Echo("46.5.\nResponse: The answer is 5.")  # a custom generator: it does not stop at the protocol's stops
    report = evaluate(rambling, ["gsm8k=" + str(DATA / "gsm8k.jsonl")], **kwargs)
    second = report.items["released"]["gsm8k"][1]  # gold 46.5
    assert second.output.endswith("The answer is 46.5.\n") and second.prediction == "46.5" and second.correct
    uncut = evaluate(rambling, ["gsm8k=" + str(DATA / "gsm8k.jsonl")], cut_at_stop=False, **kwargs)
    assert uncut.items["released"]["gsm8k"][1].prediction == "5"
    record = {"benchmark": "gsm8k", "id": "1", "output": rambling.generate([""])[0].text}  # score_outputs' records too
    cut = score_outputs([record], protocol="released", data_dir=DATA, allow_unisolated=True)
    assert cut.items["released"]["gsm8k"][0].prediction == "46.5" and cut.meta["cut_at_stop"] is True
    kept = score_outputs([record], protocol="released", data_dir=DATA, allow_unisolated=True, cut_at_stop=False)
    assert kept.items["released"]["gsm8k"][0].prediction == "5"


# ------------------------------------------------------------------ Python-API parity


def test_the_report_json_has_what_the_cli_prints(tmp_path, capsys):
    records = [{"benchmark": "gsm8k", "id": str(i), "output": o}
               for i, o in enumerate(["print(0.07 * 100)", "The answer is 46.5", "The answer is 540"])]
    path = _write(tmp_path, "items.jsonl", records)
    report = score_outputs(path, protocol="both", data_dir=DATA, allow_unisolated=True)
    data = report.to_json()
    assert data["schema_version"] == SCHEMA_VERSION and "numloss_version" in data
    assert data["disagreements"] == {"gsm8k": ["0"]}  # 7.000000000000001: released compares strings
    assert len(report.to_json(items=True)["items"]["numloss"]["gsm8k"]) == 3
    out = tmp_path / "out"
    assert eval_main(["--score-outputs", str(path), "--protocol", "both", "--data-dir", str(DATA), "--allow-unisolated-exec", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((out / "results.json").read_text())
    for protocol in ("released", "numloss"):
        s = data["benchmarks"][protocol]["gsm8k"]
        assert {"accuracy", "ci95", "correct", "count", "mae", "signed_log_mae", "place_accuracy", "program_status", "pot_refused"} <= set(s)
        assert data["macc"][protocol] == report.macc(protocol)
        score = saved["benchmarks"][protocol]["gsm8k"]
        assert f"{protocol:<9} gsm8k" in printed and with_interval(score["accuracy"], score["ci95"]) in printed
        assert with_interval(saved["macc"][protocol], saved["macc_ci95"][protocol]) in printed
    assert "verdicts differ: gsm8k 1" in printed and saved["disagreements"]["gsm8k"] == ["0"]


# ------------------------------------------------------------------ lm-eval's results file, large MAE


#: lm-eval's aggregated results file, in the layout lm_eval/evaluator.py writes (abridged)
RESULTS = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25}}, "group_subtasks": {"gsm8k": []},
           "configs": {"gsm8k": {"task": "gsm8k"}}, "versions": {"gsm8k": 3.0}, "n-shot": {"gsm8k": 5}, "config": {"model": "hf"}}


@pytest.mark.parametrize(("name", "beside"), [("results_2024-06-01T12-00-00.123456.json", True), ("my_results.json", True),
                                              ("results_2024-06-01T12-00-00.json", False)])
def test_the_aggregated_results_file_is_named_with_the_samples_file_to_give(tmp_path, name, beside):
    (tmp_path / name).write_text(json.dumps(RESULTS, indent=2))
    samples = tmp_path / GSM8K_SAMPLES.name
    if beside:
        samples.write_text(GSM8K_SAMPLES.read_text())
    with pytest.raises(BenchmarkError) as error:
        score_outputs(tmp_path / name, data_dir=DATA, allow_unisolated=True)
    message = str(error.value)
    assert "aggregated results file" in message and "\n" not in message and "fix or delete" not in message
    assert (str(samples) if beside else "rerun lm_eval with --log_samples") in message


def test_a_huge_mae_is_printed_readably_with_a_note_that_one_item_dominates(tmp_path):
    rows = [json.loads(line) for line in GSM8K_SAMPLES.read_text().splitlines()]
    rows[0]["resps"] = [["The answer is " + "9" * 255]]
    report = score_outputs(_write(tmp_path, GSM8K_SAMPLES.name, rows), data_dir=DATA, allow_unisolated=True)
    text = report.to_markdown()
    mae_cells = [line for line in text.splitlines() if line.startswith("| gsm8k")]
    assert mae_cells and all(len(cell) < 40 for line in mae_cells for cell in line.split("|"))
    assert "e+254" in text and "dominated by that item" in text
    report.to_json()  # still serialisable
