"""Evaluation results as one summary dict, written as JSON, Markdown and PNG plots.

`summarize` turns per-item results (and optional teacher-forced digit statistics) into the summary;
`write_report` writes into an output folder:

- `results.json`: the summary;  `report.md`: the same as tables;
- `predictions/<benchmark>.jsonl`: every item, its outputs, program status, prediction;
- `accuracy.png` (per benchmark and mACC), `digit_entropy.png` (histogram of teacher-forced digit
  entropies), `place_accuracy.png` (generated answers and teacher-forced digits, by place).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from numloss.evaluate.answers import plain_number
from numloss.evaluate.metrics import (
    DigitStats,
    PlaceAccuracy,
    accuracy,
    entropy_histogram,
    macc,
    numeric_distance,
    place_accuracy,
)
from numloss.evaluate.runner import ItemResult

DECIMAL = re.compile(r"-?\d+(\.\d+)?")


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _places(entries: Sequence[PlaceAccuracy]) -> list[dict[str, Any]]:
    return [{"place": e.place, "correct": e.correct, "total": e.total, "accuracy": e.accuracy} for e in entries]


def benchmark_summary(results: Sequence[ItemResult], digits: DigitStats | None = None) -> dict[str, Any]:
    """Accuracy, protocol counts, numeric distance and place accuracy of one benchmark."""
    golds, preds, place_golds, place_preds = [], [], [], []
    for r in results:
        gold = plain_number(r.gold) if r.kind != "choice" else None
        if gold is not None:
            golds.append(gold)
            preds.append(r.value)
            if DECIMAL.fullmatch(r.gold.strip()):  # places are defined for decimals, not "\frac{5}{6}"
                place_golds.append(r.gold.strip())
                place_preds.append(r.value)
    summary: dict[str, Any] = {
        "accuracy": accuracy([r.correct for r in results]),
        "count": len(results),
        "correct": sum(r.correct for r in results),
        "answered": sum(bool(r.prediction) for r in results),
        "styles": dict(Counter(r.style for r in results)),
        "program_status": dict(Counter(r.program_status for r in results if r.program_status)),
    }
    if golds:
        summary["numeric_distance"] = asdict(numeric_distance(preds, golds))
    if place_golds:
        summary["place_accuracy"] = _places(place_accuracy(place_preds, place_golds))
    if digits is not None:
        counts, edges = entropy_histogram(digits.entropies)
        summary["digit_stats"] = {
            "accuracy": digits.accuracy,
            "mean_entropy": digits.mean_entropy,
            "count": digits.count,
            "histogram": {"counts": counts, "edges": edges},
            "per_place": _places(digits.per_place),
        }
    return summary


def summarize(
    results: Mapping[str, Sequence[ItemResult]],
    digit_stats: Mapping[str, DigitStats] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole evaluation: per-benchmark summaries, mACC, and `extra` (model, settings, timing)."""
    per = {name: benchmark_summary(rs, (digit_stats or {}).get(name)) for name, rs in results.items()}
    out: dict[str, Any] = dict(extra or {})
    out["benchmarks"] = per
    out["macc"] = macc({n: s["accuracy"] for n, s in per.items()})
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _num(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown(summary: Mapping[str, Any]) -> str:
    """The summary as Markdown tables."""
    lines = [f"# Evaluation of {summary.get('model', 'a model')}", ""]
    lines += ["| benchmark | items | accuracy % | answered | PoT / CoT / PoT+CoT | MAE | signed-log MAE | digit acc % (TF) | digit entropy (TF, nats) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary["benchmarks"].items():
        styles = s["styles"]
        dist = s.get("numeric_distance") or {}
        digits = s.get("digit_stats") or {}
        lines.append(
            f"| {name} | {s['count']} | {_pct(s['accuracy'])} | {s['answered']} | "
            f"{styles.get('pot', 0)} / {styles.get('cot', 0)} / {styles.get('pot+cot', 0)} | "
            f"{_num(dist.get('mae'))} | {_num(dist.get('signed_log_mae'))} | "
            f"{_pct(digits.get('accuracy'))} | {_num(digits.get('mean_entropy'))} |"
        )
    lines += ["", f"**mACC: {_pct(summary['macc'])}%** (mean of the per-benchmark accuracies)", ""]
    for name, s in summary["benchmarks"].items():
        if s.get("program_status"):
            status = ", ".join(f"{k} {v}" for k, v in sorted(s["program_status"].items()))
            lines.append(f"- {name}: programs run: {status}")
        if s.get("place_accuracy"):
            cells = " ".join(f"{e['place']}:{_pct(e['accuracy'])}" for e in s["place_accuracy"])
            lines.append(f"- {name}: generated-answer accuracy by place (place:%): {cells}")
    isolation = summary.get("isolation")
    if isolation:  # how model-written programs ran (docs/sandbox.md)
        used = "" if isolation.get("program_of_thought", True) else " (no program ran: every item used chain of thought)"
        lines += ["", f"Program sandbox: {isolation['mode']}{used}: {isolation.get('detail', '')}"]
    generation = summary.get("generation")
    if generation:
        lines += ["", f"Generation: {generation.get('tokens', 0)} tokens in {_num(generation.get('seconds'), 1)} s "
                  f"({_num(generation.get('tokens_per_second'), 1)} tokens/s); wall time "
                  f"{_num(summary.get('wall_seconds'), 1)} s."]
    return "\n".join(lines) + "\n"


def _plots(summary: Mapping[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    per = summary["benchmarks"]
    names = list(per) + ["mACC"]
    values = [100 * (per[n]["accuracy"] if not math.isnan(per[n]["accuracy"]) else 0) for n in per]
    values.append(100 * (summary["macc"] if not math.isnan(summary["macc"]) else 0))
    fig, ax = plt.subplots(figsize=(max(4, 1.1 * len(names)), 3.2))
    ax.bar(names, values, color=["#4c72b0"] * len(per) + ["#dd8452"])
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Accuracy per benchmark")
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=100)
    plt.close(fig)
    written.append(out / "accuracy.png")

    with_digits = {n: s["digit_stats"] for n, s in per.items() if s.get("digit_stats", {}).get("count")}
    if with_digits:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for name, d in with_digits.items():
            edges, counts = d["histogram"]["edges"], d["histogram"]["counts"]
            total = max(1, sum(counts))
            ax.stairs([c / total for c in counts], edges, label=f"{name} (mean {d['mean_entropy']:.2f})")
        ax.set_xlabel("entropy of the 10-digit distribution (nats; max ln 10)")
        ax.set_ylabel("fraction of digits")
        ax.set_title("Teacher-forced digit entropy")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "digit_entropy.png", dpi=100)
        plt.close(fig)
        written.append(out / "digit_entropy.png")

    series = {}
    for name, s in per.items():
        if s.get("place_accuracy"):
            series[f"{name} (generated)"] = s["place_accuracy"]
        if s.get("digit_stats", {}).get("per_place"):
            series[f"{name} (teacher-forced)"] = s["digit_stats"]["per_place"]
    if series:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for label, entries in series.items():
            ax.plot([e["place"] for e in entries], [100 * e["accuracy"] for e in entries], marker="o", label=label)
        ax.set_xlabel("digit place (0 = units, 1 = tens, -1 = first decimal)")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.invert_xaxis()  # highest place on the left, as numbers are written
        ax.set_title("Accuracy by digit place")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "place_accuracy.png", dpi=100)
        plt.close(fig)
        written.append(out / "place_accuracy.png")
    return written


def write_report(
    out_dir: str | Path, summary: Mapping[str, Any], results: Mapping[str, Sequence[ItemResult]] | None = None
) -> list[Path]:
    """Write results.json, report.md, predictions/*.jsonl and the PNG plots; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "report.md"]
    (out / "results.json").write_text(json.dumps(_json_safe(dict(summary)), indent=2) + "\n")
    (out / "report.md").write_text(markdown(summary))
    for name, rs in (results or {}).items():
        path = out / "predictions" / f"{name.replace(':', '_')}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(_json_safe(r.to_json())) + "\n" for r in rs))
        written.append(path)
    written += _plots(summary, out)
    return written
