"""`numloss train [CONFIG.yaml] [--resume] [--overwrite] [--dry-run] [--threads N] [--section.key
VALUE ...]`."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from numloss.config import Config, ConfigError, describe_keys, dump_config, load_config
from numloss.interrupt import sigterm_as_interrupt
from numloss.train import run
from numloss.train.errors import DiskFullError
from numloss.train.folder import RunPlan, continue_with, interrupted_line

USAGE = """usage: numloss train [CONFIG.yaml] [--resume [--resume-changed]] [--overwrite] [--dry-run] [--threads N]
                     [--section.key VALUE ...]

Fine-tune a causal LM with a numloss objective. CONFIG.yaml holds any of the keys below
(nested by section; train is transformers.TrainingArguments by its own names); --section.key VALUE
overrides it, or --key VALUE where one section has it (--max_steps 20; VALUE is read as YAML).
  --resume          continue from the newest intact checkpoint in train.output_dir (= --train.resume
                    true); a finished run is left as it is
  --resume-changed  with --resume: continue although settings that change the run differ from the
                    run's config.yaml (= --train.resume_changed true)
  --overwrite       train into an output_dir that holds another or a finished run: its files move to
                    output_dir/overwritten-TIME/ first (= --train.overwrite true); nothing is deleted
  --dry-run         every check of a real run (config, model, run folder, data, tokenizer, chat
                    template, LoRA targets, TrainingArguments), print the config, train nothing
  --threads N       torch CPU threads, 1 to the machine's core count (as in `numloss eval` and compare)
Multi-GPU / multi-node: run the same command under `torchrun` or `accelerate launch`
(FSDP / DeepSpeed configs in configs/accelerate/).

keys:
"""  # noqa: E501


def machine_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; os.cpu_count() elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pop_threads(argv: list[str]) -> tuple[int | None, list[str]]:
    """(`--threads N` / `--threads=N` as an int or None, the other arguments); 1 <= N <= cores."""
    rest: list[str] = []
    threads: int | None = None
    tokens = iter(argv)
    for token in tokens:
        if token != "--threads" and not token.startswith("--threads="):
            rest.append(token)
            continue
        value = token.partition("=")[2] if "=" in token else next(tokens, "")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"--threads needs a positive integer, got {value!r}")
        threads, cores = int(value), machine_cores()
        if threads > cores:
            raise ValueError(
                f"--threads {threads}: this machine has {cores} cores; give 1 to {cores}"
            )
    return threads, rest


#: command-line switches and the keys they set
FLAGS = {
    "--resume": "--train.resume",
    "--resume-changed": "--train.resume_changed",
    "--overwrite": "--train.overwrite",
}


@sigterm_as_interrupt()
def main(argv: list[str] | None = None) -> int:
    """`numloss train` entry point; returns the exit status (2 for a bad config or run folder,
    1 for a full disk). SIGTERM ends it as Ctrl-C does (numloss.interrupt)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(USAGE + describe_keys())
        return 0
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    try:
        threads, argv = pop_threads(argv)
    except ValueError as error:
        print(f"numloss train: {error}", file=sys.stderr)
        return 2
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    argv = [word for arg in argv for word in ([FLAGS[arg], "true"] if arg in FLAGS else [arg])]
    path = None
    if argv and not argv[0].startswith("--"):
        path, argv = argv[0], argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    config: Config | None = None
    try:
        config = load_config(path, argv)
        if dry_run:
            plan, prepared = run.check_run(config)
            print(dump_config(config), end="")
            print(
                f"numloss train: dry run passed: {len(prepared.dataset)} examples;"
                f" {_plan_text(plan, config)}",
                file=sys.stderr,
            )
            return 0
        try:
            result = run.run_training(config)
        except BaseException:
            _end_process_group(finished=False)
            raise
        _end_process_group(finished=True)
    except (ConfigError, OSError, KeyboardInterrupt) as error:
        return _failed(error, config)
    return _done(result)


def _failed(error: BaseException, config: Config | None) -> int:
    """Print the one line for a run that failed (rank 0 for Ctrl-C); returns the exit status."""
    if isinstance(error, ConfigError):
        print(f"numloss train: {error}", file=sys.stderr)
        return 2
    then = "" if config is None else f"; then {continue_with(Path(config.train.output_dir))}"
    if isinstance(error, DiskFullError):
        print(f"numloss train: {error}{then}", file=sys.stderr)
        return 1
    # a write that failed for another reason than space (EIO, a folder gone)
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else ""
        print(
            f"numloss train: cannot write{where}: {error.strerror or error}{then}", file=sys.stderr
        )
        return 1
    if int(os.environ.get("RANK", "0")) == 0:
        line = (
            "interrupted before training began; nothing was written"
            if config is None
            else interrupted_line(Path(config.train.output_dir))
        )
        print(f"numloss train: {line}", file=sys.stderr)
    return 130


def _done(result: run.TrainResult) -> int:
    """Print what a run that ended left (rank 0); returns 0."""
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    if result.already_finished:
        print(
            f"numloss train: the run in {result.output_dir} already finished ({result.global_step}"
            f" steps); {result.model_dir} is left as it is. Raise train.max_steps (with"
            " --resume-changed) to train further."
        )
    elif result.model_dir.exists():
        summary = {k: round(v, 5) if isinstance(v, float) else v for k, v in result.metrics.items()}
        print(
            f"numloss train: done, {result.global_step} steps; model in {result.model_dir}; metrics"
            f" {summary}"
        )
    return 0


def _end_process_group(finished: bool) -> None:
    """Destroy the process group the Trainer started under torchrun / accelerate launch, if any.

    Left to interpreter shutdown, gloo's worker threads can outlive the Python objects they hold
    and abort the process (SIGABRT, "terminate called without an active exception") after a run
    that finished: the launcher then reports a finished run as failed. On the way out of an
    error no barrier is taken, since another rank may never reach it."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if finished:
        dist.barrier()  # every rank has written what it writes before any rank leaves
    dist.destroy_process_group()


def _plan_text(plan: RunPlan, config: Config) -> str:
    out = config.train.output_dir
    return {
        "new": f"a new run in {out}",
        "overwrite": f"would move {len(plan.entries)} entries of {out} aside (--overwrite)",
        "resume": (
            f"would resume in {out}"
            + (f" under changed settings: {'; '.join(plan.changed)}" if plan.changed else "")
        ),
        "finished": f"the run in {out} already finished; nothing to train",
    }[plan.action]
