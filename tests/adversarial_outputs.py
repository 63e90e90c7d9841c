"""What looping models emit, as outputs of any size, and the items they are read against: one
source for tests/test_eval_linear.py (the reading time is linear) and bench/reader.py (how long
it is)."""

from __future__ import annotations

from numloss.evaluate.benchmarks import Item

#: answer kind: (an item of that kind, a benchmark of it)
ITEMS = {
    "number": (Item("1", "q", "18", "number"), "gsm8k"),
    "math": (Item("2", "q", "18", "math"), "math"),
    "choice": (Item("3", "q", "B", "choice", ("1 over 5", "2", "3", "5")), "aqua"),
}
#: one unit repeated to the size
UNITS = {
    "newlines": "\n", "spaces": " ", "digits": "1", "equals": "=", "answer": "answer ", "brackets": "(",
    "square-brackets": "[", "braces": "{", "backslashes": "\\", "trigger": "The answer is ", "letters": "(C) ",
    "numbers": "1 ", "boxed": "\\boxed{", "headers": "\n\nQuestion 1:\n", "dollars": "$1",
}
#: a word followed by a run of one character
RUNS = {"answer-then-spaces": ("answer", " "), "digits-then-equals": ("", "1"), "answer-then-newlines": ("The answer is", "\n")}
NAMES = [*UNITS, *RUNS]


def adversarial(name: str, size: int) -> str:
    if name in RUNS:
        head, unit = RUNS[name]
        return head + unit * (size - len(head) - 1) + ("=" if name == "digits-then-equals" else " ")
    unit = UNITS[name]
    return (unit * (size // len(unit) + 1))[:size]
