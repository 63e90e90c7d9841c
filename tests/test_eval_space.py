"""The `numloss` protocol over the space of outputs, against the unmodified released scripts
(docs/evaluation.md, "The output space", says what is drawn and asserted).

Each composition of the axes below (phrase, answer form, wrapper, tail, benchmark kind) is filled
with the right answer and with a wrong one, for real items of every benchmark, and scored by the
oracle (tests/reference/released_eval.py, its programs run in the sandbox) and by `numloss`:

- property 1: wherever the released scripts read right, numloss reads right, unless the released
  scripts pass the wrong answer in the same dress too (their verdict there does not depend on the
  answer). No list of exceptions: a documented strictness counts as a violation.
- property 2: numloss never passes a wrong answer.
- property 3: no output and no program result, of any size or content, raises out of the scorer
  under either protocol; reading one may fail only as that item's "unreadable" verdict with a note.

Why a seeded enumerator and not Hypothesis: the space is a finite product (some 200,000
compositions), so a seeded draw from it is the same on every run (a failure names its composition)
and is scored in one batch, so its programs run in the sandbox in parallel, where Hypothesis would
run and shrink examples one at a time. NUMLOSS_SPACE_DRAW=N draws N compositions per benchmark.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy
import pytest

from eval_cases import Case, answers_of, grouped, option_of, usable
from eval_dress import spell  # tests/ is on sys.path (conftest.py)
from numloss.evaluate.answers import format_exact, plain_exact
from numloss.evaluate.benchmarks import Item, load_benchmark
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import NUMLOSS, RELEASED
from numloss.evaluate.runner import score_items
from test_eval_differential import DATA, LIMITS, NAMES, scored, violations

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"the real benchmark files are not here ({DATA})")

PHRASES = [
    "The answer is {x}.", "The answer is: {x}", "the answer is {x}", "So the answer is {x}", "#### {x}",
    "Final answer: {x}", "**Final Answer:** {x}", "Answer: {x}", "Therefore, the final answer is {x}.",
    "The correct answer is {x}.", "{x}", "Step 1: 3 + 4 = 7.\nStep 2: 7 * 2 = 14.\nThe answer is {x}.",
    # markers in other dress, and answers given without one (on a line of their own, after a lead)
    "Final result: {x}", "**Answer:** {x}", "ANSWER = {x}", "Result → {x}", "∴ {x}", "Therefore, the total is {x}.",
    "| Step | Value |\n|---|---|\n| Answer | {x} |", "- Answer: {x}", "### Final Answer\n{x}", "Ans: {x}",
    "1. Add the parts.\n2. Simplify.\n3. Answer: {x}", "So, {x} is the answer.", "The answer is {x}, not {o}.",
    "First, 3 + 4 = 7. Then 7 * 2 = 14.\n{x}", "answer is {x}", "Final Answer: The final answer is {x}. I hope it is correct.",
    # other languages, emoji and quotes a chat model puts around an answer
    "La respuesta es {x}.", "Step 1: 3 + 4 = 7.\n答案是{x}。", "Ответ: {x}", "Die Antwort lautet {x}.", "✅ {x}",
    "> **Answer:** {x}", "Answer – {x}",
]
WRAPPERS = [
    "{f}", '"{f}"', "'{f}'", "`{f}`", "[{f}]", "({f})", '{{"answer": "{f}"}}', "**{f}**", "${f}$",
    "\\boxed{{{f}}}", "$\\boxed{{{f}}}$", "__{f}__", "<b>{f}</b>", "“{f}”", "\\({f}\\)", "\\[{f}\\]", "«{f}»", "$$\n{f}\n$$",
    "$\\underline{{{f}}}$", "$\\color{{red}}{{{f}}}$", "~~{{o}}~~ {f}",  # the other answer struck out before this one
]
TAILS = {
    "none": "",
    "explanation": "\nExplanation: we add the two amounts and check the result.",
    "next-question": "\n\nQuestion: What is five plus nine?\nAnswer: {o}",
    "next-question-inline": "\nNext question: A farmer has some cows. How many legs?\nThe answer is {o}.",
    "input-output": "\n### Input:\nWhat is five plus nine?\n### Output:\n{o}",
    "problem-n": "\n\nProblem 2: What is five plus nine?\nSolution: The answer is {o}.",
    "exercise": "\nExercise 3: Compute the next one.\nThe answer is {o}.",
    "im-end": "<|im_end|>\n<|im_start|>user\nAnd the next one?<|im_end|>\n<|im_start|>assistant\nThe answer is {o}.",
    "eot": "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nNext? The answer is {o}",
    "think": "",  # a think block before the answer (prefix, below)
    "md-next-question": "\n\n### Next Question\nWhat is five plus nine?\nThe answer is {o}.",
    "md-question-3": "\n\n## Question 3\nWhat is five plus nine?\nThe answer is {o}.",
    "role-line": "\n\nassistant\nThe answer is {o}.",
    "student-teacher": "\nStudent: What is five plus nine?\nTeacher: The answer is {o}.",
    "inst": "\n[INST] What is five plus nine? [/INST] The answer is {o}.",
    "exercise-alone": "\nExercise 2\nCompute five plus nine. The answer is {o}.",
    "try-another": "\n\nNow let's try another one: What is five plus nine? The answer is {o}.",
    "numbered-question": "\n\n2. What is five plus nine?\nThe answer is {o}.",
    "q-a": "\nQ: What is five plus nine?\nA: {o}",
    "explanation-other": "\nExplanation: the other value, {o}, is what you get if you forget a step.",
    "note-other": "\nNote: {o} would be the result with the other rate.",
    "gemma": "<end_of_turn>\n<start_of_turn>user\nNext<end_of_turn>\n<start_of_turn>model\nThe answer is {o}.",
    "double-check-other": "\n\nDouble-check: without the last step we would have {o}.",
    "verify-cut-off": "\n\nNow let me double-check by starting from {o} and",
    "emoji-verification": "\n\n🔍 Verification: {o} is the value before the final step.",
}
THINK = "<think>\nMaybe it is {o}? Let me check again.\n</think>\n"


def number_forms(value: Fraction) -> dict[str, str]:
    """The forms of one number (those that apply to it; `sampled` sorts them, so order is free)."""
    s = format_exact(value)
    if "/" in s:
        return {"fraction": s}
    size, sign = abs(value), "-" if value < 0 else ""
    a = format_exact(size)
    forms = {"plain": s, "currency-before": sign + "$" + a, "euro": sign + "€" + a, "rupees": "Rs." + s, "usd-after": s + " USD",
             "dollars-word": s + " dollars", "percent": s + "%", "percent-word": s + " percent", "units": s + " apples",
             "text": "\\text{" + s + "}", "text-units": "\\text{" + s + " units}", "approx": "~" + s,
             "latex-dollar": sign + "\\$" + a, "usd-before": "USD " + s, "degrees": s + "^\\circ", "about": "about " + s,
             "approx-sign": "≈ " + s, "x-equals": "x = " + s, "units-ratio": s + " km/h",
             "fullwidth": s.translate(str.maketrans("0123456789.-", "０１２３４５６７８９．－")),
             "arabic-indic": s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))}
    if value >= 0:
        forms["plus"] = "+" + s
    else:
        forms.update({"negative-word": "negative " + a, "unicode-minus": "−" + a, "en-dash-minus": "–" + a})
    if value.denominator != 1:
        if "." in s and size < 1000:
            forms["decimal-comma"] = s.replace(".", ",")
        return forms
    forms.update({"point-zero": s + ".0", "dollar-cents": sign + "$" + a + ".00"})
    if size >= 10:
        digits = str(size.numerator)
        mantissa = (digits[0] + "." + digits[1:]).rstrip("0").rstrip(".")
        forms["times-ten"] = sign + f"{mantissa} \\times 10^{{{len(digits) - 1}}}"
    if size < 10**6:
        word = ("negative " if value < 0 else "") + spell(int(size))
        forms.update({"spelled": word, "spelled-capital": word[0].upper() + word[1:]})
    if size >= 1000:
        seps = {"": ",", "nbsp-": "\u00a0", "narrow-nbsp-": "\u202f", "thin-": "\u2009"}
        forms.update({f"{name}thousands": grouped(value, sep) for name, sep in seps.items()})
        # a scale word: 18000 is "18k" and "18 thousand", 18007 "18.007k" (never read as 18)
        forms.update({"k-suffix": format_exact(value / 1000) + "k", "thousand-word": format_exact(value / 1000) + " thousand"})
    return forms


def choice_forms(letter: str, option: str, other: str = "B") -> dict[str, str]:
    """The forms of a letter answer; `other` is another option's letter (named to be ruled out)."""
    lower = letter.lower()
    return {"letter": letter, "lower": lower + ".", "bracketed": f"({letter})", "close-bracket": f"{letter})",
             "letter-dot": f"{letter}.", "letter-text": f"{letter}. {option}", "bracketed-text": f"({letter}) {option}",
             "option-word": f"Option {letter}", "square": f"[{letter}]", "bold": f"**{letter}**", "lower-bracketed": f"({lower})",
             "colon-text": f"{letter}: {option}", "dash-text": f"{letter} — {option}", "boxed-text": f"\\boxed{{\\text{{{letter}}}}}",
             "text-then-letter": f"{option} ({letter})", "ruled-out-other": f"{letter}) {option} (not {other})",
             "option-lower": f"option {lower}", "letter-word": f"letter {letter}", "quoted-lower": f"“{lower}”",
             "choice-word": f"Choice {letter}", "checked": f"{letter} ✓", "cjk-stop": f"{letter}。"}


PROGRAMS = {
    "fence-python3": "```python3\nprint({p})\n```",
    "fence-space": "``` python\nx = {p}\nprint(x)\n```",
    "fence-tilde": "~~~python\nprint({p})\n~~~",
    "fence-output-block": "```python\nx = {p}\nprint(x)\n```\nOutput:\n```\n{p}\n```",
    "prose-around": "Here is the code:\nx = {p}\nprint(x)\nThis prints the answer.",
    "stdout-write": "import sys\nsys.stdout.write(str({p}) + '\\n')",
    "plain-print": "print({p})",
}


@dataclass(frozen=True)
class Composition:
    benchmark: str
    kind: str  # "number", "math", "choice", "program"
    phrase: str
    form: str
    wrapper: str
    tail: str

    def name(self) -> str:
        return f"{self.benchmark}/{self.kind}: phrase {self.phrase!r} form {self.form} wrapper {self.wrapper!r} tail {self.tail}"


def sampled(benchmark: str, item: Item, n: int | None, rng: random.Random) -> list[Composition]:
    """n text compositions (None: all) drawn without replacement, by index into the product (the
    product, some 700,000 per item, is never built: drawing costs the same however many axis
    values there are); numpy reads an index as one value per axis, in itertools.product's order."""
    if item.kind == "choice":
        forms = list(choice_forms("A", "x"))
    else:
        (_, right), (_, wrong) = answers_of(item)
        forms = sorted(set(number_forms(right)) & set(number_forms(wrong))) if right is not None and wrong is not None else ["plain"]
    axes = [PHRASES, forms, WRAPPERS, list(TAILS)]  # in the order of Composition's fields
    shape = [len(axis) for axis in axes]
    total = math.prod(shape)
    picked = numpy.unravel_index(rng.sample(range(total), min(n or total, total)), shape)
    return [Composition(benchmark, item.kind, *map(list.__getitem__, axes, digits)) for digits in zip(*picked, strict=True)]


def fill(c: Composition, item: Item, said: str, said_value: Fraction | None, other: str) -> str:
    """The output of composition `c` saying `said` (the other answer goes in the tail)."""
    if c.kind == "program":
        literal = format_exact(said_value) if said_value is not None and "/" not in format_exact(said_value) else repr(said)
        return PROGRAMS[c.form].replace("{p}", literal)
    if c.kind == "choice":
        form = choice_forms(said, option_of(item, said), other)[c.form]
    else:
        form = number_forms(said_value)[c.form] if said_value is not None else said
    wrapped = c.wrapper.format(f=form)
    text = c.phrase.replace("{x}", wrapped).replace("{o}", other) + TAILS[c.tail].replace("{o}", other)
    return THINK.replace("{o}", other) + text if c.tail == "think" else text


def items_for(name: str, n: int) -> list[Item]:
    """The first n usable items of a benchmark (MATH ones with a plain-number gold, choice ones with
    four options or more)."""
    def fits(it: Item) -> bool:
        return usable(it) and (it.kind != "math" or plain_exact(it.answer) is not None and "," not in it.answer) and (
            it.kind != "choice" or len(it.options) >= 4)

    return list(itertools.islice(filter(fits, load_benchmark(name, data_dir=DATA).items), n))


def draw(per_benchmark: int | None, seed: int = 0, items_per_benchmark: int = 1,
         n_programs: int = 2) -> list[tuple[Composition, Case]]:
    """A seeded draw of `per_benchmark` compositions per benchmark (None: all of them), each filled
    right and wrong; at most `n_programs` program compositions per open benchmark (they run in the
    sandbox). A case's kind is its composition's name, as test_eval_differential's dressings are."""
    rng = random.Random(seed)
    program_rng = random.Random(seed)  # its own stream: a new text axis does not change which programs (sandbox runs) are drawn
    out = []
    for name in NAMES:
        for item in items_for(name, items_per_benchmark):
            # the program shapes of an open number item (none for other kinds)
            progs = [Composition(name, "program", "", shape, "", "none") for shape in PROGRAMS] if item.kind == "number" else []
            n = len(progs) if per_benchmark is None else min(n_programs, len(progs))
            chosen = sampled(name, item, per_benchmark, rng) + program_rng.sample(progs, n)
            (right, rv), (wrong, wv) = answers_of(item)
            for c in chosen:
                for said, sv, other, said_right in ((right, rv, wrong, True), (wrong, wv, right, False)):
                    out.append((c, Case(c.name(), name, item, fill(c, item, said, sv, other), None, said_right)))
    return out


def score(cases: list[Case]) -> list[tuple[Case, tuple[str, bool], object, object]]:
    """test_eval_differential's rows of `cases` (its `violations` reads them), one batch per benchmark."""
    runner = ProgramRunner(LIMITS, workers=2, allow_unisolated=True)
    return [row for name in NAMES for row in scored(name, [c for c in cases if c.benchmark == name], runner)]


@pytest.fixture(scope="module")
def fast_draw():
    drawn = draw(int(os.environ.get("NUMLOSS_SPACE_DRAW", "90")), seed=int(os.environ.get("NUMLOSS_SPACE_SEED", "0")))
    return [c for c, _ in drawn], score([case for _, case in drawn])


def test_properties_1_and_2_the_released_protocol_and_no_ordinary_output_is_unreadable(fast_draw):
    """On a draw that spans every axis, the `released` protocol reads as the released scripts, and
    properties 1 and 2 hold, with no output of the draw unreadable."""
    comps, rows = fast_draw
    assert {c.kind for c in comps} == {"number", "math", "choice", "program"}
    assert {c.benchmark for c in comps} == set(NAMES)
    comps = [c for c in comps if c.kind != "program"]  # a program has no phrase, wrapper or tail
    assert len({c.tail for c in comps}) == len(TAILS) and len({c.wrapper for c in comps}) == len(WRAPPERS)
    assert len({c.phrase for c in comps}) == len(PHRASES)
    for key, found in violations(rows).items():
        assert not found, f"{key}: {len(found)} cases:\n" + "\n".join(map(str, found[:12]))


@pytest.mark.slow
def test_properties_1_and_2_on_a_larger_draw():
    """1,500 compositions per benchmark on two items each, another seed (the whole product, some
    200,000 compositions, is `draw(None)`: hours of CPU)."""
    rows = score([case for _, case in draw(1500, seed=1, items_per_benchmark=2, n_programs=len(PROGRAMS))])
    found = violations(rows)
    assert not found["dominance"] and not found["wrong_pass"], {k: v[:8] for k, v in found.items()}
    assert not found["released_is_not_transcription"]


# ---------------------------------------------------------------- property 3: hostile outputs

HOSTILE = [
    "The answer is 1e400", "The answer is 1e-400", "The answer is 1e999999999", "The answer is " + "9" * 5000,
    "The answer is 0." + "0" * 5000 + "1", "The answer is inf", "The answer is nan", "The answer is -Infinity",
    "The answer is 1/0", "The answer is 0/0", "\\boxed{\\frac{1}{0}}", "The answer is 10^{10^{10^{10}}}",
    "\\boxed{" * 3000 + "18" + "}" * 3000, "{" * 50_000, "(" * 50_000 + "18", "[" * 20_000 + "]" * 20_000,
    "The answer is ١٨", "The answer is １８", "The answer is \u202e81\u202c", "The answer is 1\u200b8",
    "e\u0301" * 5000, "\x00" * 1000 + "The answer is 18", "The answer is \ud800", "The answer is 𝟏𝟖",
    "The answer is " + "-" * 10_000 + "18", "The answer is " + "1," * 20_000, "The answer is \\frac{" * 2000,
    "The answer is $" * 5000, "<think>" * 10_000, "</think>" * 10_000 + "18", "<|im_end|>" * 10_000,
    "Question:\n" * 10_000, "answer:" * 20_000, "The answer is " + "twenty " * 20_000,
    "The answer is 1.5 \\times 10^{999999}", "The answer is (" + "A" * 10_000 + ")", "\\text{" * 5000,
]
HOSTILE_PROGRAMS = [
    "print(float('nan'))", "print(float('inf'))", "print('9' * 200000)", "print(10 ** 400)", "print('\\x00\\x1b[2J' * 100)",
    "print('The answer is', 1e308 * 10)", "import sys\nsys.stdout.buffer.write(bytes(range(256)))", "print('{' * 100000)",
]


@pytest.mark.parametrize("protocol", [RELEASED, NUMLOSS], ids=["released", "numloss"])
def test_property_3_no_output_raises_out_of_the_scorer(protocol):
    runner = ProgramRunner(LIMITS, workers=2, allow_unisolated=True)
    for name in ("gsm8k", "math", "aqua"):
        item = items_for(name, 1)[0]
        outputs = HOSTILE + HOSTILE_PROGRAMS
        results = score_items(protocol, name, [item] * len(outputs), outputs, list(outputs), runner)
        assert len(results) == len(outputs)
        for output, result in zip(outputs, results, strict=True):
            assert result.note == "" or result.note.startswith("unreadable: "), (output[:60], result.note)
        runner.forget()


if __name__ == "__main__":  # counts of a draw: python tests/test_eval_space.py [N per benchmark [seed]] (docs: 300 23)
    import sys

    rows = score([case for _, case in draw(int(sys.argv[1]) if len(sys.argv) > 1 else None,
                                          seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0)])
    found = violations(rows)
    print(f"cases {len(rows)}; dominance violations {len(found['dominance'])}; numloss false passes {len(found['wrong_pass'])}; "
          f"unreadable {len(found['unreadable'])}")
    for key, shown in (("dominance", 40), ("wrong_pass", 40), ("unreadable", 10)):
        for line in found[key][:shown]:
            print(key, str(line)[:400])
    right = [(t, n) for c, t, _, n in rows if c.truth]
    print("right cases", len(right), "released right", sum(t[1] for t, _ in right), "numloss right", sum(n.correct for _, n in right))
