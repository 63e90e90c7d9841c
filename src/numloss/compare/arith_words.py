"""The pretrained arm's task: one-step arithmetic word problems whose answer is written directly.

    Q: "Tom had 3456 coins and got 2789 more. How many coins does Tom have now?"
    A: "#### 6245"

`task: {kind: arith_words, answer_digits: 4, ...}` in a comparison YAML. Every answer has exactly
`answer_digits` digits (the calibration knob: longer answers are harder), so each digit place
has the same share of the answers and DEL's place weights act on every place. One operation per
problem: `+` (the answer split into two addends), `-` (a d-digit answer plus a subtrahend), `*`
(a one-digit multiplier, 2-9, times a multiplicand the answer is a multiple of). Prompts are the
question as one user turn in the model's chat template after an empty system turn (SmolLM2's
default system prompt would cost 16 of the 64 tokens); about 45 tokens a sequence with SmolLM2.

Scoring (`evaluate`): `test_size` held-out problems (their own seed, never in training), scored
teacher-forced in one forward pass per batch (numloss.compare.teacher_forced): an item is right
when the argmax is right at every answer position, end token included, which is exactly greedy
exact match. The first `generate_check` of them are also decoded greedily and both verdicts are
recorded, item by item, so every record carries its own check of that equivalence. `benchmarks`
(default none; `svamp`, `gsm8k`) adds real benchmark questions with the direct-answer target
"#### <gold>", scored the same way (first `benchmark_limit` open-answer items of each).

Each set's per-item verdicts are kept as a 0/1 string (`items`) so two runs can be compared item
by item (McNemar, numloss.compare.item_paired).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le

from numloss.compare.task import LARGEST, Count
from numloss.compare.word_task import ChatExample, WordProblemTask

NAMES = ("Tom", "Ana", "Sam", "Mia", "Leo", "Eva", "Ben", "Zoe", "Raj", "Kim")
THINGS = (
    "apples",
    "coins",
    "books",
    "stamps",
    "shells",
    "cards",
    "bricks",
    "pens",
    "seeds",
    "beads",
)

TEMPLATES = {
    "+": (
        "{name} had {a} {things} and got {b} more. How many {things} does {name} have now?",
        (
            "A shop sold {a} {things} on Monday and {b} on Tuesday. How many {things} did it sell"
            " in all?"
        ),
        "{name} has {a} {things} and {other} has {b}. How many {things} do they have together?",
    ),
    "-": (
        "{name} had {a} {things} and gave away {b}. How many {things} does {name} have left?",
        "A store had {a} {things}. It sold {b} of them. How many {things} are left?",
        "{name} needs {a} {things} and already has {b}. How many more {things} does {name} need?",
    ),
    "*": (
        "{name} buys {m} boxes with {a} {things} in each. How many {things} does {name} buy?",
        "Each of {m} trucks carries {a} {things}. How many {things} do the trucks carry in all?",
        "{name} packs {a} {things} a day for {m} days. How many {things} does {name} pack?",
    ),
}


#: an arithmetic fact: the operation and its operands (unordered for + and *, which commute)
Fact = tuple[str, int, int]


def word_problem(rng: random.Random, answer_digits: int, operations: str = "+-*") -> ChatExample:
    """One problem whose answer has exactly `answer_digits` digits (>= 2), operation drawn from
    `operations`."""
    return _draw(rng, answer_digits, operations)[0]


def _draw(rng: random.Random, answer_digits: int, operations: str) -> tuple[ChatExample, Fact]:
    """A problem (see `word_problem`) and its arithmetic fact."""
    low, high = 10 ** (answer_digits - 1), 10**answer_digits - 1
    op = rng.choice(operations)
    answer = rng.randint(low, high)
    fields: dict[str, Any] = {"name": rng.choice(NAMES), "things": rng.choice(THINGS)}
    fields["other"] = rng.choice([n for n in NAMES if n != fields["name"]])
    if op == "+":
        a = rng.randint(1, answer - 1)
        fields.update(a=a, b=answer - a)
        fact: Fact = ("+", *sorted((a, answer - a)))
    elif op == "-":
        b = rng.randint(1, high)
        fields.update(a=answer + b, b=b)
        fact = ("-", answer + b, b)
    else:
        m = rng.randint(2, 9)
        q = rng.randint(-(-low // m), high // m)
        fields.update(m=m, a=q)
        answer, fact = q * m, ("*", *sorted((m, q)))
    question = rng.choice(TEMPLATES[op]).format(**fields)
    return ChatExample(question, f"#### {answer}", answer=str(answer), system=""), fact


def _problems(
    seed: str,
    n: int,
    answer_digits: int,
    operations: str,
    exclude: Iterable[str] = (),
    exclude_facts: frozenset[Fact] = frozenset(),
) -> list[ChatExample]:
    """`n` problems with distinct questions from the named seed, none of whose questions is in
    `exclude` and none of whose arithmetic facts is in `exclude_facts`."""
    rng = random.Random(seed)
    seen = set(exclude)
    items: list[ChatExample] = []
    tries = 0
    while len(items) < n:
        item, fact = _draw(rng, answer_digits, operations)
        tries += 1
        if item.instruction not in seen and fact not in exclude_facts:
            seen.add(item.instruction)
            items.append(item)
        if tries > 20 * n + 1000:
            raise ValueError(
                f"task: cannot draw {n} distinct problems with {answer_digits}-digit answers"
            )
    return items


@dataclass(frozen=True)
class ArithmeticWordTask(WordProblemTask):
    """Training items, held-out items and their teacher-forced scoring (see the module doc)."""

    kind: Literal["arith_words"] = "arith_words"  # type: ignore[assignment]
    answer_digits: Annotated[int, Ge(2), Le(12)] = 4
    operations: str = "+-*"
    train_size: Count = 2000
    test_size: Count = 1000
    generate_check: Annotated[int, Ge(0), Le(LARGEST)] = 64
    benchmarks: tuple[str, ...] = ()
    benchmark_limit: Count = 500
    max_new_tokens: Count = 16
    eval_batch_size: Count = 100
    #: "any": training problems may share an arithmetic fact (operation and operands) with a
    #: held-out problem; "unseen": no training problem of any seed has a held-out problem's fact,
    #: so the held-out score measures arithmetic not memorised from training
    heldout_facts: Literal["any", "unseen"] = "any"

    def describe(self) -> str:
        sets = f"{self.test_size} held-out problems" + (
            f" and the first {self.benchmark_limit} items of {', '.join(self.benchmarks)} (answer"
            " '#### N')"
            if self.benchmarks
            else ""
        )
        return (
            f"one-step arithmetic word problems ({', '.join(self.operations)}) with"
            f" {self.answer_digits}-digit answers written directly ('#### N'), chat template,"
            f" {self.train_size} training items per seed; scored teacher-forced (greedy exact"
            f" match) on {sets}"
        )

    def check(self) -> None:
        """Raise ValueError for operations other than + - * (the field types and ranges are
        checked before, numloss.compare.tasks.checked)."""
        if not self.operations or set(self.operations) - set(TEMPLATES):
            raise ValueError(f"task.operations must be a string of + - *, got {self.operations!r}")

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        # absent at its default: the untrained baseline's hash reads every key
        if self.heldout_facts == "any":
            out.pop("heldout_facts")
        return out

    def held_out(self) -> list[ChatExample]:
        """The `test_size` scored problems: their own seed, the same for every run."""
        return _problems(
            f"numloss-arith-words-test-{self.test_seed}",
            self.test_size,
            self.answer_digits,
            self.operations,
        )

    def held_out_facts(self) -> frozenset[Fact]:
        """The arithmetic facts of the held-out problems (drawn again, in the same order)."""
        rng = random.Random(f"numloss-arith-words-test-{self.test_seed}")
        questions = {e.instruction for e in self.held_out()}
        facts: set[Fact] = set()
        while questions:
            item, fact = _draw(rng, self.answer_digits, self.operations)
            if item.instruction in questions:
                questions.discard(item.instruction)
                facts.add(fact)
        return frozenset(facts)

    def test_sets(self) -> dict[str, list[ChatExample]]:
        """The held-out problems (the runner keeps their questions out of training)."""
        return {"heldout": self.held_out()}

    def check_set(self, size: int) -> list[ChatExample]:
        """`size` problems for learning checks, apart from the held-out set."""
        held = {e.instruction for e in self.held_out()}
        return _problems(
            f"numloss-arith-words-check-{self.test_seed}",
            size,
            self.answer_digits,
            self.operations,
            held,
        )

    def train_set(self, seed: int, exclude: Iterable[str] | None = None) -> list[ChatExample]:
        """`train_size` problems for `seed`, none of whose questions is in `exclude`."""
        facts = self.held_out_facts() if self.heldout_facts == "unseen" else frozenset()
        return _problems(
            f"numloss-arith-words-train-{seed}",
            self.train_size,
            self.answer_digits,
            self.operations,
            exclude or (),
            facts,
        )

    def benchmark_items(self, name: str) -> list[ChatExample]:
        """The first `benchmark_limit` open-answer items of benchmark `name`, target '####
        <gold>'."""
        from numloss.evaluate import load_benchmark

        bench = load_benchmark(name, data_dir=self.data_dir)
        items = [item for item in bench.items if item.kind != "choice"][: self.benchmark_limit]
        return [
            ChatExample(i.question, f"#### {i.answer}", answer=i.answer, system="") for i in items
        ]

    def evaluate(self, model: Any, tokenizer: Any) -> dict[str, dict[str, Any]]:
        """Teacher-forced greedy exact match on the held-out problems and each benchmark (on the GPU
        when there is one: the runner loads a trained model onto the CPU)."""
        import torch

        if torch.cuda.is_available() and next(model.parameters()).device.type == "cpu":
            model.to("cuda")
        sets = {"heldout": self.held_out()}
        for name in self.benchmarks:
            sets[name] = self.benchmark_items(name)
        return {
            name: self.score_set(model, tokenizer, items, name == "heldout")
            for name, items in sets.items()
        }

    def score_set(
        self, model: Any, tokenizer: Any, items: list[ChatExample], check_generation: bool
    ) -> dict[str, Any]:
        """One set's record: exact match with its Wilson interval, per-item verdicts, places,
        NLL."""
        import math
        import statistics

        from numloss.compare.stats import exact_match_record
        from numloss.compare.teacher_forced import generated_exact, teacher_forced_exact

        rendered = self.render(items, tokenizer)
        started = time.perf_counter()
        score = teacher_forced_exact(model, tokenizer, rendered, batch_size=self.eval_batch_size)
        seconds = {"teacher_forced": time.perf_counter() - started}
        nll = [v for v in score.answer_nll if math.isfinite(v)]
        record: dict[str, Any] = {
            **exact_match_record(sum(score.correct), len(items)),
            "items": score.bits(),
            "answer_nll": statistics.fmean(nll) if nll else float("nan"),
            "digit_entropy": score.digit_entropy,
            "teacher_forced_place_accuracy": {str(p): v for p, v in score.place.items()},
            "examples": [
                {"question": e.instruction, "gold": e.output, "argmax": p}
                for e, p in list(zip(items, score.predictions, strict=True))[:5]
            ],
        }
        n = min(self.generate_check, len(items)) if check_generation else 0
        if n:
            started = time.perf_counter()
            generated = generated_exact(
                model, tokenizer, rendered[:n], batch_size=self.eval_batch_size
            )
            seconds["generate_check"] = time.perf_counter() - started
            record["generation_check"] = {
                "n": n,
                "generated": "".join("1" if g else "0" for g in generated),
                "agree": sum(g == t for g, t in zip(generated, score.correct[:n], strict=True)),
            }
        record["seconds"] = seconds
        return record
