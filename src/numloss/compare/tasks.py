"""The task of a comparison config, by its `kind` (one place that knows every task module), and
the one check of a config section against its dataclass (`checked`)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from numloss.compare.arith_words import ArithmeticWordTask
from numloss.compare.task import ArithmeticTask
from numloss.compare.word_task import WordProblemTask
from numloss.config import ConfigError, check_value

KINDS = {
    "arithmetic": ArithmeticTask,
    "word_problems": WordProblemTask,
    "arith_words": ArithmeticWordTask,
}


def refuse_unknown(where: str, given: Any, known: list[str]) -> None:
    """A one-line ConfigError if `given` (a mapping's keys) holds a key not in `known`."""
    if unknown := sorted(set(given) - set(known)):
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )


def checked(klass: type, values: Any, where: str) -> Any:
    """Dataclass `klass` built from the mapping `values` (config section `where`): unknown keys
    refused, each value checked against its field's type and range (the field's Annotated hint,
    `numloss.config.check_value`: strict types, finite numbers; a list where a tuple is wanted), a
    nested dataclass in turn; then the object's own `check()` (rules across fields). Every problem
    is a ConfigError of one line naming the key, before anything trains."""
    fields = [f.name for f in dataclasses.fields(klass)]
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a mapping of {', '.join(fields)}, got {values!r}")
    refuse_unknown(where, values, fields)
    hints = typing.get_type_hints(klass, include_extras=True)
    kwargs = {}
    for key, value in values.items():
        hint, name = hints[key], f"{where}.{key}"
        if dataclasses.is_dataclass(hint):
            kwargs[key] = checked(hint, {} if value is None else value, name)
            continue
        if typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = check_value(name, value, hint)
    built = klass(**kwargs)
    if hasattr(built, "check"):
        built.check()
    return built


def task_from_dict(mapping: dict[str, Any] | None) -> Any:
    """The task of a comparison config: `kind: word_problems` (numloss.compare.word_task),
    `kind: arith_words` (numloss.compare.arith_words) or the arithmetic task (the default)."""
    mapping = {} if mapping is None else mapping
    kind = mapping.get("kind", "arithmetic") if isinstance(mapping, dict) else "arithmetic"
    if kind not in KINDS:
        raise ConfigError(f"task.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "arithmetic" and isinstance(mapping, dict):
        mapping = {k: v for k, v in mapping.items() if k != "kind"}
    return checked(KINDS[kind], mapping, "task")
