"""Property 3 end to end: reading AND comparing one item stays within the per-item bound.

Numbers too large to compare (`answers.check_size`: more than MAX_DIGITS digits, a power of ten
above MAX_EXPONENT, an output longer than MAX_READ_CHARS) are refused before any parser (int(),
math-verify's sympy) sees them: the item is "unreadable" with a note, and the eval goes on.
"""

import time
from types import SimpleNamespace

import pytest

from numloss.evaluate import answers
from numloss.evaluate.api import benchmark_score
from numloss.evaluate.benchmarks import Item
from numloss.evaluate.protocol import NUMLOSS, RELEASED
from numloss.evaluate.report import EvalReport
from numloss.evaluate.runner import score_items

MATH = Item("m", "q", "\\frac{9}{7}", "math", released_answer="\\frac{9}{7}")
NUMBER = Item("n", "q", "18", "number")


def printed(stdout: str) -> SimpleNamespace:
    """A program runner whose every program printed `stdout` (no sandbox needed)."""
    result = SimpleNamespace(status="ok", stdout=stdout, ok=True, raw_stdout=stdout.encode())
    return SimpleNamespace(run=lambda scripts, *limits: [result] * len(scripts))


@pytest.mark.parametrize(("protocol", "benchmark", "item", "output", "stdout"), [
    (NUMLOSS, "math", MATH, "The answer is 1E+999999.", ""),
    (NUMLOSS, "gsm8k", NUMBER, "The answer is 1E+999999.", ""),
    (NUMLOSS, "math", MATH, "So $\\boxed{10^{999999999}}$", ""),
    (NUMLOSS, "gsm8k", NUMBER, "print(x)", "9" * 10_000_000),
    (NUMLOSS, "math", MATH, "print(x)", "7\n" * 5_000_000),
    (RELEASED, "math", MATH, "The answer is 1E+999999.", ""),
    (RELEASED, "math", MATH, "So $\\boxed{10^{999999999}}$", ""),
], ids=["math-1e999999", "number-1e999999", "boxed-10^999999999", "program-10MB-digits", "program-10MB-lines",
        "released-math-1e999999", "released-boxed-10^999999999"])
def test_a_huge_number_is_scored_within_the_bound_and_numloss_calls_it_unreadable(protocol, benchmark, item, output, stdout):
    start = time.monotonic()
    hostile, following = score_items(protocol, benchmark, [item, NUMBER], [output, "The answer is 18."], [None, None], printed(stdout))
    assert time.monotonic() - start < answers.READ_SECONDS and not hostile.correct and following.correct
    if protocol is NUMLOSS:
        assert hostile.note.startswith("unreadable:") and hostile.decided_by == "unreadable" and not following.note


def test_the_size_limits_leave_ordinary_numbers_alone():
    for text in ("The answer is 18.", "2^{10} = 1024", "1.5e3 apples", "x**2 + 3", "**18**", "10^{400}", "9" * answers.MAX_DIGITS):
        answers.check_size(text)
    for text in ("10^{401}", "1e401", "3 ** 1000", "9" * (answers.MAX_DIGITS + 1)):
        with pytest.raises(answers.TooLarge):
            answers.check_size(text)


def test_every_item_names_the_rule_that_decided_it_and_the_report_counts_them():
    outputs = ["The answer is 18.", "The answer is 18 or 25.", "The answer is 7 + 11 = 18.", "The answer is 1E+999999."]
    items = [NUMBER] * len(outputs)
    results = score_items(NUMLOSS, "gsm8k", items, outputs, [None] * len(outputs), printed(""))
    assert [r.decided_by for r in results] == ["released", "alternatives", "operation-result", "unreadable"]
    assert all("decided_by" in r.to_json() for r in results)
    report = EvalReport(["numloss"], {"numloss": {"gsm8k": benchmark_score(results)}}, {"numloss": {"gsm8k": results}})
    assert "(decided_by): released 1, alternatives 1, operation-result 1, unreadable 1" in report.to_markdown()
