"""A comparison's summary: the runs' records aggregated once, per objective and held-out set, into
the one table that report.md, the terminal table, the plots and results.json all render.

Per objective and held-out set, every metric is the mean +- standard deviation over seeds (NaN
spread for one seed). The 95 % interval of exact match covers both sources of chance: it is the
hull of the Wilson interval of the items pooled over seeds (which test items were drawn) and, with
two or more seeds, the Student t interval of the per-seed exact matches (how training fell out).
The second is what dominates when runs are bimodal; with one seed only the first exists. Each
objective but the first (the baseline) is paired with it by seed: paired t on the per-seed
differences, Holm over the objectives, marked at p <= 0.05 with at least 3 seeds.

The table is plain nested dicts, not a pandas frame: it is written to results.json as it is, and
its cells hold lists and nested records (per-seed values, intervals, learning curves) that a frame
would flatten, where an integer column with a gap would turn to floats (step 400 read 400.0)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from numloss.compare.paired import holm, minimum_detectable_effect, paired_t, paired_values
from numloss.compare.stats import finite, fisher_exact_p, seed_interval, wilson_interval
from numloss.compare.survival import (
    Outcome,
    learnt_by_step,
    logrank,
    logrank_permutation_p,
    median_interval,
    median_steps,
)
from numloss.compare.task import TEST_SETS

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


def counts(evaluation: dict[str, Any], key: str) -> tuple[int, int]:
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
    right, total = (sum(x) for x in zip(*(counts(e, key) for e in evaluations), strict=True))
    items = wilson_interval(right, total)
    seeds = seed_interval([e.get(key) for e in evaluations])
    ends = [i for i in (items, seeds) if math.isfinite(i[0])]
    hull = (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else items
    return {"items": list(items), "seeds": list(seeds), "hull": list(hull)}


FINAL_CE_POINTS = 10  # logged steps averaged for a run's final training ce (one step is noisy)


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
        "exact_match_ci95": list(wilson_interval(*counts(primary_evaluation(run), "exact_match"))),
        # mean token cross-entropy of the last FINAL_CE_POINTS logged steps (NaN if none)
        "final_ce": mean_std(run["curve"].get("ce", [])[-FINAL_CE_POINTS:])[0],
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
