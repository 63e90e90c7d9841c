"""Reading text files (`read_utf8`: one line naming the file, line and column, raised as the
caller's error type) and strict JSON (`jsonable`: NaN and inf to null).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def read_utf8(path: Path, error: type[Exception] = ValueError) -> str:
    """The text of `path` (a leading UTF-8 byte-order mark dropped); a byte that is not UTF-8, a
    folder or an unreadable file is one `error` naming the file (and for bad bytes the line and
    column)."""
    if path.is_dir():
        raise error(f"{path}: is a folder, not a file")
    try:
        data = path.read_bytes()
    except OSError as problem:
        raise error(f"{path}: cannot read it ({problem.strerror or problem})") from None
    try:
        # a byte-order mark (Windows editors write one) is no text
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as problem:
        line = data.count(b"\n", 0, problem.start) + 1
        column = problem.start - (data.rfind(b"\n", 0, problem.start) + 1) + 1
        raise error(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[problem.start]:02x} at column {column}); "
            "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object stored at `path`; None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (json keeps the last silently); `key` is the key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"field {key!r} is given twice; keep one")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads(..., object_pairs_hook=unique_keys)`: the object, or DuplicateKeyError for a
    key given twice (a record whose second "output" silently replaced the first)."""
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise DuplicateKeyError(key)
        record[key] = value
    return record


def jsonable(value: Any) -> Any:
    """`value` with every NaN and inf float replaced by None, through dicts, lists and tuples
    (tuples become lists, as JSON writes them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


@contextmanager
def utf8_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """`path` as a str that encodes as UTF-8, for libraries written in Rust (tokenizers) that
    cannot take anything else. Under LC_ALL=C with Python's UTF-8 mode off, a name typed as UTF-8
    (`runs/é`) reaches Python as surrogate escapes; tokenizers then fails to save or load it. Such a
    path is given as /proc/self/fd/N[/NAME] through its folder (or its parent folder, for a NAME
    still to be made), opened for the block; any other path is yielded unchanged."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield text
        return
    folder, name = (text, "") if os.path.isdir(text) else os.path.split(text)
    try:
        name.encode("utf-8")
        fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
    except (UnicodeEncodeError, OSError):  # no open folder helps: the library says what fails
        yield text
        return
    try:
        yield f"/proc/self/fd/{fd}" + (f"/{name}" if name else "")
    finally:
        os.close(fd)
