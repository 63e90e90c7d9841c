"""The PNG plots of a comparison's report, drawn from its summary (numloss.compare.summary) and
the runs' records. Each PNG carries what a reader sees of each panel in its metadata, so a test
reads what a plot says without looking at pixels."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numloss.compare.stats import finite


def draw_plots(summary: dict[str, Any], results: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Draw the report's PNGs into `out` (matplotlib: numloss.compare requires it on import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from numloss.compare.embeddings import plot_embeddings

    sets = list(dict.fromkeys(n for e in summary.values() for n in e["sets"]))
    paths = [_save(plt, _accuracy_mae_figure(plt, summary, sets), out / "accuracy_mae.png")]
    if "in_distribution" in sets:  # the arithmetic task's digit statistics (benchmarks have none)
        paths.append(_save(plt, _entropy_figure(plt, summary, results), out / "digit_entropy.png"))
        place = _place_figure(plt, summary, results, sets)
        paths.append(_save(plt, place, out / "place_accuracy.png"))
    paths.append(_save(plt, _curves_figure(plt, summary, results), out / "training_curves.png"))
    panels: dict[str, dict[str, Any]] = {}
    for r in results:  # each objective's first run with embeddings
        if (r.get("embeddings") or {}).get("after"):
            panels.setdefault(r["label"], r["embeddings"])
    paths += plot_embeddings(panels, out)
    paths += _learning_plots(summary, out, plt)
    return paths


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Write `fig` to `path` with what a reader sees of each panel in the PNG's metadata
    (`Description`: JSON of titles, y range and scale, tick labels, legend entries), so a test
    reads what the plot says without looking at pixels."""
    fig.tight_layout()
    fig.canvas.draw()  # tick labels exist only once drawn
    panels = []
    for ax in (ax for ax in fig.axes if ax.axison):
        legend = [] if ax.get_legend() is None else ax.get_legend().get_texts()
        panels.append(
            {
                "title": ax.get_title(),
                "ylim": list(ax.get_ylim()),
                "yscale": ax.get_yscale(),
                "yticklabels": [t.get_text() for t in ax.get_yticklabels() if t.get_text()],
                "legend": [t.get_text() for t in legend],
                "legend_fontsize": legend[0].get_fontsize() if legend else None,
            }
        )
    title = fig.get_suptitle() or "; ".join(p["title"] for p in panels)
    fig.savefig(path, dpi=110, metadata={"Title": title, "Description": json.dumps(panels)})
    plt.close(fig)
    return path


def _accuracy_mae_figure(plt: Any, summary: dict[str, Any], sets: list[str]) -> Any:
    """Exact match and MAE per objective, one bar per held-out set (mean ± std over seeds; one
    seed: its value, no error bar)."""
    labels = list(summary)
    one_seed = all(len(e["seeds"]) == 1 for e in summary.values())
    width = 0.8 / max(1, len(sets))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.3 * len(labels) + 4), 3.6))
    for ax, (key, title, scale) in zip(
        axes, (("exact_match", "exact match %", 100.0), ("mae", "MAE", 1.0)), strict=False
    ):
        drawn: list[float] = []
        for j, name in enumerate(sets):
            means = [summary[label]["sets"][name][key]["mean"] * scale for label in labels]
            stds = [summary[label]["sets"][name][key]["std"] * scale for label in labels]
            # a metric with no value (no number in any output) is drawn as an empty slot
            means = [m if math.isfinite(m) else 0.0 for m in means]
            stds = [s if math.isfinite(s) else 0.0 for s in stds]
            drawn += means
            xs = [i + (j - (len(sets) - 1) / 2) * width for i in range(len(labels))]
            ax.bar(xs, means, width, yerr=None if one_seed else stds, capsize=2, label=name)
        ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
        ax.set_title(
            f"{title} ({'one seed: no spread' if one_seed else 'mean ± std over seeds'})",
            fontsize=9,
        )
        if key == "mae" and any(m > 0 for m in drawn):
            ax.set_yscale("log")  # MAE spans orders of magnitude between the held-out sets
            _plain_ticks(ax)
        elif key == "exact_match":
            ax.set_ylim(bottom=0)  # a share is never below 0, whatever a ± std bar reaches
    axes[0].legend(fontsize=7)
    return fig


def _plain_ticks(ax: Any) -> None:
    """A log y axis labelled in plain numbers (4.6, not 4.6 x 10^0): majors always, minors where
    the axis spans under a decade (matplotlib's own rule for labelling them)."""
    from matplotlib.ticker import FormatStrFormatter, LogFormatter

    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def _entropy_figure(plt: Any, summary: dict[str, Any], results: Sequence[dict[str, Any]]) -> Any:
    """Per objective, the histogram of teacher-forced digit entropy (in-distribution, all seeds)."""
    labels = list(summary)
    columns = min(4, len(labels))
    rows = -(-len(labels) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3 * columns, 2.3 * rows), squeeze=False, sharex=True
    )
    for ax in axes.flat[len(labels) :]:
        ax.axis("off")
    for ax, label in zip(axes.flat, labels, strict=False):
        hists = [
            r["evaluation"]["in_distribution"]["digit_entropy_histogram"]
            for r in results
            if r["label"] == label
        ]
        counts = [sum(column) for column in zip(*(h["counts"] for h in hists), strict=True)]
        edges = hists[-1]["edges"]
        total = sum(counts) or 1
        ax.bar(edges[:-1], [c / total for c in counts], width=edges[1] - edges[0], align="edge")
        mean = summary[label]["sets"]["in_distribution"]["digit_entropy"]["mean"]
        ax.set_title(f"{label}: mean {mean:.3f} nats", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(
        "teacher-forced digit entropy at the gold digits (in-distribution, all seeds)", fontsize=9
    )
    return fig


def _place_figure(
    plt: Any, summary: dict[str, Any], results: Sequence[dict[str, Any]], sets: list[str]
) -> Any:
    """Accuracy of the generated number by place, one panel per held-out set, pooled over seeds:
    places are discrete, so each arm is a row of dots, side by side at each place, not a line."""
    fig, axes = plt.subplots(1, len(sets), figsize=(4 * len(sets) + 2, 3.2), squeeze=False)
    width = 0.7 / max(1, len(summary))
    for ax, name in zip(axes[0], sets, strict=False):
        for k, label in enumerate(summary):
            right: Counter[int] = Counter()
            total: Counter[int] = Counter()
            for r in (r for r in results if r["label"] == label):
                for place, (c, t) in r["evaluation"][name]["place_accuracy"].items():
                    right[int(place)] += c
                    total[int(place)] += t
            places = sorted(total, reverse=True)
            xs = [i + (k - (len(summary) - 1) / 2) * width for i in range(len(places))]
            ax.plot(xs, [100 * right[p] / total[p] for p in places], "o", ms=4, label=label)
            ax.set_xticks(range(len(places)), [str(p) for p in places], fontsize=7)
        ax.set_title(f"{name}: accuracy by place (generated)", fontsize=9)
        ax.set_xlabel("place (units 0, first decimal -1)", fontsize=8)
    axes[0][0].set_ylabel("%")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig


def _curves_figure(plt: Any, summary: dict[str, Any], results: Sequence[dict[str, Any]]) -> Any:
    """Training token cross-entropy and digit entropy by step, mean over seeds (the legend beside
    the panels: 12 arms do not fit inside one)."""
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.6))
    over = "one seed" if all(len(e["seeds"]) == 1 for e in summary.values()) else "mean over seeds"
    for label in summary:
        curves = [r["curve"] for r in results if r["label"] == label and r["curve"]["step"]]
        if not curves:
            continue
        length = min(len(c["step"]) for c in curves)
        steps = curves[0]["step"][:length]
        for ax, key in zip(axes, ("ce", "digit_entropy"), strict=False):
            mean = [statistics.fmean(c[key][i] for c in curves) for i in range(length)]
            ax.plot(steps, mean, label=label, lw=1)
    axes[0].set_title(f"training token cross-entropy ({over})", fontsize=9)
    axes[0].set_yscale("log")
    _plain_ticks(axes[0])
    axes[1].set_title(f"training digit entropy, nats ({over})", fontsize=9)
    for ax in axes:
        ax.set_xlabel("optimizer step", fontsize=8)
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return fig


def _learning_plots(summary: dict[str, Any], out: Path, plt: Any) -> list[Path]:
    """learnt_by_step.png (one step curve per objective) and exact_match_per_seed.png (a box per
    objective with every seed's exact match as a dot beside it: bimodal outcomes stay visible)."""
    paths: list[Path] = []
    labels = list(summary)
    learning = [(label, e["learning"]) for label, e in summary.items() if "learning" in e]
    if learning:
        # the legend beside the axes, one readable entry a line: 12 arms do not fit inside
        fig, ax = plt.subplots(figsize=(7.5 + 0.12 * max(len(label) for label, _ in learning), 4.2))
        styles = ["-", "--", "-.", ":"]
        for i, (label, entry) in enumerate(learning):
            steps = [s for s, _ in entry["curve"]] + [entry["horizon"]]
            shares = [100 * v for _, v in entry["curve"]] + [100 * entry["curve"][-1][1]]
            ax.step(
                steps,
                shares,
                where="post",
                ls=styles[(i // 10) % len(styles)],
                lw=1.4,
                label=f"{label} ({entry['learnt']}/{entry['runs']})",
            )
        first = learning[0][1]
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.set_ylabel("% of runs that have learnt the task", fontsize=8)
        ax.set_ylim(-3, 103)
        ax.set_title(
            f"learnt by step s (held-out exact match >= {100 * first['threshold']:.0f} %, "
            f"{checked_text(sorted({s for _, e in learning for s in e.get('checked_steps', [])}))})",  # noqa: E501
            fontsize=9,
        )
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        paths.append(_save(plt, fig, out / "learnt_by_step.png"))

    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(labels) + 2), 3.8))
    values = [
        [100 * v for v in finite([s["exact_match"] for s in summary[label]["per_seed"]])]
        for label in labels
    ]
    ax.boxplot(values, positions=list(range(len(labels))), widths=0.35, showfliers=False)
    for i, label in enumerate(labels):  # each run's dot, from the summary's per-run rows
        for j, run in enumerate(summary[label]["per_seed"]):
            if run["exact_match"] is None:
                continue
            learnt = run.get("learnt_at") is not None
            offset = 0.3 + 0.15 * ((j * 0.618) % 1)  # deterministic jitter beside the box
            color = "tab:green" if learnt else "tab:red"
            ax.plot(i + offset, 100 * run["exact_match"], "o", ms=3.5, color=color, alpha=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("in-distribution exact match %", fontsize=8)
    one_seed = all(len(e["seeds"]) == 1 for e in summary.values())
    title = (
        "final exact match (one seed: no spread)"
        if one_seed
        else "final exact match per seed (dots; box: quartiles over seeds)"
    )
    if learning:
        title += "\ngreen: the run learnt the task, red: it did not"
    ax.set_title(title, fontsize=9)
    paths.append(_save(plt, fig, out / "exact_match_per_seed.png"))
    return paths


def checked_text(steps: list[int]) -> str:
    """The steps at which checks ran, as the report says them."""
    if not steps:
        return "no check ran"
    if len(steps) <= 6:
        return f"checked at step{'s' * (len(steps) > 1)} {', '.join(map(str, steps))}"
    return f"checked at {len(steps)} steps from {steps[0]} to {steps[-1]}"
