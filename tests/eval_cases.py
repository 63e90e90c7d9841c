"""Output kinds for the dominance differential (tests/test_eval_differential.py).

A kind is a way a model writes its answer: a chain-of-thought ending, a program, a letter. Each
kind is filled twice per item, once with the right answer and once with a wrong one (for a
program kind, the fallback chain-of-thought text says the other one), and carries the truth: the
verdict a reader of the output would give. `first`: the output's own answer decides (a program
that runs as Python, whatever wrapper a harness puts around it, answers with what it prints);
`fallback`: the program is broken (it raises before finishing), so the fallback text decides;
`never`: no answer is given; `letter-a`: the output ends with a lone "a", right only when the gold
is A.

`cases(benchmark, items)` gives every (kind, item, output, fallback, truth) for real items.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from numloss.evaluate.answers import format_exact, option_value, plain_exact
from numloss.evaluate.benchmarks import LETTERS, Item


@dataclass(frozen=True)
class Kind:
    name: str
    output: str  # a template: {a} answer, {l} lower-case letter, {c} with thousands commas, {t} / {s} LaTeX ',\\!' / '\\,' thousands, {p} a Python literal, {o} option text, {v} option value literal
    fallback: str | None = None  # a template filled with the *other* answer
    truth: str = "first"  # "first", "fallback", "never", "letter-a"
    kinds: tuple[str, ...] = ("number", "math", "choice")


K = Kind
GENERIC = [
    K("trigger", "The answer is {a}."),
    K("trigger-colon", "The answer is: {a}"),
    K("so-trigger", "So the answer is {a}"),
    K("steps-then-trigger", "Step 1: 3 + 4 = 7.\nStep 2: 7 * 2 = 14.\nThe answer is {a}."),
    K("lowercase-trigger", "the answer is {a}."),
    K("final-answer-is", "Therefore, the final answer is {a}."),
    K("final-answer-colon", "Final answer: {a}"),
    K("hashes", "#### {a}"),
    K("boxed", "$\\boxed{{{a}}}$"),
    K("trigger-boxed", "Thus the answer is $\\boxed{{{a}}}$."),
    K("trigger-twice", "The answer is {a}.\n\nThe answer is {a}."),
    K("bold", "The answer is **{a}**."),
    K("trailing-space", "  The answer is {a}.  \n\n"),
    K("hope-correct", "The answer is {a}. I hope it is correct."),
    K("answer-colon", "Answer: {a}"),
    K("so-colon", "So, the answer is: {a}."),
    K("exclaim", "The answer is {a}!"),
    K("no-answer", "I cannot solve this problem.", truth="never"),
    K("program-print", "print({p})", "The answer is {a}."),
    K("program-var", "x = {p}\nprint(x)", "The answer is {a}."),
    K("program-fenced", "```python\nprint({p})\n```", "The answer is {a}."),
    K("program-fenced-text", "Here is the program:\n```python\nx = {p}\nprint(x)\n```\nIt prints the answer.", "The answer is {a}."),
    K("program-indented", "    x = {p}\n    print(x)", "The answer is {a}."),
    K("program-tab-indented", "\tx = {p}\n\tprint(x)", "The answer is {a}."),
    K("program-return", "total = {p}\nprint(total)\nreturn total", "The answer is {a}."),
    K("program-indented-return", "    total = {p}\n    print(total)\n    return total", "The answer is {a}."),
    K("program-function", "def solve():\n    return {p}\nprint(solve())", "The answer is {a}."),
    K("program-star-import", "from math import *\nprint({p})", "The answer is {a}."),
    K("program-main-guard", "def main():\n    print({p})\nif __name__ == '__main__':\n    main()", "The answer is {a}."),
    K("program-trigger", "print('The answer is', {p})", "The answer is {a}."),
    K("program-raises", "print({p})\nraise ValueError('late')", "The answer is {a}.", truth="fallback"),
    K("program-no-number", "print('no number here')", "The answer is {a}.", truth="fallback"),
    K("program-import", "import math\nprint({p})", "The answer is {a}."),
    K("program-fstring", "result = {p}\nprint(f'{{result}}')", "The answer is {a}."),
    K("program-comment", "print({p})  # the answer", "The answer is {a}."),
    K("program-exit", "print({p})\nexit()", "The answer is {a}."),
    K("program-end", "print({p}, end='')", "The answer is {a}."),
    K("program-labelled", "answer = {p}\nprint('Answer:', answer)", "The answer is {a}."),
    K("program-debug-flood", "print({p})\nfor i in range(20000):\n    print('debug line', i)", "The answer is {a}."),
    K("program-big-memory", "import mmap\nbuf = mmap.mmap(-1, 1200 * 1024 * 1024)\nprint({p})", "The answer is {a}."),
    K("program-instruction-tail", "print({p})\n### Instruction:\nanother question", "The answer is {a}."),
    # classes resolve as under the released exec (code_utils is a module in sys.modules) and as under python prog.py
    K("program-dataclass", "from dataclasses import dataclass\n@dataclass\nclass Answer:\n    value: object\n    unit: str = ''\nprint(Answer({p}).value)", "The answer is {a}."),
    K("program-dataclass-quoted", "from dataclasses import dataclass\n@dataclass\nclass Answer:\n    value: 'object'\nprint(Answer({p}).value)", "The answer is {a}."),
    K("program-pickled-class", "import pickle\nfrom dataclasses import dataclass\n@dataclass\nclass Answer:\n    value: object\nprint(pickle.loads(pickle.dumps(Answer({p}))).value)", "The answer is {a}."),
    K("assignment-no-print", "x = {p}", "The answer is {a}.", kinds=("number", "math")),
]

NUMERIC = [  # number and math items
    K("commas", "The answer is {c}", kinds=("number", "math")),
    K("thin-space", "The answer is {t}", kinds=("number", "math")),
    K("thin-space-comma", "The answer is {s}", kinds=("number", "math")),
    K("dollar", "She pays ${c} in total. The answer is ${c}.", kinds=("number",)),
    K("units", "The answer is {a} apples.", kinds=("number",)),
    K("point-zero", "The answer is {a}.0", kinds=("number",)),
    K("operator-minus", "So 8 - 3 = 5 and the answer is {a}", kinds=("number", "math")),
    K("percent", "The answer is {a}%", kinds=("number",)),
    K("last-number", "He had 12 apples and 5 left, so {a} were eaten.", kinds=("number", "math")),
    K("assignment", "The answer is x = {a}", kinds=("number", "math")),
    K("assignment-thin", "The answer is x = {t}", kinds=("number", "math")),
    K("assignment-dollars", "The answer is $x = {a}$", kinds=("math",)),
    K("boxed-assignment", "So $\\boxed{{x = {a}}}$", kinds=("math",)),
    K("inline-math", "The answer is \\({a}\\).", kinds=("number", "math")),
    K("negated", "The answer is -{a}", truth="never", kinds=("number",)),
    K("half-of", "We get 1/2 of {a}, so the answer is 1/2", truth="never", kinds=("number",)),
    K("program-float", "print(float({p}))", "The answer is {a}.", kinds=("number",)),
    K("program-float-noise", "print({p} + 1e-13)", "The answer is {a}.", kinds=("number",)),
    K("program-two-prints", "x = {p}\ny = 3\nprint(x)\nprint(y)", "The answer is {a}.", kinds=("number",)),
    K("program-thousands", "print(f'{{{p}:,}}')", "The answer is {a}.", kinds=("number",)),
    K("trigger-equals", "The answer is 12 + 6 = {a}.", kinds=("number", "math")),
    K("total-is", "In total, it is {a}.", kinds=("number", "math")),
    K("we-get", "Solving, we get {a}", kinds=("number", "math")),
    K("equals-last", "So 3 * 4 = 12, and 12 + 6 = {a}", kinds=("number", "math")),
    K("boxed-commas", "The answer is $\\boxed{{{c}}}$", kinds=("number", "math")),
    K("boxed-thin", "$\\boxed{{{t}}}$", kinds=("number", "math")),
    K("trigger-dollars", "The answer is ${a}$.", kinds=("number", "math")),
    K("boxed-text-units", "$\\boxed{{{a}\\text{{ cm}}}}$", kinds=("number", "math")),
    K("trigger-degrees", "The answer is ${a}^\\circ$.", kinds=("number", "math")),
    K("in-context", "The answer is {a}.\n\nQuestion 2: what is 3 + 4? The answer is 7.", kinds=("number", "math")),
]

CHOICE = [
    K("lower-trigger", "The answer is {l}.", kinds=("choice",)),
    K("lower-bracketed", "So the answer is ({l})", kinds=("choice",)),
    K("lower-close-bracket", "{l}) is right.", kinds=("choice",)),
    K("answer-colon-lower", "Answer: {l}", kinds=("choice",)),
    K("bare-letter", "{a}", kinds=("choice",)),
    K("bare-lower", "{l}", kinds=("choice",)),
    K("bare-bracketed-lower", "({l})", kinds=("choice",)),
    K("choose-lower", "After computing, we choose {l}.", kinds=("choice",)),
    K("choose-a", "After computing, we choose a", truth="letter-a", kinds=("choice",)),
    K("article", "The answer is a boy who has some apples.", truth="never", kinds=("choice",)),  # no number: "5 apples" is an answer where an option is 5
    K("article-long-way", "The answer is a long way off.", truth="never", kinds=("choice",)),
    K("option-word", "Option {a} is correct.", kinds=("choice",)),
    K("correct-choice", "The correct choice is ({a}).", kinds=("choice",)),
    K("letter-then-text", "The answer is {a}) {o}", kinds=("choice",)),
    K("option-text", "The answer is {o}", kinds=("choice",)),
    K("boxed-lower", "$\\boxed{{{l}}}$", kinds=("choice",)),
    K("because", "I think the answer is {l}, because the area is 5.", kinds=("choice",)),
    K("variable-a", "We solve for a and find a = 5. So the answer is {a}.", kinds=("choice",)),
    K("program-letter", "x = 5\nprint({p})", kinds=("choice",)),
    K("program-lower-letter", "x = 5\nprint({p}.lower())", kinds=("choice",)),
    K("program-option-value", "x = 5\nprint({v})", kinds=("choice",)),
    K("program-indented-letter", "    print({p})", kinds=("choice",)),
]

KINDS = GENERIC + NUMERIC + CHOICE


def grouped(value: Fraction, sep: str = ",") -> str:
    """`value` with the digits of its whole part grouped in threes by `sep` ("-14,400.5"); a
    fraction ("5/6") as it is."""
    text = format_exact(value)
    sign, whole, rest = re.fullmatch(r"(-?)(\d*)(.*)", text).groups()
    return text if "/" in text else sign + f"{int(whole):,}".replace(",", sep) + rest


@dataclass(frozen=True)
class Case:
    kind: str
    benchmark: str
    item: Item
    output: str
    fallback: str | None
    truth: bool


def _fill(kind: Kind, item: Item, answer: str, value: Fraction | None) -> str:
    fields = dict.fromkeys("aclopstv", answer)  # then what differs by answer kind
    if item.kind == "choice":
        option = option_of(item, answer)
        opt_value = option_value(option)
        fields |= {"l": answer.lower(), "p": repr(answer), "o": option, "v": format_exact(opt_value) if opt_value is not None else repr(option)}
    else:
        commas = grouped(value) if value is not None else answer
        literal = format_exact(value) if value is not None and "/" not in format_exact(value) else repr(answer)
        fields |= {"c": commas, "t": commas.replace(",", ",\\!"), "s": commas.replace(",", "\\,"), "p": literal}
    return kind.output.format(**fields) if kind.output else ""


def option_of(item: Item, letter: str) -> str:
    """The text of option `letter` of `item` ("" past its last option)."""
    return item.options[LETTERS.index(letter)] if LETTERS.index(letter) < len(item.options) else ""


def answers_of(item: Item) -> tuple[tuple[str, Fraction | None], tuple[str, Fraction | None]]:
    """(right, wrong) answers for `item`, each as (text, value or None)."""
    if item.kind == "choice":
        right = item.answer.upper()
        wrong = LETTERS[(LETTERS.index(right) + 1) % max(2, len(item.options))]
        return (right, None), (wrong, None)
    if _is_list(item.answer):  # "4,6,14,15": the list itself, and the list with its last number off by 7
        head, _, last = item.answer.rpartition(",")
        return (item.answer, None), (f"{head},{last[: len(last) - len(last.lstrip())]}{format_exact(Fraction(last.strip()) + 7)}", None)
    value = plain_exact(item.answer)
    wrong = (value + 7) if value is not None else Fraction(7)
    return (item.answer, value), (format_exact(wrong), wrong)


def _is_list(answer: str) -> bool:
    """A comma list of plain integers ("4,6,14,15", "12, 10, 6"), not a number with thousands ("14,400")."""
    return bool(re.fullmatch(r"-?\d+(?:,\s?-?\d+)+", answer.strip())) and plain_exact(answer) is None


def usable(item: Item) -> bool:
    """Items whose gold a generated output can state plainly (a plain number, a comma list of integers, a letter)."""
    if item.kind == "choice":
        return item.answer.upper() in LETTERS[: len(item.options)]
    return _is_list(item.answer) or (plain_exact(item.answer) is not None and "/" not in item.answer and "frac" not in item.answer)


def cases(benchmark: str, items: list[Item]) -> list[Case]:
    """Every kind of each item, filled with its right and its wrong answer (a kind that does not
    use the answer once)."""
    out: dict[tuple, Case] = {}
    for item in items:
        (right, rv), (wrong, wv) = answers_of(item)
        for kind in KINDS:
            if item.kind not in kind.kinds:
                continue
            if kind.name == "program-option-value" and option_value(item.options[LETTERS.index(right)]) is None:
                continue
            for said, said_value, other, other_value, said_right in ((right, rv, wrong, wv, True), (wrong, wv, right, rv, False)):
                output = _fill(kind, item, said, said_value)
                fallback = _fill(Kind(kind.name, kind.fallback), item, other, other_value) if kind.fallback and item.kind != "choice" else None
                truth = {"first": said_right, "fallback": fallback is not None and not said_right,
                         "letter-a": item.answer.upper() == "A"}.get(kind.truth, False)
                out.setdefault((kind.name, item.id, output, fallback), Case(kind.name, benchmark, item, output, fallback, truth))
    return list(out.values())
