"""`numloss demo`: the default comparison, small enough for a laptop (what `make demo` runs).

Trains the tiny character-level model once per objective and seed of `configs/compare-demo.yaml`
(run from the repository root, or pass a config): MLE, DEL (alpha 0.3) and NTL-WAS x 4 seeds on
the default task, two runs at a time. Every 200 steps each run is checked on 200 held-out items;
it has learnt the task at the first check with exact match >= 80 % and stops there. The demo
prints how many runs of each objective learnt it and by which step (the learnt-by-step curves are
in `runs/demo/learnt_by_step.png`), then the final exact match. Four seeds show the spread of a
bimodal outcome; they do not rank objectives. So beside them it prints the recorded 20-seed table
of the same objectives (`results/compare/`, the runs of `configs/compare.yaml` whose config hash is
the demo's own), with the seed-paired tests against MLE; an objective is marked only when that
difference is significant (docs/results.md). Started again, it skips the runs that already
finished. The full grid: `numloss compare configs/compare.yaml`.

`numloss demo --worked-example` prints instead every objective's loss terms on one fixed batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from numloss.digits import DigitVocab, find_digits
from numloss.losses import LOSSES, build_loss
from numloss.package_data import RECORDED_DEMO_RUNS, config_path, packaged

_CHARS = list("0123456789.") + list(" =+-*/abcdefghijklmnopqrstuvwxyz")
DEMO_CONFIG = Path("configs/compare-demo.yaml")
GRID_CONFIG = Path("configs/compare.yaml")  # the recorded grid whose runs the demo's are
#: what the recorded table reads of a run record (numloss.compare.analysis.learning_analysis)
_RECORD_KEYS = ("label", "seed", "hash", "learning", "machine")


def recorded_runs(demo: Any, grid_config: Path = GRID_CONFIG) -> dict[str, dict[int, dict[str, Any]]]:
    """The recorded runs of the grid (`grid_config`'s records_dir) that are the demo's own runs:
    label -> seed -> record, for every seed whose record has the hash the demo config gives it."""
    import re

    from numloss.compare.config import load_compare_config
    from numloss.compare.runner import read_record

    grid = load_compare_config(grid_config)
    if grid.records_dir is None or not Path(grid.records_dir).is_dir():
        return {}
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for spec in demo.objectives:
        seeds = sorted({int(m[1]) for p in Path(grid.records_dir).glob(f"{spec.label}-s*-*.json")
                        if (m := re.fullmatch(rf"{re.escape(spec.label)}-s(\d+)-[0-9a-f]{{16}}\.json", p.name))})
        for seed in seeds:
            config = demo.run_config(spec, seed, Path("unused"), Path("unused.jsonl"))
            record = read_record(Path(grid.records_dir), f"{spec.label}-s{seed}", demo.run_hash(config))
            if record is not None:
                runs.setdefault(spec.label, {})[seed] = record
    return runs


def trim_record(record: dict[str, Any]) -> dict[str, Any]:
    """The parts of a run record the recorded table reads (learning, final exact match, machine)."""
    trimmed = {key: record[key] for key in _RECORD_KEYS}
    trimmed["evaluation"] = {"in_distribution": {"exact_match": record["evaluation"]["in_distribution"]["exact_match"]}}
    return trimmed


def export_recorded_runs(root: Path = Path(".")) -> Path:
    """Write the demo's recorded runs (trimmed) from a checkout's results/compare/ to the package
    file the demo reads when installed from a wheel; returns its path. Run from the repository
    root after the grid's records change: tests/test_demo_recorded.py checks the two agree."""
    demo = load_demo_config(root / "configs" / DEMO_CONFIG.name)
    runs = recorded_runs(demo, root / "configs" / GRID_CONFIG.name)
    path = root / "src" / "numloss" / RECORDED_DEMO_RUNS
    path.parent.mkdir(parents=True, exist_ok=True)
    # one record a line: a changed record is a one-line diff
    blocks = []
    for label, seeds in sorted(runs.items()):
        rows = [f"  {json.dumps(str(seed))}: {json.dumps(trim_record(r), sort_keys=True)}" for seed, r in sorted(seeds.items())]
        blocks.append(f" {json.dumps(label)}: {{\n" + ",\n".join(rows) + "\n }")
    path.write_text("{\n" + ",\n".join(blocks) + "\n}\n")
    return path


def shipped_recorded_runs(demo: Any) -> dict[str, dict[int, dict[str, Any]]]:
    """The recorded runs shipped in the package (a wheel has no results/), the demo config's own
    only: a record counts when its hash is the one `demo` gives that objective and seed."""
    path = packaged(RECORDED_DEMO_RUNS)
    if not path.is_file():
        return {}
    shipped = json.loads(path.read_text())
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for spec in demo.objectives:
        for seed, record in shipped.get(spec.label, {}).items():
            config = demo.run_config(spec, int(seed), Path("unused"), Path("unused.jsonl"))
            if record.get("hash") == demo.run_hash(config):
                runs.setdefault(spec.label, {})[int(seed)] = record
    return runs


def load_demo_config(path: Path) -> Any:
    """The comparison config at `path` (`numloss.compare.config.load_compare_config`)."""
    from numloss.compare.config import load_compare_config

    return load_compare_config(path)


def recorded_table(runs: dict[str, dict[int, dict[str, Any]]], fresh: dict[str, tuple[int, int]] | None = None,
                   baseline: str = "mle", alpha: float = 0.05) -> list[str]:
    """Lines of the recorded table: per objective the fresh and recorded learnt counts, the
    difference in share learnt from `baseline` with its 95 % interval, and the seed-paired tests
    (seed-stratified log-rank, McNemar). '*' only where the stratified log-rank p, Holm-adjusted
    over the objectives, is <= `alpha`."""
    from numloss.compare.analysis import learning_analysis
    from numloss.compare.paired import holm

    if baseline not in runs:
        return []
    arms = [label for label in runs if label != baseline]
    rows = learning_analysis(runs, baseline, arms)
    adjusted = holm([r["stratified_logrank_p"] for r in rows])
    fresh = fresh or {}

    def counts(label: str) -> str:
        return f"{fresh[label][0]} of {fresh[label][1]}" if label in fresh else "-"

    def p(value: float) -> str:
        return f"{value:.2f}" if value == value else "n/a"

    base = runs[baseline]
    learnt = sum(bool(r["learning"]["learnt"]) for r in base.values())
    table = [("objective", "fresh: learnt", "recorded: learnt", f"share - {baseline} [95% CI]",
              "stratified log-rank p", "Holm p", "McNemar p"),
             (baseline, counts(baseline), f"{learnt} of {len(base)}", "-", "-", "-", "-")]
    for row, p_holm in zip(rows, adjusted, strict=True):
        low, high = row["share_ci"]
        mark = " *" if p_holm == p_holm and p_holm <= alpha else ""
        table.append((row["arm"] + mark, counts(row["arm"]), f"{row['learnt']} of {row['runs']}",
                      f"{100 * row['share_difference']:+.0f} [{100 * low:+.0f}, {100 * high:+.0f}]",
                      p(row["stratified_logrank_p"]), p(p_holm), p(row["mcnemar_p"])))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    machines = sorted({f"{r['machine']['cpu']} ({r['machine'].get('vector_extension')}), torch {r['machine']['torch']}, "
                       f"{r['machine']['date']}" for seeds in runs.values() for r in seeds.values()})
    marked = any(" *" in r[0] for r in table)
    return lines + [
        f"Recorded on {'; '.join(machines)}. Paired by seed: seed s of every objective has the same data and initial weights.",
        "'*': differs from " + baseline + " (seed-stratified log-rank, Holm over the objectives, p <= 0.05)"
        + ("." if marked else "; none does at these seed counts."),
    ]


def worked_example(seed: int = 0) -> list[tuple[str, float, float, float, int, int]]:
    """(name, loss, ce, aux, tokens, digits) of every objective on one fixed random batch."""
    vocab = DigitVocab(digit_ids=range(10), decimal_point_id=10)
    index = {c: i for i, c in enumerate(_CHARS)}
    rows = ["12+30=42", "3.5*2=7.0"]
    width = max(map(len, rows))
    labels = torch.full((len(rows), width), -100)
    for r, text in enumerate(rows):
        answer_start = text.index("=") + 1  # completion-only: the prompt is ignored
        labels[r, answer_start : len(text)] = torch.tensor([index[c] for c in text[answer_start:]])
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(rows), width, len(_CHARS) + 5, generator=generator)
    embedding = torch.randn(logits.shape[-1], 16, generator=generator)
    digits = find_digits(labels, vocab, logits.shape[-1])
    print(f"answers: {[r[r.index('=') + 1:] for r in rows]}; place indices of their digits: {digits.place.tolist()}")
    results = []
    for name in LOSSES:
        options = {"embedding": embedding} if name == "emo" else {}
        out = build_loss(name, vocab, **options)(logits, labels)
        results.append(
            (name, float(out.loss), float(out.ce), float(out.aux), int(out.num_tokens), int(out.num_digits))
        )
    return results


def _print_worked_example(seed: int) -> None:
    print(f"{'objective':<10}{'loss':>10}{'ce':>10}{'aux':>10}{'tokens':>8}{'digits':>8}")
    for name, loss, ce, aux, tokens, digits in worked_example(seed):
        print(f"{name:<10}{loss:>10.4f}{ce:>10.4f}{aux:>10.4f}{tokens:>8}{digits:>8}")


def main(argv: list[str] | None = None) -> int:
    """`numloss demo` entry point (see the module docstring)."""
    from numloss.compare import (
        build_parser,
        quiet_training_logs,
        resolve,
        run_comparison,
        run_reporting_errors,
    )
    from numloss.config import ConfigError

    parser = build_parser("numloss demo")
    parser.description = __doc__
    parser.add_argument("--worked-example", action="store_true", help="print every loss on one fixed batch and exit")
    parser.add_argument("--seed", type=int, default=0, help="seed of the worked example's batch")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.worked_example:
        if not 0 <= args.seed < 2**32:  # torch and numpy take seeds in this range
            print(f"numloss demo: --seed must be in [0, 2**32), got {args.seed}", file=sys.stderr)
            return 2
        _print_worked_example(args.seed)
        return 0
    default = args.config is None
    if default:  # the checkout's configs/, else the copy in the installed package
        args.config = str(config_path(DEMO_CONFIG.name))
    try:
        compare = resolve(args, default_config=None)
    except ConfigError as error:
        print(f"numloss demo: {error}", file=sys.stderr)
        return 2
    if not args.verbose:
        quiet_training_logs()
    objectives = ", ".join(s.label for s in compare.objectives)
    print(
        f"numloss demo: {len(compare.objectives)} objectives ({objectives}) x seeds {compare.seeds} on the "
        f"tiny model; report in {compare.output_dir}/. Finished runs are kept: run again to continue.\n"
        "A run has learnt the task at its first check with held-out exact match >= 80 % (every 200 steps). "
        "Four seeds per objective show the spread; they do not rank objectives: the recorded 20-seed table of "
        "the same objectives follows them (docs/results.md; the full grid: numloss compare configs/compare.yaml).",
        flush=True,
    )
    if not args.smoke:  # a missing model fails now, in one line, not in the first run
        from numloss.models import ModelUnavailableError, check_model_available

        model = compare.base.get("model", {})
        try:
            check_model_available(model.get("name", "tiny"), model.get("revision"), model.get("cache_dir"))
        except ModelUnavailableError as error:
            print(f"numloss demo: model.name: {error}", file=sys.stderr)
            return 2
    summaries: list[dict] = []
    status = run_reporting_errors("numloss demo", compare,
                                  lambda: summaries.append(run_comparison(compare, progress=not args.no_progress)))
    if status:
        return status
    summary = summaries[0]
    fresh = {label: (e["learning"]["learnt"], e["learning"]["runs"]) for label, e in summary.items() if "learning" in e}
    config_dir = Path(args.config).resolve().parent
    runs = recorded_runs(compare, config_dir / GRID_CONFIG.name)
    if not runs and default:  # installed from a wheel: no results/compare/ here, the shipped copy
        runs = shipped_recorded_runs(compare)
    lines = recorded_table(runs, fresh)
    if lines:
        print(f"\nThe same objectives in the recorded grid ({GRID_CONFIG}; the same runs, by config hash), beside "
              f"the {len(compare.seeds)} seeds just run:")
        print("\n".join(lines))
    else:
        print(f"\n(no recorded runs of these objectives found beside {args.config}: the 20-seed table is in docs/results.md)")
    return 0

