"""JSON files of the comparison: written whole or not at all, strict JSON (no NaN).

`write_json_atomic` (run results, records, the report's results.json) and `jsonable`; shared by
the runner and the report, which import this module and not each other for it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from numloss import atomic as _atomic


def write_json_atomic(path: Path, payload: Any, compact: bool = False) -> None:
    """`payload` as JSON at `path`, written whole or not at all (`numloss.atomic`: temporary file
    in the same folder, fsync, rename); `compact`: no whitespace and sorted keys (the records kept
    in git: small, stable diffs)."""
    _atomic.write_json_atomic(path, payload, compact=compact)


def jsonable(value: Any) -> Any:
    """NaN and inf as null (strict JSON), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


__all__ = ["write_json_atomic", "jsonable"]
