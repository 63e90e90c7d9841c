"""The task of a comparison config, by its `kind`: one place that knows every task module."""

from __future__ import annotations

from typing import Any

from numloss.compare.arith_words import ArithmeticWordTask
from numloss.compare.task import ArithmeticTask
from numloss.compare.word_task import WordProblemTask


def task_from_dict(mapping: dict[str, Any] | None) -> Any:
    """The task of a comparison config: `kind: word_problems` (numloss.compare.word_task),
    `kind: arith_words` (numloss.compare.arith_words) or the arithmetic task (the default)."""
    mapping = dict(mapping or {})
    kind = mapping.get("kind", "arithmetic")
    if kind == "word_problems":
        return WordProblemTask.from_dict(mapping)
    if kind == "arith_words":
        return ArithmeticWordTask.from_dict(mapping)
    mapping.pop("kind", None)
    return ArithmeticTask.from_dict(mapping)
