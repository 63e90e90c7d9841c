"""JSON files of the comparison: written whole or not at all, strict JSON (no NaN).

`write_json_atomic` (run results, records, the report's results.json); shared by the runner and
the report, which import this module and not each other for it (NaN to null: numloss.textio).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, payload: Any, compact: bool = False) -> None:
    """`payload` as JSON at `path`, via a temporary file renamed into place; `compact`: no
    whitespace and sorted keys (the records kept in git: small, stable diffs)."""
    tmp = path.with_name(path.name + ".tmp")
    if compact:
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=_json_default)
    else:
        text = json.dumps(payload, indent=1, default=_json_default)
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


__all__ = ["write_json_atomic"]
