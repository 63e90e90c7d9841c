"""README.md and docs/*.md held to the code: every list a page gives of the code's names (the loss
output's fields, log.csv's columns, the progress bar's keys, the files `numloss eval` writes, the
fields of the results and settings it shows) is derived here from the code, and a page that
leaves one out or names one that does not exist fails."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def pages() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in DOCS}


def listed(text: str, lead: str) -> list[list[str]]:
    """For each `lead` in `text`, the `backticked` names after it up to the end of its list: the
    first ".", ";" or ")" outside backticks."""
    lists = []
    for match in re.finditer(re.escape(lead), text):
        names, rest = [], text[match.end():]
        while rest:
            tick, stop = rest.find("`"), min((i for i in (rest.find(c) for c in ".;)") if i >= 0), default=len(rest))
            if tick < 0 or stop < tick:
                break
            end = rest.index("`", tick + 1)
            names.append(rest[tick + 1:end])
            rest = rest[end + 1:]
        lists.append(names)
    return lists


def test_every_list_of_the_loss_outputs_fields_is_complete():
    from numloss.losses.base import NumericLossOutput

    fields = [f.name for f in dataclasses.fields(NumericLossOutput)]
    found = []
    for page, text in pages().items():
        for match in re.finditer(r"NumericLossOutput(?:\(|: )([\w, ]+)", text):
            found.append(page)
            assert [n.strip() for n in match.group(1).split(",")] == fields, f"{page}: {match.group(0)!r} is not {fields}"
    assert {"README.md", "docs/losses.md"} <= set(found)


def test_log_csv_columns_and_the_progress_bars_keys_are_the_codes():
    from numloss.train.callbacks import PROGRESS_KEYS
    from numloss.train.folder import CSV_COLUMNS

    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    assert listed(text, "log.csv columns: ") == [list(CSV_COLUMNS)]
    assert listed(text, "The progress bar shows ") == [list(PROGRESS_KEYS)]


def test_numloss_eval_help_lists_every_file_it_writes_and_no_other():
    from numloss.evaluate.cli import build_parser
    from numloss.evaluate.report import REPORT_FILES

    text = build_parser().format_help()
    files = {*REPORT_FILES, "items.jsonl"}
    assert all(name in text for name in files), [name for name in files if name not in text]
    assert set(re.findall(r"(?<![/\w])[a-z_]+\.(?:json|jsonl|md|png)\b", text)) <= files


def classes() -> dict[str, type]:
    """The result and settings classes the pages show, by name."""
    from numloss.evaluate.metrics import PlaceAccuracy
    from numloss.evaluate.report import BenchmarkScore, EvalReport
    from numloss.evaluate.runner import ItemResult
    from numloss.evaluate.sandbox import Isolation, ProgramResult, SandboxLimits
    from numloss.losses.base import NumericLossOutput

    return {c.__name__: c for c in (ProgramResult, Isolation, SandboxLimits, NumericLossOutput, BenchmarkScore,
                                    EvalReport, ItemResult, PlaceAccuracy)}


@pytest.mark.parametrize("name", ["ProgramResult", "Isolation", "SandboxLimits", "NumericLossOutput", "BenchmarkScore",
                                  "EvalReport", "ItemResult", "PlaceAccuracy"])
def test_the_pages_name_only_fields_that_exist(name):
    """`Class.attr` in any page names a field, property or method of Class; `Class(field=...)` (a
    constructor call or a repr) a field."""
    cls = classes()[name]
    fields = {f.name for f in dataclasses.fields(cls)}
    known = fields | set(dir(cls))
    for page, text in pages().items():
        for match in re.finditer(rf"\b{name}\.(\w+)", text):
            assert match.group(1) in known, f"{page}: {match.group(0)} is no attribute of {name}"
        for match in re.finditer(rf"\b{name}\(([^()]*)\)", text):
            for field in re.findall(r"(\w+)=", match.group(1)):
                assert field in fields, f"{page}: {name}({field}=...) is no field of {name} ({sorted(fields)})"


def test_each_name_is_imported_from_one_module_across_the_pages():
    """A reader who copies two snippets gets one helper, not the same name from two modules."""
    sources: dict[str, set[str]] = {}
    for page, text in pages().items():
        for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("numloss"):
                    for alias in node.names:
                        sources.setdefault(alias.name, set()).add(f"{node.module} ({page})")
    twice = {name: sorted(where) for name, where in sources.items() if len({w.split()[0] for w in where}) > 1}
    assert not twice, twice
