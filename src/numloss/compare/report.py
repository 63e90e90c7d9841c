"""The report folder of a comparison: results.json, report.md and the PNG plots, rendered from
the summary that numloss.compare.summary aggregates once (its doc says what each figure is).

With one seed there is no spread: the value alone is printed, and the report says "one seed: no
spread". No column names a "best": a few seeds do not rank objectives. An objective's exact match
is marked (bold, or '*' in the terminal) only when it differs from the baseline's (the first
objective) by seed: paired t on the per-seed differences, Holm over the objectives, p <= 0.05, at
least 3 seeds."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numloss.atomic import write_json_atomic, write_text_atomic
from numloss.compare.plots import checked_text, draw_plots
from numloss.compare.stats import wilson_interval
from numloss.compare.summary import (
    COLUMNS,
    FINAL_CE_POINTS,
    PERMUTATIONS,
    aggregate,
    counts,
    set_names,
    significant_labels,
)
from numloss.textio import jsonable

#: every file a report writes into its folder (`numloss compare --help` names them; a plot whose
#: data no run has is left out: place and entropy plots of benchmarks, the learning plots)
REPORT_FILES = (
    "results.json",
    "report.md",
    "accuracy_mae.png",
    "digit_entropy.png",
    "place_accuracy.png",
    "training_curves.png",
    "embeddings_cosine.png",
    "embeddings_pca.png",
    "learnt_by_step.png",
    "exact_match_per_seed.png",
)


def exact_match_text(evaluation: dict[str, Any]) -> str:
    """One evaluation's exact match as the console prints it: '62.5% [47.0, 75.8]' (the Wilson
    interval over its items; none where it kept no counts)."""
    interval = _interval(wilson_interval(*counts(evaluation, "exact_match")))
    return f"{100 * evaluation.get('exact_match', math.nan):.1f}%{interval}"


def _interval(ci: Sequence[float]) -> str:
    """' [low, high]': a share's 95 % interval in points, as every table prints it ('' for none)."""
    return f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if math.isfinite(ci[0]) else ""


#: what a mark in a results table means (the terminal table's caption says it too)
MARK_NOTE = (
    "an exact match is marked only where it differs from the baseline's by seed (paired t, Holm"
    " over the objectives, p <= 0.05, 3+ seeds); nothing else is ranked"
)


def _cell(metric: dict[str, Any], scale: float, fmt: str) -> str:
    """mean ± std, or the value alone where there is no spread (one seed); then the 95 % interval
    where the metric has one (`ci95`, of a share)."""
    mean, std = metric["mean"], metric["std"]
    if not math.isfinite(mean):
        return "n/a"
    return (
        fmt.format(mean * scale)
        + (f" ± {fmt.replace('+', '').format(std * scale)}" if math.isfinite(std) else "")
        + _interval(metric.get("ci95", [math.nan]))
    )


def spread_note(summary: dict[str, Any]) -> str:
    """How the tables' cells read: mean ± std over seeds, or one seed's value (no spread)."""
    seeds = {len(e["seeds"]) for e in summary.values()}
    if seeds == {1}:
        return "One seed: no spread; each cell is that run's value."
    return "Mean ± std over seeds" + (
        " (one seed: no spread, the value alone)." if 1 in seeds else "."
    )


def table_rows(
    summary: dict[str, Any], set_name: str, bold: bool = True
) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one held-out set's table; an exact match that differs from the
    baseline's by seed is marked (bold or '*', `significant_labels`). A metric no run has (a
    benchmark scores exact match only) gets no column."""
    entries = [e for e in summary.values() if set_name in e["sets"]]
    columns = [
        c
        for c in COLUMNS
        if c[0] == "exact_match"
        or any(math.isfinite(e["sets"][set_name][c[0]]["mean"]) for e in entries)
    ]
    header = ["objective", "seeds"] + [title for _, title, *_ in columns]
    header.insert(3, "exact match 95% CI")
    rows = []
    marked = significant_labels(summary, set_name)
    for label, entry in summary.items():
        if set_name not in entry["sets"]:
            continue
        metrics = entry["sets"][set_name]
        row = [label, str(len(entry["seeds"]))]
        for key, _, scale, _better, fmt in columns:
            text = _cell(metrics[key], scale, fmt)
            if key == "exact_match" and label in marked:
                text = f"**{text}**" if bold else f"{text} *"
            row.append(text)
            if key == "exact_match":
                row.append(_interval(metrics["exact_match_ci95"]).strip() or "n/a")
        rows.append(row)
    return header, rows


def _md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: every table of report.md is rendered here."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown_table(summary: dict[str, Any], set_name: str) -> str:
    return "\n".join(_md(*table_rows(summary, set_name, bold=True)))


def text_table(summary: dict[str, Any], set_name: str) -> str:
    """A plain aligned table for the terminal (`MARK_NOTE`: '*' only where significant)."""
    header, rows = table_rows(summary, set_name, bold=False)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(
        [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
        + [fmt.format(*r) for r in rows]
    )


SET_TITLES = {
    "in_distribution": "In-distribution (the training distribution, held-out questions)",
    "longer": "Longer numbers (one more significant digit per operand than in training)",
    "decimals": "Decimals (one more decimal place than in training)",
}


def markdown_report(summary: dict[str, Any], meta: dict[str, Any], plots: Sequence[Path]) -> str:
    """report.md: what was run, one table per held-out set, the plots."""
    lines = [
        "# numloss compare report",
        "",
        (
            f"- config: `{meta.get('config')}`; model: `{meta.get('model')}`; seeds:"
            f" {meta.get('seeds')}"
        ),
        f"- task: {meta.get('task_text')}",
        f"- training: {meta.get('train_text')}",
        (
            f"- finished: {meta.get('finished')} on {meta.get('machine')}; wall time of this"
            f" invocation {meta.get('wall_seconds', 0):.0f} s (finished runs are reused, not"
            f" retrained); the {meta.get('runs', 'n/a')} runs' own training and evaluation time,"
            f" summed: {meta.get('run_seconds', 0):.0f} s"
        ),
        "",
        (
            f"{spread_note(summary)} Exact-match 95 % interval: the hull of the Wilson interval of"
            " the items pooled over seeds and, with 2+ seeds, the Student t interval of the"
            " per-seed exact matches, so it counts both the test sample and the spread between"
            f" training runs. In bold: {MARK_NOTE}. MAE, signed-log MAE and median absolute error"
            " are over items whose output holds a number. Place accuracy: of the generated number,"
            " integer places (units and up) and decimal places. TF digit acc and the place"
            " accuracies carry their 95 % interval in brackets, built as exact match's (the Wilson"
            " interval of the digits pooled over seeds, hulled with the seed t interval). TF digit"
            " acc / digit entropy:"
            " teacher-forced at the gold answer's digits (entropy of the 10-digit softmax, nats,"
            " max ln 10 = 2.303). Answer NLL: the teacher-forced negative log-likelihood of the"
            " gold answer's tokens (nats per token), where the task records it."
        ),
        "",
    ]
    machine = f"_Machine: {meta.get('machine', 'not recorded')}._"
    lines += learning_table(summary, machine)
    for name in dict.fromkeys(n for e in summary.values() for n in e["sets"]):
        items = next(e["sets"][name]["items"] for e in summary.values() if name in e["sets"])
        lines += [
            f"## {SET_TITLES.get(name, name)}",
            "",
            f"{items} items per objective (all seeds).",
            "",
        ]
        lines += [markdown_table(summary, name), "", machine, ""]
    lines += paired_table(summary)
    per_run = per_seed_table(summary)
    lines += per_run[:-1] + (["", machine, ""] if per_run else [])
    lines += embedding_table(summary)
    lines += ["## Objectives", ""]
    for label, entry in summary.items():
        o = entry["objective"]
        options = ", ".join(f"{k}={v}" for k, v in sorted((o.get("options") or {}).items()))
        alpha = "default" if o.get("alpha") is None else f"{o['alpha']:g}"
        lines.append(
            f"- `{label}`: {o['name']}, alpha {alpha}{', ' + options if options else ''}; "
            f"{entry['train_seconds']:.0f} s of training per run (wall), "
            + (
                f"{entry['cpu_seconds']:.0f} CPU-s per run, "
                if math.isfinite(entry.get("cpu_seconds", math.nan))
                else ""
            )
            + f"{entry.get('steps', math.nan):.0f} steps per run (mean), "
            f"{entry['tokens_per_second'] or float('nan'):.0f} tokens/s"
        )
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def paired_table(summary: dict[str, Any]) -> list[str]:
    """report.md lines: every objective against the baseline (the first) by seed on the headline
    set (`_pair_with_baseline`: the pairing the grid's seeds give, the same data order and
    initial weights for every objective)."""
    if len(summary) < 2:
        return []
    baseline, *others = summary
    headline = next(iter(set_names([{"evaluation": e["sets"]} for e in summary.values()])), None)
    lines = [
        "## Paired by seed",
        "",
        (
            f"{SET_TITLES.get(headline, headline).split(' (')[0]} exact match, objective -"
            f" `{baseline}`, per seed (seed s of every objective: the same data order and initial"
            " weights): mean difference in points with its 95 % t interval, two-sided paired t p,"
            f" Holm p over the {len(others)} objectives, and the difference these seeds detect with"
            " 80 % power at alpha 0.05. Runs that stop early are scored at different steps: where"
            " they do, this compares pass rates as much as skill."
        ),
        "",
    ]
    rows = []
    for label in others:
        t = summary[label]["sets"].get(headline, {}).get("vs_baseline", {"seeds": 0})
        cells = ["n/a"] * 4
        if t["seeds"] >= 2:
            ci = f"{t['mean']:+.1f} [{t['ci'][0]:+.1f}, {t['ci'][1]:+.1f}]"
            cells = [ci, f"{t['p']:.3f}", f"{t['p_holm']:.3f}", f"{t['detectable']:.1f}"]
        rows.append([label, str(t["seeds"]), *cells])
    head = ["objective", "seeds", "difference [95% CI]", "p", "Holm p", "detectable"]
    return lines + _md(head, rows) + [""]


def per_seed_table(summary: dict[str, Any]) -> list[str]:
    """report.md lines: each run's in-distribution exact match and final training ce. Means hide
    bimodal outcomes (a run that learnt the task beside one that did not); this table shows them."""
    seeds = sorted({s["seed"] for e in summary.values() for s in e.get("per_seed", [])})
    if not seeds:
        return []
    learning = any("learning" in e for e in summary.values())
    lines = [
        "## Per run",
        "",
        "In-distribution exact match % [95 % Wilson interval over the run's items] / training ce"
        f" (mean of the last {FINAL_CE_POINTS} logged steps)"
        + (" / the step at which the run learnt the task (-: not by the end)" if learning else "")
        + ". Each objective against the baseline, paired by seed: the table above.",
        "",
    ]
    rows = []
    for label, entry in summary.items():
        by_seed = {s["seed"]: s for s in entry.get("per_seed", [])}
        cells = []
        for seed in seeds:
            run = by_seed.get(seed)
            em = run and run["exact_match"]
            if run is None:
                cells.append("")
                continue
            interval = _interval(run.get("exact_match_ci95", [math.nan]))
            text = f"{100 * em:.1f}{interval} / {run['final_ce']:.3f}" if em is not None else "n/a"
            if "learnt_at" in run:
                text += f" / {run['learnt_at']}" if run["learnt_at"] is not None else " / -"
            cells.append(text)
        rows.append([label, *cells])
    return lines + _md(["objective"] + [f"seed {s}" for s in seeds], rows) + [""]


def _spread(values: list[int], most: int) -> list[int]:
    """Up to `most` of `values`, evenly spaced, the last always among them."""
    if len(values) <= most:
        return values
    return sorted({values[round(k * (len(values) - 1) / (most - 1))] for k in range(most)})


def _p(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "n/a"


def _steps(value: float) -> str:
    return "n/a" if math.isnan(value) else "> horizon" if math.isinf(value) else f"{value:.0f}"


def learning_table(summary: dict[str, Any], machine: str = "") -> list[str]:
    """report.md lines: learning speed per objective (pass counts, the learnt-by-step curve at
    quarters of the horizon, the median steps-to-learn with its interval, the log-rank tests)."""
    rows = [(label, e["learning"]) for label, e in summary.items() if "learning" in e]
    if not rows:
        return []
    first = rows[0][1]
    checked = sorted({step for _, r in rows for step in r.get("checked_steps", [])})
    marks = _spread(checked, 4)  # columns at steps a check ran, up to 4 of them, the last included
    baseline = rows[0][0]
    then = {
        True: "; it stops there. ",
        False: "; it trains on to the last step, where it is scored. ",
    }
    lines = [
        "## Learning speed",
        "",
        f"A run has **learnt the task** at the first check ({checked_text(checked)}, on a fixed"
        " held-out slice apart from the test sets) whose exact match is >="
        f" {100 * first['threshold']:.0f} %"
        + then.get(first.get("stop_early"), ". ")
        + "Learnt by step s: the share of runs (Kaplan-Meier; runs that never learnt are censored"
        " at the horizon). Median steps to learn with its distribution-free 95 % interval (order"
        " statistics; n/a below 6 runs; '> horizon': fewer than half learnt, or the interval"
        f" reaches past the horizon). Log-rank p against `{baseline}` on the whole curves:"
        f" chi-square and permutation ({PERMUTATIONS} seeded relabellings); Fisher p on the"
        " learnt-by-the-end counts. Two-sided, uncorrected for the number of objectives"
        " (multiply by it for Bonferroni).",
        "",
    ]
    head = ["objective", "runs", "learnt by the end", *(f"by {m}" for m in marks)]
    head += ["median steps [95% CI]", "log-rank p", "permutation p", "Fisher p"]
    table = []
    for label, r in rows:
        shares = [
            f"{100 * max([v for at, v in r['curve'] if at <= m], default=0.0):.0f} %" for m in marks
        ]
        low, high = r["median_ci95"]
        interval = "n/a" if math.isnan(low) else f"[{_steps(low)}, {_steps(high)}]"
        test = r.get("vs_baseline") or {}
        tests = ("logrank_p", "logrank_permutation_p", "fisher_p")
        table.append(
            [label, str(r["runs"]), f"{r['learnt']} of {r['runs']}", *shares]
            + [f"{_steps(r['median_steps'])} {interval}"]
            + [_p(test[key]) if test else "-" for key in tests]
        )
    lines += _md(head, table)
    overall = first.get("all_objectives_logrank_p")
    if overall is not None and math.isfinite(overall):
        lines += [
            "",
            (
                f"Log-rank test of all {len(rows)} objectives at once (chi-square, {len(rows) - 1}"
                f" df): p = {overall:.3g}."
            ),
        ]
    lines += ["", machine, ""] if machine else [""]
    return lines


def embedding_table(summary: dict[str, Any]) -> list[str]:
    """report.md lines: the digit-embedding neighbour order score before and after training."""
    rows = [(label, e["embedding_order"]) for label, e in summary.items() if "embedding_order" in e]
    if not rows:
        return []
    lines = [
        "## Digit embeddings",
        "",
        (
            "Neighbour order score of the input embeddings of 0-9 (mean cosine of adjacent digits"
            " minus that of the other pairs; > 0: the embedding is ordered like the number line)."
            f" {spread_note(summary)} The plots show the first seed."
        ),
        "",
    ]
    cells = [
        [label] + [_cell(order[w], 1.0, "{:+.3f}") for w in ("before", "after")]
        for label, order in rows
    ]
    return lines + _md(["objective", "before training", "after training"], cells) + [""]


def write_report(
    results: Sequence[dict[str, Any]], out: Path, meta: dict[str, Any]
) -> dict[str, Any]:
    """Write results.json, report.md and the plots into `out`; returns the aggregated summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = aggregate(results)
    plots = draw_plots(summary, results, out)
    slim_runs = [{k: v for k, v in r.items() if k != "embeddings"} for r in results]
    write_json_atomic(
        out / "results.json", jsonable({"meta": meta, "summary": summary, "runs": slim_runs})
    )
    write_text_atomic(out / "report.md", markdown_report(summary, meta, plots))
    return summary


def main(argv: list[str] | None = None) -> int:
    """`python -m numloss.compare.report RESULTS.json [OUT]`: rewrite report.md and the plots of a
    results.json (from another machine, say) into OUT (default: beside it)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(main.__doc__)
        return 0 if args else 2
    data = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    out = Path(args[1]) if len(args) > 1 else Path(args[0]).parent
    write_report(data["runs"], out, data["meta"])
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
