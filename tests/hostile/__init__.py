"""Hostile programs for the sandbox: each ``*.py.in`` file tries one escape (its first line says
which); they are templates, hence not ``.py``.

The line after it, ``# expect: a|b``, lists the statuses the sandbox may report for it. Placeholders
``@NAME@`` are filled by the test with the evaluator's real paths, pids and ports, so that a
program aims at live targets; whether it got anywhere is judged from the host side (files,
listeners, processes), not from what it prints. A program prints ``ESCAPED`` when it sees that an
attempt worked, which the test also refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Hostile:
    name: str
    tries: str
    expect: frozenset[str]
    template: str

    def source(self, values: dict[str, str]) -> str:
        text = self.template
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        missing = sorted(set(re.findall(r"@[A-Z_]+@", text)))
        if missing:
            raise KeyError(f"{self.name}: no value for {missing}")
        return text


def load() -> list[Hostile]:
    """Every hostile program in this folder, sorted by name."""
    out = []
    for path in sorted(HERE.glob("*.py.in")):
        text = path.read_text()
        lines = text.splitlines()
        end = next((i for i, line in enumerate(lines) if line.startswith("# expect: ")), None)
        if not lines[0].startswith("# tries: ") or end is None:
            raise ValueError(f"{path}: must start with '# tries: ...' (may go on over comment lines), then '# expect: ...'")
        tries = " ".join(line.removeprefix("#").strip() for line in lines[:end]).removeprefix("tries: ")
        expect = frozenset(lines[end].removeprefix("# expect: ").strip().split("|"))
        out.append(Hostile(path.name.removesuffix(".py.in"), tries, expect, text))
    return out
