"""numloss's reading: the released reading, then named corrections (answers.CORRECTIONS).

Each correction has its own property test over a Hypothesis generator of outputs that make it
fire, each filled with the gold and with a wrong answer: wherever it decides the reading and the
released reading was right, numloss is right too, and it never passes the wrong fill (a
20-digit gold stands for the numbers float() cannot tell apart). Where no correction fires,
numloss reads exactly what the released code reads. The comparison (`number_matches`,
`math_equal`) is tested on its own.
"""

import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numloss.evaluate import answers
from numloss.evaluate.answers import (
    CORRECTIONS,
    extract_exact,
    format_exact,
    math_equal,
    number_matches,
    read,
)
from numloss.evaluate.benchmarks import Item
from numloss.evaluate.protocol import NUMLOSS, RELEASED

NUMBER = Item("n", "q", "18", "number")
CHOICE = Item("c", "q", "B", "choice", ("5(√3 + 1)", "18", "7 apples", "x = 4", "None of these"))
MATH = Item("m", "q", "\\frac{9}{7}", "math", released_answer="\\frac{9}{7}")
BIG = Item("big", "q", "12345678901234567891", "number")  # float() cannot tell it from ...890
ITEMS = {"number": (NUMBER, "gsm8k", "18", "25"), "choice": (CHOICE, "aqua", "B", "D"), "math": (MATH, "math", "\\frac{9}{7}", "\\frac{1}{2}"),
         "big": (BIG, "gsm8k", BIG.answer, "12345678901234567890")}
WORK = ["", "Step 1: 3 + 4 = 7.\nStep 2: 7 * 2 = 14.\n", "We add the parts and simplify.\n\n"]
DRESS = ["{x}", "({x})", "**{x}**", "${x}$"]

# per correction: (kinds, outputs that make it fire; {x} is the answer the output gives, {o} the other answer,
# {d} {x} in a dress; a template whose truth is "no answer" ends with a "#none" marker)
FIRES = {
    "end-of-turn": ("number choice math", [
        "The answer is {d}.<|im_end|>\n<|im_start|>user\nAnd the next one?<|im_end|>\n<|im_start|>assistant\nThe answer is {o}.",
        "The answer is {d}.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nNext? The answer is {o}",
        "The answer is {d}.</s>[INST] Next? [/INST] The answer is {o}.",
        "The answer is {d}.<end_of_turn>\n<start_of_turn>user\nNext<end_of_turn>\n<start_of_turn>model\nThe answer is {o}."]),
    "harmony-final": ("number choice math", [
        "<|channel|>analysis<|message|>The answer is {o}, no.<|end|><|start|>assistant<|channel|>final<|message|>**Answer:** {d}",
        "<|channel|>analysis<|message|>Maybe the answer is {o}? Recheck.<|end|><|start|>assistant<|channel|>final<|message|>The answer is {d}.<|return|>"]),
    "think-block": ("number choice math", [
        "<think>\nMaybe the answer is {o}? Let me check again.\n</think>\nSo we get {d}.",
        "<think>\nFirst I thought the answer is {o}.\n</think>\n\nThe answer is {d}."]),
    "next-exercise": ("number choice math", [
        "The answer is {d}.\nQ2: What is five plus nine?\nA2: The answer is {o}.",
        "Answer: {d}\n\nQuestion: What is five plus nine?\nAnswer: {o}",
        "So we get {d}.\n\nNow let's try another one: what is five plus nine? The answer is {o}.",
        "{d}\n\n2. What is five plus nine?\nThe answer is {o}."]),
    "minerva-final": ("math choice number", ["Final Answer: The final answer is ${x}$. I hope it is correct.",
                                             "We add the parts.\nFinal Answer: The final answer is {x}. I hope it is correct."]),
    "afterword": ("number choice math", [
        "**Answer:** {d}\nExplanation: the other value, {o}, is what you get if you forget a step.",
        "So we get {d}.\n\nNow let me double-check by starting from {o}.",
        "Total: {d}\n\nNote: {o} would be the result with the other rate.",
        "Answer: {d}\n(Not {o}.)"]),
    "markup": ("number choice math", ["The answer is ~~{o}~~ {d}.", "Final: ~~{o}~~ {d}", "The answer is <b>{d}</b>.", "Answer: __{d}__",
                                      "So, <strong>{d}</strong> is the answer."]),
    "self-correction": ("number choice", [
        "The answer is {o}. Wait, actually it is {d}.", "The answer is {o}, I mean {d}.", "The answer is {o}. Oops, it should be {d}."]),
    "cut-off": ("number choice", ["We start with {d} and then we#none", "So far we have {d} apples plus the#none"]),
    "table-answer": ("choice", ["| Step | Value |\n|---|---|\n| Answer | {d} |\n| Ruled out | {o} |"]),
    "operation-result": ("number", ["The answer is 7 + 11 = {x}.", "The answer is 2 * 9 = {x} apples."]),
    "alternatives": ("number choice math", ["The answer is {d} or {o}.#none", "The answer is between {d} and {o}.#none", "The answer is {d}–{o}#none",
                                            "It could be {x} or {o}; I am not sure.#none"]),
    "list-marker": ("number", ["1. Add the parts.\n2. Simplify.\n3. Answer: that one#none", "1. Add {x} and 0.\n2. Done: {x} is it."]),
    "ruled-out": ("number", ["The answer is that, not {o}.#none", "The answer is, not {o} but {x}."]),
    "contradicted-letter": ("choice", ["The correct option is {x}: 5(√3 + 1)#none"]),
    "not-a-letter": ("choice", ["**Answer: {d}**\n\nI hope this helps!", "答案是{x}。", "Answer: {f}", "The answer is a boy with {d} apples.", "A train leaves at noon. It is not ({o}). So, {d}", "I think the answer is a guess#none"]),
    "option-text": ("choice", ["The answer is {v}"]),
    "no-guess": ("choice", ["Cannot tell which one it is.#none", "The answer is none of the letters#none"]),
    "math-line": ("math", ["Step 1: 3 + 4 = 7.\n$${x}$$", "Final answer: {x} cm^2"]),
    "number-form": ("number math", ["Step 1: 3 + 4 = 7.\nThe answer is {w}.", "Die Antwort lautet \\boxed{{{W}}}", "Final: {e} \\times 10^{{1}}",
                                    "Result → Rs.{x}"]),
    "float-noise": ("number", ["The answer is {x}.00000000000001"]),
    "exact-digits": ("big", ["The answer is {x}", "So we get {d}."]),
}


def _fill(template: str, kind: str, said: str, other: str, dress: str) -> str:
    item = ITEMS[kind][0]
    value = item.options["ABCDE".index(said)] if kind == "choice" else said
    shown = dress.format(x=said) if kind != "math" else f"\\boxed{{{said}}}" if "{d}" in template else said
    words = {"18": "eighteen", "25": "twenty-five", "\\frac{9}{7}": "nine sevenths", "\\frac{1}{2}": "one half"}  # a fraction is no spelled number
    template = template.replace("{w}", words.get(said, said)).replace("{W}", words.get(said, said).title())
    template = template.replace("{e}", format_exact(Fraction(said) / 10) if said.isdigit() else said)
    template = template.replace("{f}", chr(0xFF21 + "ABCDE".index(said)) if kind == "choice" else said)  # full-width
    return template.replace("#none", "").replace("{d}", shown).replace("{x}", said).replace("{o}", other).replace("{v}", value)


def _verdicts(kind: str, output: str) -> tuple[bool, bool, str]:
    """(released correct, numloss correct, numloss's decided_by) of `output` for the kind's item."""
    item, benchmark = ITEMS[kind][:2]
    got = {}
    for protocol in (RELEASED, NUMLOSS):
        reading = protocol.extract(item, output, benchmark)
        prediction = protocol.finalize(item, reading.prediction)
        got[protocol.name] = (bool(prediction) and protocol.compare(item, prediction), reading.decided_by)
    return got["released"][0], got["numloss"][0], got["numloss"][1]


@pytest.mark.parametrize("name", list(FIRES))
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_each_correction_is_right_wherever_it_decides(name, data):
    kinds, templates = FIRES[name]
    kind = data.draw(st.sampled_from(kinds.split()))
    template = data.draw(st.sampled_from(templates))
    prefix, dress = data.draw(st.sampled_from(WORK)), data.draw(st.sampled_from(DRESS))
    _, _, gold, wrong = ITEMS[kind]
    said_none = template.endswith("#none")
    right_out = prefix + _fill(template, kind, gold, wrong, dress)
    wrong_out = prefix + _fill(template, kind, wrong, gold, dress)
    released_right, numloss_right, decided = _verdicts(kind, right_out)
    released_wrong, numloss_wrong, decided_wrong = _verdicts(kind, wrong_out)
    fired = {decided, decided_wrong}
    if name not in fired:
        return  # another rule decided this composition (the released reading or an earlier correction)
    truth_right = not said_none
    if decided == name and released_right == truth_right:
        assert numloss_right == truth_right, (right_out, decided)
    assert not numloss_wrong, (wrong_out, decided_wrong)  # never passes the wrong fill


FORMULAS = Item("f", "q", "A", "choice", ("$t=\\frac{a-1}{2}$", "$t=\\frac{a+1}{2}$", "$t=\\frac{1-a}{2}$", "$t=\\frac{2}{a+1}$"))


@pytest.mark.parametrize("template", ["The answer is {v}", "{v}", "So t = {v}."])
@pytest.mark.parametrize("letter", "ABCD")
def test_a_formulas_variable_is_no_letter(letter, template):
    """A letter beside an operator is a variable (the released code reads every "a" below as A):
    an answer that is one option's whole formula reads as that option; other prose, as none."""
    output = template.replace("{v}", FORMULAS.options["ABCD".index(letter)])
    assert RELEASED.extract(FORMULAS, output, "sat").prediction == "A"
    assert NUMLOSS.extract(FORMULAS, output, "sat").prediction == ("" if "t =" in template else letter)


@pytest.mark.parametrize("name", list(FIRES))
def test_each_correction_fires_on_its_own_example(name):
    kinds, templates = FIRES[name]
    kind = kinds.split()[0]
    item, benchmark, gold, wrong = ITEMS[kind]
    output = _fill(templates[0], kind, gold, wrong, "{x}")
    assert NUMLOSS.extract(item, output, benchmark).decided_by == name, output


@pytest.mark.parametrize(("kind", "output", "read"), [
    ("choice", "The answer is (C) Kathy repairs phones at a rate of", "C"),  # cut off after a marked answer
    ("number", "The answer is 18 because we add the", "18"),
])
def test_a_cut_after_a_marked_answer_keeps_it(kind, output, read):
    item, benchmark = ITEMS[kind][:2]
    reading = NUMLOSS.extract(item, output, benchmark)
    assert (reading.prediction, reading.decided_by) == (read, "released")


_PIECES = st.sampled_from(["The answer is", "the answer is", "####", "18", "25", "-3", "4.50", "1,234", "(B)", "C", "a",
                           "apples", ".", ",", " ", "\n", "\n\n", "=", "+", "\\boxed{7}", "$", "Answer:", "so"])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_PIECES, max_size=12).map(" ".join), st.sampled_from(list(ITEMS)))
def test_where_no_correction_fires_numloss_reads_what_released_reads(text, kind):
    item, benchmark = ITEMS[kind][:2]
    reading = NUMLOSS.extract(item, text, benchmark)
    if reading.decided_by == "released":
        assert reading.prediction == RELEASED.finalize(item, RELEASED.extract(item, text, benchmark).prediction)


def test_a_correction_sees_no_gold():
    assert not any(hasattr(answers.Task("number", (), "gsm8k"), field) for field in ("answer", "released_answer", "gold"))
    assert read(NUMBER, "The answer is 18.").prediction == read(Item("n", "q", "25", "number"), "The answer is 18.").prediction


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.integers(-10**13, 10**13), st.integers(0, 4),
       st.one_of(st.sampled_from([0, 1, -1]), st.fractions(-1, 1), st.integers(-10**6, 10**6)))
def test_number_matches_is_exact_at_the_golds_precision(digits, places, offset):
    """A decimal gold matches its own value; one with 2+ decimals also a prediction strictly inside
    its half-unit interval (a rounding of the answer); nothing else (the old relative tolerance of
    1e-6 passed 22090613 for 22090603, and a one-decimal gold is exact: 46.51 is not 46.5)."""
    gold = Fraction(digits, 10**places)
    written = f"{Decimal(digits).scaleb(-places):f}"
    pred = gold + Fraction(offset) / (2 * 10**places)
    assert number_matches(pred, written) is (offset == 0 or (places >= 2 and abs(offset) < 1)), (pred, written)


@pytest.mark.parametrize(
    "pred, gold, same",
    [
        (18.4, "18", False),
        (18.0, "18", True),
        (Fraction(4650, 100), "46.50", True),
        (Fraction(1750, 3), "583.3333", True),  # 583.33333...: inside the half-unit interval
        (Fraction(3, 4), "3/4", True),
        (Fraction(75, 100), "3/4", True),
        (Fraction(7, 10), "3/4", False),
        (Fraction(45), "45%", True),
        (Fraction(-7), "$7", False),
        (None, "3", False),
        (float("nan"), "3", False),
    ],
)
def test_number_matches_other_forms(pred, gold, same):
    assert number_matches(pred, gold) is same


@pytest.mark.parametrize(
    "printed, expected",
    [("60.00000000000001", 60), ("583.3333333333334", Fraction(583333333333, 10**9)), ("0.30000000000000004", Fraction(3, 10)),
     ("22090603.000000004", 22090603), ("123456789012345", 123456789012345), ("1234567.5", Fraction(12345675, 10)),
     ("60.0001", Fraction(600001, 10000))],
)
def test_float_noise_is_removed_only_where_it_is_noise(printed, expected):
    assert extract_exact(f"The answer is {printed}") == expected


def test_format_exact_reads_back_exactly():
    assert [format_exact(Fraction(n, d)) for n, d in [(7, 1), (93, 2), (-1, 4), (1, 3)]] == ["7", "46.5", "-0.25", "1/3"]


@pytest.mark.parametrize(
    "pred, gold, same",
    [
        ("\\frac{5}{6}", "\\frac{5}{6}", True),
        ("\\dfrac{5}{6}", "\\frac{5}{6}", True),
        ("5/6", "\\frac{5}{6}", True),
        ("0.8333333333", "\\frac{5}{6}", True),
        ("\\frac{10}{12}", "\\frac{5}{6}", True),
        ("5\\sqrt{2}", "5\\sqrt{2}", True),
        ("\\sqrt{50}", "5\\sqrt{2}", True),
        ("7", "5\\sqrt{2}", False),
        ("6", "6", True),
        ("7", "6", False),
        ("", "6", False),
        ("(1,2)", "(1, 2)", True),
        ("(2,1)", "(1, 2)", False),
        # a plain-number gold's one number in dress glued by the released space removal
        ("about2", "2", True), ("USD2", "2", True), ("2km/h", "2", True), ("“2.0”,not9", "2", True), ("+2", "2", True),
        ("9,not2", "2", False), ("1/2", "2", False), ("2+2", "2", False),
    ],
)
def test_math_equal(pred, gold, same):
    assert math_equal(pred, gold) is same


def test_every_correction_has_a_property_test_and_a_doc_row_in_order():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text(encoding="utf-8")
    assert re.findall(r"(?m)^   \| `([a-z-]+)`", doc) == [c.name for c in CORRECTIONS]
    assert set(FIRES) == {c.name for c in CORRECTIONS}
