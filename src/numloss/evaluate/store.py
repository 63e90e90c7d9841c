"""The per-item results file: JSON lines, appended batch by batch, read back to resume.

Each line is one item scored under one protocol (`runner.ItemResult.to_json()`), keyed by
(model, benchmark, protocol, id, settings): `settings` is a short hash of the generation settings
(prompt, stop strings, token limits, backend, dtype, program of thought), spelled out in
`generation`. A batch is written with one write, flushed and fsynced before the next batch starts,
so a kill loses at most the batch in flight. A torn last line (the kill came mid-write) is ignored
on reading and cut off before the next append; any other unreadable line is an error naming the
file and line. `--overwrite` rewrites the file without the records of this run's key (through a
temporary file and an atomic rename).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from numloss.evaluate.benchmarks import BenchmarkError

KEY_FIELDS = ("model", "benchmark", "protocol", "id", "settings")


def settings_key(settings: dict[str, Any]) -> str:
    """A short stable hash of the generation settings."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file; a torn last line is skipped, a bad line elsewhere is an error."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    torn_last = not text.endswith("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if torn_last and number == len(lines):
                break  # a write cut short by a kill: that item is redone
            raise BenchmarkError(f"{path}:{number}: not a JSON record ({error.msg}); fix or delete that line") from None
        if not isinstance(record, dict):
            raise BenchmarkError(f"{path}:{number}: expected a JSON object per line")
        records.append(record)
    return records


class ResultsFile:
    """Append-only per-item results (module doc)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def records(self) -> list[dict[str, Any]]:
        return read_lines(self.path)

    def _cut_torn_tail(self) -> None:
        if not self.path.is_file():
            return
        with open(self.path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            start = data.rfind(b"\n") + 1
            try:  # a whole record that only lacks its newline (a hand edit) is kept, and ended
                json.loads(data[start:].decode("utf-8"))
            except ValueError:
                f.truncate(start)  # torn by a kill mid-write: records() skipped it too
            else:
                f.seek(size)
                f.write(b"\n")

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write `records` as one batch: one write, flushed and fsynced."""
        lines = "".join(json.dumps(_safe(r), ensure_ascii=False) + "\n" for r in records)
        if not lines:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())

    def drop(self, matches: Callable[[dict[str, Any]], bool]) -> int:
        """Rewrite the file without the records `matches` selects; returns how many were dropped."""
        records = self.records()
        keep = [r for r in records if not matches(r)]
        if len(keep) == len(records):
            return 0
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text("".join(json.dumps(_safe(r), ensure_ascii=False) + "\n" for r in keep), encoding="utf-8")
        os.replace(tmp, self.path)
        return len(records) - len(keep)
