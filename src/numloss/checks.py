"""One checker for the values that cross a boundary: a public function's arguments, a command-line
option, a config key. Each `check_*` returns the value (normalised: an int, a float, a Path) or
raises one error whose message names the argument, says what is wrong and how to fix it, so the
API and the CLI refuse the same value with the same line.

Errors: `ArgumentTypeError` (the wrong kind of value: a string where a bool is wanted) and
`ArgumentError` (a value of the right kind out of range). Both are ValueErrors, so a command's
`except ValueError` turns either into its one line; the type error is also a TypeError, as Python
code expects of a wrong type. A bool is never an int or a float here, and a string is never a bool:
`overwrite="no"` is truthy, which is exactly the silent wrong run this module exists to refuse.

Pure Python: the torch-only core (losses, fused, patch) may import it.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")


class ArgumentError(ValueError):
    """A value out of range; the message names the argument and the fix."""


class ArgumentTypeError(ArgumentError, TypeError):
    """A value of the wrong type; the message names the argument and the fix."""


def _short(value: Any) -> str:
    # a huge integer: its size, not its 400 digits
    if isinstance(value, int) and abs(value) >= 10**40:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def shown(value: Any) -> str:
    """`value` as an error message quotes it: its repr (cut at 60 characters) and its type."""
    return f"{_short(value)} ({type(value).__name__})"


def check_bool(name: str, value: Any) -> bool:
    """`value` if it is True or False; anything else (the string "false", 0, None) is refused,
    because Python reads a non-empty string as true."""
    if isinstance(value, bool):
        return value
    raise ArgumentTypeError(f"{name} must be True or False, got {shown(value)}: pass a bool")


def _ranged(noun: str, low: Any, high: Any, low_open: bool = False, high_open: bool = False) -> str:
    """`noun` with its bounds, as the errors say it: "an integer >= 1 and <= 64"."""
    limits = [(">" if low_open else ">=", low), ("<" if high_open else "<=", high)]
    parts = [f"{op} {b if isinstance(b, int) else f'{b:g}'}" for op, b in limits if b is not None]
    return f"{noun} {' and '.join(parts)}".rstrip()


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """`value` as an int in [low, high] (either bound optional). A bool, a float (even 3.0), a
    string or NaN is refused: a count or a seed is written as an integer."""
    what = _ranged("an integer", low, high)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be {what}, got {shown(value)}: pass an int")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise ArgumentError(f"{name} must be {what}, got {_short(number)}: pass one in range")
    return number


def check_float(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """`value` as a finite float in the range (bounds optional, closed unless `*_open`). A bool, a
    string, NaN or an infinity is refused; an int is accepted and converted."""
    what = _ranged("a finite number", low, high, low_open, high_open)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be {what}, got {shown(value)}: pass a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        number = math.inf
    too_low = low is not None and (number < low or (low_open and number == low))
    too_high = high is not None and (number > high or (high_open and number == high))
    if not math.isfinite(number) or too_low or too_high:
        raise ArgumentError(f"{name} must be {what}, got {_short(value)}: pass one in range")
    return number


def check_choice(name: str, value: Any, choices: Iterable[T]) -> T:
    """`value` if it is one of `choices` (compared by ==, a bool never matching 1 or 0), else an
    error listing them."""
    options = list(choices)
    for option in options:
        if type(value) is type(option) and value == option:
            return option
    listed = ", ".join(repr(option) for option in options)
    raise ArgumentError(f"{name} must be one of {listed}, got {shown(value)}: pick one of those")


def check_type(name: str, value: Any, types: type | tuple[type, ...], what: str) -> Any:
    """`value` if it is an instance of `types`; else an error saying it must be `what` (e.g.
    "a transformers PreTrainedModel")."""
    allowed = types if isinstance(types, tuple) else (types,)
    if isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool)):
        return value
    raise ArgumentTypeError(f"{name} must be {what}, got {shown(value)}: pass {what}")


PathKind = Literal["file", "dir", "new_file", "new_dir", "any"]


def check_path(name: str, value: Any, kind: PathKind = "any") -> Path:
    """`value` (a str or os.PathLike) as a Path, checked for what the caller will do with it:
    "file" (must be an existing file), "dir" (an existing folder), "new_file" (may be missing but
    must not be a folder), "new_dir" (may be missing but must not be a file, nor lie under one),
    "any" (only the type)."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():
        raise ArgumentTypeError(
            f"{name} must be a path (a non-blank str or Path), got {shown(value)}: pass a path"
        )
    path = Path(value)
    if kind == "file":
        if path.is_dir():
            raise ArgumentError(f"{name}: {path} is a folder, not a file: pass a file")
        if not path.is_file():
            raise ArgumentError(f"{name}: {path} does not exist: pass an existing file")
    elif kind == "dir":
        if not path.is_dir():
            what = "is a file, not a folder" if path.exists() else "does not exist"
            raise ArgumentError(f"{name}: {path} {what}: pass an existing folder")
    elif kind == "new_file" and path.is_dir():
        raise ArgumentError(f"{name}: {path} is a folder, not a file: pass a file path")
    if kind in ("new_file", "new_dir"):
        for place in (path, *path.parents) if kind == "new_dir" else path.parents:
            if place.exists() and not place.is_dir():
                where = "" if place == path else f", so {path} cannot be made under it"
                raise ArgumentError(
                    f"{name}: {place} is a file, not a folder{where}: pass another path (or move"
                    " the file away)"
                )
            if place.exists():
                break
    return path
