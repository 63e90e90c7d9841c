"""JSON files of the comparison: written whole or not at all, strict JSON (no NaN).

`write_json_atomic` (run results, records, the report's results.json); shared by the runner and
the report, which import this module and not each other for it (NaN to null: numloss.textio).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from numloss import atomic as _atomic


def write_json_atomic(path: Path, payload: Any, compact: bool = False) -> None:
    """`payload` as JSON at `path`, written whole or not at all (`numloss.atomic`: temporary file
    in the same folder, fsync, rename); `compact`: no whitespace and sorted keys (the records kept
    in git: small, stable diffs)."""
    _atomic.write_json_atomic(path, payload, compact=compact)


__all__ = ["write_json_atomic"]
