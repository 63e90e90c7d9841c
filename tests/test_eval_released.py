"""The `released` protocol against the transcription of the released code (tests/reference/released_eval.py).

Built from the real benchmark files in ../shared/benchmarks: the question text and gold of every
item of every benchmark, then several hundred outputs (chain-of-thought endings, programs that
print, multiple-choice letters in every form) scored by both; they must agree on every
extracted answer and every verdict.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from numloss.evaluate.benchmarks import load_benchmark
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import RELEASED, released_prompt
from numloss.evaluate.runner import score_items
from numloss.evaluate.sandbox import SandboxLimits
from reference import released_eval as ref

DATA = Path(__file__).resolve().parents[2] / "shared" / "benchmarks"  # ../shared beside the repository
pytestmark = pytest.mark.usefixtures("shared_benchmarks")  # fails, naming the folder, when it is missing

NAMES = {"gsm8k": "gsm8k", "svamp": "svamp", "simuleq": "simuleq", "math": "math", "aqua": "aqua", "sat": "sat", "mmlu_math": "mmlu_mathematics"}
LIMITS = SandboxLimits(wall_seconds=10.0, cpu_seconds=5, memory_bytes=0)


@pytest.fixture(scope="module")
def benches():
    return {name: load_benchmark(name, data_dir=DATA) for name in NAMES}


@pytest.mark.parametrize("name", list(NAMES))
def test_question_text_gold_and_prompt_of_every_item(benches, name):
    questions, golds = ref.data_reader(NAMES[name], DATA)
    bench = benches[name]
    assert len(bench) == len(questions)
    assert [it.question for it in bench.items] == questions
    assert [RELEASED.gold(it) for it in bench.items] == golds
    form = "alpaca_mc" if bench.kind == "choice" else "alpaca"
    for item, question in zip(bench.items[:50], questions[:50], strict=True):
        if bench.kind == "choice":
            assert released_prompt(item, "cot") == ref.input_str(question, form)
        else:
            assert released_prompt(item, "pot") == ref.input_str(ref.process_question_with_flan_tag([question], "pot_prompt")[0], form)
            assert released_prompt(item, "cot") == ref.input_str(question, form)


def test_generation_settings_are_the_released_ones():
    assert list(RELEASED.stop) == ref.STOP_TOKENS
    assert RELEASED.max_new_tokens_open == ref.MAX_TOKENS_OPEN and RELEASED.max_new_tokens_choice == ref.MAX_TOKENS_CHOICE


def _commas(n: str) -> str:
    whole, _, frac = n.partition(".")
    sign = "-" if whole.startswith("-") else ""
    whole = whole.lstrip("-")
    grouped = f"{int(whole):,}" if whole.isdigit() else whole
    return sign + grouped + (f".{frac}" if frac else "")


def open_outputs(gold: str) -> list[tuple[str, str | None]]:
    """(first output, fallback) pairs: CoT endings and programs, right and wrong."""
    wrong = str(int(float(gold)) + 10) if gold.lstrip("-").replace(".", "", 1).isdigit() else "7"
    cot = [
        f"First 3 + 4 = 7, then 7 * 2 = 14.\nThe answer is {gold}.",
        f"The answer is: {_commas(gold)}",
        f"She pays $ {gold} in total. The answer is ${_commas(gold)}.",
        f"So 8 - 3 = 5 and the answer is {gold} apples",
        f"It is {gold}% of them. The answer is {gold}%",
        f"The answer is {wrong}. Checking again with 12 and 5.",
        f"We get 1/2 of {gold}, so the answer is 1/2",
        f"He had 12 apples and 5 left, so {gold} were eaten.",
        f"The answer is -{gold}",
        f"The answer is {gold}.0",
        f"The answer is 3\n\nThe answer is {gold}",  # two triggers: the released code keeps the first chunk
        f"#### {gold}",
        f"To find the answer: 80,000 + {gold}",
        "I cannot tell.",
    ]
    programs = [
        f"a = {gold}\nprint(a)",
        f"total = {gold}\nprint(float(total))",
        f"x = {gold}\ny = 3\nprint(x)\nprint(y)",
        f"print('The answer is', {gold})",
        f"```python\nprint({gold})\n```",
        f"from sympy import *\nprint({gold})",
        f"def main():\n    print({gold})\nif __name__ == '__main__':\n    main()",
        f"print({gold})\nraise ValueError('late')",
        f"import math\nprint(math.floor({gold} * 3 / 3))",
        "value = 0.1 + 0.2\nprint(value * 200)",
        "print('no number here')",
    ]
    fallback = f"Step by step. The answer is {gold}."
    return [(o, None) for o in cot] + [(p, fallback) for p in programs]


def math_outputs(gold: str) -> list[tuple[str, str | None]]:
    return [
        (f"So the result is $\\boxed{{{gold}}}$.", None),
        (f"The answer is ${gold}$", None),
        (f"The answer is x = {gold}", None),
        ("so the sum of roots is 5", None),
        ("Thus $x = \\boxed{\\dfrac{1}{2}}$", None),
        (f"x = {gold}\nprint(x)", f"The answer is {gold}"),
        ("print('abc')", "The answer is 0.5"),
    ]


CHOICE_TEMPLATES = [
    "Let's think. The answer is ({L}).",
    "The answer is {L}",
    "So the answer is $\\boxed{{{L}}}$",
    "Answer: ({l})",
    "The answer is a number close to {L}",
    "Option {L} is right because of the area.",
    "I think it is (B) or maybe ({L}).",
    "None of these look right.",
    "x = 5\nprint('{L}')",
    "#### {L}",
]


def choice_outputs(gold: str) -> list[str]:
    letters = {gold, "A", "C"}
    return [t.format(L=L, l=L.lower()) for t, L in itertools.product(CHOICE_TEMPLATES, sorted(letters))]


def _runner():
    return ProgramRunner(LIMITS, workers=2, allow_unisolated=True)


def test_released_protocol_agrees_with_the_transcription_on_every_output(benches):
    runner = _runner()
    total = 0
    for name, bench in benches.items():
        dataset = NAMES[name]
        items = bench.items[:3] if name != "math" else bench.items[:8]
        cases = []
        for item in items:
            gold = RELEASED.gold(item)
            if bench.kind == "choice":
                cases += [(item, o, None) for o in choice_outputs(gold)]
            elif bench.kind == "math":
                cases += [(item, o, f) for o, f in math_outputs(gold)]
            else:
                cases += [(item, o, f) for o, f in open_outputs(gold)]
        mine = score_items(RELEASED, name, [c[0] for c in cases], [c[1] for c in cases], [c[2] for c in cases], runner)
        for (item, output, fallback), got in zip(cases, mine, strict=True):
            gold = RELEASED.gold(item)
            if bench.kind == "choice":
                answer, correct = ref.score_choice(dataset, gold, output)
            else:
                answer, correct, _ = ref.score_open(dataset, gold, output, fallback)
            assert (got.prediction, got.correct) == (answer, correct), (name, item.id, output, fallback)
        total += len(cases)
    assert total >= 200


def test_released_quirks_are_reproduced(benches):
    gsm = benches["gsm8k"].items[0]  # gold 18
    runner = _runner()
    cases = [
        ("print(60.00000000000001 - 42)", "The answer is 18"),  # float noise: string comparison fails
        ("```python\nprint(18)\n```", "The answer is 17"),  # fenced code is a SyntaxError in the wrapper
        ("x = 18\nprint(x)\nprint(3)", None),  # the first number of all printed output
    ]
    got = score_items(RELEASED, "gsm8k", [gsm] * 3, [c[0] for c in cases], [c[1] for c in cases], runner)
    assert [(r.prediction, r.correct) for r in got] == [("18.000000000000007", False), ("17", False), ("18", True)]
    aqua = benches["aqua"].items[0]
    outputs = ["Nothing fits.", "The answer is a long way off: (C)", "I do not know."]
    got = score_items(RELEASED, "aqua", [aqua] * 3, outputs, [None] * 3, runner)
    # no letter: the guess 'A'; the words "a" and "I" read as letters (the first after a trigger)
    assert [r.prediction for r in got] == ["A", "A", "I"]


CLASS_PROGRAMS = [
    "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int = 2\nprint(P(16).x + 2)",
    "from dataclasses import dataclass, field\n@dataclass\nclass P:\n    x: 'int'\n    ys: list = field(default_factory=list)\nprint(P(18).x)",
    "import pickle\nfrom dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\nprint(pickle.loads(pickle.dumps(P(18))).x)",
    "class Box:\n    def __init__(self, v):\n        self.v = v\n    def __repr__(self):\n        return f'{type(self).__module__}:{self.v}'\nprint(Box(18))",
]


def test_classes_resolve_and_pickle_as_under_the_released_exec():
    """A program's classes under `released` (the wrapper, in the sandbox) do what they do under the
    released scripts' own exec (the transcription's CodeExecutor, run in this process): a
    dataclass prints (it ran with empty output when the sandbox's compile leaked
    `from __future__ import annotations` into the program), a function-local class does not pickle."""
    results = ProgramRunner(LIMITS, allow_unisolated=True).run([RELEASED.script(p) for p in CLASS_PROGRAMS])
    own = [ref.execute_with_timeout(p) for p in CLASS_PROGRAMS]
    assert [r.stdout if r.ok else "" for r in results] == own
    assert own[:2] == ["18", "18"] and own[2] == "" and own[3] == "code_utils:18"
