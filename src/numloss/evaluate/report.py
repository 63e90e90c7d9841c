"""The eval report (`EvalReport`, one `BenchmarkScore` per benchmark and protocol) and its
rendering: `write_report` writes results.json, report.md, accuracy.png and, when there is
something to plot, place_accuracy.png and digit_entropy.png.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numloss.evaluate.metrics import PlaceAccuracy, macc
from numloss.textio import jsonable

if TYPE_CHECKING:
    from numloss.evaluate.runner import ItemResult


SCHEMA_VERSION = 2  # of EvalReport.to_json(); 1 was the earlier unversioned layout


@dataclass
class BenchmarkScore:
    """One benchmark under one protocol."""

    benchmark: str
    protocol: str
    count: int
    correct: int
    accuracy: float
    ci95: tuple[float, float]
    answered: int
    styles: dict[str, int]
    program_status: dict[str, int]
    pot_refused: int
    mae: float | None = None
    signed_log_mae: float | None = None
    numeric_count: int = 0
    mae_top_share: float | None = None  # the largest single error's share of the MAE (1.0: one item is all of it)
    place_accuracy: list[PlaceAccuracy] = field(default_factory=list)
    digit_entropy: float | None = None  # teacher-forced, nats (model only; None when not measured)
    digit_accuracy: float | None = None
    digit_entropy_histogram: list[int] = field(default_factory=list)  # 20 equal bins over [0, ln 10]

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["ci95"] = list(self.ci95)
        out["place_accuracy"] = [{"place": e.place, "correct": e.correct, "total": e.total, "accuracy": e.accuracy} for e in self.place_accuracy]
        return out


@dataclass
class EvalReport:
    """Per protocol and benchmark: scores and item results; the items where protocols disagree."""

    protocols: list[str]
    scores: dict[str, dict[str, BenchmarkScore]]
    items: dict[str, dict[str, list[ItemResult]]]
    isolation: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def benchmarks(self) -> list[str]:
        return list(self.scores[self.protocols[0]])

    def accuracy(self, benchmark: str, protocol: str | None = None) -> float:
        return self.scores[protocol or self.protocols[-1]][benchmark].accuracy

    def macc(self, protocol: str | None = None) -> float:
        """The paper's mACC: the mean of the per-benchmark accuracies."""
        return macc({b: s.accuracy for b, s in self.scores[protocol or self.protocols[-1]].items()})

    @property
    def disagreements(self) -> dict[str, list[str]]:
        """Per benchmark, the ids of items whose verdict differs between the first two protocols."""
        if len(self.protocols) < 2:
            return {b: [] for b in self.benchmarks}
        a, b = self.protocols[:2]
        return {name: [x.id for x, y in zip(self.items[a][name], self.items[b][name], strict=True) if x.correct != y.correct]
                for name in self.benchmarks}

    def to_json(self, items: bool = False) -> dict[str, Any]:
        """The report as JSON-ready data (schema `SCHEMA_VERSION`, documented in docs/evaluation.md,
        "The report's JSON"): everything `numloss eval` prints or writes to report.md.
        `items=True` adds every item result (the lines of items.jsonl)."""
        from importlib.metadata import PackageNotFoundError, version

        try:
            package = version("numloss")
        except PackageNotFoundError:  # a source checkout without an install
            package = None
        out = {
            "schema_version": SCHEMA_VERSION,
            "numloss_version": package,
            **self.meta,
            "protocols": self.protocols,
            "isolation": self.isolation,
            "benchmarks": {p: {b: s.to_json() for b, s in per.items()} for p, per in self.scores.items()},
            "macc": {p: self.macc(p) for p in self.protocols},
            "disagreements": self.disagreements,
        }
        if items:
            out["items"] = {p: {b: [r.to_json() for r in rs] for b, rs in per.items()} for p, per in self.items.items()}
        return out

    def to_markdown(self) -> str:
        return markdown(self)


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


LARGE = 1e6  # from here on a figure is printed with an exponent ("2.5e+254", not 255 digits)
DOMINATES = 0.5  # one item's share of a MAE from which the report says the mean is that item's


def _num(x: float | None, digits: int = 3) -> str:
    """A figure for a table: fixed point, or with an exponent when it is large or not finite."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if not math.isfinite(x) or abs(x) >= LARGE:
        return f"{x:.{digits}g}"
    return f"{x:.{digits}f}"


def provenance(report: EvalReport) -> list[str]:
    """The header lines saying what made the report: the command, the numloss version and date,
    and the settings (protocols, generation, limit, threads)."""
    import shlex

    meta = report.meta
    command = meta.get("command")
    made = f"`{shlex.join(command)}`" if command else "numloss.evaluate from Python"
    if meta.get("scored_from"):
        made += f", scoring the saved outputs of {meta['scored_from']}"
    lines = [f"Made by {made} with numloss {meta.get('numloss_version', '?')} on {meta.get('date', '?')}."]
    settings = meta.get("settings") or {}
    parts = [f"protocol {', '.join(report.protocols)}"]
    if settings:
        parts += [f"backend {settings.get('backend')} ({settings.get('dtype')})", f"prompt {settings.get('prompt')}",
                  f"max new tokens {settings.get('max_new_tokens_open')} open / {settings.get('max_new_tokens_choice')} multiple choice",
                  f"program of thought {'on' if settings.get('program_of_thought') else 'off'}"]
    parts += [f"{key} {meta[key]}" for key in ("limit", "threads") if meta.get(key) is not None]
    return lines + ["Settings: " + "; ".join(parts) + "."]


def markdown(report: EvalReport) -> str:
    """Tables: per protocol and benchmark, then the side-by-side comparison when there are two."""
    lines = [f"# Evaluation of {report.meta.get('model', 'a model')}", "", *provenance(report), ""]
    iso = report.isolation
    if iso:  # how model-written programs ran (docs/sandbox.md)
        used = "" if iso.get("program_of_thought", True) else " (no program ran: those items used chain of thought)"
        lines += [f"Program sandbox: {iso.get('mode')}{used}: {iso.get('detail', '')}", ""]
    for protocol in report.protocols:
        lines += [f"## Protocol `{protocol}`", "",
                  "| benchmark | items | accuracy % | 95 % interval | answered | PoT / CoT / PoT+CoT | PoT refused | MAE | signed-log MAE | digit entropy (TF, nats) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, s in report.scores[protocol].items():
            st = s.styles
            lines.append(
                f"| {name} | {s.count} | {_pct(s.accuracy)} | {_pct(s.ci95[0])}-{_pct(s.ci95[1])} | {s.answered} | "
                f"{st.get('pot', 0)} / {st.get('cot', 0)} / {st.get('pot+cot', 0)} | {s.pot_refused} | "
                f"{_num(s.mae)} | {_num(s.signed_log_mae)} | {_num(s.digit_entropy)} |"
            )
        lines += ["", f"**mACC ({protocol}): {_pct(report.macc(protocol))}%** (mean of the per-benchmark accuracies)", ""]
        for name, s in report.scores[protocol].items():
            if s.program_status:
                lines.append(f"- {name}: programs: " + ", ".join(f"{k} {v}" for k, v in sorted(s.program_status.items())))
            share = getattr(s, "mae_top_share", None)
            if share is not None and share >= DOMINATES and (s.numeric_count or 0) > 1:
                lines.append(f"- {name}: one item is {100 * share:.0f} % of the MAE's summed error ({_num(s.mae)}): the mean "
                             "is dominated by that item; the signed-log MAE is not")
            if s.place_accuracy:
                cells = " ".join(f"{e.place}:{_pct(e.accuracy)}" for e in s.place_accuracy)
                lines.append(f"- {name}: generated-answer accuracy by place (place:%): {cells}")
        decided = Counter(getattr(r, "decided_by", "released") for rows in report.items.get(protocol, {}).values() for r in rows)
        if decided:  # which reading rule gave the predictions (items.jsonl's decided_by)
            lines.append("- items by the rule that decided them (decided_by): " + ", ".join(f"{k} {v}" for k, v in decided.most_common()))
        lines.append("")
    if len(report.protocols) >= 2:
        a, b = report.protocols[:2]
        lines += [f"## `{a}` vs `{b}`", "", f"| benchmark | items | {a} % | {b} % | verdicts differ | ids (first 10) |", "|---|---|---|---|---|---|"]
        for name, ids in report.disagreements.items():
            sa, sb = report.scores[a][name], report.scores[b][name]
            lines.append(f"| {name} | {sa.count} | {_pct(sa.accuracy)} | {_pct(sb.accuracy)} | {len(ids)} | {', '.join(ids[:10])} |")
        lines += ["", f"mACC: {a} {_pct(report.macc(a))}%, {b} {_pct(report.macc(b))}%", ""]
    gen = report.meta.get("generation_stats")
    if gen and gen.get("tokens"):
        lines += [f"Generation: {gen['tokens']} tokens in {_num(gen.get('seconds'), 1)} s "
                  f"({_num(gen.get('tokens_per_second'), 1)} tokens/s); wall time {_num(report.meta.get('wall_seconds'), 1)} s.", ""]
    return "\n".join(lines)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    """Title and legend `ax`, write `fig` to `path` and close it."""
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def _accuracy_plot(report: EvalReport, path: Path) -> Path:
    names = report.benchmarks + ["mACC"]
    width = 0.8 / len(report.protocols)
    fig, ax = _pyplot().subplots(figsize=(max(4, 1.2 * len(names)), 3.2))
    for k, protocol in enumerate(report.protocols):
        values = [report.scores[protocol][n].accuracy for n in report.benchmarks] + [report.macc(protocol)]
        values = [0 if math.isnan(v) else 100 * v for v in values]
        ax.bar([i + k * width for i in range(len(names))], values, width, label=protocol)
    ax.set_xticks([i + width * (len(report.protocols) - 1) / 2 for i in range(len(names))], names, rotation=30, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    return _save(fig, ax, "Accuracy per benchmark", path)


def _detail_plots(report: EvalReport, out: Path) -> list[Path]:
    """place_accuracy.png and digit_entropy.png of the last protocol, each when it has data."""
    from numloss.evaluate.metrics import MAX_DIGIT_ENTROPY

    written = []
    scores = report.scores[report.protocols[-1]]
    places = {n: s.place_accuracy for n, s in scores.items() if s.place_accuracy}
    if places:
        fig, ax = _pyplot().subplots(figsize=(5, 3.2))
        for name, entries in places.items():
            ax.plot([e.place for e in entries], [100 * e.accuracy for e in entries], marker="o", label=name)
        ax.set_xlabel("digit place (0 = units, 1 = tens, -1 = first decimal)")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.invert_xaxis()  # highest place on the left, as numbers are written
        title = f"Generated answers by digit place ({report.protocols[-1]})"
        written.append(_save(fig, ax, title, out / "place_accuracy.png"))
    hist = {n: s for n, s in scores.items() if s.digit_entropy_histogram}
    if hist:
        fig, ax = _pyplot().subplots(figsize=(5, 3.2))
        for name, s in hist.items():
            counts = s.digit_entropy_histogram
            edges = [MAX_DIGIT_ENTROPY * i / len(counts) for i in range(len(counts) + 1)]
            total = max(1, sum(counts))
            ax.stairs([c / total for c in counts], edges, label=f"{name} (mean {s.digit_entropy:.2f})")
        ax.set_xlabel("entropy of the 10-digit distribution (nats; max ln 10)")
        ax.set_ylabel("fraction of digits")
        written.append(_save(fig, ax, "Teacher-forced digit entropy", out / "digit_entropy.png"))
    return written


def write_report(out_dir: str | Path, report: EvalReport) -> list[Path]:
    """Write results.json, report.md and the PNG plots into `out_dir`; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from numloss.atomic import write_text_atomic

    # whole or not at all: a failed write keeps the earlier report, never a torn results.json
    write_text_atomic(out / "results.json", json.dumps(jsonable(report.to_json()), indent=2) + "\n")
    write_text_atomic(out / "report.md", markdown(report))
    accuracy = _accuracy_plot(report, out / "accuracy.png")
    return [out / "results.json", out / "report.md", accuracy, *_detail_plots(report, out)]
