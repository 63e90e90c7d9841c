"""`numloss compare [CONFIG] [--objectives ...] [--seeds ...] [--model ...] [--out DIR]`.

Trains the same model on the same seeded data once per objective and seed, evaluates each run on
the held-out sets of the task (in-distribution, longer numbers, more decimals) and writes a report
folder: results.json, report.md (tables: mean +- std over seeds, or one seed's value with no
spread, with 95 % intervals; a mark only where a difference from the baseline is significant) and
the plots accuracy_mae.png, digit_entropy.png, place_accuracy.png, training_curves.png,
embeddings_cosine.png, embeddings_pca.png, learnt_by_step.png and exact_match_per_seed.png (each
where its data exist).
Started again with the same settings, it skips the runs that already finished.

Safety: a given option is never read as "not given": --steps, --jobs and --threads must be
positive (--threads at most the machine's cores), an empty --objectives, --seeds, --model, --out or
--records is refused, and so is a seed or objective named twice. The config file is checked key by
key (types and ranges) before anything trains; every error is one line. The report folder is
locked for the whole run: a second compare into it stops at once, naming the first. A finished run
of other settings (another --steps, say) is never deleted: it is moved to
OUT/superseded/<run>-<hash> and the console says so. A corrupted run record (records_dir) is
named and refused: restore it from git, or delete it to train that run again. With --jobs, the
workers die with the compare that started them, even when it is killed.

Inputs by content: an objective label must be a plain name (letters, digits, . _ + = -; no
separator, no '..'), since it names the run's folder. Beside its run hash every result carries
model_sha256 (the weights of a model folder, or smollm2's GGUF source; none for tiny) and
data_sha256 (its training file); a finished run or record whose hashes differ from what this
run would use (a model saved over --model DIR, say) is refused in one line naming the change.
A result or record written before these fields existed is reused as before. --report-only of a
slice (--objectives, --seeds) never replaces a fuller report; a training slice keeps the fuller
one as OUT/previous-report-TIME/. Ctrl-C prints one line (what is kept, how to go on), exit 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from numloss.compare.logs import quiet_training_logs
from numloss.config import ConfigError
from numloss.extras import require

# imported inside the functions that use them; looked up here so a missing one names its extra
require("compare", "numloss.compare", "reasoning_gym", "matplotlib")

__all__ = ["main", "run_comparison"]


def run_comparison(
    compare: Any, progress: bool = True, print_table: bool = True, finished_only: bool = False
) -> dict[str, Any]:
    """Run the grid of `compare` (a CompareConfig), write the report; returns the summary.
    `finished_only`: train nothing, report the runs already finished."""
    from numloss.compare.report import write_report
    from numloss.compare.runner import hold_output_dir, run_grid

    # the whole run holds the report folder: a second compare into it stops at once, naming this one
    with hold_output_dir(compare.output_dir):
        started = time.perf_counter()
        wanted = {f"{spec.label}-s{seed}" for spec in compare.objectives for seed in compare.seeds}
        try:  # the runs (label-s<seed>) the earlier results.json reports; none without one
            data = json.loads((compare.output_dir / "results.json").read_text(encoding="utf-8"))
            reported = {f"{r['label']}-s{r['seed']}" for r in data["runs"]}
        except (OSError, ValueError, KeyError, TypeError):
            reported = set()
        if finished_only and reported - wanted:
            raise ConfigError(
                f"{compare.output_dir / 'report.md'} reports {len(reported)} runs and this"
                f" --report-only selects {len(wanted)} (--objectives / --seeds): it would replace"
                " the fuller report; leave them out to report the whole grid"
            )
        results = run_grid(compare, progress=progress, finished_only=finished_only)
        if not results:
            raise ConfigError(
                f"no finished runs of this grid in {compare.output_dir}/runs to report"
            )
        missing = reported - {f"{r['label']}-s{r['seed']}" for r in results}
        if missing:  # a slice of the grid: its report must not silently replace the fuller one
            kept = keep_report_aside(compare.output_dir)
            print(
                f"numloss compare: the earlier report held {len(missing)} runs this one does not"
                f" ({', '.join(sorted(missing)[:4])}{', ...' if len(missing) > 4 else ''}); kept as"
                f" {kept}",
                file=sys.stderr,
            )
        meta = _report_meta(compare, results, started)
        summary = write_report(results, compare.output_dir, meta)
        if print_table:
            _print_summary(summary, meta["machine"], compare.output_dir)
        return summary


def _report_meta(compare: Any, results: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """What the report says was run: config, model, task, training, machine, times."""
    from numloss.compare.machine import machine_info, runs_machine_line

    base = compare.base
    train = base.get("train", {})
    meta = {
        "config": compare.source,
        "model": base.get("model", {}).get("name", "tiny"),
        "seeds": compare.seeds,
        "objectives": [dataclasses.asdict(s) for s in compare.objectives],
        "task": compare.task.to_dict(),
        "task_text": compare.task.describe(),
        "train_text": (
            f"{train.get('max_steps')} steps x batch {train.get('per_device_train_batch_size')}, lr"
            f" {train.get('learning_rate')},"
            f" {'LoRA' if base.get('lora', {}).get('enabled') else 'full fine-tuning'}"
        ),
        "finished": time.strftime("%Y-%m-%d %H:%M"),
        "machine_info": machine_info(),
        "torch_threads": compare.torch_threads,
        "jobs": compare.jobs,
        "wall_seconds": time.perf_counter() - started,
        # invariant under resumption, unlike the wall time: each run's own training + evaluation
        "run_seconds": sum(
            r["seconds"].get("total", r["seconds"].get("train", 0.0)) for r in results
        ),
        "runs": len(results),
    }
    meta["machine"] = runs_machine_line(results, meta["machine_info"])
    if compare.learning is not None:
        meta["learning"] = dataclasses.asdict(compare.learning)
        meta["max_steps"] = train.get("max_steps")
    return meta


def _print_summary(summary: dict[str, Any], machine: str, out: Path) -> None:
    """The report in the terminal: learning speed, the first held-out set's table, where the rest
    is."""
    from numloss.compare.report import MARK_NOTE, learning_table, text_table

    learning = learning_table(summary, f"_Machine: {machine}._")
    if learning:
        print("\n" + "\n".join(learning[2:]))  # the section without its heading
    first = next(iter(next(iter(summary.values()))["sets"]), None) if summary else None
    if first is not None:
        print(f"\n{first} (held-out) of every run; {MARK_NOTE}:")
        print(text_table(summary, first))
    print(f"\nreport: {out / 'report.md'} (all held-out sets, plots, results.json)")


def keep_report_aside(out: Path) -> Path:
    """Move OUT's results.json and report.md into OUT/previous-report-<UTC time>/ (nothing is
    deleted; the plots are redrawn by every report); returns that folder."""
    folder = Path(out) / f"previous-report-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{folder.name.split('~')[0]}~{n}")
    folder.mkdir(parents=True)
    for name in ("results.json", "report.md"):
        if (Path(out) / name).is_file():
            os.replace(Path(out) / name, folder / name)
    return folder


def build_parser(
    prog: str = "numloss compare", default_config: str = "configs/compare.yaml"
) -> argparse.ArgumentParser:
    """The options of `numloss compare` (the demo and scripts/grid_driver.py add theirs);
    `default_config`: the config the command reads without one, named in its help."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "config",
        nargs="?",
        help=(
            f"comparison YAML (default: {default_config}, the installed package's copy outside a"
            " checkout)"
        ),
    )
    parser.add_argument(
        "--objectives",
        help="comma-separated labels of the config or objective names (default: all)",
    )
    parser.add_argument("--seeds", help="comma-separated seeds (default: the config's)")
    parser.add_argument(
        "--model", help="tiny, smollm2 or a local model folder (default: the config's)"
    )
    parser.add_argument("--out", help="report folder (default: the config's output_dir)")
    parser.add_argument(
        "--max_steps",
        "--steps",
        dest="steps",
        type=int,
        help=(
            "override train.max_steps of every run (as `numloss train --max_steps`; --steps: the"
            " old name)"
        ),
    )
    parser.add_argument(
        "--jobs", type=int, help="runs trained at once, one process each (default: the config's, 1)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=(
            "a seconds-long check of the config's code path on CPU: the tiny model, 2 steps of"
            " batch 2, one seed, a few evaluation items, a learning check every step (numbers mean"
            " nothing)"
        ),
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help=(
            "train nothing: write the report of the runs of this grid already finished (a grid run"
            " in slices)"
        ),
    )
    parser.add_argument(
        "--records",
        help=(
            "folder of kept run records (default: the config's records_dir; --model, --steps and"
            " --smoke use none unless this is given): finished runs are written there and found"
            " again in a new checkout"
        ),
    )
    parser.add_argument(
        "--no-records", action="store_true", help="neither read nor write run records"
    )
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads per run (= the config's torch_threads)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--verbose", action="store_true", help="show the training logs of each run")
    return parser


def resolve(args: argparse.Namespace, default_config: str | None = "configs/compare.yaml") -> Any:
    """The CompareConfig of parsed arguments (config file, then the command-line overrides)."""
    from numloss.compare.config import load_compare_config

    path = args.config
    # the checkout's configs/, else the copy in the installed package
    if path is None and default_config:
        from numloss.package_data import config_path

        found = config_path(Path(default_config).name)
        path = str(found) if found.is_file() else None
    compare = load_compare_config(path)
    _check_options(args)
    smoke = getattr(args, "smoke", False)
    if args.model is not None or args.steps is not None or args.out is not None or smoke:
        compare = _overridden(compare, args)
    if getattr(args, "records", None) is not None:
        compare.records_dir = Path(args.records)
    if getattr(args, "no_records", False):
        compare.records_dir = None
    _select(compare, args)
    return compare


def _check_options(args: argparse.Namespace) -> None:
    """ConfigError for a given option that is no value: a given value is never "not given"."""
    for option, value in (
        ("--max_steps", args.steps),
        ("--jobs", args.jobs),
        ("--threads", getattr(args, "threads", None)),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{option} must be a positive integer, got {value}")
    for option, value in (
        ("--model", args.model),
        ("--out", args.out),
        ("--records", getattr(args, "records", None)),
        ("--objectives", args.objectives),
        ("--seeds", args.seeds),
    ):
        if value is not None and not value.strip(" ,"):
            raise ConfigError(f"{option} is empty: give a value or leave the option out")
    if getattr(args, "smoke", False) and args.model is not None:  # smoke always runs the tiny model
        raise ConfigError("--smoke runs the tiny model and would ignore --model; drop one of them")


def _overridden(compare: Any, args: argparse.Namespace) -> Any:
    """`compare` rebuilt with --model, --steps, --out and --smoke applied (and checked again)."""
    from numloss.compare.config import compare_config_from_dict

    smoke = getattr(args, "smoke", False)
    base = {k: dict(v) if isinstance(v, dict) else v for k, v in compare.base.items()}
    if args.model is not None:
        base.setdefault("model", {})["name"] = args.model
    if args.steps is not None:
        base.setdefault("train", {})["max_steps"] = args.steps
    mapping = {
        "base": base,
        "task": compare.task.to_dict(),
        "objectives": [dataclasses.asdict(s) for s in compare.objectives],
        "seeds": compare.seeds,
        "evaluation": dataclasses.asdict(compare.evaluation),
        "learning": None if compare.learning is None else dataclasses.asdict(compare.learning),
        "torch_threads": compare.torch_threads,
        "jobs": compare.jobs,
        "output_dir": args.out or str(compare.output_dir),
        # another model, length or the smoke check are other runs: they stay out of the records
        # (another report folder, --out, is the same runs)
        "records_dir": (
            None
            if args.model is not None or args.steps is not None or smoke
            else compare.records_dir
        ),
    }
    if smoke:
        _shrink_for_smoke(mapping, out_given=bool(args.out))
    return compare_config_from_dict(mapping, compare.source)


def _select(compare: Any, args: argparse.Namespace) -> None:
    """Apply --objectives, --jobs, --threads and --seeds to `compare`."""
    from numloss.compare.config import check_seeds, select_objectives

    if args.objectives is not None:
        names = [n.strip() for n in args.objectives.split(",") if n.strip()]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ConfigError(
                f"--objectives: {', '.join(repeated)} given twice; name each objective once"
            )
        compare.objectives = select_objectives(compare, names)
    if args.jobs is not None:
        compare.jobs = args.jobs
    if getattr(args, "threads", None) is not None:
        # torch would start them all: --threads 100000 hangs
        if args.threads > (os.cpu_count() or 1):
            raise ConfigError(
                f"--threads {args.threads} is more than this machine's {os.cpu_count()} cores"
            )
        compare.torch_threads = args.threads
    if args.seeds is not None:
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise ConfigError(
                f"--seeds must be comma-separated integers, got {args.seeds!r}"
            ) from None
        check_seeds(seeds, "--seeds")  # a seed twice: trained once, it would still count twice
        compare.seeds = seeds


def _shrink_for_smoke(mapping: dict[str, Any], out_given: bool) -> None:
    """`--smoke`: the same grid and code path, cut to seconds on a CPU (see the flag's help)."""
    base = mapping["base"]
    base["model"] = {"name": "tiny", "tiny_layers": 1, "tiny_hidden": 32, "tiny_heads": 2}
    base["train"] = {
        **base.get("train", {}),
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "logging_steps": 1,
        "bf16": False,
        "progress_bar": False,
    }
    base.setdefault("data", {})["max_length"] = min(
        int(base.get("data", {}).get("max_length", 512)), 512
    )
    base.pop("lora", None)
    task = mapping["task"]
    task["train_size"] = 8
    if task.get("kind") == "word_problems":
        task.update({"benchmark_limit": 3, "max_new_tokens": 12, "eval_batch_size": 8})
    # the tiny model reads characters: ~150 a chat-templated problem
    elif task.get("kind") == "arith_words":
        task.update({"test_size": 16, "generate_check": 4, "benchmark_limit": 8})
        base["data"]["max_length"] = max(base["data"]["max_length"], 256)
    else:
        task["test_size"] = 16
    mapping["seeds"] = mapping["seeds"][:1]
    mapping["evaluation"] = {
        **mapping["evaluation"],
        "batch_size": 64,
        "teacher_forced_batch_size": 64,
    }
    if mapping["learning"] is not None:
        mapping["learning"] = {**mapping["learning"], "every": 1, "slice_size": 4, "batch_size": 4}
    mapping["jobs"], mapping["torch_threads"] = 1, 1
    if not out_given:
        mapping["output_dir"] = str(mapping["output_dir"]).rstrip("/") + "-smoke"


def main(argv: list[str] | None = None) -> int:
    """`numloss compare` entry point; 2 for a bad configuration."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    compare = configured("numloss compare", args, check_inputs=not args.report_only)
    if compare is None:
        return 2
    return run_reporting_errors(
        "numloss compare",
        compare,
        lambda: run_comparison(
            compare, progress=not args.no_progress, finished_only=args.report_only
        ),
    )


def configured(
    prog: str,
    args: argparse.Namespace,
    default_config: str | None = "configs/compare.yaml",
    check_inputs: bool = True,
) -> Any:
    """The CompareConfig of `args` (`resolve`), the training logs quietened unless --verbose; None,
    after one line saying why, for a bad config or (`check_inputs`) a model that cannot be loaded
    or a benchmarks folder that is not there: they fail now, not in the first run or its scoring."""
    from numloss.models import ModelUnavailableError, check_model_available

    try:
        compare = resolve(args, default_config)
    except ConfigError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return None
    model = compare.base.get("model", {})
    try:  # a missing model fails before the first run, not in it
        if check_inputs:
            check_model_available(
                model.get("name", "tiny"), model.get("revision"), model.get("cache_dir")
            )
    except ModelUnavailableError as error:
        print(f"{prog}: model.name: {error}", file=sys.stderr)
        return None
    data_dir = getattr(compare.task, "data_dir", None)
    if check_inputs and getattr(compare.task, "benchmarks", ()) and not Path(data_dir).is_dir():
        print(
            f"{prog}: task.data_dir: {data_dir!r} is not a folder (from {Path.cwd()}); the runs"
            " would train and then fail to score: point it at the benchmarks' folder",
            file=sys.stderr,
        )
        return None
    if not args.verbose:
        quiet_training_logs()
    return compare


def interrupted_line(compare: Any) -> str:
    """The one line a Ctrl-C prints: what was kept and how to continue."""
    kept = f"{compare.output_dir / 'runs'}" + (
        f" and {compare.records_dir}" if compare.records_dir else ""
    )
    return (
        f"interrupted; every finished run is kept in {kept}: run the same command to continue (the"
        " run in progress starts again)"
    )


def run_reporting_errors(prog: str, compare: Any, body: Any) -> int:
    """Run `body()` and turn what it raises into one line and an exit status: 2 for a bad config
    or folder, 1 for a failed read or write (a full disk, a folder turned read-only), 130 for
    Ctrl-C or SIGTERM (saying what was kept and how to continue)."""
    from numloss.interrupt import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            body()
    except ConfigError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    # a full disk, a folder that turned read-only mid-run: one line, not a traceback
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        print(f"{prog}: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted_line(compare)}", file=sys.stderr)
        return 130
    return 0
