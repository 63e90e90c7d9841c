"""Reading an output takes time linear in its length, under both protocols, and one output that
still takes too long is that item's "unreadable" verdict, never a stalled eval.

Models that loop emit megabytes of newlines, spaces, digits, "=", "answer", brackets or
backslashes. Each such output is read at two sizes ten times apart (30 KB and 300 KB in `make
test`; 100 KB and 1 MB in the `slow` variant), by both protocols and for the three answer kinds;
the larger read must take at most about ten times the smaller one (the bound asserted is 15x, on
CPU time, since the machine running the tests is shared): a quadratic reader takes 100x. Absolute
times are recorded by bench/reader.py, not asserted here.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from adversarial_outputs import ITEMS, NAMES, adversarial
from numloss.evaluate import answers, runner, score_outputs
from numloss.evaluate.benchmarks import Item, load_benchmark
from numloss.evaluate.protocol import NUMLOSS, RELEASED
from test_eval_differential import program_runner

FLOOR = 0.02  # seconds: below this the smaller read is too fast to time against
#: (smaller, larger) sizes in characters; the slow pair is the same property at megabyte scale
SIZES = [pytest.param((30_000, 300_000), id="30KB"), pytest.param((100_000, 1_000_000), id="1MB", marks=pytest.mark.slow)]


def read_all(text: str) -> float:
    """CPU seconds to read `text` under both protocols, for the three kinds."""
    start = time.process_time()
    for item, benchmark in ITEMS.values():
        for protocol in (NUMLOSS, RELEASED):
            try:
                prediction = protocol.finalize(item, protocol.extract(item, text, benchmark).prediction)
                if prediction:
                    protocol.compare(item, prediction)
            except answers.TooLarge:  # a run of 401+ digits is refused before it is read: nothing grows
                pass
            protocol.program(text)
    return time.process_time() - start


@pytest.fixture(scope="module", autouse=True)
def warm():
    read_all("The answer is \\frac{3}{x}.")  # imports (math-verify, sympy) are not the reader's time


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("name", NAMES)
def test_reading_time_grows_linearly(name, sizes):
    small = read_all(adversarial(name, sizes[0]))
    large = read_all(adversarial(name, sizes[1]))
    assert large <= 15 * max(small, FLOOR), f"{name}: {sizes[0]} chars {small:.3f} s, {sizes[1]} chars {large:.3f} s"


def test_a_quadratic_pattern_is_stopped_by_the_read_bound():
    """The second line of defence: a pattern that backtracks is interrupted at the deadline."""
    pattern = answers._rx(r"answer\s*(?:is)?\s*:?\s*\(([A-E])\)")
    with pytest.raises(answers.ReadTimeout), answers.read_limit(0.2):
        answers._search(pattern, "answer" + " " * 200_000)


def test_an_output_over_the_bound_or_a_reader_error_is_unreadable_and_the_eval_goes_on(monkeypatch):
    monkeypatch.setattr(runner, "READ_SECONDS", 1e-9)
    item = Item("0", "q", "18", "number")
    results = runner.score_items(NUMLOSS, "gsm8k", [item, item], ["\n" * 100_000, "The answer is 18."], [None, None], program_runner())
    assert [r.correct for r in results] == [False, False]
    assert all(r.note.startswith("unreadable: ReadTimeout") for r in results)
    monkeypatch.setattr(runner, "READ_SECONDS", 30.0)

    def broken(item, text, benchmark):
        raise IndexError("a reader bug")

    protocol = NUMLOSS.__class__(**{**NUMLOSS.__dict__, "extract": broken})
    [result] = runner.score_items(protocol, "gsm8k", [item], ["The answer is 18."], ["The answer is 18."], program_runner())
    assert not result.correct and result.note == "unreadable: IndexError: a reader bug"


def test_score_outputs_with_one_megabyte_of_newlines_scores_the_other_records():
    data = Path(__file__).parent / "fixtures" / "benchmarks"
    items = load_benchmark("gsm8k", data_dir=data).items
    records = [{"benchmark": "gsm8k", "id": it.id, "output": f"The answer is {it.answer}.", "fallback_output": ""} for it in items]
    records[3]["output"] = records[3]["fallback_output"] = "\n" * 1_000_000
    report = score_outputs(records, protocol="both", data_dir=data, allow_unisolated=True)
    for protocol in ("released", "numloss"):
        score = report.scores[protocol]["gsm8k"]
        assert (score.count, score.correct) == (len(items), len(items) - 1), protocol
