"""Resumable per-item results, re-scoring saved outputs, `file:` sets and the Python API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from numloss import __version__
from numloss.evaluate import EvalReport, api, evaluate, programs, score_outputs
from numloss.evaluate.benchmarks import BenchmarkError, load_benchmark
from numloss.evaluate.generate import Generation
from numloss.evaluate.protocol import POT_TRIGGER
from numloss.evaluate.released import STOP
from test_digits import wordlevel  # a tokenizer without digits

FIXTURES = Path(__file__).parent / "fixtures" / "benchmarks"


class Counting:
    """Answers every open question with a program printing the gold (with float noise, "18.00000000000001",
    for the questions in `noisy`), multiple choice with (C); counts prompts."""

    def __init__(self, golds, die_after=None, noisy=()):
        self.golds, self.prompts, self.die_after, self.noisy = golds, [], die_after, noisy

    def generate(self, prompts, max_new_tokens=None):
        if self.die_after is not None and len(self.prompts) >= self.die_after:
            raise KeyboardInterrupt("killed")
        self.prompts += prompts
        out = []
        for p in prompts:
            if "multi-choice" in p:
                out.append(Generation("The answer is (C).", 4))
            else:
                question, gold = next((q, g) for q, g in self.golds.items() if q in p)
                # what print(0.1 * 70) style float arithmetic gives, as the program's text: 16 significant digits
                printed = repr(f"{gold}." + "0" * (15 - len(gold)) + "1") if question in self.noisy else gold
                out.append(Generation(f"print({printed})" if POT_TRIGGER in p else f"The answer is {gold}", 4))
        return out


def golds(name):
    return {it.question: it.answer for it in load_benchmark(name, data_dir=FIXTURES).items}


def run(tmp_path, generator, protocol="both", **kw):
    return evaluate(generator, "gsm8k,aqua", data_dir=FIXTURES, protocol=protocol, results_file=tmp_path / "items.jsonl",
                    batch_size=2, allow_unisolated=True, digit_stats=False, **kw)


def test_resume_skips_finished_items_reuses_their_outputs_and_a_kill_loses_only_the_batch_in_flight(tmp_path):
    gen = Counting(golds("gsm8k"), die_after=2)  # dies on the second batch
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, gen, protocol="released")
    first = (tmp_path / "items.jsonl").read_text().splitlines()
    assert len(first) == 2  # the first batch (2 items), nothing more
    gen2 = Counting(golds("gsm8k"))
    report = run(tmp_path, gen2)
    n_gsm, n_aqua = len(load_benchmark("gsm8k", data_dir=FIXTURES)), len(load_benchmark("aqua", data_dir=FIXTURES))
    # the two finished items are not generated again: numloss scores their outputs saved under `released`
    assert len(gen2.prompts) == (n_gsm - 2) + n_aqua
    assert report.scores["numloss"]["gsm8k"].count == n_gsm
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) == 2 * (n_gsm + n_aqua)
    gen3 = Counting(golds("gsm8k"))
    again = run(tmp_path, gen3)
    assert gen3.prompts == [] and again.macc("numloss") == report.macc("numloss")
    gen4 = Counting(golds("gsm8k"))
    run(tmp_path, gen4, overwrite=True)
    assert len(gen4.prompts) == n_gsm + n_aqua
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) == 2 * (n_gsm + n_aqua)


def test_score_outputs_of_plain_records():  # of its own results file: test_eval_faults, test_eval_runner
    plain = [{"benchmark": "gsm8k", "id": "0", "output": "The answer is 18"}, {"benchmark": "gsm8k", "id": "1", "output": "print('x')"}]
    scored = score_outputs(plain, protocol="numloss", data_dir=FIXTURES, allow_unisolated=True)
    results = scored.items["numloss"]["gsm8k"]
    assert results[1].needs_fallback and results[1].prediction == ""  # no fallback output given
    # a file's faults: test_eval_faults' test_every_malformed_record_to_score_is_one_line
    with pytest.raises(BenchmarkError, match="record 0: missing field 'output'"):
        score_outputs([{"benchmark": "gsm8k", "id": "0"}], data_dir=FIXTURES)


def test_programs_are_refused_without_isolation_and_those_items_use_cot(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMLOSS_ALLOW_UNISOLATED_EXEC", raising=False)
    monkeypatch.setattr(programs, "isolation", lambda allow_unisolated=False: programs.Isolation(
        "unisolated" if allow_unisolated else "unavailable", "test: no namespaces"))
    report = evaluate(Counting(golds("gsm8k")), "gsm8k", data_dir=FIXTURES, protocol="numloss", digit_stats=False, allow_unisolated=False)
    score = report.scores["numloss"]["gsm8k"]
    assert report.isolation["mode"] == "unavailable"
    assert score.pot_refused == score.count and score.styles == {"pot+cot": score.count} and score.accuracy == 1.0
    monkeypatch.setenv("NUMLOSS_ALLOW_UNISOLATED_EXEC", "1")
    report = evaluate(Counting(golds("gsm8k")), "gsm8k", data_dir=FIXTURES, digit_stats=False)
    assert report.isolation["mode"] == "unisolated" and report.scores["numloss"]["gsm8k"].pot_refused == 0


def test_file_sets_and_the_report_api(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"question": "What is 2 + 3?", "answer": 5},
        {"id": "half", "question": "Half of 7?", "answer": "3.5"},
        {"question": "Which is prime?", "options": ["4", "6", "7"], "answer": "C"},
        {"question": "Which is even?", "options": ["3", "8"], "answer": 1},
    ]) + "\n")
    bench = load_benchmark(f"file:{path}")
    assert [it.kind for it in bench.items] == ["number", "number", "choice", "choice"]
    assert [it.id for it in bench.items] == ["1", "half", "3", "4"] and bench.items[3].answer == "B"
    gen = Counting({"What is 2 + 3?": "5", "Half of 7?": "3.50"})
    report = evaluate(gen, f"file:{path}", protocol="numloss", allow_unisolated=True, digit_stats=False, limit=4, threads=1)
    assert isinstance(report, EvalReport) and torch.get_num_threads() == 1  # conftest resets threads
    # which settings, version and date made it (from the command line: test_eval_runner's end-to-end run)
    header = report.to_markdown().splitlines()[2:4]
    assert header[0].startswith(f"Made by numloss.evaluate from Python with numloss {__version__} on 20") and header[0].endswith(" UTC.")
    assert header[1] == ("Settings: protocol numloss; backend hf (auto); prompt released-alpaca-0shot; max new tokens "
                         "1500 open / 2048 multiple choice; program of thought on; limit 4; threads 1.")
    s = report.scores["numloss"][f"file:{path}"]
    assert (s.correct, s.count) == (3, 4) and s.ci95[0] < 0.75 < s.ci95[1]
    assert s.mae == 0 and s.signed_log_mae == 0
    assert "| file:" in report.to_markdown() and "mACC" in report.to_markdown()
    with pytest.raises(BenchmarkError, match="no such file"):
        load_benchmark(f"file:{tmp_path / 'none.jsonl'}")


def test_limit_zero_is_refused_the_same_way_everywhere():
    for call in (lambda: load_benchmark("synthetic:integer_arithmetic", limit=0),  # load_benchmark's one check_limit, files too
                 lambda: evaluate(Counting({}), "gsm8k", data_dir=FIXTURES, limit=0),
                 lambda: score_outputs([{"benchmark": "gsm8k", "id": "0", "output": "1"}], data_dir=FIXTURES, limit=0)):
        with pytest.raises(BenchmarkError, match="--limit must be a positive number of items, got 0"):
            call()


def test_the_api_checks_the_tokenizer_for_digit_metrics_before_generating():
    class NeverCalled:  # a model whose use would mean generation started
        def __getattr__(self, name):
            raise AssertionError(f"the model was used ({name}) before the tokenizer check")

    with pytest.raises(ValueError, match="digit_stats=False"):
        evaluate((NeverCalled(), wordlevel(list("abc"))), "gsm8k", data_dir=FIXTURES)


def test_both_protocols_list_the_items_whose_verdicts_differ(tmp_path):
    """A program printing float noise ("18.00000000000001") is wrong by the released string
    comparison and right by numloss's: `both` lists exactly those items, in the API and report.md."""
    items = load_benchmark("gsm8k", data_dir=FIXTURES).items
    noisy = Counting(golds("gsm8k"), noisy={items[0].question, items[2].question})
    report = evaluate(noisy, "gsm8k", data_dir=FIXTURES, protocol="both", allow_unisolated=True, digit_stats=False)
    assert report.disagreements == {"gsm8k": [items[0].id, items[2].id]}
    assert report.accuracy("gsm8k", "numloss") == 1.0
    assert report.accuracy("gsm8k", "released") == pytest.approx(1 - 2 / len(items))
    markdown = report.to_markdown()
    assert "verdicts differ" in markdown and f"| 2 | {items[0].id}, {items[2].id} |" in markdown


def test_evaluate_hands_the_protocols_stop_strings_and_limits_to_the_generator(monkeypatch):
    """The released stop strings and token limits reach the generator that is built (not only the
    settings record)."""
    seen = {}

    def fake_generator(opts, model_or_path, stop, limit):
        seen.update(stop=tuple(stop), limit=limit)
        return None, None, Counting(golds("gsm8k"))

    monkeypatch.setattr(api, "_generator", fake_generator)
    for cap, limit in ((None, 1500), (64, 64)):
        evaluate("anything", "gsm8k", data_dir=FIXTURES, protocol="released", allow_unisolated=True, digit_stats=False,
                 max_new_tokens=cap)
        assert set(STOP) <= set(seen["stop"]) and seen["limit"] == limit
