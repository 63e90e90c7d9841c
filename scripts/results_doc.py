"""docs/results.md's numbers, generated from the run records kept in git.

Every table and every number-bearing sentence of docs/results.md sits between
``<!-- results:NAME:begin -->`` and ``<!-- results:NAME:end -->`` and is written here from the
records in ``results/`` (scripts/grid_analysis.py), never typed by hand:

    python scripts/results_doc.py            # rewrite the blocks of docs/results.md,
                                             # docs/results-pretrained.md and README.md, and
                                             # the recorded grid a `numloss demo` prints
    python scripts/results_doc.py --check    # exit 1 if a block differs from the records

The write-up of this repository's experiments, not part of the installed package: it reads the
records in results/ and writes the pages of this checkout (numloss must be importable).

`tests/test_results_doc.py` runs the check, so records committed without the doc regenerated
(or a hand-edited number) fail the tests.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from grid_analysis import (
    ENDPOINTS,
    Comparison,
    by_label,
    complete_seeds,
    endpoint_value,
    learning_analysis,
    load_records,
    logrank_exact_p,
    paired_analysis,
    seed_plan,
    seeds_for_power,
)

from numloss.atomic import write_json_atomic, write_text_atomic
from numloss.compare import item_paired
from numloss.compare.machine import runs_machine_line
from numloss.compare.paired import holm, paired_t, paired_t_power
from numloss.compare.stats import seed_interval, wilson_interval
from numloss.compare.survival import Outcome, logrank, median_steps
from numloss.package_data import RECORDED_GRID_TEXT

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results.md"
PRETRAINED_DOC = ROOT / "docs" / "results-pretrained.md"
MUL_CENTERED_DOC = ROOT / "docs" / "results-mul-centered.md"
README = ROOT / "README.md"
LOSSES_DOC = ROOT / "docs" / "losses.md"
DOCS = (DOC, PRETRAINED_DOC, MUL_CENTERED_DOC, README, LOSSES_DOC)
"""The pages whose generated blocks are written here (the pretrained arm's design page has its
status, the README the answer)."""
PRETRAINED_GRID = "compare-smollm2-words"
"""The pretrained CPU grid: configs/<name>.yaml, its records in results/<name>/."""
BLOCK = re.compile(
    r"(<!-- results:(?P<name>[a-z0-9-]+):begin -->\n)(?P<body>.*?)(<!-- results:(?P=name):end -->)",
    re.S,
)

MUL_ARMS = ("del-a0.3", "del-noplace", "ntl-was")
ADD_ARMS = (
    "del-a0.3",
    "ntl-was",
    "del-l1",
    "del-a0.1",
    "del-a1.0",
    "dist2",
    "ntl-mse",
    "mixce",
    "emo",
    "del-noplace",
    "del-continuous",
)
DEMO_ARMS = ("del-a0.3", "ntl-was")


def _f(value: float, fmt: str = "{:.1f}", signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    text = fmt.format(value)
    return "+" + text if signed and value > 0 else text


def _p(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return "< 0.001" if value < 0.001 else f"{value:.3f}" if value < 0.1 else f"{value:.2f}"


def _ci(low: float, high: float, fmt: str = "{:.1f}") -> str:
    return f"[{_f(low, fmt, True)}, {_f(high, fmt, True)}]"


def _mean_text(mean: float, ci: Sequence[float], prose: bool = True) -> str:
    """A mean exact match over seeds (shares) in %, with its seed t interval, or 'one seed: no
    spread' where there is none; `prose` names the unit and what the interval is over."""
    unit, over = (" %", " over seeds") if prose else ("", "")
    if not math.isfinite(ci[0]):
        return f"{100 * mean:.1f}{unit} (one seed: no spread)"
    return f"{100 * mean:.1f}{unit} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]{over}"


def _seed_mean(values: Sequence[float], fmt: str = "{:.1f}") -> str:
    """The mean of per-seed values with its 95 % t interval, clipped to [0, 100] (every value
    given here is an accuracy in points or a non-negative error), or 'one seed: no spread'."""
    t = paired_t(values)
    if t.n < 2:
        return f"{fmt.format(t.mean)} (one seed: no spread)"
    return (
        f"{fmt.format(t.mean)} [{fmt.format(max(0.0, t.ci[0]))}, {fmt.format(min(100.0, t.ci[1]))}]"
    )


def _wilson(e: dict[str, Any]) -> str:
    """One run's exact match (its evaluation `e`) in points with its Wilson 95 % interval over
    its items."""
    low, high = wilson_interval(e["correct"], e["n"])
    return f"{100 * e['exact_match']:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _heldout_mean(heldout: Sequence[dict[str, Any]], prose: bool = True) -> str:
    """Held-out exact match over seeds (`_mean_text`); one run gets its items' Wilson interval,
    which one seed's spread cannot give."""
    if len(heldout) == 1:
        return f"{_wilson(heldout[0])}{' %' if prose else ''} over items (one seed: no spread)"
    ems = [h["exact_match"] for h in heldout]
    return _mean_text(statistics.fmean(ems), seed_interval(ems), prose)


def _widest(runs: Sequence[dict[str, Any]]) -> str:
    """The sentence that gives every listed run's value its Wilson interval: the widest one."""
    es = [r["evaluation"]["in_distribution"] for r in runs]
    width = max(hi - lo for lo, hi in (wilson_interval(e["correct"], e["n"]) for e in es))
    sizes = sorted({e["n"] for e in es})
    items = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
    wide = f"at most {100 * width:.1f} points wide"
    return f"each run's Wilson 95 % interval over its {items} items is {wide}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


class Records:
    """The record folders the doc is built from (read once)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.memo: dict[str, Any] = {}

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time `key` is asked for, the same value after."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def _runs(self, folder: str) -> dict[str, dict[int, dict[str, Any]]]:
        return by_label(load_records(self.root / "results" / folder))

    @cached_property
    def mul(self) -> dict[str, dict[int, dict[str, Any]]]:
        return self._runs("compare-mul")

    @cached_property
    def mul_centered(self) -> dict[str, dict[int, dict[str, Any]]]:
        return self._runs(MUL_CENTERED_GRID)

    @cached_property
    def add(self) -> dict[str, dict[int, dict[str, Any]]]:
        return self._runs("compare")

    @cached_property
    def chunked(self) -> dict[str, dict[int, dict[str, Any]]]:
        return self._runs("compare-chunked")

    def pretrained_grid(
        self, name: str
    ) -> tuple[Any, dict[str, dict[int, dict[str, Any]]], dict[str, Any]]:
        """(CompareConfig, {label: {seed: record}}, grid_driver.summarise) of the
        pretrained grid configs/<name>.yaml: the records of its config's hashes only, the untrained
        model included (read once)."""
        import grid_driver as pretrained

        from numloss.compare.config import load_compare_config

        def read() -> tuple[Any, dict[str, dict[int, dict[str, Any]]], dict[str, Any]]:
            compare = load_compare_config(self.root / "configs" / f"{name}.yaml")
            records = self.root / "results" / name
            return (
                compare,
                pretrained.load_records(compare, records),
                pretrained.summarise(compare, records),
            )

        return self.once(f"grid:{name}", read)

    @cached_property
    def chunked2(self) -> dict[str, dict[int, dict[str, Any]]]:
        return self._runs("compare-chunked-2digit")


def _all(runs: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [r for seeds in runs.values() for r in seeds.values()]


def machine(runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The machine line of a grid's records (CPU, vector extension, cores, torch, dates)."""
    records = _all(runs)

    def without_date(record: dict[str, Any]) -> str:
        return json.dumps(
            {k: v for k, v in record["machine"].items() if k != "date"}, sort_keys=True
        )

    # each machine's runs under one line, with the range of their own dates
    dates: dict[str, list[str]] = {}
    for r in records:
        dates.setdefault(without_date(r), []).append(r["machine"]["date"])
    span = {
        key: min(d) if min(d) == max(d) else f"{min(d)} to {max(d)}" for key, d in dates.items()
    }
    dated = [{**r, "machine": {**r["machine"], "date": span[without_date(r)]}} for r in records]
    line = runs_machine_line(dated, dated[0]["machine"])
    return f"_Machine: {line}; {len(records)} runs._"


# -- the multiplication testbed -------------------------------------------------------------------
def _mul_state(rec: Records) -> tuple[dict[str, Any], list[int], list[Comparison]]:
    return rec.once("mul", lambda: _mul_analysis(rec))


def _mul_analysis(rec: Records) -> tuple[dict[str, Any], list[int], list[Comparison]]:
    """(plan, seeds every arm has, comparisons): each comparison pairs the planned seeds that both
    of its arms have (pre-registered: a seed counts in a comparison when both runs are recorded)."""
    plan = seed_plan(rec.mul["mle"])
    arms = _mul_arms(plan)
    planned = list(range(plan["seeds"]))
    seeds = [s for s in complete_seeds(rec.mul, ("mle",) + arms) if s in planned]
    return plan, seeds, paired_analysis(rec.mul, "mle", arms, seeds=planned)


def _mul_arms(plan: dict[str, Any]) -> tuple[str, ...]:
    """The arms the seed rule keeps: all three, or DEL alone when the pilot SD exceeded its
    limit."""
    return MUL_ARMS[:1] if plan["two_arms"] else MUL_ARMS


def mul_shape(rec: Records) -> list[str]:
    """How MLE learns the testbed: its check curve and its accuracy by place (pilot seeds)."""
    mle = [rec.mul["mle"][s] for s in sorted(rec.mul["mle"])[:4]]
    checks = mle[0]["learning"]["checks"]
    curve = ", ".join(
        f"{_seed_mean([100 * r['learning']['checks'][i][1] for r in mle])} % at step {checks[i][0]}"
        for i in (0, len(checks) // 2 - 1, -1)
    )
    places = [_seed_mean([endpoint_value(r, f"place_{i}") for r in mle]) for i in range(4)]
    return [
        (
            f"MLE's first {len(mle)} seeds, mean [95 % t interval over the seeds]: check exact"
            f" match {curve}; accuracy of the generated answer by place: units {places[0]} %, tens"
            f" {places[1]} %, hundreds {places[2]} %, thousands {places[3]} % (of answers that"
            " have one)."
        ),
    ]


def mul_plan(rec: Records) -> list[str]:
    plan, seeds, _ = _mul_state(rec)
    values = ", ".join(f"{v:.2f}" for v in plan["pilot_values"])
    return [
        f"Pilot (MLE seeds {plan['pilot_seeds'][0]}-{plan['pilot_seeds'][-1]}): exact match"
        f" {values} % ({_widest([rec.mul['mle'][s] for s in plan['pilot_seeds']])}; mean"
        f" {_seed_mean(plan['pilot_values'], '{:.2f}')} over the seeds), SD s ="
        f" **{plan['sd']:.2f} points** "
        + (
            f"(> {plan['sd_limit']}: MLE and DEL alpha 0.3 only). "
            if plan["two_arms"]
            else f"(<= {plan['sd_limit']}: all four arms). "
        )
        + f"With a paired SD of sqrt(2) s = {math.sqrt(2) * plan['sd']:.2f}, alpha"
        f" {plan['alpha']:.4f} and 80 % power for +{plan['effect']} points the rule gives"
        f" **{plan['seeds']} seeds per arm** (seeds 0-{plan['seeds'] - 1}). "
        + (
            f"**Complete: all {plan['seeds']} seeds of every arm are in.**"
            if len(seeds) == plan["seeds"]
            else f"**Incomplete: {len(seeds)} of {plan['seeds']} seeds have every arm** ("
            + ", ".join(f"`{a}` {len(rec.mul.get(a, {}))}" for a in ("mle",) + _mul_arms(plan))
            + " runs); the tables below are an interim "
            "look with CIs and no verdict (pre-registered: no interim test). The grid continues: "
            "`numloss compare configs/compare-mul.yaml --jobs 1` skips every recorded run."
        ),
    ]


def _fmt(c: Comparison) -> str:
    key = c.endpoint.key
    return "{:.4f}" if key == "signed_log_mae" else "{:.3f}" if key == "digit_entropy" else "{:.1f}"


def _baseline(c: Comparison, runs: dict[str, dict[int, dict[str, Any]]]) -> str:
    """MLE's mean over the comparison's seeds with its seed t interval."""
    return _seed_mean([endpoint_value(runs["mle"][s], c.endpoint.key) for s in c.seeds], _fmt(c))


def _difference(c: Comparison) -> str:
    return f"{_f(c.test.mean, _fmt(c), True)} {_ci(*c.test.ci, _fmt(c))}"


def mul_primary(rec: Records) -> list[str]:
    plan, seeds, comparisons = _mul_state(rec)
    arms = _mul_arms(plan)
    if max(c.test.n for c in comparisons) < 2:
        return ["Fewer than two seeds pair with MLE yet: no paired difference to show."]
    primary = [c for c in comparisons if c.endpoint.primary]
    head = ["arm"]
    for e in dict.fromkeys(c.endpoint for c in primary):
        head += [f"{e.title}: arm - MLE [95 % CI]", "p", "Holm p", "detectable"]
    rows = []
    for arm in arms:
        row = [f"`{arm}`"]
        for c in (c for c in primary if c.arm == arm):
            row += [_difference(c), _p(c.test.p), _p(c.p_holm), _f(c.mde, _fmt(c))]
        rows.append(row)
    means = "; ".join(
        f"{c.endpoint.title} {_baseline(c, rec.mul)}" for c in primary if c.arm == arms[0]
    )
    counts = ", ".join(f"`{a}` {next(c.test.n for c in primary if c.arm == a)}" for a in arms)
    return (
        [
            (
                f"Seeds paired with MLE: {counts}; MLE's mean over the first arm's pairs [95 % t"
                f" interval over the seeds]: {means}."
                f" Paired t on the per-seed differences, Holm over the {len(arms)} arm(s) per"
                " endpoint; detectable: the difference these seeds detect with 80 % power at the"
                f" observed SD of the differences, at alpha {0.05 / len(arms):.4g}."
            ),
            "",
        ]
        + _table(head, rows)
        + ["", machine(rec.mul)]
    )


def mul_secondary(rec: Records) -> list[str]:
    plan, seeds, comparisons = _mul_state(rec)
    arms = _mul_arms(plan)
    if max(c.test.n for c in comparisons) < 2:
        return ["Fewer than two seeds pair with MLE yet."]
    secondary = [c for c in comparisons if not c.endpoint.primary]
    head = ["endpoint", "MLE [95 % CI]"] + [f"`{arm}` - MLE [95 % CI], p" for arm in arms]
    rows = []
    for e in dict.fromkeys(c.endpoint for c in secondary):
        cells = {c.arm: c for c in secondary if c.endpoint == e}
        first = cells[arms[0]]
        rows.append(
            [e.title + (f" ({e.unit})" if e.unit else ""), _baseline(first, rec.mul)]
            + [f"{_difference(cells[a])}, {_p(cells[a].test.p)}" for a in arms]
        )
    return [
        (
            "Descriptive: unadjusted p, no multiplicity claim. Place accuracy: of the generated"
            " number at that place."
        ),
        "",
    ] + _table(head, rows)


MUL_FIGURE = ROOT / "docs" / "img" / "compare" / "mul_paired.png"

# -- the multiplication testbed, grid c: centred DEL and raw DEL at the released weight ---------
MUL_CENTERED_GRID = "compare-mul-centered"
MUL_CENTERED_ARMS = ("del-centered-a0.3", "del-a1.28")
MUL_CENTERED_SEEDS = 17  # the design's seed count (docs/results-mul-centered.md)
PAPER_GAIN = 2.6  # points of exact match: the gain the power is stated for


def _mul_centered_state(rec: Records) -> tuple[bool, list[Comparison]]:
    """(complete, comparisons of each arm against MLE on the planned seeds both have)."""

    def compute() -> tuple[bool, list[Comparison]]:
        runs, planned = rec.mul_centered, range(MUL_CENTERED_SEEDS)
        complete = (
            len([s for s in complete_seeds(runs, ("mle",) + MUL_CENTERED_ARMS) if s in planned])
            == MUL_CENTERED_SEEDS
        )
        return complete, paired_analysis(runs, "mle", MUL_CENTERED_ARMS, seeds=planned)

    return rec.once("mul-centered", compute)


def _realised_power(c: Comparison) -> str:
    """For exact match: the power these pairs have for the paper's gain at the realised SD of the
    differences (Holm's first-step level), and the seeds 80 % would need."""
    if c.endpoint.key != "exact_match" or c.test.n < 3 or not c.test.sd > 0:
        return ""
    power = paired_t_power(c.test.n, PAPER_GAIN, c.test.sd, c.alpha)
    need = seeds_for_power(PAPER_GAIN, c.test.sd, c.alpha)
    return (
        f"; power for +{PAPER_GAIN} points {100 * power:.0f} % at SD {c.test.sd:.2f} (80 % would"
        f" need {need} seeds)"
    )


def mul_centered_grid(rec: Records) -> list[str]:
    """docs/results-mul-centered.md's grid c: each DEL arm against MLE on both primary endpoints."""
    complete, comparisons = _mul_centered_state(rec)
    runs = rec.mul_centered
    if not _all(runs):
        return ["No run is recorded yet."]
    counts = ", ".join(f"`{a}` {len(runs.get(a, {}))}" for a in ("mle",) + MUL_CENTERED_ARMS)
    state = (
        "**Complete: all 17 seeds of every arm are in.**"
        if complete
        else (
            f"**Interim ({counts} of 17 runs): intervals only, no verdict** (pre-registered: no"
            " interim test)."
        )
    )
    lines = [state, "", f"Exact match % per seed ({_widest(_all(runs))}):", ""]
    for label in ("mle",) + MUL_CENTERED_ARMS:
        values = ", ".join(
            f"{s}: {endpoint_value(r, 'exact_match'):.1f}"
            for s, r in sorted(runs.get(label, {}).items())
        )
        lines.append(f"- `{label}`: {values or 'none yet'}")
    primary = [c for c in comparisons if c.endpoint.primary and c.test.n >= 2]
    if not primary:
        return lines
    rows = [
        [
            f"`{c.arm}`",
            c.endpoint.title,
            str(c.test.n),
            _baseline(c, runs),
            _difference(c),
            _p(c.test.p),
            _p(c.p_holm),
            verdict(c) if complete else "interim",
            _f(c.mde, _fmt(c)) + _realised_power(c),
        ]
        for c in primary
    ]
    return (
        lines
        + [
            "",
            (
                "Arm minus MLE, paired t on the per-seed differences, Holm over the two arms per"
                " endpoint:"
            ),
            "",
        ]
        + _table(
            [
                "arm",
                "endpoint",
                "seeds",
                "MLE [95 % CI]",
                "arm - MLE [95 % CI]",
                "p",
                "Holm p",
                "reading",
                "detectable (80 %)",
            ],
            rows,
        )
        + ["", machine(runs)]
    )


def mul_centered_answer(rec: Records) -> list[str]:
    """The answer's line on grid c."""
    complete, comparisons = _mul_centered_state(rec)
    head = (
        "- **Multiplication testbed, centred DEL alpha 0.3 and raw DEL at the released weight"
        " 1.28** (pre-registered, 17 seeds, MLE rerun on the same AVX2 CPU; "
    )
    shown = [c for c in comparisons if c.endpoint.key == "exact_match" and c.test.n >= 2]
    if not shown:
        return [head + "running): too few seeds pair with MLE yet."]
    state = "complete" if complete else f"interim: {min(c.test.n for c in shown)} of 17 seeds"
    cells = [
        f"`{c.arm}` minus MLE {_difference(c)} points, Holm p {_p(c.p_holm)}"
        + (
            f", **{verdict(c)}**"
            if complete and verdict(c) in ("better", "worse")
            else f", {verdict(c)}"
            if complete
            else ""
        )
        + f" (detects {_f(c.mde, _fmt(c))}{_realised_power(c)})"
        for c in shown
    ]
    return [
        head
        + f"{state}): exact match "
        + "; ".join(cells)
        + ("." if complete else "; no verdict until every run is in.")
    ]


"""The multiplication testbed's per-seed differences against MLE (the README's figure)."""


def _save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (100 dpi) and close `fig`; returns `path`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def mul_figure(rec: Records, path: Path = MUL_FIGURE) -> Path:
    """Draw every planned arm's per-seed difference from MLE on both primary endpoints (one dot a
    seed, the mean with its 95 % t interval, 0 and the paper's +2.6 points marked) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan, seeds, comparisons = _mul_state(rec)
    arms = _mul_arms(plan)
    primary = [e for e in dict.fromkeys(c.endpoint for c in comparisons) if e.primary]
    fig, axes = plt.subplots(1, len(primary), figsize=(4.2 * len(primary), 3.4))
    for ax, endpoint in zip(axes, primary, strict=True):
        for x, arm in enumerate(arms):
            c = next(c for c in comparisons if c.arm == arm and c.endpoint == endpoint)
            base, other = rec.mul["mle"], rec.mul.get(arm, {})
            diffs = [
                endpoint_value(other[s], endpoint.key) - endpoint_value(base[s], endpoint.key)
                for s in c.seeds
            ]
            jitter = [x + 0.18 * ((i % 5) - 2) / 2 for i in range(len(diffs))]
            ax.scatter(jitter, diffs, s=12, alpha=0.55, color="tab:gray", zorder=2)
            if c.test.n >= 2:
                ax.errorbar(
                    [x],
                    [c.test.mean],
                    yerr=[[c.test.mean - c.test.ci[0]], [c.test.ci[1] - c.test.mean]],
                    fmt="o",
                    color="black",
                    capsize=5,
                    zorder=3,
                )
        ax.axhline(0, color="black", lw=0.8)
        if endpoint.key == "exact_match":
            ax.axhline(2.6, color="tab:green", lw=0.8, ls="--", label="the paper's +2.6")
            ax.legend(loc="lower right", fontsize=8, frameon=False)
        ax.set_xticks(range(len(arms)), arms)
        better = "higher" if endpoint.better == "higher" else "lower"
        ax.set_title(f"{endpoint.title}: arm - MLE ({better} is better)", fontsize=9)
    fig.suptitle(
        f"2-digit x 2-digit multiplication, {len(seeds)} seeds per arm (dots), mean and 95 % CI",
        fontsize=10,
    )
    return _save_figure(fig, path)


def mul_runs(rec: Records) -> list[str]:
    lines = [f"Exact match % at step 3,200, seed: value ({_widest(_all(rec.mul))}):", ""]
    for label in ("mle",) + MUL_ARMS:
        runs = rec.mul.get(label, {})
        values = ", ".join(
            f"{s}: {endpoint_value(runs[s], 'exact_match'):.1f}" for s in sorted(runs)
        )
        lines.append(
            f"- `{label}` ({len(runs)} run{'' if len(runs) == 1 else 's'}): {values or 'none yet'}"
        )
    cpu = [r["seconds"]["cpu"] for r in _all(rec.mul)]
    missing = max(int(_in_distribution_of(r)["missing"]) for r in _all(rec.mul))
    none = (
        "no output lacked a number"
        if missing == 0
        else f"at most {missing} of 2,000 outputs of a run lacked a number"
    )
    return lines + [
        "",
        (
            f"Signed-log MAE: {none} (such outputs are left out of it). A run took"
            f" {min(cpu):.0f}-{max(cpu):.0f} s of CPU (one thread: training, checks and"
            " evaluation)."
        ),
    ]


def _in_distribution_of(run: dict[str, Any]) -> dict[str, Any]:
    return run["evaluation"]["in_distribution"]


def verdict(c: Comparison) -> str:
    """A primary comparison in words, by its Holm-adjusted p and the endpoint's better direction:
    "better" or "worse" at Holm p <= 0.05, else "not told apart" (no p yet: "no test yet")."""
    if not math.isfinite(c.p_holm):
        return "no test yet"
    if c.p_holm > 0.05:
        return "not told apart"
    higher = c.test.mean > 0
    return "better" if higher == (c.endpoint.better == "higher") else "worse"


def mul_answer(rec: Records) -> list[str]:
    """The multiplication testbed's lines of the answer: DEL alpha 0.3 against MLE first, then every
    planned arm on both primary endpoints, each with its interval, Holm p and verdict (verdicts only
    once every seed of every arm is in: the pre-registration has no interim test)."""
    plan, seeds, comparisons = _mul_state(rec)
    complete = len(seeds) == plan["seeds"]
    main = next(c for c in comparisons if c.endpoint.key == "exact_match" and c.arm == "del-a0.3")
    head = "- **Graded testbed, 2-digit x 2-digit multiplication** (pre-registered, seed-paired; "
    if main.test.n < 2:
        return [
            head
            + f"running): {main.test.n} of {plan['seeds']} seeds pair DEL with MLE, too few for a"
            " difference yet."
        ]
    state = (
        f"complete, {plan['seeds']} seeds per arm"
        if complete
        else f"interim: {main.test.n} of {plan['seeds']} seeds"
    )
    said = f" **{verdict(main).capitalize()}.**" if complete else ""
    mle_ci = seed_interval(
        [endpoint_value(rec.mul["mle"][s], "exact_match") / 100 for s in main.seeds]
    )
    lines = [
        head
        + f"{state}): DEL alpha 0.3 minus MLE in exact match {_f(main.test.mean, '{:.1f}', True)}"
        f" points {_ci(*main.test.ci)} (MLE {_mean_text(main.baseline_mean / 100, mle_ci)}), Holm p"
        f" {_p(main.p_holm)}.{said} These seeds detect {main.mde:.1f} points (80 % power); the"
        " paper's gain is +2.6. Every planned comparison, arm minus MLE:"
    ]
    for arm in _mul_arms(plan):
        cells = []
        for c in (c for c in comparisons if c.arm == arm and c.endpoint.primary):
            word = verdict(c) if complete else "interim"
            word = f"**{word}**" if word in ("better", "worse") else word
            cells.append(
                f"{c.endpoint.title} {_difference(c)}, Holm p {_p(c.p_holm)}, {word} "
                f"(detects {_f(c.mde, _fmt(c))})"
            )
        lines.append(f"  - `{arm}`: " + "; ".join(cells) + ".")
    return lines


def answer(rec: Records) -> list[str]:
    """The answer block: each comparison's bottom line (docs/results.md's first screen, and the
    README's)."""
    lines = mul_answer(rec)
    add = {r["arm"]: r for r in _add_state(rec)}
    d = add["del-a0.3"]
    lines.append(
        f"- **Three-digit addition** ({d['runs']} seeds each, a learnt-or-not outcome): "
        + (
            "not told apart, and too few seeds to tell. "
            if min(d["stratified_logrank_p"], d["mcnemar_p"]) > 0.05
            else "told apart at p <= 0.05 by a paired test (uncorrected). "
        )
        + f"DEL alpha 0.3 learnt the task in {d['learnt']} of {d['runs']} runs, MLE in"
        f" {d['baseline_learnt']}: {_f(100 * d['share_difference'], '{:.0f}', True)} points"
        f" {_ci(100 * d['share_ci'][0], 100 * d['share_ci'][1], '{:.0f}')}, seed-stratified"
        f" log-rank p {_p(d['stratified_logrank_p'])}; detecting a rise from"
        f" {100 * d['baseline_learnt'] / d['baseline_runs']:.0f} % would need about"
        f" {100 * d['detectable_share']:.0f} % learnt at these counts."
    )
    lines.append(pretrained_answer(rec))
    lines += followup_answer(rec) + followup_answer(rec, "seeds")
    lines += centered_answer(rec)
    lines += mul_centered_answer(rec)
    lines += dose_answer(rec)
    grids = [rec.mul, rec.mul_centered, rec.add] + [
        rec.pretrained_grid(name)[1]
        for name in (
            PRETRAINED_GRID,
            ALPHA_GRID,
            REPLICATE_GRID,
            FRESH_GRID,
            SEEDS8_GRID,
            CENTERED_GRID,
            GENTLE_GRID,
            DOSE_GRID,
        )
    ]
    # a run counts once: the control's MLE records are the follow-up's, copied
    every: dict[str, dict[int, dict[str, Any]]] = {}
    for record in {
        (r["hash"], r["label"], r["seed"], r.get("finished_at")): r
        for runs in grids
        for r in _all(runs)
    }.values():
        every.setdefault(f"{record['hash']}/{record.get('finished_at')}", {})[record["seed"]] = (
            record
        )
    return lines + ["", machine(every)]


# -- the pretrained arm ---------------------------------------------------------------------------
def _pretrained_state(rec: Records) -> dict[str, Any]:
    """What the pretrained grid's records say: planned, recorded and missing runs (the untrained
    model's among the planned), the seeds every arm has, the held-out set's arms and comparisons
    against the reference (MLE) and the untrained model."""
    from grid_driver import BASELINE

    compare, found, summary, planned, missing = _grid_runs(rec, PRETRAINED_GRID)
    labels = [spec.label for spec in compare.objectives]
    return {
        "found": found,
        "summary": summary,
        "reference": summary["reference"],
        "planned": len(planned) + 1,
        "recorded": len(planned) - len(missing) + (BASELINE in found),
        "missing": missing,
        "seeds": list(compare.seeds),
        "complete_seeds": [s for s in compare.seeds if all(s in found.get(a, {}) for a in labels)],
        "entry": summary["sets"].get(
            "heldout", {"arms": {}, "versus_reference": {}, "versus_untrained": {}}
        ),
        "complete": not missing and BASELINE in found,
    }


def _pp(share: float, signed: bool = True) -> str:
    return _f(100 * share, "{:.1f}", signed)


def _pretrained_comparison(label: str, c: dict[str, Any]) -> str:
    """One comparison against MLE in words: difference, seed-level interval, McNemar, detectable
    effects."""
    seed_ci = (
        f" {_ci(100 * c['ci95'][0], 100 * c['ci95'][1])} over {len(c['seeds'])} seeds, sign-flip p "
        f"{_p(c['sign_flip_p'])}"
        if len(c["seeds"]) >= 2
        else " (one seed: no seed-level interval yet)"
    )
    detect = f"{100 * c['mde_items']:.1f} points by items"
    if len(c["seeds"]) >= 2:
        detect += f", {100 * c['mde_seeds']:.1f} by seeds"
    return (
        f"{label} minus MLE {_pp(c['mean_diff'])} points{seed_ci}; items right only under {label} /"
        f" only under MLE {c['b']} / {c['c']}, McNemar Holm p {_p(c['mcnemar_p_holm'])}; detectable"
        f" {detect}"
    )


def pretrained_answer(rec: Records) -> str:
    """The pretrained arm's line of the answer block."""
    state = _pretrained_state(rec)
    entry, reference = state["entry"], state["reference"]
    head = (
        "- **A pretrained model, one recipe** (SmolLM2-135M-Instruct, LoRA r16 at lr 1e-3 for 100"
        " steps, 200x the paper's full-fine-tuning lr, bf16 autocast, 2-digit word-problem answers,"
        " teacher-forced exact match on 1,000 held-out problems; "
        + (
            "complete"
            if state["complete"]
            else f"interim: {len(state['complete_seeds'])} of {len(state['seeds'])} seeds"
        )
        + "): "
    )
    if reference not in entry["arms"]:
        return head + "no run recorded yet."
    comparisons, mle = entry["versus_reference"], entry["arms"][reference]
    if "del-a0.3" not in comparisons:
        return head + f"MLE {_mean_text(mle['mean'], mle['ci95'])}, no DEL run recorded yet."
    c = comparisons["del-a0.3"]
    verdict = ""
    if state["complete"]:
        seeds_agree = len(c["seeds"]) >= 2 and (c["ci95"][0] > 0 or c["ci95"][1] < 0)
        verdict = (
            " **Raw DEL is better on these items under this recipe.**"
            if c["mcnemar_p_holm"] <= 0.05 and c["mean_diff"] > 0
            else (
                " **Raw DEL is worse on these items under this recipe.**"
                if c["mcnemar_p_holm"] <= 0.05
                else " **Not told apart.**"
            )
        )
        if c["mcnemar_p_holm"] <= 0.05:
            verdict += (
                " The seed-level interval excludes 0 as well."
                if seeds_agree
                else (
                    " The seed-level interval still holds 0: training randomness alone could"
                    " give it."
                )
            )
    return (
        head
        + f"DEL alpha 0.3 minus MLE {_pp(c['mean_diff'])} points"
        + _seed_ci(c)
        + f" (MLE {_mean_text(mle['mean'], mle['ci95'])}), item-level McNemar Holm p"
        f" {_p(c['mcnemar_p_holm'])}.{verdict} These runs detect "
        f"{100 * c['mde_items']:.1f} points by items"
        + (f", {100 * c['mde_seeds']:.1f} by seeds." if len(c["seeds"]) >= 2 else ".")
        + " Why: DEL's sigmoid reads the raw digit logits (near +30 on this model); the term"
        " lowers every logit together until, below zero, it pushes the target digit down"
        ' (docs/losses.md, "When DEL works against CE").'
    )


def pretrained_result(rec: Records) -> list[str]:
    """The pretrained section of docs/results.md: where the grid stands and each comparison."""
    state = _pretrained_state(rec)
    entry = state["entry"]
    found = state["found"]
    arms = ", ".join(
        f"{label} {_heldout_mean([r['evaluation']['heldout'] for r in found[label].values()])}"
        for label in entry["arms"]
    )
    lines = [
        f"**{state['recorded']} of {state['planned']} runs recorded"
        + (
            " (complete)"
            if state["complete"]
            else (
                f", {len(state['complete_seeds'])} of {len(state['seeds'])} seeds "
                "with every arm: an interim result"
            )
        )
        + f".** Mean exact match: {arms}."
    ]
    lines += [
        f"- {_pretrained_comparison(label, c)}." for label, c in entry["versus_reference"].items()
    ]
    checks = [
        r["evaluation"]["heldout"]["generation_check"]
        for seeds in state["found"].values()
        for r in seeds.values()
        if r["evaluation"].get("heldout", {}).get("generation_check")
    ]
    if checks:
        lines.append(
            "- Greedy decoding gave the teacher-forced verdict on"
            f" {sum(c['agree'] for c in checks)} of {sum(c['n'] for c in checks)} items decoded"
            f" (the first {checks[0]['n']} held-out problems of each of {len(checks)} runs)."
        )
    lines += pretrained_terms(state["found"], rec.mul.get("del-a0.3", {}))
    if state["found"]:
        lines += ["", machine(state["found"])]
    return lines


def _span(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return (
        fmt.format(min(values))
        if min(values) == max(values)
        else f"{fmt.format(min(values))}-{fmt.format(max(values))}"
    )


def pretrained_terms(
    found: dict[str, dict[int, dict[str, Any]]], scratch_del: dict[int, dict[str, Any]]
) -> list[str]:
    """Where DEL's term sits on the pretrained model, from the logged curves: its size at the first
    logged step beside the cross-entropy's (and beside DEL's on the from-scratch testbed), and the
    held-out digit entropy of every arm. Descriptive: the records show sizes, not causes."""
    runs = [r for r in found.get("del-a0.3", {}).values() if (r.get("curve") or {}).get("aux")]
    if not runs:
        return []
    aux0 = [r["curve"]["aux"][0] for r in runs]
    ce0 = [r["curve"]["ce"][0] for r in runs]
    later = [
        (r["curve"]["step"][2], r["curve"]["aux"][2]) for r in runs if len(r["curve"]["aux"]) > 2
    ]  # the third log
    line = (
        f"- DEL's term on the pretrained model: {_span(aux0)} per digit at the first logged step,"
        f" beside a cross-entropy of {_span(ce0)} (with alpha 0.3 it adds"
        f" {_span([0.3 * a for a in aux0])} to the loss)"
    )
    if later:
        line += (
            f"; by step {max(int(step) for step, _ in later)} it is {_span([a for _, a in later])}"
        )
    scratch = [
        r["curve"]["aux"][0] for r in scratch_del.values() if (r.get("curve") or {}).get("aux")
    ]
    if scratch:
        line += f". On the multiplication testbed, from scratch, it starts at {_span(scratch)}"
    entropy = ", ".join(
        f"{label} {_span([r['evaluation']['heldout']['digit_entropy'] for r in seeds.values()])}"
        for label, seeds in found.items()
        if all("digit_entropy" in r["evaluation"]["heldout"] for r in seeds.values())
    )
    return [
        line + ".",
        (
            "- Teacher-forced digit entropy at the gold digits of the held-out problems (nats, per"
            f" run): {entropy}."
        ),
    ]


def pretrained_grid(rec: Records) -> list[str]:
    """docs/results-pretrained.md's status: every recorded run's score and the tests of the
    summary."""
    state = _pretrained_state(rec)
    found, missing = state["found"], state["missing"]
    lines = [
        f"**{state['recorded']} of {state['planned']} runs recorded"
        + (
            ", the grid is complete.**"
            if state["complete"]
            else f"; left: {', '.join(missing) or 'the untrained model'}.**"
        ),
        "",
    ]
    lines += summary_markdown_lines(state["summary"])
    if found:
        lines += ["", machine(found)]
    return lines


ALPHA_GRID = "compare-smollm2-words-alpha"
"""The pretrained arm's follow-up: DEL at a tenth of the alpha against MLE, on its own machine."""
REPLICATE_GRID = "compare-smollm2-words-replicate"
"""Its control: DEL at the grid's alpha against the same MLE runs, on the follow-up's machine."""
FRESH_GRID = "compare-smollm2-words-fresh"
"""Four more seeds (4-7) of DEL alpha 0.3 against MLE on the follow-up's machine: the confirmatory
McNemar."""
SEEDS8_GRID = "compare-smollm2-words-seeds8"
"""Those pooled with the control's seeds 0-3: the 8-seed sign-flip test."""

TESTS = {"mcnemar_p_holm": ("McNemar p", "mde_items"), "sign_flip_p": ("sign-flip p", "mde_seeds")}
"""A follow-up's deciding test: its p in the summary, its name in the prose, its detectable
effect."""


def _grid_runs(rec: Records, grid: str) -> tuple[Any, dict[str, Any], dict[str, Any], list, list]:
    """(CompareConfig, found, summary, planned (label, seed) runs, missing run names) of the
    pretrained grid configs/<grid>.yaml."""
    compare, found, summary = rec.pretrained_grid(grid)
    planned = [(spec.label, seed) for seed in compare.seeds for spec in compare.objectives]
    missing = [f"{label}-s{seed}" for label, seed in planned if seed not in found.get(label, {})]
    return compare, found, summary, planned, missing


def _followup_state(rec: Records, grid: str, arm: str) -> dict[str, Any]:
    """A two-arm follow-up's records (`grid`: `arm` against MLE): planned and missing runs, the
    summary and, when `arm` has pairs with MLE, its held-out comparison."""
    _, found, summary, planned, missing = _grid_runs(rec, grid)
    comparison = summary["sets"].get("heldout", {}).get("versus_reference", {}).get(arm)
    return {
        "found": found,
        "planned": planned,
        "missing": missing,
        "summary": summary,
        "comparison": comparison,
    }


def _followup_reading(
    state: dict[str, Any], worse: str, otherwise: str, test: str = "mcnemar_p_holm"
) -> str | None:
    """The reading fixed in a follow-up's design, once all of its runs are in (else None), by its
    deciding `test` (a key of TESTS)."""
    c = state["comparison"]
    if c is None or state["missing"]:
        return None
    if c[test] <= 0.05 and c["mean_diff"] < 0:
        return worse
    said = "better than MLE" if c[test] <= 0.05 else "not told apart from MLE"
    return otherwise.format(verdict=said, mde=100 * c[TESTS[test][1]])


def _status(
    planned: Sequence[Any], missing: Sequence[str], name_missing: bool = False
) -> list[str]:
    """A grid's first lines: how many of its planned runs are recorded, and while some are missing
    (named, or counted), that what follows is interim with no verdict."""
    left = ", ".join(missing) if name_missing else f"{len(missing)} runs"
    return [
        f"**{len(planned) - len(missing)} of {len(planned)} runs recorded"
        + (", complete.**" if not missing else f"; left: {left}: an interim result, no verdict.**"),
        "",
    ]


def _followup(
    rec: Records, grid: str, arm: str, readings: tuple[str, str], test: str = "mcnemar_p_holm"
) -> list[str]:
    """A two-arm follow-up's status: its runs, the McNemar and seed-level tests and, once all of
    its runs are in, the reading fixed in its design by its deciding `test` (`readings`: worse
    when `arm` is worse than MLE at p <= 0.05, else the other with {verdict}: better than MLE, or
    not told apart)."""
    state = _followup_state(rec, grid, arm)
    planned, missing = state["planned"], state["missing"]
    if not state["found"]:
        return [f"**0 of {len(planned)} runs recorded.**"]
    lines = _status(planned, missing, name_missing=True)
    reading = _followup_reading(state, *readings, test)
    if reading is not None:
        c = state["comparison"]
        lines += [
            (
                f"Reading, as fixed in the design: `{arm}` minus MLE {_pp(c['mean_diff'])} points,"
                f" {TESTS[test][0]} {_p(c[test])}: {reading}"
            ),
            "",
        ]
    return lines + summary_markdown_lines(state["summary"]) + ["", machine(state["found"])]


ALPHA_READINGS = (
    (
        "**worse than MLE: a tenth of the term still harms**, so its size alone does not explain"
        " the grid's result."
    ),
    (
        "**{verdict}**: consistent with the harm going with the term's size; the items detect "
        "{mde:.1f} points."
    ),
)
REPLICATE_READINGS = (
    (
        "**worse than MLE: the grid's result holds on this machine**, so the two alphas meet MLE on"
        " one CPU."
    ),
    (
        "**{verdict} here**: the grid's result did not reproduce on this machine; the items "
        "detect {mde:.1f} points."
    ),
)

FRESH_READINGS = (
    "**worse than MLE on seeds never run before: the item-level result replicates.**",
    (
        "**{verdict} on the fresh seeds**: the item-level result did not replicate; the items "
        "detect {mde:.1f} points."
    ),
)
SEEDS8_READINGS = (
    (
        "**worse than MLE beyond the spread training randomness gives these 8 pairs** (the test was"
        " chosen after seeds 0-3: its level is above the nominal 0.05)."
    ),
    "**{verdict} at the seed level**: the 8 pairs detect {mde:.1f} points.",
)


def _seed_ci(c: dict[str, Any]) -> str:
    """' [low, high] over seeds' for a pretrained comparison with two seeds or more, else ''."""
    return (
        f" {_ci(100 * c['ci95'][0], 100 * c['ci95'][1])} over seeds" if len(c["seeds"]) >= 2 else ""
    )


def _reading_end(
    line: str, state: dict[str, Any], readings: tuple[str, str], test: str = "mcnemar_p_holm"
) -> str:
    """`line` closed by the follow-up's reading once all of its runs are in, else by a full stop."""
    reading = _followup_reading(state, *readings, test=test)
    return line + (f"; {reading}" if reading else ".")


def _interim(state: dict[str, Any]) -> str:
    """'complete', or how many of a grid's planned runs are in."""
    planned, missing = state["planned"], state["missing"]
    return (
        f"interim: {len(planned) - len(missing)} of {len(planned)} runs" if missing else "complete"
    )


#: the answer's follow-up lines: (grid, arm, title, design, the arm in words, readings) of the
#: line's own follow-up (McNemar), then of the follow-up that closes it: (grid, arm, its words
#: before the difference, the fewest seeds it is shown with, its deciding test, readings)
FOLLOWUP_ANSWERS = {
    "alpha": (
        (
            ALPHA_GRID,
            "del-a0.03",
            "Follow-up on the pretrained model, a tenth of the alpha",
            "pre-registered, 4 seeds on another CPU",
            "DEL alpha 0.03",
            ALPHA_READINGS,
        ),
        (
            REPLICATE_GRID,
            "del-a0.3",
            " Its control, DEL alpha 0.3 on that machine{interim}:",
            1,
            "mcnemar_p_holm",
            REPLICATE_READINGS,
        ),
    ),
    "seeds": (
        (
            FRESH_GRID,
            "del-a0.3",
            "Four more seeds of the pretrained comparison",
            "pre-registered, seeds 4-7 on the follow-up's CPU",
            "DEL alpha 0.3",
            FRESH_READINGS,
        ),
        (
            SEEDS8_GRID,
            "del-a0.3",
            " Over the {n} seed pairs on that CPU:",
            5,
            "sign_flip_p",
            SEEDS8_READINGS,
        ),
    ),
}


def followup_answer(rec: Records, which: str = "alpha") -> list[str]:
    """A follow-up's line of the answer block (FOLLOWUP_ANSWERS; none before its first pair of
    runs): its design and completeness, its arm minus MLE with the seed interval and McNemar p,
    then the follow-up that closes it, each with its reading once all of its runs are in."""
    (grid, label, title, design, arm, readings), closing = FOLLOWUP_ANSWERS[which]
    state = _followup_state(rec, grid, label)
    c = state["comparison"]
    if c is None:
        return []
    line = _reading_end(
        f"- **{title}** ({design}; {_interim(state)}): {arm} minus MLE {_pp(c['mean_diff'])}"
        f" points{_seed_ci(c)}, McNemar p {_p(c['mcnemar_p_holm'])}",
        state,
        readings,
    )
    grid, label, words, fewest, test, readings = closing
    state = _followup_state(rec, grid, label)
    k = state["comparison"]
    if k is not None and len(k["seeds"]) >= fewest:
        interim = f" ({_interim(state)})" if state["missing"] else ""
        line = _reading_end(
            line
            + words.format(interim=interim, n=len(k["seeds"]))
            + f" {_pp(k['mean_diff'])} points{_seed_ci(k)}, {TESTS[test][0]} {_p(k[test])}",
            state,
            readings,
            test,
        )
    return [line]


def summary_markdown_lines(summary: dict[str, Any]) -> list[str]:
    """grid_driver.summary_markdown's tables, the held-out set named in words."""
    from grid_driver import summary_markdown

    return (
        summary_markdown(summary)
        .rstrip("\n")
        .replace("### heldout", "Held-out problems (1,000):")
        .splitlines()
    )


# -- the addition grid ----------------------------------------------------------------------------
def _add_state(rec: Records) -> list[dict[str, Any]]:
    return rec.once("add", lambda: learning_analysis(rec.add, "mle", ADD_ARMS))


def add_paired(rec: Records) -> list[str]:
    head = [
        "arm",
        "learnt",
        "MLE learnt",
        "difference in share [95 % CI]",
        "Fisher p",
        "detectable share",
        "log-rank p",
        "stratified log-rank p",
        "McNemar (arm only / MLE only), p",
        "exact match arm - MLE, paired [95 % CI]",
        "detectable",
    ]
    rows = []
    for r in _add_state(rec):
        em = r["exact_match"]
        rows.append(
            [
                f"`{r['arm']}`",
                f"{r['learnt']} of {r['runs']}",
                f"{r['baseline_learnt']} of {r['baseline_runs']}",
                (
                    f"{_f(100 * r['share_difference'], '{:.0f}', True)}"
                    f" {_ci(100 * r['share_ci'][0], 100 * r['share_ci'][1], '{:.0f}')}"
                ),
                _p(r["fisher_p"]),
                f"{100 * r['detectable_share']:.0f} %",
                _p(r["logrank_p"]),
                _p(r["stratified_logrank_p"]),
                f"{r['only_arm']} / {r['only_baseline']}, {_p(r['mcnemar_p'])}",
                f"{_f(em.mean, '{:.1f}', True)} {_ci(*em.ci)}",
                f"{r['exact_match_mde']:.0f}",
            ]
        )
    return _table(head, rows) + ["", machine(rec.add)]


def _exact_match(run: dict[str, Any]) -> float:
    return endpoint_value(run, "exact_match")


def add_facts(rec: Records) -> list[str]:
    records = _all(rec.add)
    learnt, other = (
        sorted((r for r in records if r["learning"]["learnt"] == flag), key=_exact_match)
        for flag in (True, False)
    )
    cpu = [r["seconds"]["cpu"] for r in records]
    mle = [endpoint_value(r, "exact_match") for r in rec.add["mle"].values()]
    mle_learnt = [rec.add["mle"][s]["learning"]["learnt"] for s in range(4)]
    learnt_on = {
        label: sum(rec.add[label][s]["learning"]["learnt"] for s in range(4))
        for label in ("mle",) + DEMO_ARMS
    }
    counts = {label: len(seeds) for label, seeds in rec.add.items()}
    most = max(counts.values())

    def ends(runs: list[dict[str, Any]]) -> str:
        return " to ".join(f"{_wilson(_in_distribution_of(r))} %" for r in (runs[0], runs[-1]))

    return [
        (
            f"{len(counts)} objectives:"
            f" {', '.join(f'`{k}`' for k, v in counts.items() if v == most)} with {most} seeds, the"
            f" other {sum(v < most for v in counts.values())} with {min(counts.values())}, all on"
            f" one machine. Over the {len(records)} runs, the {len(learnt)} that learnt score from"
            f" {ends(learnt)} on the 2,000 test items (the range of the runs, each end with its"
            f" Wilson 95 % interval) and the {len(other)} that did not from {ends(other)}: the"
            " ranges overlap (the 200-item"
            " check slice is noisier than the test set), so learnt-or-not is a threshold on a"
            f" continuum, not a gap. MLE's per-seed exact match has SD {statistics.stdev(mle):.1f}"
            f" points over {len(mle)} seeds. A run took {min(cpu):.1f}-{max(cpu):.1f} s of CPU (one"
            " thread; less when it learnt early). Seeds 0-3, the demo's, are easy ones for MLE:"
            f" {sum(mle_learnt)} of 4 learnt, against"
            f" {sum(r['learning']['learnt'] for r in rec.add['mle'].values())} of {len(mle)} over"
            f" all seeds; on them DEL alpha 0.3 learnt in {learnt_on['del-a0.3']} of 4 and NTL-WAS"
            f" in {learnt_on['ntl-was']} of 4."
        ),
    ]


# -- chunked numbers ------------------------------------------------------------------------------
def _chunked_rows(runs: dict[str, dict[int, dict[str, Any]]]) -> list[list[str]]:
    rows = []
    base = [
        Outcome(int(r["learning"]["step"]), bool(r["learning"]["learnt"]))
        for r in runs["mle"].values()
    ]
    for label in ["mle"] + [label for label in runs if label != "mle"]:
        seeds = runs[label]
        outcomes = [
            Outcome(int(r["learning"]["step"]), bool(r["learning"]["learnt"]))
            for r in seeds.values()
        ]
        em = [endpoint_value(r, "exact_match") for r in seeds.values()]
        threshold = next(iter(seeds.values()))["learning"]["threshold"]
        if label == "mle":
            tests = ["-", "-", "-"]
        else:
            pair = [outcomes, base]
            paired = paired_analysis(runs, "mle", [label], endpoints=[ENDPOINTS[0]])[0]
            tests = [
                _p(logrank(pair)),
                _p(logrank_exact_p(pair)),
                f"{_f(paired.test.mean, '{:.1f}', True)} {_ci(*paired.test.ci)}",
            ]
        rows.append(
            [
                f"`{label}`",
                str(len(outcomes)),
                f"{sum(o.learnt for o in outcomes)} (>= {100 * threshold:.0f} %)",
                f"{median_steps(outcomes):.0f}"
                if math.isfinite(median_steps(outcomes))
                else "> 3200",
                _seed_mean(em),
                *tests,
            ]
        )
    return rows


def chunked(rec: Records) -> list[str]:
    head = [
        "objective",
        "runs",
        "learnt",
        "median steps",
        "exact match %, mean [95 % CI over seeds]",
        "log-rank p (chi-square)",
        "log-rank p (exact)",
        "exact match - MLE, paired [95 % CI]",
    ]
    lines = ["Three-digit addition, numbers in chunks of up to 3 digits:", ""] + _table(
        head, _chunked_rows(rec.chunked)
    )
    lines += [
        "",
        machine(rec.chunked),
        "",
        "Two-digit addition, same tokenizer (graded: runs train to the end):",
        "",
    ]
    lines += _table(head, _chunked_rows(rec.chunked2)) + ["", machine(rec.chunked2)]
    return lines


# -- the shift-invariant DEL: grids a and b (docs/results-pretrained.md) ---------------------------
CENTERED_GRID = "compare-smollm2-words-centered"
GENTLE_GRID = "compare-smollm2-words-gentle"
#: each grid's primary comparisons (arm, against), Holm over them, and the one reported beside
#: them (not in the Holm family), as fixed in its design
# the designs' comparisons (numloss.compare.item_paired; the demo reads them too)
#: the pre-registered comparisons of the three-arm pretrained grids (configs/<name>.yaml): the
#: primary pairs (Holm-adjusted McNemar p over them) and the pairs shown beside them (not in Holm)
GRID_COMPARISONS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]] = {
    CENTERED_GRID: (
        (("del-centered-a0.3", "mle"), ("del-centered-a0.3", "del-a0.3")),
        (("del-a0.3", "mle"),),
    ),
    GENTLE_GRID: (
        (("del-centered-a1.28", "mle"), ("del-a1.28", "mle")),
        (("del-centered-a1.28", "del-a1.28"),),
    ),
}


def design_comparisons(
    bits: dict[str, dict[int, str]],
    primary: Sequence[tuple[str, str]],
    beside: Sequence[tuple[str, str]] = (),
) -> dict[tuple[str, str], dict[str, Any]]:
    """`item_paired.paired_comparison` of every (arm, against) pair of a design whose two arms
    share a seed in `bits` ({label: {seed: verdict string}}); the primary pairs carry
    `mcnemar_p_holm` (Holm over those of them present), the pairs beside them do not."""
    comparisons: dict[tuple[str, str], dict[str, Any]] = {}
    for arm, against in (*primary, *beside):
        if set(bits.get(arm, {})) & set(bits.get(against, {})):
            comparisons[(arm, against)] = item_paired.paired_comparison(bits[arm], bits[against])
    tested = [pair for pair in primary if pair in comparisons]
    for pair, p in zip(
        tested, holm([comparisons[pair]["mcnemar_p"] for pair in tested]), strict=True
    ):
        comparisons[pair]["mcnemar_p_holm"] = p
    return comparisons


def bits_of(runs: dict[int, dict[str, Any]]) -> dict[int, str]:
    """{seed: the held-out items' 0/1 verdicts} of one arm's records."""
    return {seed: r["evaluation"]["heldout"]["items"] for seed, r in runs.items()}


def _three_arm_state(rec: Records, grid: str) -> dict[str, Any]:
    """A three-arm grid's records: planned and missing runs, and each comparison of its design
    (item-paired: McNemar over seeds as strata, seed-level t interval and sign-flip), the
    primary ones with Holm-adjusted McNemar p."""
    compare, found, summary, planned, missing = _grid_runs(rec, grid)
    bits = {label: bits_of(runs) for label, runs in found.items()}
    primary, beside = GRID_COMPARISONS[grid]
    comparisons = design_comparisons(bits, primary, beside)
    return {
        "compare": compare,
        "found": found,
        "summary": summary,
        "planned": planned,
        "missing": missing,
        "comparisons": comparisons,
        "primary": primary,
        "complete": not missing,
    }


def _grid_reading(arm: str, against: str, c: dict[str, Any], alpha: float = 0.05) -> str:
    """The reading fixed in the designs of grids a and b for one primary comparison `c` (with its
    `mcnemar_p_holm`) of `arm` against `against` (MLE, or raw DEL for a centred arm), and, where
    the seed-level interval holds 0, that training randomness alone could give it (the docs and the
    demo both say it through this function)."""
    if c["mcnemar_p_holm"] > alpha:
        return f"not told apart (the items detect {100 * c['mde_items']:.1f} points)"
    if against != "mle":
        reading = (
            "centring removes (part of) raw DEL's harm"
            if c["mean_diff"] > 0
            else "centring makes it worse"
        )
    else:
        reading = "better than MLE" if c["mean_diff"] > 0 else "worse than MLE"
    if len(c["seeds"]) >= 2 and c["ci95"][0] <= 0 <= c["ci95"][1]:
        reading += (
            " on these items (its seed-level interval holds 0: training randomness alone could"
            " give it)"
        )
    return reading


#: the package file `numloss demo` prints the recorded grid a from (a wheel has no results/)
DEMO_RECORDED = ROOT / "src" / "numloss" / RECORDED_GRID_TEXT
RAW, CENTERED = "del-a0.3", "del-centered-a0.3"  # grid a's DEL arms beside MLE (demo.BASELINE)
#: the recorded trace's steps (where logged): the collapse of raw DEL happens by step 15
RECORDED_TRACE_STEPS = (1, 5, 10, 15, 20, 30, 50, 100)


def demo_recorded(rec: Records) -> list[str]:
    """What `numloss demo` prints of grid a beside its fresh runs: its runs (how many of the
    design's), every arm's mean exact match, the design's comparisons (seed-level 95 % interval,
    McNemar p, Holm over the primary pair) with, once every run is in, their readings, and the
    recorded mean digit-logit trace of the three arms."""
    from numloss.demo import BASELINE, _columns, _interval, _mean_curves, _pct, trace_lines

    state = _three_arm_state(rec, CENTERED_GRID)
    grid, missing = state["compare"], state["missing"]
    runs = {label: seeds for label, seeds in state["found"].items() if label != "untrained"}
    lines = [
        f"Recorded: grid a ({CENTERED_GRID}.yaml: the same recipe at"
        f" {grid.base.get('train', {}).get('max_steps')} steps, {grid.task.test_size} held-out"
        " items, seeds paired: seed s of every arm has the same data and initial weights), from"
        f" results/{CENTERED_GRID}/:"
    ]
    done = len(state["planned"]) - len(missing)
    if not done:
        return lines + [f"  0 of {len(state['planned'])} runs recorded."]
    seeds = sorted({seed for arm in runs.values() for seed in arm})
    status = (
        "complete"
        if not missing
        else (
            f"interim, {len(missing)} runs to come ({', '.join(missing)}): no verdict until every"
            " run is in"
        )
    )
    planned = len(state["planned"])
    lines.append(f"  {done} of {planned} runs recorded, seeds {seeds[0]}-{seeds[-1]}; {status}.")
    rows = [("arm", "seeds", "mean exact match [95 % CI over seeds]")]
    for spec in grid.objectives:
        if spec.label in runs:
            ems = [b.count("1") / len(b) for b in bits_of(runs[spec.label]).values()]
            mean = f"{_pct(statistics.fmean(ems))} {_interval(*seed_interval(ems))}"
            rows.append((spec.label, str(len(ems)), mean))
    lines += _columns(rows)
    head = ("comparison", "seeds", "diff (points)", "95 % CI over seeds", "McNemar p", "Holm p")
    rows = [(*head, "reading")]
    for (arm, against), c in state["comparisons"].items():
        one = len(c["seeds"]) < 2
        ci = "n/a (1 seed)" if one else f"[{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"
        if "mcnemar_p_holm" not in c:
            holm_p, reading = "beside", "beside the design's primary pair: no verdict"
        else:
            holm_p = _p(c["mcnemar_p_holm"])
            reading = _grid_reading(arm, against, c) if not missing else "no verdict (interim)"
        diff, p = f"{100 * c['mean_diff']:+.1f}", _p(c["mcnemar_p"])
        rows.append((f"{arm} - {against}", str(len(c["seeds"])), diff, ci, p, holm_p, reading))
    machines = "; ".join(
        sorted(
            {
                f"{r['machine']['cpu']} ({r['machine'].get('vector_extension')}), "
                f"torch {r['machine']['torch']}, {r['machine']['date']}"
                for arm in runs.values()
                for r in arm.values()
            }
        )
    )
    lines += [""] + _columns(rows)
    lines.append(
        "  McNemar on item verdicts (seeds as strata); Holm over the design's primary pair. "
        f"Recorded on {machines}."
    )
    curves = {label: runs[label] for label in (BASELINE, RAW, CENTERED) if label in runs}
    trace = trace_lines(curves, "digit_logit_mean", steps=RECORDED_TRACE_STEPS)
    if trace:
        counts = {label: n for label, (_, _, n) in _mean_curves(curves, "digit_logit_mean").items()}
        lines += [
            "",
            "Recorded trace of digit_logit_mean, mean over the seeds"
            f" ({', '.join(f'{k} {v}' for k, v in counts.items())}), raw against centred DEL:",
            *trace,
        ]
    return lines


def _without_versus_mle(lines: list[str]) -> list[str]:
    """A summary's lines without its "arm vs mle" table: its McNemar p is Holm-adjusted over every
    arm, while a three-arm design holds its own family (the design's table says which)."""
    out, skipping = [], False
    for line in lines:
        if line.startswith("| arm vs mle"):
            skipping = True
        if skipping and not line.startswith("|"):
            skipping = False
            if out and out[-1] == "":
                continue
        if not skipping:
            out.append(line)
    return out


WHY_HEAD = [
    "arm",
    "seeds",
    "exact match, % [95 % CI, seeds]",
    "digit entropy (nats)",
    "answer NLL (nats)",
    "last pushdown share",
    "last digit logit mean",
]


def why_rows(found: dict[str, dict[int, dict[str, Any]]]) -> list[list[str]]:
    """Per trained arm, means over its seeds: held-out exact match, teacher-forced digit entropy at
    the gold digits and the answer's NLL, and the training curve's last `pushdown_share` and
    `digit_logit_mean` (what the term does, beside what it scores)."""
    from grid_driver import BASELINE

    def mean(values: list[float]) -> str:
        return f"{statistics.fmean(values):.3f}" if values else "n/a"

    rows = []
    for label, seeds in found.items():
        if label == BASELINE:
            continue
        heldout = [r["evaluation"]["heldout"] for r in seeds.values()]
        curves = [r.get("curve") or {} for r in seeds.values()]
        rows.append(
            [
                f"`{label}`",
                str(len(seeds)),
                _heldout_mean(heldout, prose=False),
                mean([h["digit_entropy"] for h in heldout if "digit_entropy" in h]),
                mean([h["answer_nll"] for h in heldout if "answer_nll" in h]),
                mean([c["pushdown_share"][-1] for c in curves if c.get("pushdown_share")]),
                mean([c["digit_logit_mean"][-1] for c in curves if c.get("digit_logit_mean")]),
            ]
        )
    return rows


def why_table(found: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """`why_rows` as a table with its caption."""
    return [
        (
            "Why, per arm (means over seeds; digit entropy and NLL teacher-forced on the held-out"
            " answers):"
        ),
        "",
    ] + _table(WHY_HEAD, why_rows(found))


def _comparison_rows(state: dict[str, Any]) -> list[str]:
    rows = [
        (
            "| comparison | diff (pp) | 95 % CI, seeds (pp) | sign-flip p | b / c | McNemar p |"
            " Holm p | MDE items / seeds (pp) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for (arm, against), c in state["comparisons"].items():
        one_seed = len(c["seeds"]) < 2
        rows.append(
            f"| {arm} vs {against} | {100 * c['mean_diff']:+.1f} |"
            f" {'n/a (1 seed)' if one_seed else _ci(100 * c['ci95'][0], 100 * c['ci95'][1])} |"
            f" {'n/a' if one_seed else _p(c['sign_flip_p'])} | {c['b']} / {c['c']} |"
            f" {_p(c['mcnemar_p'])} |"
            f" {_p(c['mcnemar_p_holm']) if 'mcnemar_p_holm' in c else 'beside (not in Holm)'} |"
            f" {100 * c['mde_items']:.1f} /"
            f" {'n/a' if one_seed else format(100 * c['mde_seeds'], '.1f')} |"
        )
    return rows


def three_arm_grid(rec: Records, grid: str) -> list[str]:
    """A three-arm grid's block: its runs, every arm per seed, the comparisons of its design and,
    once every run is in, their readings."""
    state = _three_arm_state(rec, grid)
    planned, missing = state["planned"], state["missing"]
    if not state["found"]:
        return [f"**0 of {len(planned)} runs recorded.**"]
    lines = _status(planned, missing)
    if state["complete"]:
        for arm, against in state["primary"]:
            c = state["comparisons"][(arm, against)]
            lines.append(
                f"- `{arm}` vs `{against}`: {_pp(c['mean_diff'])} points, McNemar Holm p "
                f"{_p(c['mcnemar_p_holm'])}: **{_grid_reading(arm, against, c)}**."
            )
        lines.append("")
    lines += _without_versus_mle(summary_markdown_lines(state["summary"]))
    lines += [""] + why_table(state["found"])
    if state["comparisons"]:
        lines += [
            "",
            (
                "The comparisons of the design (McNemar on item verdicts, seeds as strata; Holm"
                " over the primary two):"
            ),
            "",
        ] + _comparison_rows(state)
    return lines + ["", machine(state["found"])]


DIAGNOSTICS_FIGURE = ROOT / "docs" / "img" / "compare" / "del_diagnostics.png"
#: the arms the figure draws, in order, with their colours
DIAGNOSTIC_ARMS = (("mle", "tab:gray"), ("del-a0.3", "tab:red"), ("del-centered-a0.3", "tab:blue"))


def diagnostics_figure(rec: Records, path: Path = DIAGNOSTICS_FIGURE) -> Path | None:
    """Grid a's digit diagnostics against the training step: `digit_logit_mean` and
    `pushdown_share` (what raw DEL's term would do, for MLE) of every recorded run (thin) and
    their mean over seeds (thick), MLE, raw and centred DEL. None (nothing drawn) before any run
    with the diagnostics is recorded."""
    found = rec.pretrained_grid(CENTERED_GRID)[1]
    curves = {
        label: [
            r["curve"]
            for r in found.get(label, {}).values()
            if "pushdown_share" in r.get("curve", {})
        ]
        for label, _ in DIAGNOSTIC_ARMS
    }
    if not any(curves.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, title in (
        (axes[0], "digit_logit_mean", "mean raw digit logit at digit targets"),
        (axes[1], "pushdown_share", "share of digit positions DEL's term pushes down"),
    ):
        for label, colour in DIAGNOSTIC_ARMS:
            runs = curves[label]
            for curve in runs:
                ax.plot(curve["step"], curve[key], color=colour, lw=0.6, alpha=0.35)
            if runs:
                steps = runs[0]["step"]
                same = [c[key] for c in runs if c["step"] == steps]
                mean = [sum(values) / len(values) for values in zip(*same, strict=True)]
                ax.plot(
                    steps,
                    mean,
                    color=colour,
                    lw=2,
                    label=f"{label} ({len(runs)} seed{'s' * (len(runs) > 1)})",
                )
        ax.set_xlabel("training step")
        ax.set_title(title, fontsize=9)
    axes[0].axhline(0, color="black", lw=0.8)
    axes[1].axhline(0.5, color="black", lw=0.8, ls="--")
    axes[1].set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(
        "SmolLM2-135M-Instruct, LoRA lr 1e-3 (grid a): for MLE, what raw DEL's term would do at its"
        " logits",
        fontsize=9,
    )
    return _save_figure(fig, path)


def _versus(c: dict[str, Any], arm: str, against: str) -> str:
    return (
        f"{arm} minus {against} {_pp(c['mean_diff'])} points{_seed_ci(c)}, McNemar Holm p"
        f" {_p(c['mcnemar_p_holm'])} (the items detect {100 * c['mde_items']:.1f}"
        + (f", the seeds {100 * c['mde_seeds']:.1f})" if len(c["seeds"]) >= 2 else ")")
    )


#: the answer's line of each three-arm grid: its question, its design in brief, each arm's name in
#: words, each primary pair's name in the verdict, and whether the pairs beside the primary ones are
#: described after it (no verdict)
THREE_ARM_ANSWERS = {
    CENTERED_GRID: (
        "Does centring DEL's sigmoid remove the harm?",
        "the same recipe in float32 on an AVX2 CPU, MLE and raw DEL run again beside centred DEL"
        " alpha 0.3; pre-registered, 8 seeds",
        {"del-centered-a0.3": "centred DEL", "del-a0.3": "raw DEL", "mle": "MLE"},
        ("against MLE", "against raw DEL"),
        False,
    ),
    GENTLE_GRID: (
        "A gentler recipe, four changes at once",
        "against grid a: LoRA lr 2e-4 with warm-up instead of 1e-3, 200 steps instead of 100,"
        " held-out problems whose arithmetic fact no training problem has, and raw and centred DEL"
        " at the released recipe's weight 1.28 instead of 0.3, so no one change can be named the"
        " cause; pre-registered, 8 seeds",
        {"del-centered-a1.28": "centred DEL", "del-a1.28": "raw DEL", "mle": "MLE"},
        ("centred DEL", "raw DEL"),
        True,
    ),
}


def three_arm_answer(rec: Records, grid: str) -> str:
    """A three-arm grid's line of the answer (THREE_ARM_ANSWERS): each primary comparison with
    both of its arms recorded, and once every run is in, the readings fixed in its design."""
    state = _three_arm_state(rec, grid)
    title, design, names, verdict_names, beside = THREE_ARM_ANSWERS[grid]
    line = f"- **{title}** ({design}; {_interim(state)}): "
    shown = [pair for pair in state["primary"] if pair in state["comparisons"]]
    if not shown:
        return line + "no seed with two arms recorded yet."
    comparisons = state["comparisons"]
    line += "; ".join(_versus(comparisons[p], names[p[0]], names[p[1]]) for p in shown)
    if state["complete"]:
        readings = "; ".join(
            f"{name}: {_grid_reading(*pair, comparisons[pair])}"
            for name, pair in zip(verdict_names, state["primary"], strict=True)
        )
        line += ". **" + readings[0].upper() + readings[1:] + ".**"
    else:
        line += ": no verdict until every run is in."
    for arm, against in GRID_COMPARISONS[grid][1] if beside else ():
        if (arm, against) in comparisons:
            c = comparisons[(arm, against)]
            line += (
                f" Beside them (outside Holm, no verdict pre-registered): {names[arm]} minus"
                f" {names[against]} {_pp(c['mean_diff'])} points{_seed_ci(c)}, McNemar p"
                f" {_p(c['mcnemar_p'])}."
            )
    return line


def centered_answer(rec: Records) -> list[str]:
    """The answer's lines on the shift-invariant DEL: grid a (same recipe), grid b (gentler)."""
    return [three_arm_answer(rec, CENTERED_GRID), three_arm_answer(rec, GENTLE_GRID)]


# -- grid d: the dose-response of centred DEL (docs/results-pretrained.md) ------------------------
DOSE_GRID = "compare-smollm2-words-dose"
#: the arms of grid d's design, each tested one-sided ("helps") against MLE, Holm over the four
DOSE_ARMS = (
    "del-centered-a0.03",
    "del-centered-a0.1",
    "del-centered-a0.3",
    "del-centered-detached-a0.3",
)
#: the trend test's doses in rank order: MLE is alpha 0; the last is grid b's centred DEL at 1.28
DOSE_TREND = ("mle", "del-centered-a0.03", "del-centered-a0.1", "del-centered-a0.3")
GENTLE_DOSE = "del-centered-a1.28"


def dose_state(rec: Records) -> dict[str, Any]:
    """Grid d's records and its design's tests: per arm against MLE, the one-sided exact McNemar
    (arm right where MLE is wrong more often) and the one-sided seed-level t, each Holm-adjusted
    over the arms present; the trend slope per seed over alpha 0-1.28; detached against attached."""
    from scipy import stats

    _, found, _, planned, missing = _grid_runs(rec, DOSE_GRID)
    bits = {label: bits_of(runs) for label, runs in found.items()}
    tests: dict[str, dict[str, Any]] = {}
    for arm in DOSE_ARMS:
        if set(bits.get(arm, {})) & set(bits.get("mle", {})):
            c = item_paired.paired_comparison(bits[arm], bits["mle"])
            c["mcnemar_helps_p"] = (
                float(stats.binomtest(c["b"], c["b"] + c["c"], 0.5, alternative="greater").pvalue)
                if c["b"] + c["c"]
                else 1.0
            )
            diffs = [p["diff"] for p in c["per_seed"]]
            c["t_helps_p"] = (
                float(stats.ttest_1samp(diffs, 0.0, alternative="greater").pvalue)
                if len(diffs) >= 2
                else math.nan
            )
            tests[arm] = c
    for key in ("mcnemar_helps_p", "t_helps_p"):
        present = [arm for arm in tests if math.isfinite(tests[arm][key])]
        for arm, adjusted in zip(present, holm([tests[arm][key] for arm in present]), strict=True):
            tests[arm][key + "_holm"] = adjusted
    gentle = rec.pretrained_grid(GENTLE_GRID)[1]
    slopes = {}
    for seed in sorted(found.get("mle", {})):
        runs = [found.get(label, {}).get(seed) for label in DOSE_TREND]
        far = [gentle.get(label, {}).get(seed) for label in (GENTLE_DOSE, "mle")]
        if all(runs) and all(far):
            base = runs[0]["evaluation"]["heldout"]["exact_match"]
            ys = [r["evaluation"]["heldout"]["exact_match"] - base for r in runs]
            ys.append(
                far[0]["evaluation"]["heldout"]["exact_match"]
                - far[1]["evaluation"]["heldout"]["exact_match"]
            )
            slopes[seed] = float(stats.linregress(range(len(ys)), ys).slope)
    trend = None
    if len(slopes) >= 2:
        values = list(slopes.values())
        trend = {
            "seeds": sorted(slopes),
            "mean_slope": statistics.fmean(values),
            "p": float(stats.ttest_1samp(values, 0.0).pvalue),
        }
    detached = None
    if set(bits.get("del-centered-detached-a0.3", {})) & set(bits.get("del-centered-a0.3", {})):
        detached = item_paired.paired_comparison(
            bits["del-centered-detached-a0.3"], bits["del-centered-a0.3"]
        )
    return {
        "found": found,
        "planned": planned,
        "missing": missing,
        "tests": tests,
        "trend": trend,
        "detached": detached,
        "complete": not missing,
    }


def why_grids(rec: Records) -> list[str]:
    """docs/losses.md's why tables: per arm of grids a, b and d, what each scores beside what its
    term does to the digit distribution."""
    lines: list[str] = []
    for grid, title in (
        (CENTERED_GRID, "Grid a (LoRA lr 1e-3, 100 steps, alpha 0.3)"),
        (GENTLE_GRID, "Grid b (lr 2e-4, 200 steps, unseen facts, alpha 1.28)"),
        (DOSE_GRID, "Grid d (grid b's recipe, centred DEL at three weights and with p detached)"),
    ):
        found = rec.pretrained_grid(grid)[1]
        lines += [f"**{title}**:" + (" no run recorded yet." if not found else ""), ""]
        if found:
            lines += _table(WHY_HEAD, why_rows(found)) + ["", machine(found), ""]
            if grid == DOSE_GRID and (share := detached_share(found)):
                lines += [*share, ""]
    return lines[:-1]


def detached_share(found: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """Grid d's line on where centred DEL's rise in held-out digit entropy and answer NLL comes
    from: per seed, attached and detached centred DEL at 0.3 minus MLE, and the share of the
    attached rise that goes when p is held constant (described: the design tests exact match)."""
    arms = ("mle", "del-centered-a0.3", "del-centered-detached-a0.3")
    keys = {"digit_entropy": "digit entropy", "answer_nll": "answer NLL"}

    def heldout(arm: str, seed: int) -> dict[str, Any]:
        return found.get(arm, {}).get(seed, {}).get("evaluation", {}).get("heldout", {})

    seeds = [
        s
        for s in sorted(found.get("mle", {}))
        # a seed counts when all three arms hold both measures as finite numbers
        if all(math.isfinite(heldout(a, s).get(k, math.nan)) for a in arms for k in keys)
    ]
    if len(seeds) < 2:
        return []
    parts = []
    for key, name in keys.items():
        attached, detached = (
            paired_t([heldout(arm, s)[key] - heldout("mle", s)[key] for s in seeds])
            for arm in arms[1:]
        )
        share = 100 * (1 - detached.mean / attached.mean) if attached.mean > 0 else math.nan
        parts.append(
            f"{name} {attached.mean:+.3f} nats {_ci(*attached.ci, fmt='{:.3f}')} with p attached,"
            f" {detached.mean:+.3f} {_ci(*detached.ci, fmt='{:.3f}')} with p held constant (holding"
            f" p removes {_f(share, '{:.0f}')} % of the rise)"
        )
    return [
        f"Where the rise comes from, centred DEL at 0.3 minus MLE, paired by seed over {len(seeds)}"
        " seeds (95 % intervals; described, not tested): " + "; ".join(parts) + "."
    ]


def dose_reading(c: dict[str, Any]) -> str:
    """The decision rule fixed in grid d's design, for one arm's tests against MLE."""
    items = c.get("mcnemar_helps_p_holm", math.nan) <= 0.05
    seeds = c.get("t_helps_p_holm", math.nan) <= 0.05
    if items and seeds:
        return "helps"
    if items:
        return (
            "the items favour it, the seeds do not show it beyond training randomness: not shown to"
            " help"
        )
    return "did not help"


def dose_grid(rec: Records) -> list[str]:
    """docs/results-pretrained.md's grid d: its runs, each arm's one-sided tests against MLE (Holm
    over the arms), the why per arm, the trend over alpha and, once every run is in, the readings.
    """
    state = dose_state(rec)
    planned, missing = state["planned"], state["missing"]
    if not state["found"]:
        return [f"**0 of {len(planned)} runs recorded.**"]
    lines = _status(planned, missing)
    rows = []
    for arm, c in state["tests"].items():
        one = len(c["seeds"]) < 2
        rows.append(
            [
                f"`{arm}`",
                str(len(c["seeds"])),
                _pp(c["mean_diff"]),
                "n/a (1 seed)" if one else _ci(100 * c["ci95"][0], 100 * c["ci95"][1]),
                f"{c['b']} / {c['c']}",
                _p(c.get("mcnemar_helps_p_holm", math.nan)),
                _p(c.get("t_helps_p_holm", math.nan)),
                f"{100 * c['mde_items']:.1f} / {'n/a' if one else format(100 * c['mde_seeds'], '.1f')}",  # noqa: E501
                dose_reading(c) if state["complete"] else "no verdict (interim)",
            ]
        )
    if rows:
        lines += (
            ["Each arm against MLE, one-sided (helps), Holm over the four arms:", ""]
            + _table(
                [
                    "arm",
                    "seeds",
                    "diff (pp)",
                    "95 % CI, seeds (pp)",
                    "b / c",
                    "McNemar p (Holm)",
                    "t p (Holm)",
                    "MDE items / seeds (pp, two-sided)",
                    "reading",
                ],
                rows,
            )
            + [""]
        )
    lines += why_table(state["found"])
    trend, detached = state["trend"], state["detached"]
    if trend:
        lines += [
            "",
            (
                "Beside them, the trend over alpha 0, 0.03, 0.1, 0.3 and 1.28 (grid b), per seed:"
                f" mean slope {100 * trend['mean_slope']:+.2f} points per dose step over"
                f" {len(trend['seeds'])} seeds, two-sided t p {_p(trend['p'])} (not in Holm)."
            ),
        ]
    if detached:
        lines += [
            "",
            (
                "Beside them, detached minus attached centred DEL at 0.3:"
                f" {_pp(detached['mean_diff'])} points{_seed_ci(detached)}, McNemar p"
                f" {_p(detached['mcnemar_p'])} (described, no verdict)."
            ),
        ]
    return lines + ["", machine(state["found"])]


def dose_answer(rec: Records) -> list[str]:
    """The answer's line on grid d: interim counts, or the decision rule applied to every arm."""
    state = dose_state(rec)
    head = (
        "- **Can any form of DEL help this model? A dose-response** (grid b's recipe; centred DEL"
        " at alpha 0.03, 0.1 and 0.3, and at 0.3 with p held constant; MLE rerun on an AVX-512"
        f" CPU; pre-registered, 8 seeds, one-sided tests, Holm over the arms; {_interim(state)}): "
    )
    if not state["tests"]:
        return [head + "no seed with an arm and MLE recorded yet."]
    parts = [
        f"`{arm}` minus MLE {_pp(c['mean_diff'])} points{_seed_ci(c)}"
        for arm, c in state["tests"].items()
    ]
    if not state["complete"]:
        return [head + "; ".join(parts) + ": no verdict until every run is in."]
    readings = {arm: dose_reading(c) for arm, c in state["tests"].items()}
    helped = [arm for arm, reading in readings.items() if reading == "helps"]
    verdict = (
        f"**{', '.join(helped)} helped.**"
        if helped
        else "**No form of DEL tried helped this model at this recipe.**"
    )
    # the decision rule reports each arm that did not help with what its items and seeds detect
    detects = {
        arm: f"detects {_f(100 * c['mde_items'])} by items, {_f(100 * c['mde_seeds'])} by seeds"
        for arm, c in state["tests"].items()
    }
    trend = state["trend"]
    beside = (
        f" Beside them (outside Holm): the trend over alpha 0-1.28 is"
        f" {100 * trend['mean_slope']:+.2f} points per dose step, t p {_p(trend['p'])}."
        if trend
        else ""
    )
    return [
        head
        + "; ".join(
            f"{part} ({readings[arm]}; {detects[arm]})"
            for part, arm in zip(parts, state["tests"], strict=True)
        )
        + ". "
        + verdict
        + beside
    ]


RENDERERS: dict[str, Callable[[Records], list[str]]] = {
    "answer": answer,
    "mul-shape": mul_shape,
    "mul-plan": mul_plan,
    "mul-primary": mul_primary,
    "mul-secondary": mul_secondary,
    "mul-runs": mul_runs,
    "add-paired": add_paired,
    "add-facts": add_facts,
    "chunked": chunked,
    "pretrained": pretrained_result,
    "pretrained-grid": pretrained_grid,
    "readme-answer": answer,
    # docs/results-pretrained.md's follow-ups (the tenth alpha, its control on the follow-up's
    # machine, four more seeds, the 8 seed pairs read by their sign-flip test) and grids a and b
    "pretrained-alpha": partial(
        _followup, grid=ALPHA_GRID, arm="del-a0.03", readings=ALPHA_READINGS
    ),
    "pretrained-replicate": partial(
        _followup, grid=REPLICATE_GRID, arm="del-a0.3", readings=REPLICATE_READINGS
    ),
    "pretrained-fresh": partial(
        _followup, grid=FRESH_GRID, arm="del-a0.3", readings=FRESH_READINGS
    ),
    "pretrained-seeds8": partial(
        _followup, grid=SEEDS8_GRID, arm="del-a0.3", readings=SEEDS8_READINGS, test="sign_flip_p"
    ),
    "pretrained-centered": partial(three_arm_grid, grid=CENTERED_GRID),
    "pretrained-gentle": partial(three_arm_grid, grid=GENTLE_GRID),
    "mul-centered": mul_centered_grid,
    "pretrained-dose": dose_grid,
    "why": why_grids,
}


def render(text: str, rec: Records | None = None) -> str:
    """`text` with every results block rewritten from the records (unknown block names: an
    error)."""
    rec = rec or Records()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise KeyError(f"unknown results block {name!r}; known: {', '.join(RENDERERS)}")
        return match.group(1) + "\n".join(RENDERERS[name](rec)) + "\n" + match.group(4)

    return BLOCK.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with --check, compare) the generated blocks of the given page, or of every page
    in DOCS; 1 when --check finds a block that differs from the records."""
    args = list(sys.argv[1:] if argv is None else argv)
    given = [Path(a) for a in args if not a.startswith("-")]
    rec = Records()
    status = 0
    for path in given or DOCS:
        text = path.read_text()
        rendered = render(text, rec)
        if "--check" in args:
            if rendered != text:
                print(
                    f"{path}: numbers differ from the records; run python scripts/results_doc.py",
                    file=sys.stderr,
                )
                status = 1
            else:
                print(f"{path}: every generated block matches the records")
            continue
        write_text_atomic(path, rendered)
        print(f"{path}: {len(BLOCK.findall(text))} blocks written from the records")
    recorded = {"lines": demo_recorded(rec)}
    if "--check" in args and not given:
        same = DEMO_RECORDED.is_file() and json.loads(DEMO_RECORDED.read_text()) == recorded
        print(f"{DEMO_RECORDED}: {'matches' if same else 'differs from'} the records")
        status = status or int(not same)
    if "--check" not in args and not given:
        write_json_atomic(DEMO_RECORDED, recorded)
        print(f"{DEMO_RECORDED}: written from the records")
        print(f"{mul_figure(rec)}: drawn from the records")
        drawn = diagnostics_figure(rec)
        if drawn is not None:
            print(f"{drawn}: drawn from the records")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
