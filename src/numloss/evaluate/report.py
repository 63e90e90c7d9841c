"""The eval report (`EvalReport`, one `BenchmarkScore` per benchmark and protocol) and its
rendering: `write_report` writes results.json, report.md, accuracy.png and, when there is
something to plot, place_accuracy.png and digit_entropy.png.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numloss.evaluate.metrics import MAX_DIGIT_ENTROPY, PlaceAccuracy, macc, wilson_interval
from numloss.textio import jsonable

if TYPE_CHECKING:
    from numloss.evaluate.runner import ItemResult


SCHEMA_VERSION = 2  # of EvalReport.to_json(); 1 was the earlier unversioned layout


def answer_style(result: ItemResult) -> str:
    """How an item was answered, as the report counts it: "pot+cot" when the first attempt gave
    nothing and the chain-of-thought fallback was read, "pot" when a program ran in the first
    attempt (a refused one did not run), else "cot" (the text was read). The prompt alone does not
    make an item PoT: lm-eval samples or a prose answer to a program prompt are read as text."""
    from numloss.evaluate.programs import REFUSED

    if result.style == "pot+cot":
        return "pot+cot"
    return "pot" if result.program_status not in ("", REFUSED) else "cot"


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
    # the largest single error's share of the MAE (1.0: one item is all of it)
    mae_top_share: float | None = None
    place_accuracy: list[PlaceAccuracy] = field(default_factory=list)
    digit_entropy: float | None = None  # teacher-forced, nats (model only; None when not measured)
    digit_accuracy: float | None = None
    # 20 equal bins over [0, ln 10]
    digit_entropy_histogram: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["ci95"] = list(self.ci95)
        out["place_accuracy"] = [asdict(e) | {"accuracy": e.accuracy} for e in self.place_accuracy]
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

    def macc_ci95(self, protocol: str | None = None) -> tuple[float, float]:
        """An approximate 95 % interval of mACC: the per-benchmark Wilson intervals combined as
        independent errors, each side apart (mACC minus the root of the summed squared distances
        to the lower ends over the number of benchmarks; likewise above). One benchmark gives its
        own Wilson interval; the interval always holds mACC."""
        scores = [
            s
            for s in self.scores[protocol or self.protocols[-1]].values()
            if not math.isnan(s.accuracy)
        ]
        if not scores:
            return float("nan"), float("nan")
        mean, k = sum(s.accuracy for s in scores) / len(scores), len(scores)
        below = math.sqrt(sum((s.accuracy - s.ci95[0]) ** 2 for s in scores)) / k
        above = math.sqrt(sum((s.ci95[1] - s.accuracy) ** 2 for s in scores)) / k
        return max(0.0, mean - below), min(1.0, mean + above)

    def macc_text(self, protocol: str | None = None) -> str:
        """mACC as a percentage with its 95 % interval ("66.7 % (20.8-93.9)")."""
        return with_interval(self.macc(protocol), self.macc_ci95(protocol))

    @property
    def disagreements(self) -> dict[str, list[str]]:
        """Per benchmark, the ids of items whose verdict differs between the first two protocols."""
        if len(self.protocols) < 2:
            return {b: [] for b in self.benchmarks}
        a, b = self.protocols[:2]
        return {
            name: [
                x.id
                for x, y in zip(self.items[a][name], self.items[b][name], strict=True)
                if x.correct != y.correct
            ]
            for name in self.benchmarks
        }

    def to_json(self, items: bool = False) -> dict[str, Any]:
        """The report as JSON-ready data (schema `SCHEMA_VERSION`, documented in docs/evaluation.md,
        "The report's JSON"): everything `numloss eval` prints or writes to report.md.
        `items=True` adds every item result (the lines of items.jsonl)."""
        out = {
            "schema_version": SCHEMA_VERSION,
            **self.meta,  # numloss_version and date among them
            "protocols": self.protocols,
            "isolation": self.isolation,
            "benchmarks": {
                p: {b: s.to_json() for b, s in per.items()} for p, per in self.scores.items()
            },
            "macc": {p: self.macc(p) for p in self.protocols},
            "macc_ci95": {p: list(self.macc_ci95(p)) for p in self.protocols},
            "disagreements": self.disagreements,
        }
        if items:
            out["items"] = {
                p: {b: [r.to_json() for r in rs] for b, rs in per.items()}
                for p, per in self.items.items()
            }
        return out

    def to_markdown(self) -> str:
        return markdown(self)


def _pct(x: float | None) -> str:
    return _num(None if x is None else 100 * x, 1)


def with_interval(value: float, ci: tuple[float, float]) -> str:
    """An accuracy as a percentage with its 95 % interval: "66.7 % (20.8-93.9)"."""
    return f"{_pct(value)} % ({_pct(ci[0])}-{_pct(ci[1])})"


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
    """The header lines saying what made the report: the command, what it read (a model's
    generations, or saved outputs and their format), the numloss version and date, and the
    settings (protocols, generation, limit, threads)."""
    import shlex

    meta = report.meta
    command = meta.get("command")
    made = f"`{shlex.join(command)}`" if command else "numloss.evaluate from Python"
    if meta.get("scored_from"):
        source = meta["scored_from"]  # "records": score_outputs' iterable
        given = (
            "outputs given in Python" if source == "records" else f"the saved outputs of {source}"
        )
        made += f", scoring {given} read as {meta.get('format', 'numloss records')}"
        lm_eval = meta.get("lm_eval") or {}
        if lm_eval:
            matched = sorted((lm_eval.get("matched") or {}).items())
            how = ", ".join(f"{n} by {way}" for way, n in matched)
            made += (
                f" (task {lm_eval.get('task')} as {lm_eval.get('benchmark')}; items matched:"
                f" {how or 'none'})"
            )
    lines = [
        f"Made by {made} with numloss {meta.get('numloss_version', '?')} on"
        f" {meta.get('date', '?')}."
    ]
    settings = meta.get("settings") or {}
    parts = [f"protocol {', '.join(report.protocols)}"]
    if settings:
        parts += [
            f"backend {settings.get('backend')} ({settings.get('dtype')})",
            f"prompt {settings.get('prompt')}",
            (
                f"max new tokens {settings.get('max_new_tokens_open')} open /"
                f" {settings.get('max_new_tokens_choice')} multiple choice"
            ),
            f"program of thought {'on' if settings.get('program_of_thought') else 'off'}",
        ]
    parts += [f"{key} {meta[key]}" for key in ("limit", "threads") if meta.get(key) is not None]
    return lines + ["Settings: " + "; ".join(parts) + "."]


def _place_line(name: str, s: BenchmarkScore) -> str:
    """One line of accuracy by digit place, or why there is none."""
    if not s.numeric_count:  # every place would read 0 %: a number no answer gave
        return f"- {name}: no numeric answer, so no accuracy by digit place"
    cells = "; ".join(
        f"{PLACE_NAMES.get(e.place, f'place {e.place}')}"
        f" {with_interval(e.accuracy, wilson_interval(e.correct, e.total))} of {e.total}"
        for e in s.place_accuracy
    )
    return f"- {name}: accuracy by digit place of the generated answers: {cells}"


def markdown(report: EvalReport) -> str:
    """Tables: per protocol and benchmark, then the side-by-side comparison when there are two.
    Every accuracy carries its 95 % interval; a section with nothing to show says so in one line."""
    lines = [f"# Evaluation of {report.meta.get('model', 'a model')}", "", *provenance(report), ""]
    iso = report.isolation
    if iso:  # how model-written programs ran (docs/sandbox.md); the sandbox's detail names no path
        ran = iso.get("program_of_thought", True)
        used = "" if ran else " (no program ran: those items used chain of thought)"
        lines += [f"Program sandbox: {iso.get('mode')}{used}: {iso.get('detail', '')}", ""]
    for protocol in report.protocols:
        lines += [
            f"## Protocol `{protocol}`",
            "",
            (
                "| benchmark | items | accuracy % | 95 % interval | answered | PoT / CoT / PoT+CoT"
                " | PoT refused | MAE | signed-log MAE | digit entropy (TF, nats) |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, s in report.scores[protocol].items():
            st = s.styles
            lines.append(
                f"| {name} | {s.count} | {_pct(s.accuracy)} | {_pct(s.ci95[0])}-{_pct(s.ci95[1])} |"
                f" {s.answered} | {st.get('pot', 0)} / {st.get('cot', 0)} / {st.get('pot+cot', 0)}"
                f" | {s.pot_refused} | {_num(s.mae)} | {_num(s.signed_log_mae)} |"
                f" {_num(s.digit_entropy)} |"
            )
        lines += [
            "",
            (
                "PoT: a program ran and was read; CoT: the text was read; PoT+CoT: the first"
                " attempt gave no answer and the chain-of-thought fallback was read."
            ),
            "",
            f"**mACC ({protocol}): {report.macc_text(protocol)}** (mean of the per-benchmark"
            " accuracies; the interval combines theirs)",
            "",
        ]
        for name, s in report.scores[protocol].items():
            if s.program_status:
                lines.append(
                    f"- {name}: programs: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(s.program_status.items()))
                )
            share = s.mae_top_share
            if share is not None and share >= DOMINATES and s.numeric_count > 1:
                lines.append(
                    f"- {name}: one item is {100 * share:.0f} % of the MAE's summed error"
                    f" ({_num(s.mae)}): the mean is dominated by that item; the signed-log MAE"
                    " is not"
                )
            if s.place_accuracy:
                lines.append(_place_line(name, s))
        decided = Counter(
            r.decided_by for rows in report.items.get(protocol, {}).values() for r in rows
        )
        if decided:  # which reading rule gave the predictions (items.jsonl's decided_by)
            lines.append(
                "- items by the rule that decided them (decided_by): "
                + ", ".join(f"{k} {v}" for k, v in decided.most_common())
            )
        lines.append("")
    if len(report.protocols) >= 2:
        a, b = report.protocols[:2]
        lines += [
            f"## `{a}` vs `{b}`",
            "",
            f"| benchmark | items | {a} % | {b} % | verdicts differ | ids (first 10) |",
            "|---|---|---|---|---|---|",
        ]
        for name, ids in report.disagreements.items():
            sa, sb = report.scores[a][name], report.scores[b][name]
            lines.append(
                f"| {name} | {sa.count} | {with_interval(sa.accuracy, sa.ci95)} |"
                f" {with_interval(sb.accuracy, sb.ci95)} | {len(ids)} | {', '.join(ids[:10])} |"
            )
        lines += [
            "",
            f"mACC: {a} {report.macc_text(a)}, {b} {report.macc_text(b)}",
            "",
        ]
    gen = report.meta.get("generation_stats")
    if gen and gen.get("tokens"):
        lines += [
            (
                f"Generation: {gen['tokens']} tokens in {_num(gen.get('seconds'), 1)} s"
                f" ({_num(gen.get('tokens_per_second'), 1)} tokens/s); wall time"
                f" {_num(report.meta.get('wall_seconds'), 1)} s."
            ),
            "",
        ]
    return "\n".join(lines)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def drawn(fig: Any, ax: Any) -> dict[str, Any]:
    """What `ax` shows, read back from its artists after drawing: title, axis labels, visible tick
    labels, legend, each series of points with intervals (label, values, the intervals' low and
    high ends) and the point count of each line joining points. `_save` writes it into the PNG
    (text chunk "numloss"), so a test checks the picture against the report without pixels."""
    from matplotlib.container import ErrorbarContainer

    fig.canvas.draw()
    series = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            data, _, (ranges, *_) = container.lines
            series.append(
                {
                    "label": container.get_label(),
                    "x": [float(x) for x in data.get_xdata()],
                    "values": [float(y) for y in data.get_ydata()],
                    "intervals": [[float(a[1]), float(b[1])] for a, b in ranges.get_segments()],
                }
            )
    legend = ax.get_legend()
    return {
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xticklabels": _visible(ax.xaxis),
        "yticklabels": _visible(ax.yaxis),
        "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        "series": series,
        "lines": [
            len(line.get_xdata())
            for line in ax.get_lines()
            if line.get_linestyle() not in ("None", "", " ")
        ],
    }


def _visible(axis: Any) -> list[str]:
    """The texts of an axis' tick labels inside its limits (matplotlib lists some beyond them)."""
    low, high = sorted(axis.get_view_interval())
    return [
        t.get_text()
        for at, t in zip(axis.get_ticklocs(), axis.get_ticklabels(), strict=True)
        if low - 1e-9 <= at <= high + 1e-9
    ]


def _save(fig: Any, ax: Any, title: str, path: Path) -> Path:
    """Title and legend `ax`, write `fig` to `path` (with `drawn` in its metadata) and close it."""
    ax.set_title(title, fontsize=10)
    # beside the axes, never over a point or its interval
    if len(ax.get_legend_handles_labels()[0]) > 1:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 2.2, height)  # the legend's room, not the axes
    fig.tight_layout()
    fig.savefig(
        path,
        dpi=100,
        bbox_inches="tight",
        metadata={"Title": title, "numloss": json.dumps(drawn(fig, ax))},
    )
    _pyplot().close(fig)
    return path


Series = tuple[str, list[int], list[float], list[tuple[float, float]]]  # label, x, values, CIs


def _interval_figure(series: list[Series], ticks: list[str], width: float) -> tuple[Any, Any]:
    """(figure, axes) of accuracies in percent at discrete x positions named by `ticks`: each
    series' points with their 95 % intervals (asymmetric, as Wilson intervals are), side by side
    around each tick; points, not bars, so that 0 % shows as a point on the axis, not as nothing."""
    fig, ax = _pyplot().subplots(figsize=(width, 3.4))
    step = min(0.25, 0.8 / len(series)) if len(series) > 1 else 0.0
    for k, (label, xs, values, cis) in enumerate(series):
        points = [100 * v for v in values]
        low = [max(0.0, p - 100 * lo) for p, (lo, _) in zip(points, cis, strict=True)]
        high = [max(0.0, 100 * hi - p) for p, (_, hi) in zip(points, cis, strict=True)]
        offset = (k - (len(series) - 1) / 2) * step
        style = {"fmt": "o", "capsize": 4, "markersize": 5, "elinewidth": 1.2, "label": label}
        ax.errorbar([x + offset for x in xs], points, yerr=[low, high], **style)
    ax.set_xticks(range(len(ticks)), ticks, fontsize=8)
    ax.set_xlim(-0.6, len(ticks) - 0.4)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(-4, 104)  # a point at 0 % or 100 % stays whole
    ax.set_yticks(range(0, 101, 20))
    ax.grid(axis="y", alpha=0.3)
    return fig, ax


def _accuracy_plot(report: EvalReport, path: Path) -> Path:
    """accuracy.png: per protocol, each benchmark's accuracy and mACC with the table's intervals."""
    names = report.benchmarks
    counts = [report.scores[report.protocols[0]][n].count for n in names]
    labels = [f"{n}\n({c} items)" for n, c in zip(names, counts, strict=True)] + ["mACC"]
    series = []
    for protocol in report.protocols:
        scores = [report.scores[protocol][n] for n in names]
        values = [s.accuracy for s in scores] + [report.macc(protocol)]
        cis = [s.ci95 for s in scores] + [report.macc_ci95(protocol)]
        series.append((f"protocol {protocol}", list(range(len(labels))), values, cis))
    fig, ax = _interval_figure(series, labels, max(4.0, 1.3 * len(labels)))
    which = f" (protocol {report.protocols[0]})" if len(report.protocols) == 1 else ""
    return _save(fig, ax, f"Accuracy with 95 % intervals{which}", path)


#: digit places by power of ten (units 0, tens 1, tenths -1)
_PLACES = "millions|100 thousands|10 thousands|thousands|hundreds|tens|units|tenths|hundredths"
PLACE_NAMES = dict(zip(range(6, -4, -1), f"{_PLACES}|thousandths".split("|"), strict=True))


def _place_plot(report: EvalReport, path: Path) -> Path | None:
    """place_accuracy.png of the last protocol: per benchmark, the accuracy at each digit place
    (a discrete axis, highest place on the left as numbers are written; points, never joined
    across places) with Wilson intervals; benchmarks without a numeric answer are left out (every
    place would read 0 %)."""
    protocol = report.protocols[-1]
    places = {
        n: {e.place: e for e in s.place_accuracy}
        for n, s in report.scores[protocol].items()
        if s.place_accuracy and s.numeric_count
    }
    if not places:
        return None
    axis = sorted({p for entries in places.values() for p in entries}, reverse=True)
    series = []
    for name, entries in places.items():
        shown = [p for p in axis if p in entries]
        cis = [wilson_interval(entries[p].correct, entries[p].total) for p in shown]
        series.append(
            (name, [axis.index(p) for p in shown], [entries[p].accuracy for p in shown], cis)
        )
    ticks = [PLACE_NAMES.get(p, f"place {p}") for p in axis]
    fig, ax = _interval_figure(series, ticks, max(4.5, 0.9 * len(axis)))
    ax.set_xlabel("digit place of the gold answer")
    # one series: the title names it, no legend
    which = f"{next(iter(places))}: g" if len(places) == 1 else "G"
    return _save(fig, ax, f"{which}enerated answers by digit place (protocol {protocol})", path)


def _entropy_plot(report: EvalReport, path: Path) -> Path | None:
    """digit_entropy.png: the teacher-forced digit entropy's histogram per benchmark (measured
    once per model, the same under every protocol)."""
    hist = {
        n: s for n, s in report.scores[report.protocols[-1]].items() if s.digit_entropy_histogram
    }
    if not hist:
        return None
    fig, ax = _pyplot().subplots(figsize=(5, 3.4))
    for k, (name, s) in enumerate(hist.items()):
        counts = s.digit_entropy_histogram
        edges = [MAX_DIGIT_ENTROPY * i / len(counts) for i in range(len(counts) + 1)]
        ax.stairs(
            [c / max(1, sum(counts)) for c in counts],
            edges,
            linewidth=1.5,
            linestyle=("-", "--", ":", "-.")[k % 4],
            # styles: equal curves stay apart
            label=f"{name}: {sum(counts)} digits, mean {s.digit_entropy:.2f} nats",
        )
    ax.set_xlabel("digit entropy (nats; at most ln 10 = 2.30)")
    ax.set_ylabel("share of the gold digits")
    ax.set_xlim(0, MAX_DIGIT_ENTROPY)
    ax.set_ylim(0, 1.05)
    title = "Teacher-forced digit entropy at the gold answer's digits"
    if len(hist) == 1:  # one series draws no legend: the title says whose it is
        title = f"Teacher-forced digit entropy, {ax.get_legend_handles_labels()[1][0]}"
    return _save(fig, ax, title, path)


PLOTS = {
    "accuracy.png": _accuracy_plot,
    "place_accuracy.png": _place_plot,
    "digit_entropy.png": _entropy_plot,
}
#: every file `write_report` may write (`numloss eval --help` and the docs list them;
#: tests/test_docs.py)
REPORT_FILES = ("results.json", "report.md", *PLOTS)


def write_report(out_dir: str | Path, report: EvalReport) -> list[Path]:
    """Write results.json, report.md and the PNG plots into `out_dir`; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from numloss.atomic import write_text_atomic

    # whole or not at all: a failed write keeps the earlier report, never a torn results.json
    write_text_atomic(out / "results.json", json.dumps(jsonable(report.to_json()), indent=2) + "\n")
    write_text_atomic(out / "report.md", markdown(report))
    written = [out / "results.json", out / "report.md"]
    for name, plot in PLOTS.items():
        if plot(report, out / name) is not None:
            written.append(out / name)
        else:  # nothing to plot: an earlier report's picture must not pass for this one's
            (out / name).unlink(missing_ok=True)
    return written
