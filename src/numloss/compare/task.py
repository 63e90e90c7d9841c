"""The default comparison task: short arithmetic with bare prompts, and its held-out test sets.

An item is ``"47+38="`` -> ``"85"`` (or ``"4.7+3.8="`` -> ``"8.5"``): two operands of `digits`
significant digits each, written most-significant digit first (DEL's place weights assume it).
A share `decimal_share` of the items writes both operands and the answer with `decimal_places`
digits after the point (the same number of significant digits, so "4.7" is as long as "47").
Subtraction keeps the larger operand first unless `allow_negative`, so answers are non-negative.

The prompt is bare (no Alpaca template): for a character-level model the template would be ~150
tokens of context around a 3-token answer and would cost ten times the compute for nothing.

Held-out sets (all drawn from `test_seed`, independent of the training seed, so every run of a
comparison is scored on the same items; each holds distinct questions, none of them in training):

* ``in_distribution``: the training distribution;
* ``longer``: every operand has one more significant digit than any training operand;
* ``decimals``: decimal items only, with one more decimal place than training (same integer part).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from decimal import Decimal
from typing import Annotated, Any

from annotated_types import Ge, Le

from numloss.data.examples import Example

TEST_SETS = ("in_distribution", "longer", "decimals")
#: no count of a comparison (set sizes, batch sizes, steps between checks, seeds) is larger
LARGEST = 10**9
Count = Annotated[int, Ge(1), Le(LARGEST)]
#: a test seed, or a count that may be 0
Natural = Annotated[int, Ge(0), Le(LARGEST)]
#: operands longer than this are no task a model is trained on, and 10**digits would not finish
Digits = Annotated[int, Ge(0), Le(100)]
Share = Annotated[float, Ge(0), Le(1)]


@dataclass(frozen=True)
class TaskExample(Example):
    """An `Example` whose prompt is its instruction as is (``"47+38="``), without a template."""

    @property
    def prompt(self) -> str:
        return self.instruction


@dataclass(frozen=True)
class Distribution:
    """Which items one set draws: operations, operand length, decimal share and places."""

    operations: str = "+-"
    digits: Annotated[int, Ge(1), Le(100)] = 2
    decimal_share: Share = 0.5
    decimal_places: Digits = 1
    allow_negative: bool = False
    #: draw operands with exactly `digits` significant digits (no shorter ones); held-out "longer"
    exact_length: bool = False

    def check(self, where: str = "task.train") -> None:
        """Raise ValueError naming the field when the distribution cannot generate items (the
        field types and ranges are checked before, numloss.compare.tasks.checked)."""
        if not self.operations or set(self.operations) - set("+-*"):
            raise ValueError(
                f"{where}.operations must be a non-empty string of + - *, got {self.operations!r}"
            )
        if self.decimal_share > 0 and not 1 <= self.decimal_places:
            raise ValueError(
                f"{where}.decimal_places must be >= 1 when decimal_share > 0, got"
                f" {self.decimal_places}"
            )
        if self.decimal_share > 0 and self.decimal_places > self.digits:
            raise ValueError(
                f"{where}.decimal_places ({self.decimal_places}) cannot exceed digits"
                f" ({self.digits}): digits counts every significant digit of an operand, decimals"
                " included"
            )

    def universe_size(self) -> int:
        """How many distinct questions this distribution can produce (an upper bound)."""
        low = 10 ** (self.digits - 1) if self.exact_length else 0
        pairs = (10**self.digits - low) ** 2
        formats = (self.decimal_share < 1.0) + (self.decimal_share > 0.0)
        return pairs * len(set(self.operations)) * formats

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """One (question, answer) pair, e.g. ("47+38=", "85")."""
        op = rng.choice(self.operations)
        places = self.decimal_places if rng.random() < self.decimal_share else 0
        low = 10 ** (self.digits - 1) if self.exact_length else 0
        a, b = rng.randrange(low, 10**self.digits), rng.randrange(low, 10**self.digits)
        if op == "-" and b > a and not self.allow_negative:
            a, b = b, a
        # exact arithmetic on scaled integers: no float noise in the answers
        result = a + b if op == "+" else a - b if op == "-" else a * b
        question = f"{_written(a, places)}{op}{_written(b, places)}="
        return question, _written(result, 2 * places if op == "*" else places)


def _written(scaled: int, places: int) -> str:
    """`scaled` / 10**places with exactly `places` decimals ("85", "8.5", "-0.3", "10.0")."""
    return format(Decimal(scaled).scaleb(-places), f".{places}f")


@dataclass(frozen=True)
class ArithmeticTask:
    """The training distribution, the sizes of the sets and the seed of the held-out sets."""

    train: Distribution = Distribution()
    train_size: Count = 20000
    test_size: Count = 2000
    test_seed: Natural = 1234

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for the report: the training distribution and the set sizes."""
        t = self.train
        return (
            f"operations {t.operations!r}, {t.digits} significant digits per operand, "
            f"{100 * t.decimal_share:.0f}% of items with {t.decimal_places} decimal place(s); "
            f"{self.train_size} training items per seed, {self.test_size} items per held-out set"
        )

    def check(self) -> None:
        """Raise ValueError when the sets cannot be drawn (too small a universe)."""
        for name, distribution in self.test_distributions().items():
            distribution.check(f"task.{name}")
            if distribution.universe_size() < self.test_size:
                raise ValueError(
                    f"task: the {name} set needs {self.test_size} distinct questions but its"
                    f" distribution has at most {distribution.universe_size()}; lower"
                    " task.test_size or raise task.train.digits"
                )
        free = self.train.universe_size() - self.test_size
        if free < max(1, self.test_size // 2):
            raise ValueError(
                f"task: only {free} questions remain for training once the {self.test_size}"
                " in-distribution test questions are held out; raise task.train.digits or lower"
                " task.test_size"
            )

    def test_distributions(self) -> dict[str, Distribution]:
        """The distribution of each held-out set (see the module docstring)."""
        train = self.train
        return {
            "in_distribution": train,
            "longer": replace(train, digits=train.digits + 1, exact_length=True),
            "decimals": replace(
                train,
                digits=train.digits + 1,
                decimal_share=1.0,
                decimal_places=train.decimal_places + 1,
            ),
        }

    def test_sets(self) -> dict[str, list[TaskExample]]:
        """The held-out sets, `test_size` distinct questions each; the same for every training
        seed."""
        sets: dict[str, list[TaskExample]] = {}
        for name, distribution in self.test_distributions().items():
            rng = random.Random(f"numloss-compare-test-{name}-{self.test_seed}")
            sets[name] = _distinct(distribution, rng, self.test_size, exclude=set())
        return sets

    def check_set(self, size: int) -> list[TaskExample]:
        """`size` distinct in-distribution questions for the checks during training
        (numloss.compare.learning): drawn from their own stream of `test_seed`, none of them in a
        held-out test set; the runner keeps them out of training too."""
        tests = {e.instruction for items in self.test_sets().values() for e in items}
        if self.train.universe_size() - len(tests) < 2 * size:
            raise ValueError(
                f"learning.slice_size {size}: too few questions left beside the test sets; lower it"
                " or raise task.train.digits"
            )
        rng = random.Random(f"numloss-compare-check-{self.test_seed}")
        return _distinct(self.train, rng, size, exclude=tests)

    def train_set(self, seed: int, exclude: Iterable[str] | None = None) -> list[TaskExample]:
        """`train_size` training examples for `seed` (repeats allowed), none of whose questions is
        in a held-out set (`exclude`: the held-out questions; by default those of `test_sets()`)."""
        if exclude is None:
            exclude = {e.instruction for items in self.test_sets().values() for e in items}
        held_out = set(exclude)
        rng = random.Random(f"numloss-compare-train-{seed}")
        items: list[TaskExample] = []
        while len(items) < self.train_size:
            question, answer = self.train.sample(rng)
            if question not in held_out:
                items.append(TaskExample(instruction=question, output=answer, answer=answer))
        return items


def _distinct(
    distribution: Distribution, rng: random.Random, n: int, exclude: set[str]
) -> list[TaskExample]:
    seen = set(exclude)
    items: list[TaskExample] = []
    tries = 0
    while len(items) < n:
        tries += 1
        if tries > 200 * n:
            raise ValueError(
                f"could not draw {n} distinct questions from {distribution}; lower task.test_size"
            )
        question, answer = distribution.sample(rng)
        if question in seen:
            continue
        seen.add(question)
        items.append(TaskExample(instruction=question, output=answer, answer=answer))
    return items
