"""`python scripts/grid_driver.py CONFIG`: a grid that cannot come back empty, for a machine
shared or lent for a while. A script, not part of the installed package (`numloss compare` is the
user command; numloss must be importable).

The same runs as `numloss compare` (numloss.compare.runner.run_one: the same training, scoring
and run hash, so its records are `numloss compare` records), driven for a machine whose time is
cut off from outside (a device call, a shared CPU across sessions):

- **the untrained model first**, scored by the task like a run (label `untrained`): the
  baseline every trained run is compared with;
- **seed-major order** (every objective of seed 0, then of seed 1, ...): a grid cut short leaves
  whole seed-paired sets;
- **each run's record written the moment it finishes** (`records_dir`, and a copy in every
  `--also-to` folder, e.g. a device call's $OUT), atomically; a run whose record exists is not
  trained again, so the next call or session continues where the last stopped;
- **a failing run is recorded** (`FAILED-<label>-s<seed>-<hash>.json`: the error and the end of
  its traceback) **and the rest go on**; it is tried again on the next start;
- **`--budget-s`**: no run starts that the slowest run so far says would not finish in time (the
  first always starts: it is the timing run); what is left is printed with the command that
  continues it;
- `--shard I/N`: this process takes every N-th run of the order (N processes share one GPU);
- at the end `summary.md` / `summary.json` (numloss.compare.item_paired: McNemar and seed-paired
  tests of every arm against the first objective, and of every arm against the untrained model).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numloss.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from numloss.compare.config import RESULT_SCHEMA, CompareConfig
from numloss.compare.runner import (
    Grid,
    RunKey,
    config_threads,
    key_hash,
    read_record,
    record_path,
    write_record,
)
from numloss.config import ConfigError
from numloss.textio import jsonable as _jsonable

BASELINE = "untrained"


def run_order(compare: CompareConfig) -> list[RunKey]:
    """Seed-major: every objective of the first seed, then the next seed, ..."""
    return [RunKey(spec, seed) for seed in compare.seeds for spec in compare.objectives]


def baseline_hash(compare: CompareConfig) -> str:
    """What decides the untrained model's scores: the model section and the task."""
    payload = {
        "model": compare.base.get("model", {}),
        "task": compare.task.to_dict(),
        "schema": RESULT_SCHEMA,
        "baseline": True,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]


def evaluate_untrained(compare: CompareConfig) -> dict[str, Any]:
    """The task's scores of the model every run starts from, as a run record (label `untrained`)."""
    import torch

    from numloss.compare.machine import machine_info
    from numloss.train import load_model_for

    started = time.perf_counter()
    key = RunKey(compare.objectives[0], compare.seeds[0])
    config = compare.run_config(
        key.spec, key.seed, compare.output_dir / "runs" / BASELINE, Path("train.jsonl")
    )
    config.lora.enabled = False  # the base model itself, not a zero-initialised adapter on it
    model, tokenizer = load_model_for(config)
    with torch.inference_mode():
        evaluation = compare.task.evaluate(model.eval(), tokenizer)
    return _jsonable(
        {
            "hash": baseline_hash(compare),
            "label": BASELINE,
            "objective": None,
            "seed": 0,
            "steps": 0,
            # no training: the fields every record holds, empty
            "curve": {},
            "train_metrics": {},
            "learning": None,
            "evaluation": evaluation,
            "seconds": {"total": time.perf_counter() - started},
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": machine_info(),
        }
    )


def _copy(path: Path, folders: list[Path]) -> None:
    """`path` into each of `folders`, atomically: a kill mid-copy keeps the copy already there."""
    data = path.read_bytes()
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(folder / path.name, data)


def _failure_path(records: Path, name: str, run_hash: str) -> Path:
    return records / f"FAILED-{name}-{run_hash}.json"


def run_pretrained_grid(
    compare: CompareConfig,
    budget_s: float | None = None,
    baseline: bool = True,
    also_to: list[Path] | None = None,
    shard: tuple[int, int] = (0, 1),
    run: Callable[..., dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run what is missing of the grid (see the module doc) through `Grid`, `numloss compare`'s
    runner; returns {finished, failed, left, skipped, busy}. Torch uses the config's
    `torch_threads`."""
    started = time.perf_counter()
    also_to = list(also_to or [])
    records = compare.records_dir or compare.output_dir / "records"
    records.mkdir(parents=True, exist_ok=True)
    status: dict[str, Any] = {"finished": [], "failed": [], "left": [], "skipped": []}
    index, count = shard

    def finish(key: RunKey, result: dict[str, Any], seconds: float | None) -> None:
        _copy(record_path(records, key.name, result["hash"]), also_to)
        if seconds is None:
            status["skipped"].append(key.name)
            return
        _failure_path(records, key.name, result["hash"]).unlink(missing_ok=True)
        status["finished"].append(key.name)
        log(f"{key.name}: {_headline(result)} ({seconds:.0f} s)")

    slowest = 0.0  # wall seconds of the slowest run trained so far
    with config_threads(compare):
        if baseline and index == 0:
            _score_baseline(compare, records, also_to, status, log)
        grid = Grid(compare, records)
        keys = [key for position, key in enumerate(run_order(compare)) if position % count == index]
        grid.run(keys, finish, finished_only=True)  # every finished run first, kept and copied
        for key in (key for key in keys if key.name not in status["skipped"]):
            begun = time.perf_counter()
            if budget_s is not None and slowest and begun + slowest > started + budget_s:
                status["left"].append(key.name)  # the first run always starts: it times the rest
                continue
            try:
                grid.run([key], finish, run=run)
            except Exception as error:  # noqa: BLE001 - recorded, and the grid goes on
                _record_failure(records, also_to, key.name, key.seed, key_hash(compare, key), error)
                status["failed"].append(key.name)
                log(f"{key.name}: FAILED ({type(error).__name__}: {error})")
            slowest = max(slowest, time.perf_counter() - begun)
    status["busy"] = [key.name for key in grid.busy]
    if status["busy"]:
        log(f"left to the process training them now: {', '.join(status['busy'])}")
    if status["left"]:
        log(
            f"left (budget {budget_s:g} s, slowest run {slowest:.0f} s): "
            f"{', '.join(status['left'])}"
        )
    return status


def _score_baseline(
    compare: CompareConfig,
    records: Path,
    also_to: list[Path],
    status: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """The untrained model's record, scored unless it exists; a failure is recorded, not raised."""
    path = record_path(records, f"{BASELINE}-s0", baseline_hash(compare))
    if path.is_file():
        status["skipped"].append(BASELINE)
        _copy(path, also_to)
        return
    started = time.perf_counter()
    try:
        write_record(records, evaluate_untrained(compare))
        _copy(path, also_to)
        status["finished"].append(BASELINE)
        seconds = time.perf_counter() - started
        log(
            f"{BASELINE}: {_headline(json.loads(path.read_text(encoding='utf-8')))}"
            f" ({seconds:.0f} s)"
        )
    except Exception as error:  # noqa: BLE001 - recorded, and the grid goes on
        _record_failure(records, also_to, BASELINE, 0, baseline_hash(compare), error)
        status["failed"].append(BASELINE)
        log(f"{BASELINE}: FAILED ({error})")


def _headline(result: dict[str, Any]) -> str:
    from numloss.compare.report import exact_match_text

    sets = result.get("evaluation", {})
    return ", ".join(
        f"{name} {exact_match_text(ev)} of {ev['n']}" for name, ev in sorted(sets.items())
    )


def _record_failure(
    records: Path, also_to: list[Path], name: str, seed: int, run_hash: str, error: BaseException
) -> None:
    label = name.rsplit("-s", 1)[0]
    payload = {
        "hash": run_hash,
        "label": label,
        "seed": seed,
        "failed": True,
        "error": f"{type(error).__name__}: {error}",
        "traceback": "".join(traceback.format_exception(error))[-4000:],
        "failed_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = _failure_path(records, name, run_hash)
    write_json_atomic(path, payload)
    _copy(path, also_to)


def load_records(
    compare: CompareConfig, records: Path | None = None
) -> dict[str, dict[int, dict[str, Any]]]:
    """{label: {seed: record}} of the finished runs of this grid (this config's hashes) in
    `records`, the untrained model under `untrained` (seed 0)."""
    records = records or compare.records_dir or compare.output_dir / "records"
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for key in run_order(compare):
        record = read_record(records, key.name, key_hash(compare, key))
        if record is not None:
            found.setdefault(key.spec.label, {})[key.seed] = record
    base = read_record(records, f"{BASELINE}-s0", baseline_hash(compare))
    if base is not None:
        found[BASELINE] = {0: base}
    return found


def summarise(compare: CompareConfig, records: Path | None = None) -> dict[str, Any]:
    """Per set: every arm's exact match per seed (with its Wilson interval over the items) and its
    mean over seeds (with the seed t interval, NaN below two seeds), and the paired tests of each
    arm against the first objective (Holm over those) and against the untrained model."""
    from numloss.compare.item_paired import paired_comparison
    from numloss.compare.paired import holm
    from numloss.compare.stats import seed_interval, wilson_interval

    found = load_records(compare, records)
    reference = compare.objectives[0].label
    sets = sorted(
        {name for arm in found.values() for r in arm.values() for name in r["evaluation"]}
    )
    summary: dict[str, Any] = {"reference": reference, "sets": {}}
    for set_name in sets:
        bits = {
            label: {
                seed: r["evaluation"][set_name]["items"]
                for seed, r in arm.items()
                if set_name in r["evaluation"]
            }
            for label, arm in found.items()
        }
        entry: dict[str, Any] = {"arms": {}, "versus_reference": {}, "versus_untrained": {}}
        for label, arm in bits.items():
            ems = {seed: s.count("1") / len(s) for seed, s in sorted(arm.items())}
            entry["arms"][label] = {
                "per_seed": ems,
                "per_seed_ci95": {
                    seed: wilson_interval(s.count("1"), len(s)) for seed, s in sorted(arm.items())
                },
                "mean": sum(ems.values()) / len(ems) if ems else float("nan"),
                "ci95": seed_interval(list(ems.values())),  # NaN below two seeds
            }
        others = [s.label for s in compare.objectives[1:] if s.label in bits and reference in bits]
        for label in others:
            if set(bits[label]) & set(bits[reference]):
                entry["versus_reference"][label] = paired_comparison(bits[label], bits[reference])
        adjusted = holm(
            [entry["versus_reference"][k]["mcnemar_p"] for k in entry["versus_reference"]]
        )
        for k, p in zip(entry["versus_reference"], adjusted, strict=True):
            entry["versus_reference"][k]["mcnemar_p_holm"] = p
        if BASELINE in bits:
            for spec in compare.objectives:
                if spec.label in bits:
                    untrained = {seed: bits[BASELINE][0] for seed in bits[spec.label]}
                    entry["versus_untrained"][spec.label] = paired_comparison(
                        bits[spec.label], untrained
                    )
        summary["sets"][set_name] = entry
    return summary


def _percent_interval(ci: Any) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def summary_markdown(summary: dict[str, Any]) -> str:
    """The summary as Markdown tables (percentage points; p exact, Holm-adjusted where said): every
    exact match with its 95 % interval (Wilson over one run's items, t over seeds for a mean; one
    seed says it has no spread)."""
    lines: list[str] = []
    for set_name, entry in summary["sets"].items():
        lines += [
            f"### {set_name}",
            "",
            "| arm | seeds | exact match per seed, % [95 % CI, items] | mean, % [95 % CI, seeds] |",
            "|---|---|---|---|",
        ]
        for label, arm in entry["arms"].items():
            per = ", ".join(
                f"{100 * v:.1f} {_percent_interval(arm['per_seed_ci95'][seed])}"
                for seed, v in arm["per_seed"].items()
            )
            spread = (
                _percent_interval(arm["ci95"])
                if len(arm["per_seed"]) > 1
                else "(one seed: no spread)"
            )
            lines.append(
                f"| {label} | {len(arm['per_seed'])} | {per} | {100 * arm['mean']:.1f} {spread} |"
            )
        for title, block in (
            ("vs " + summary["reference"], entry["versus_reference"]),
            ("vs untrained", entry["versus_untrained"]),
        ):
            if not block:
                continue
            lines += [
                "",
                (
                    f"| arm {title} | diff (pp) | 95 % CI, seeds (pp) | sign-flip p | b / c |"
                    " McNemar"
                    f" p{' (Holm)' if 'reference' in title or summary['reference'] in title else ''}"  # noqa: E501
                    " | MDE items / seeds (pp) |"
                ),
                "|---|---|---|---|---|---|---|",
            ]
            for label, c in block.items():
                p = c.get("mcnemar_p_holm", c["mcnemar_p"])
                # no seed-level interval, test or detectable effect yet
                one_seed = len(c["seeds"]) < 2
                seed_ci = (
                    "n/a (1 seed)"
                    if one_seed
                    else f"[{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"
                )
                lines.append(
                    f"| {label} | {100 * c['mean_diff']:+.1f} | {seed_ci} | "
                    f"{'n/a' if one_seed else format(c['sign_flip_p'], '.3g')} | {c['b']} /"
                    f" {c['c']} | "
                    # an exact p below the smallest double
                    f"{'< 1e-300' if p == 0 else format(p, '.3g')} | "
                    f"{100 * c['mde_items']:.1f} /"
                    f" {'n/a' if one_seed else format(100 * c['mde_seeds'], '.1f')} |"
                )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point; 2 for a bad configuration, 1 when a run failed (its record says why)."""
    from numloss.compare import build_parser, quiet_training_logs, resolve
    from numloss.compare.arith_words import ArithmeticWordTask

    parser = build_parser("python scripts/grid_driver.py")
    parser.description = __doc__
    parser.add_argument(
        "--budget-s", type=float, help="start no run that would not finish within this many seconds"
    )
    parser.add_argument(
        "--also-to", action="append", default=[], help="copy every record here too (repeatable)"
    )
    parser.add_argument(
        "--shard", default="0/1", help="I/N: take every N-th run of the order, from the I-th"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="do not score the untrained model"
    )
    parser.add_argument(
        "--summary-only", action="store_true", help="train nothing: summarise the records"
    )
    args = parser.parse_args(argv)
    try:
        compare = resolve(args)
        index, count = (int(x) for x in args.shard.split("/"))
        if not 0 <= index < count:
            raise ValueError
        if not isinstance(compare.task, ArithmeticWordTask):
            # the summary's paired tests read per-item verdicts, which only arith_words records keep
            raise ConfigError(
                f"{args.config}: this driver needs task.kind arith_words (its records keep the "
                f"per-item verdicts its paired tests read), got {type(compare.task).__name__}; "
                "run this config with `numloss compare`"
            )
    except ConfigError as error:
        print(f"numloss compare: {error}", file=sys.stderr)
        return 2
    except ValueError:
        print(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}", file=sys.stderr)
        return 2
    if args.smoke and compare.records_dir is None:
        compare.records_dir = compare.output_dir / "records"
    if not args.verbose:
        quiet_training_logs()
    also_to = [Path(p) for p in args.also_to]
    status: dict[str, Any] = {"failed": []}
    if not args.summary_only:
        from numloss.compare import run_reporting_errors

        # Ctrl-C or SIGTERM, a bad config, a failed write: one line and `numloss compare`'s status
        stopped = run_reporting_errors(
            "numloss compare",
            compare,
            lambda: status.update(
                run_pretrained_grid(
                    compare,
                    budget_s=args.budget_s,
                    baseline=not args.no_baseline,
                    also_to=also_to,
                    shard=(index, count),
                )
            ),
        )
        if stopped:
            return stopped
    summary = summarise(compare)
    text = summary_markdown(summary)
    for folder in [compare.output_dir, *also_to]:
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / f"summary-{index}.json", _jsonable(summary))
        write_text_atomic(folder / f"summary-{index}.md", text)
    print(text)
    return 1 if status["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
