"""lm-evaluation-harness `--log_samples` files (`samples_<task>_<date>.jsonl`) as inputs of
`score_outputs`: the benchmark from the task name, each sample's `doc` parsed with the benchmark's
record parser and matched to our item by id, then by question, else the doc's own item; the raw
response `resps[0][0]` is scored (numloss reads the answer, not lm-eval's filter). Details:
docs/evaluation.md, "Scoring other harnesses' outputs".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from numloss.evaluate.benchmarks import (
    LETTERS,
    MMLU_MATH_SUBJECTS,
    Benchmark,
    BenchmarkError,
    Item,
    letter_of,
    parse_records,
)

SAMPLE_FIELDS = ("doc_id", "doc", "resps")


def refuse_results_file(path: str | Path) -> None:
    """BenchmarkError when `path` is lm-eval's aggregated results file (`results_<date>.json`, one
    JSON object of per-task scores, no model outputs), naming the samples files to give instead."""
    path = Path(path)
    named = re.fullmatch(r"results(?:_(.+))?\.json", path.name)
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace").lstrip()
    except OSError:
        return
    # lm-eval writes {"results": {...}, "groups": ..., "configs": ..., "versions": ...}; a samples
    # file is one JSON object per line, each with doc_id and resps
    by_content = head.startswith("{") and '"results"' in head[:300] and '"doc_id"' not in head
    if not (named and head.startswith("{")) and not by_content:
        return
    stamp = named.group(1) if named else None
    beside = sorted(path.parent.glob(f"samples_*_{stamp}.jsonl")) if stamp else []
    beside = beside or sorted(path.parent.glob("samples_*.jsonl"))
    more = f" (and {len(beside) - 6} more)" if len(beside) > 6 else ""
    instead = ", ".join(map(str, beside[:6])) + more if beside else "samples_<task>_<date>.jsonl"
    none = "" if beside else " (none is beside this one: rerun lm_eval with --log_samples)"
    raise BenchmarkError(
        f"{path}: this is lm-evaluation-harness's aggregated results file (scores per task, no"
        " model outputs); give the per-task samples file lm_eval --log_samples writes beside it"
        f" instead: {instead}{none}"
    )


def is_samples(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `rows` look like lm-eval samples (doc_id, doc, resps; no numloss `benchmark`)."""
    return bool(rows) and all(
        isinstance(r, Mapping) and all(k in r for k in SAMPLE_FIELDS) and "benchmark" not in r
        for r in rows
    )


def task_of(path: str | Path) -> str | None:
    """The task name in an lm-eval samples file name
    (`samples_gsm8k_2024-05-01T10-00-00.123.jsonl`)."""
    match = re.match(r"samples_(.+?)_(\d{4}-\d{2}-\d{2}T[\d\-.:]+)\.jsonl$", Path(path).name)
    return match.group(1) if match else None


def benchmark_of_task(task: str) -> str | None:
    """numloss's benchmark for an lm-eval task name, None when it is not one of the seven."""
    t = task.lower()
    if t.startswith("gsm8k"):
        return "gsm8k"
    if t.startswith(("minerva_math", "hendrycks_math", "math_")) or t == "math":
        return "math"
    if t.startswith("mmlu") and any(s in t for s in MMLU_MATH_SUBJECTS):
        return "mmlu_math"
    if "sat_math" in t or "sat-math" in t:
        return "sat"
    if "aqua" in t:
        return "aqua"
    if t.startswith("svamp"):
        return "svamp"
    if t.startswith("simuleq"):
        return "simuleq"
    return None


@dataclass(frozen=True)
class Sample:
    """One lm-eval sample mapped to a numloss item."""

    item: Item
    output: str
    doc_id: str
    # "id" (our file's item with that id), "question" (found by its question), "doc" (made from the
    # doc)
    matched: str


def _text(sample: Mapping[str, Any], where: str) -> str:
    resps = sample.get("resps")
    first = resps[0] if isinstance(resps, list) and resps else None
    text = first[0] if isinstance(first, list) and first else first
    if not isinstance(text, str):
        raise BenchmarkError(
            f"{where}: field 'resps' holds no generated text ({type(text).__name__}); only"
            " generate_until tasks (e.g. gsm8k, minerva_math, mmlu_flan_cot_zeroshot) can be"
            " scored"
        )
    return text


def _key(question: str) -> str:
    return " ".join(question.split())


def read_samples(
    rows: Sequence[Mapping[str, Any]], benchmark: str, source: str, ours: Benchmark | None
) -> list[Sample]:
    """Map lm-eval `rows` of `benchmark` to items (module doc); `ours` is our copy of the benchmark,
    if any."""
    by_id = {it.id: it for it in ours.items} if ours is not None else {}
    by_question = {_key(it.question): it for it in ours.items} if ours is not None else {}
    out, seen = [], set()
    for n, row in enumerate(rows, 1):
        where = f"{source}:{n}"
        # lm-eval writes one sample per document and filter: same text
        if str(row.get("doc_id")) in seen:
            continue
        seen.add(str(row.get("doc_id")))
        doc = row.get("doc")
        if not isinstance(doc, Mapping):
            raise BenchmarkError(f"{where}: field 'doc' must be the dataset record (a JSON object)")
        doc_id = str(row["doc_id"])
        try:
            made = parse_records(benchmark, [doc], where, [where]).items[0]
        except BenchmarkError as error:
            raise BenchmarkError(
                f"{error} (lm-eval sample doc_id {doc_id}: its doc is not a {benchmark} record; "
                "name the benchmark with benchmark= / --outputs-benchmark)"
            ) from None
        item, matched = made, "doc"
        if doc_id in by_id and _key(by_id[doc_id].question) == _key(made.question):
            item, matched = by_id[doc_id], "id"
        elif _key(made.question) in by_question:
            item, matched = by_question[_key(made.question)], "question"
        else:
            item = replace(made, id=f"lm-eval:{doc_id}")
        _check_target(row.get("target"), item, where)
        out.append(Sample(item, _text(row, where), doc_id, matched))
    return out


def _check_target(target: Any, item: Item, where: str) -> None:
    """Refuse a sample whose `target` names another answer than the item's gold (a wrong match)."""
    from numloss.evaluate.answers import number_matches, plain_exact

    if target is None or isinstance(target, (list, dict)):
        return
    if item.kind == "choice":
        try:  # a letter or an option's index; anything else names no option to check
            given = letter_of(target, len(LETTERS), where, "target")
        except BenchmarkError:
            return
        if given != item.answer.upper():
            raise BenchmarkError(
                f"{where}: lm-eval target {target!r} is not the gold {item.answer!r} of {item.id}"
            )
    elif item.kind == "number":
        text = str(target).split("####")[-1]
        value = plain_exact(text)
        if value is not None and not number_matches(value, item.answer):
            raise BenchmarkError(
                f"{where}: lm-eval target {str(target)[-40:]!r} is not the gold {item.answer!r} of"
                f" {item.id}"
            )
