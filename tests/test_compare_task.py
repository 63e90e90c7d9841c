"""The comparison task: seeded, reproducible, correct answers, held-out sets disjoint from training."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from numloss.compare.task import TEST_SETS, ArithmeticTask, Distribution
from numloss.compare.tasks import task_from_dict


def _value(question: str) -> Decimal:
    a, op, b = re.fullmatch(r"([\d.]+)([+\-*])([\d.]+)=", question).groups()
    x, y = Decimal(a), Decimal(b)
    return x + y if op == "+" else x - y if op == "-" else x * y


@pytest.fixture(scope="module")
def task() -> ArithmeticTask:
    return ArithmeticTask(train_size=3000, test_size=500)


def test_answers_are_right_and_formatted(task: ArithmeticTask) -> None:
    for items in [task.train_set(0), *task.test_sets().values()]:
        for item in items:
            assert Decimal(item.output) == _value(item.instruction), item
            decimals = item.instruction.split("+")[0].split("-")[0]
            places = len(decimals.split(".")[1]) if "." in decimals else 0
            written = len(item.output.split(".")[1]) if "." in item.output else 0
            assert written == places, f"{item}: the answer keeps the operands' decimal places"
            assert not item.output.startswith("-"), "subtraction keeps answers non-negative by default"
            assert item.prompt == item.instruction, "the prompt is the bare question ('4.7+3.8=')"


def test_seeded_and_reproducible(task: ArithmeticTask) -> None:
    assert task.train_set(0) == ArithmeticTask(train_size=3000, test_size=500).train_set(0)
    assert task.train_set(0) != task.train_set(1)
    assert task.test_sets() == ArithmeticTask(train_size=10, test_size=500).test_sets(), (
        "held-out sets depend only on test_seed and test_size, not on the training seed or size"
    )
    assert ArithmeticTask(test_size=500, test_seed=7).test_sets() != task.test_sets()


def test_held_out_sets_distinct_and_disjoint_from_training(task: ArithmeticTask) -> None:
    sets = task.test_sets()
    assert set(sets) == set(TEST_SETS)
    held_out = set()
    for name, items in sets.items():
        questions = [i.instruction for i in items]
        assert len(questions) == task.test_size
        assert len(set(questions)) == len(questions), f"{name} repeats a question"
        held_out |= set(questions)
    for seed in (0, 1):
        train = {i.instruction for i in task.train_set(seed)}
        assert not train & held_out


def test_longer_and_decimals_go_beyond_training(task: ArithmeticTask) -> None:
    def digits(number: str) -> int:
        return len(number.replace(".", "").lstrip("0")) or 1

    train_operands = [op for i in task.train_set(0) for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert max(digits(o) for o in train_operands) == task.train.digits
    sets = task.test_sets()
    longer = [op for i in sets["longer"] for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert all(digits(o) == task.train.digits + 1 for o in longer)
    decimals = [op for i in sets["decimals"] for op in re.split(r"[+\-*=]", i.instruction) if op]
    assert all(len(o.split(".")[1]) == task.train.decimal_places + 1 for o in decimals)
    share = sum("." in i.instruction for i in task.train_set(0)) / task.train_size
    assert abs(share - task.train.decimal_share) < 0.05


def test_bad_task_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="operations"):
        task_from_dict({"train": {"operations": "/"}})
    with pytest.raises(ValueError, match="unknown key"):
        task_from_dict({"train": {"digit": 2}})
    with pytest.raises(ValueError, match="distinct questions"):
        task_from_dict({"train": {"digits": 1, "decimal_share": 0.0, "operations": "+"}, "test_size": 2000})
    with pytest.raises(ValueError, match="decimal_places"):
        Distribution(digits=1, decimal_places=2).check("task.train")


def test_the_multiplication_testbed_draws_two_digit_products() -> None:
    from pathlib import Path

    from numloss.compare.config import load_compare_config

    task = load_compare_config(Path(__file__).resolve().parents[1] / "configs" / "compare-mul.yaml").task
    sets = task.test_sets()
    held_out = {e.instruction for items in sets.values() for e in items}
    train = task.train_set(0, exclude=held_out)[:3000]
    for item in train + sets["in_distribution"]:
        a, b = re.fullmatch(r"(\d+)\*(\d+)=", item.instruction).groups()
        assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99, item
        assert item.output == str(int(a) * int(b)) and 3 <= len(item.output) <= 4, item
    assert not {e.instruction for e in train} & held_out
    assert len({e.instruction for e in sets["in_distribution"]}) == 2000
