"""The comparison tasks (arithmetic, its multiplication testbed, arithmetic word problems): seeded,
reproducible, correct answers, held-out sets fixed and disjoint from training."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from numloss.compare.arith_words import ArithmeticWordTask
from numloss.compare.config import load_compare_config
from numloss.compare.task import TEST_SETS, ArithmeticTask
from numloss.compare.tasks import task_from_dict
from numloss.evaluate.metrics import numeric_distance, place_accuracy

TASKS = {
    "arithmetic": lambda: ArithmeticTask(train_size=3000, test_size=500),
    "multiplication": lambda: replace(load_compare_config(Path(__file__).resolve().parents[1] / "configs" / "compare-mul.yaml").task,
                                      train_size=3000),
    "arith_words": lambda: ArithmeticWordTask(answer_digits=3, test_size=300, train_size=500),
}


def _value(question: str) -> Decimal:
    a, op, b = re.fullmatch(r"([\d.]+)([+\-*])([\d.]+)=", question).groups()
    x, y = Decimal(a), Decimal(b)
    return x + y if op == "+" else x - y if op == "-" else x * y


@pytest.mark.parametrize("kind", TASKS)
def test_held_out_sets_are_fixed_distinct_and_never_trained_on(kind: str) -> None:
    task = TASKS[kind]()
    sets = task.test_sets()
    assert sets == replace(task, train_size=10).test_sets(), (
        "held-out sets depend only on test_seed and test_size, not on the training seed or size"
    )
    assert replace(task, test_seed=7).test_sets() != sets
    held: set[str] = set()
    for name, items in sets.items():
        questions = {e.instruction for e in items}
        assert len(questions) == len(items) == task.test_size, f"{name} repeats a question"
        held |= questions
    train = {seed: task.train_set(seed, exclude=held) for seed in (0, 1)}
    assert train[0] == task.train_set(0, exclude=held) and train[0] != train[1], "seeded and reproducible"
    for items in train.values():
        assert len(items) == task.train_size and not held & {e.instruction for e in items}


@pytest.mark.parametrize("kind", ["arithmetic", "multiplication"])
def test_answers_are_right_and_the_held_out_sets_go_beyond_training(kind: str) -> None:
    def digits(number: str) -> int:
        return len(number.replace(".", "").lstrip("0")) or 1

    task = TASKS[kind]()
    sets = task.test_sets()
    for item in [*task.train_set(0), *(e for items in sets.values() for e in items)]:
        assert Decimal(item.output) == _value(item.instruction), item
        decimals = item.instruction.split("+")[0].split("-")[0]
        places = len(decimals.split(".")[1]) if "." in decimals else 0
        written = len(item.output.split(".")[1]) if "." in item.output else 0
        assert written == places, f"{item}: the answer keeps the operands' decimal places"
        assert not item.output.startswith("-"), "subtraction keeps answers non-negative by default"
        assert item.prompt == item.instruction, "the prompt is the bare question ('4.7+3.8=')"
    assert set(sets) == set(TEST_SETS)
    held = {e.instruction for items in sets.values() for e in items}
    assert not held & {i.instruction for i in task.train_set(0)}, "by default training leaves out the held-out sets"
    train_operands = [op for i in task.train_set(0) for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert max(digits(o) for o in train_operands) == task.train.digits
    if task.train.exact_length:  # the multiplication testbed: both operands 10..99
        assert min(digits(o) for o in train_operands) == task.train.digits
    longer = [op for i in sets["longer"] for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert all(digits(o) == task.train.digits + 1 for o in longer)
    decimals = [op for i in sets["decimals"] for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert all(len(o.split(".")[1]) == task.train.decimal_places + 1 for o in decimals)
    share = sum("." in i.instruction for i in task.train_set(0)) / task.train_size
    assert abs(share - task.train.decimal_share) < 0.05


@pytest.mark.parametrize(("mapping", "message"), [
    ({"train": {"operations": "/"}}, "operations"),
    ({"train": {"digit": 2}}, "unknown key"),
    ({"train": {"digits": 1, "decimal_share": 0.0, "operations": "+"}, "test_size": 2000}, "distinct questions"),
    ({"train": {"digits": 1, "decimal_places": 2}}, "decimal_places"),
    ({"kind": "arith_words", "answer_digits": 1}, "answer_digits"),
    ({"kind": "arith_words", "digits": 3}, "unknown key"),
    ({"kind": "arith_words", "heldout_facts": "new"}, "heldout_facts: expected one of 'any', 'unseen'"),
])
def test_bad_task_is_a_clear_error(mapping: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        task_from_dict(mapping)


def test_a_longer_product_is_judged_at_the_golds_places_and_a_factor_ten_costs_ln_10() -> None:
    """The multiplication endpoints beyond tests/test_eval_metrics.py (alignment by place value, a
    missing answer, the signed-log MAE by hand)."""
    by_place = {e.place: (e.correct, e.total) for e in place_accuracy([12736.0, 736.0], ["2736", "2736"])}
    # 12736 is not punished at the ten-thousands 2736 lacks; 736 is wrong only at the thousands
    assert by_place == {3: (1, 2), 2: (2, 2), 1: (2, 2), 0: (2, 2)}
    assert numeric_distance([27360.0], [2736.0]).signed_log_mae == pytest.approx(math.log(27361 / 2737))
