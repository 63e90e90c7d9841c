"""The `released` protocol against the transcription of the released code (tests/reference/released_eval.py).

Built from the real benchmark files in ../shared/benchmarks: the question text and gold of every
item of every benchmark, then about 2,000 outputs (tests/eval_cases.py: chain-of-thought
endings, multiple-choice letters in every form; programs in tests/test_eval_differential.py)
scored by both; they must agree on every extracted answer and every verdict.
"""

from __future__ import annotations

import pytest

from eval_cases import cases  # tests/ is on sys.path (conftest.py)
from numloss.evaluate.benchmarks import load_benchmark
from numloss.evaluate.programs import ProgramRunner
from numloss.evaluate.protocol import RELEASED, released_prompt
from numloss.evaluate.runner import score_items
from reference import released_eval as ref
from test_eval_differential import DATA, NAMES, RELEASED_CHILD, program_runner, transcription

pytestmark = pytest.mark.usefixtures("shared_benchmarks")  # fails, naming the folder, when it is missing


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
        assert released_prompt(item, "cot") == ref.input_str(question, form)
        if bench.kind != "choice":
            assert released_prompt(item, "pot") == ref.input_str(ref.process_question_with_flan_tag([question], "pot_prompt")[0], form)


def test_generation_settings_are_the_released_ones():
    assert list(RELEASED.stop) == ref.STOP_TOKENS
    assert RELEASED.max_new_tokens_open == ref.MAX_TOKENS_OPEN and RELEASED.max_new_tokens_choice == ref.MAX_TOKENS_CHOICE


def test_released_protocol_agrees_with_the_transcription_on_every_output(benches):
    """Every text kind of tests/eval_cases.py, right and wrong, on the first three items of each
    benchmark and eight of MATH (golds such as \\frac{9}{7} that the differential's items are not);
    the program kinds run in tests/test_eval_differential.py."""
    total, runner = 0, program_runner()
    for name, bench in benches.items():
        batch = [c for c in cases(name, bench.items[: 8 if name == "math" else 3]) if "print(" not in c.output + (c.fallback or "")]
        got = score_items(RELEASED, name, [c.item for c in batch], [c.output for c in batch], [c.fallback for c in batch], runner)
        bad = [(c.item.id, c.output, c.fallback, t, (r.prediction, r.correct))
               for c, t, r in zip(batch, transcription(name, batch), got, strict=True) if (r.prediction, r.correct) != t]
        assert not bad, (name, bad[:5])
        total += len(batch)
    assert total >= 1900


def test_released_quirks_are_reproduced(benches):
    """A letter where none is given. The programs' quirks are held elsewhere: float noise failing the
    string comparison by test_eval_protocol's real-gold prints; fenced code (a SyntaxError in the
    wrapper) and the first of all printed numbers by the differential's program-fenced and
    program-two-prints kinds against the transcription."""
    aqua = benches["aqua"].items[0]
    outputs = ["Nothing fits.", "The answer is a long way off: (C)", "I do not know."]
    got = score_items(RELEASED, "aqua", [aqua] * 3, outputs, [None] * 3, program_runner())
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
    results = ProgramRunner(RELEASED_CHILD, allow_unisolated=True).run([RELEASED.script(p) for p in CLASS_PROGRAMS])
    own = [ref.execute_with_timeout(p) for p in CLASS_PROGRAMS]
    assert [r.stdout if r.ok else "" for r in results] == own
    assert own[:2] == ["18", "18"] and own[2] == "" and own[3] == "code_utils:18"
