"""The report folder of a comparison: results.json, report.md and the PNG plots.

Per objective and held-out set, every metric is the mean +- standard deviation over seeds (with one
seed there is no spread: the value alone is printed, and the report says "one seed: no spread"). The
95 % interval of exact match covers both sources of chance: it is the hull of the Wilson interval of
the items pooled over seeds (which test items were drawn) and, with two or more seeds, the Student t
interval of the per-seed exact matches (how training fell out). The second is what dominates when
runs are bimodal; with one seed only the first exists. No column names a "best": a few seeds do not
rank objectives. An objective's exact match is marked (bold, or '*' in the terminal) only when it
differs from the baseline's (the first objective) by seed: paired t on the per-seed differences,
Holm over the objectives, p <= 0.05, at least 3 seeds."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numloss.atomic import write_json_atomic, write_text_atomic
from numloss.compare.paired import holm, minimum_detectable_effect, paired_t, paired_values
from numloss.compare.stats import (
    finite,
    fisher_exact_p,
    seed_interval,
    wilson_interval,
)
from numloss.compare.survival import (
    Outcome,
    learnt_by_step,
    logrank,
    logrank_permutation_p,
    median_interval,
    median_steps,
)
from numloss.compare.task import TEST_SETS
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

# (key in an evaluation, column title, scale for display, better: "max" / "min" / None, format)
COLUMNS: tuple[tuple[str, str, float, str | None, str], ...] = (
    ("exact_match", "exact match %", 100.0, "max", "{:.1f}"),
    ("mae", "MAE", 1.0, "min", "{:.3g}"),
    ("signed_log_mae", "signed-log MAE", 1.0, "min", "{:.3f}"),
    ("median_abs_error", "median abs err", 1.0, "min", "{:.3g}"),
    ("digit_accuracy", "TF digit acc %", 100.0, "max", "{:.1f}"),
    ("digit_entropy", "digit entropy", 1.0, None, "{:.3f}"),
    ("answer_nll", "answer NLL", 1.0, "min", "{:.3f}"),
    ("integer_place_accuracy", "int place acc %", 100.0, "max", "{:.1f}"),
    ("decimal_place_accuracy", "dec place acc %", 100.0, "max", "{:.1f}"),
)


def mean_std(values: Sequence[Any]) -> tuple[float, float]:
    """Mean and sample standard deviation of the finite values (std NaN for one value, whose
    spread is undefined, not 0; both NaN for none)."""
    xs = finite(values)
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else float("nan")


#: the accuracies besides exact match, each with the per-place counts of an evaluation it pools
#: ({place: [right, total]}) and the places it counts
POOLED_COUNTS: dict[str, tuple[str, Any]] = {
    "digit_accuracy": ("teacher_forced_place_accuracy", lambda place: True),
    "integer_place_accuracy": ("place_accuracy", lambda place: place >= 0),
    "decimal_place_accuracy": ("place_accuracy", lambda place: place < 0),
}


def _counts(evaluation: dict[str, Any], key: str) -> tuple[int, int]:
    """(right, total) behind accuracy `key` of one evaluation ((0, 0) where it kept no counts)."""
    if key == "exact_match":  # no counts kept (records of earlier releases): no interval
        return (evaluation["correct"], evaluation["n"]) if "correct" in evaluation else (0, 0)
    field, counted = POOLED_COUNTS[key]
    pairs = [v for place, v in (evaluation.get(field) or {}).items() if counted(int(place))]
    return sum(c for c, _ in pairs), sum(t for _, t in pairs)


def accuracy_interval(
    evaluations: Sequence[dict[str, Any]], key: str = "exact_match"
) -> dict[str, list[float]]:
    """{items, seeds, hull} of accuracy `key`: the Wilson interval of the items (digits) pooled
    over seeds, the seed t interval, and their hull (either alone where the other is NaN)."""
    right, total = (sum(x) for x in zip(*(_counts(e, key) for e in evaluations), strict=True))
    items = wilson_interval(right, total)
    seeds = seed_interval([e.get(key) for e in evaluations])
    ends = [i for i in (items, seeds) if math.isfinite(i[0])]
    hull = (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else items
    return {"items": list(items), "seeds": list(seeds), "hull": list(hull)}


FINAL_CE_POINTS = 10  # logged steps averaged for a run's final training ce (one step is noisy)


def final_training_ce(curve: dict[str, list[float]]) -> float:
    """Mean token cross-entropy of the last FINAL_CE_POINTS logged training steps (NaN if none)."""
    values = finite(curve.get("ce", [])[-FINAL_CE_POINTS:])
    return statistics.fmean(values) if values else float("nan")


def _order_scores(embeddings: dict[str, Any]) -> dict[str, float]:
    from numloss.compare.embeddings import neighbour_order_score

    return {when: neighbour_order_score(rows) for when, rows in embeddings.items() if rows}


def aggregate(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """{label: {objective, seeds, sets: {set: {metric: {mean, std, values}}, exact_match_ci95}}}."""
    summary: dict[str, Any] = {}
    for result in results:
        entry = summary.setdefault(
            result["label"], {"objective": result["objective"], "seeds": [], "runs": [], "sets": {}}
        )
        entry["seeds"].append(result["seed"])
        entry["runs"].append(result)
    for entry in summary.values():
        runs = entry.pop("runs")
        for name in set_names(runs):
            evaluations = [r["evaluation"][name] for r in runs if name in r["evaluation"]]
            metrics: dict[str, Any] = {}
            for key, *_ in COLUMNS:
                values = [e.get(key) for e in evaluations]
                mean, std = mean_std(values)
                metrics[key] = {"mean": mean, "std": std, "values": values}
                if key in POOLED_COUNTS:
                    metrics[key]["ci95"] = accuracy_interval(evaluations, key)["hull"]
            intervals = accuracy_interval(evaluations)
            metrics["exact_match_ci95"] = intervals["hull"]
            metrics["exact_match_ci95_items"] = intervals["items"]
            metrics["exact_match_ci95_seeds"] = intervals["seeds"]
            metrics["items"] = sum(e["n"] for e in evaluations)
            entry["sets"][name] = metrics
        entry["per_seed"] = [_per_seed(r) for r in runs]
        orders = [_order_scores(r.get("embeddings") or {}) for r in runs]
        if any(orders):
            entry["embedding_order"] = {
                when: dict(
                    zip(("mean", "std"), mean_std([o.get(when) for o in orders]), strict=True)
                )
                for when in ("before", "after")
            }
        learning = _learning_entry(runs)
        if learning is not None:
            entry["learning"] = learning
        entry["train_seconds"] = mean_std([r["seconds"]["train"] for r in runs])[0]
        entry["cpu_seconds"] = mean_std([r["seconds"].get("cpu") for r in runs])[0]
        entry["steps"] = mean_std([r.get("steps") for r in runs])[0]
        entry["tokens_per_second"] = mean_std(
            [r["train_metrics"].get("tokens_per_second") for r in runs]
        )[0]
    _compare_learning(summary)
    for name in dict.fromkeys(n for e in summary.values() for n in e["sets"]):
        _pair_with_baseline(summary, name)
    return summary


#: Monte Carlo relabellings of the permutation log-rank p (seeded; its own sd at p = 0.05 is 0.003)
PERMUTATIONS = 5000


def _per_seed(run: dict[str, Any]) -> dict[str, Any]:
    """One run's line of the per-run table; `learnt_at`: the step it learnt the task (None: not by
    its horizon), only for runs with learning checks."""
    row = {
        "seed": run["seed"],
        "exact_match": primary_evaluation(run).get("exact_match"),
        "exact_match_ci95": list(wilson_interval(*_counts(primary_evaluation(run), "exact_match"))),
        "final_ce": final_training_ce(run["curve"]),
    }
    if run.get("learning"):
        row["learnt_at"] = run["learning"]["step"] if run["learning"]["learnt"] else None
    return row


def _learning_entry(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Learning speed of one objective's runs (None when they have no learning checks)."""
    checked = [r for r in runs if r.get("learning")]
    if not checked:
        return None
    outcomes = [Outcome(int(r["learning"]["step"]), bool(r["learning"]["learnt"])) for r in checked]
    try:
        interval = list(median_interval(outcomes))
    except ValueError:  # runs of different horizons: no distribution-free interval
        interval = [float("nan"), float("nan")]
    horizon = max(int(r.get("max_steps") or r["learning"]["step"]) for r in checked)
    return {
        "checked_steps": sorted(
            {int(step) for r in checked for step, _ in r["learning"].get("checks", [])}
        ),
        "runs": len(outcomes),
        "learnt": sum(o.learnt for o in outcomes),
        "horizon": horizon,
        "threshold": checked[0]["learning"]["threshold"],
        "every": checked[0]["learning"]["every"],
        "stop_early": _stops_early(checked),
        "outcomes": [[r["seed"], o.step, o.learnt] for r, o in zip(checked, outcomes, strict=True)],
        "curve": learnt_by_step(outcomes),
        "median_steps": median_steps(outcomes),
        "median_ci95": interval,
    }


def _stops_early(runs: Sequence[dict[str, Any]]) -> bool | None:
    """Whether these runs ended at the check where they learnt: recorded, or (records made before
    it was) read off the runs that learnt; None when that cannot be told."""
    recorded = {r["learning"]["stop_early"] for r in runs if "stop_early" in r["learning"]}
    if len(recorded) == 1:
        return recorded.pop()
    learnt = [r for r in runs if r["learning"]["learnt"] and "steps" in r]
    if recorded or not learnt:
        return None
    return all(int(r["steps"]) == int(r["learning"]["step"]) for r in learnt)


def _compare_learning(summary: dict[str, Any]) -> None:
    """Log-rank tests on the whole learnt-by-step curves: every objective against the first (the
    baseline), and all objectives at once; Fisher's exact test on the learnt-by-the-end counts."""
    labelled = [(label, e) for label, e in summary.items() if "learning" in e]
    if len(labelled) < 2:
        return
    groups = {
        label: [Outcome(step, learnt) for _, step, learnt in e["learning"]["outcomes"]]
        for label, e in labelled
    }
    baseline = labelled[0][0]
    for label, entry in labelled[1:]:
        pair = [groups[label], groups[baseline]]
        base = summary[baseline]["learning"]
        entry["learning"]["vs_baseline"] = {
            "baseline": baseline,
            "logrank_p": logrank(pair),
            "logrank_permutation_p": logrank_permutation_p(pair, PERMUTATIONS),
            "fisher_p": fisher_exact_p(
                entry["learning"]["learnt"], entry["learning"]["runs"], base["learnt"], base["runs"]
            ),
        }
    summary[baseline]["learning"]["all_objectives_logrank_p"] = logrank(list(groups.values()))


def set_names(results: Sequence[dict[str, Any]]) -> list[str]:
    """The held-out sets the runs were scored on: the arithmetic task's in its order, then any
    others (benchmarks) in the order the runs list them."""
    seen = list(dict.fromkeys(name for r in results for name in r["evaluation"]))
    return [s for s in TEST_SETS if s in seen] + [s for s in seen if s not in TEST_SETS]


def primary_evaluation(run: dict[str, Any]) -> dict[str, Any]:
    """The set a run's headline exact match comes from: in_distribution, else its first set."""
    evaluation = run["evaluation"]
    if "in_distribution" in evaluation:
        return evaluation["in_distribution"]
    return next(iter(evaluation.values()), {})


def exact_match_text(evaluation: dict[str, Any]) -> str:
    """One evaluation's exact match as the console prints it: '62.5% [47.0, 75.8]' (the Wilson
    interval over its items; none where it kept no counts)."""
    interval = _interval(wilson_interval(*_counts(evaluation, "exact_match")))
    return f"{100 * evaluation.get('exact_match', math.nan):.1f}%{interval}"


def _interval(ci: Sequence[float]) -> str:
    """' [low, high]': a share's 95 % interval in points, as every table prints it ('' for none)."""
    return f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if math.isfinite(ci[0]) else ""


def _pair_with_baseline(
    summary: dict[str, Any], set_name: str, alpha: float = 0.05, min_seeds: int = 3
) -> None:
    """Every objective but the first (the baseline) against it on `set_name`, by seed: paired t
    of the per-seed exact-match differences on the seeds both have (points), Holm over the
    objectives, the difference these seeds detect with 80 % power; `marked` where Holm p <= alpha
    with at least `min_seeds` seeds. Kept as the set's `vs_baseline`."""
    if not summary:
        return
    baseline, *others = summary

    def by_seed(entry: dict[str, Any]) -> dict[int, float]:
        metrics = entry["sets"].get(set_name)
        if metrics is None or len(metrics["exact_match"]["values"]) != len(entry["seeds"]):
            return {}
        return {
            s: 100 * v
            for s, v in zip(entry["seeds"], metrics["exact_match"]["values"], strict=True)
            if v is not None and math.isfinite(v)
        }

    base = by_seed(summary[baseline])
    tests = {
        label: paired_t([b - a for _, a, b in paired_values(base, by_seed(summary[label]))])
        for label in others
    }
    for (label, test), p_holm in zip(
        tests.items(), holm([t.p for t in tests.values()]), strict=True
    ):
        if set_name in summary[label]["sets"]:
            summary[label]["sets"][set_name]["vs_baseline"] = {
                "baseline": baseline,
                "seeds": test.n,
                "mean": test.mean,
                "ci": list(test.ci),
                "p": test.p,
                "p_holm": p_holm,
                "detectable": (
                    minimum_detectable_effect(test.n, test.sd, alpha) if test.n >= 2 else math.nan
                ),
                "marked": test.n >= min_seeds and math.isfinite(p_holm) and p_holm <= alpha,
            }


def significant_labels(summary: dict[str, Any], set_name: str) -> set[str]:
    """The objectives whose exact match on `set_name` differs from the baseline's by seed
    (`_pair_with_baseline`, done by `aggregate`)."""
    return {
        label
        for label, e in summary.items()
        if e["sets"].get(set_name, {}).get("vs_baseline", {}).get("marked")
    }


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


def _checked_text(steps: list[int]) -> str:
    """The steps at which checks ran, as the report says them."""
    if not steps:
        return "no check ran"
    if len(steps) <= 6:
        return f"checked at step{'s' * (len(steps) > 1)} {', '.join(map(str, steps))}"
    return f"checked at {len(steps)} steps from {steps[0]} to {steps[-1]}"


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
        f"A run has **learnt the task** at the first check ({_checked_text(checked)}, on a fixed"
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


def _plots(summary: dict[str, Any], results: Sequence[dict[str, Any]], out: Path) -> list[Path]:
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
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
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
            ax.set_xticks(range(len(places)))
            ax.set_xticklabels([str(p) for p in places], fontsize=7)
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
    learning = [
        (label, summary[label]["learning"]) for label in labels if "learning" in summary[label]
    ]
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
            f"{_checked_text(sorted({s for _, e in learning for s in e.get('checked_steps', [])}))})",  # noqa: E501
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
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
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


def write_report(
    results: Sequence[dict[str, Any]], out: Path, meta: dict[str, Any]
) -> dict[str, Any]:
    """Write results.json, report.md and the plots into `out`; returns the aggregated summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = aggregate(results)
    plots = _plots(summary, results, out)
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
