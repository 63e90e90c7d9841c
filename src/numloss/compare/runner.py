"""The grid: one training run per (objective, seed), each evaluated on the held-out sets.

Training goes through `numloss.train.run_training` (the `numloss train` code path) and scoring
through `numloss.evaluate` (greedy generation, numeric distance, place accuracy, teacher-forced
digit statistics). `Grid` is the one pass over a grid's runs that `numloss compare` (`run_grid`)
and the grid driver for shared machines (scripts/grid_driver.py) share.

Resume: each run writes `runs/<label>-s<seed>/result.json` atomically once it is fully evaluated,
stamped with the hash of everything that decides its outcome; a run whose result exists with the
same hash is skipped, an interrupted one (no result file) starts again. With `records_dir` every
finished result is also kept there (`<label>-s<seed>-<hash>.json`, in version control) and found
again across sessions and machines; a record that is unreadable or not the run its name says
(`result_problem`) is refused, naming the file. Beside the run hash a result carries
`model_sha256` and `data_sha256` (`input_hashes`), verified when present (`check_inputs`).

Nothing finished is deleted: a run folder holding a result of other settings is moved to
`superseded/<name>-<hash>` beside `runs/`. `run_grid` holds the output folder's lock
(numloss.rundir), and its worker processes die with it (PR_SET_PDEATHSIG).

Learning checks (`learning:`, numloss.compare.learning): a run is scored every few hundred steps
on the task's check slice (kept out of training and apart from the test sets); the result's
`learning` says whether and when it learnt the task, and with `stop_early` training ends there.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from numloss.atomic import write_json_atomic as _write_json_atomic
from numloss.atomic import write_text_atomic
from numloss.compare.config import CompareConfig, ObjectiveSpec
from numloss.compare.stats import exact_match_record
from numloss.compare.task import TEST_SETS, TaskExample
from numloss.config import ConfigError
from numloss.rundir import RunDirBusy
from numloss.textio import jsonable as _jsonable
from numloss.textio import read_json_object

logger = logging.getLogger("numloss.compare")


@dataclass(frozen=True)
class RunKey:
    spec: ObjectiveSpec
    seed: int

    @property
    def name(self) -> str:
        return f"{self.spec.label}-s{self.seed}"


def key_hash(compare: CompareConfig, key: RunKey) -> str:
    """The run hash of `key` in `compare` (where the run is written does not enter it)."""
    config = compare.run_config(key.spec, key.seed, Path("runs") / key.name, Path("train.jsonl"))
    return compare.run_hash(config)


def _place_split(entries: Sequence[Any]) -> tuple[float, float]:
    """Accuracy over integer places (>= 0) and over decimal places (< 0), pooled over digits."""

    def pooled(integer: bool) -> float:
        pairs = [(e.correct, e.total) for e in entries if (e.place >= 0) == integer]
        total = sum(t for _, t in pairs)
        return sum(c for c, _ in pairs) / total if total else float("nan")

    return pooled(True), pooled(False)


def evaluate_model(
    model: Any,
    tokenizer: Any,
    items: Sequence[TaskExample],
    batch_size: int = 500,
    tf_batch_size: int = 500,
) -> dict[str, Any]:
    """Score `model` on `items`: exact match (greedy), numeric distance, place and digit statistics.

    exact match: the generated answer, stripped, equals the gold string ("8.5" is not "8.50").
    mae / signed_log_mae / median_abs_error: over items whose output holds a number (`missing`
    counts the others). place accuracy: of the generated number, by place (integer places >= 0,
    decimal places < 0). digit_accuracy / digit_entropy: teacher-forced at the gold digits.
    """
    from numloss.compare.learning import greedy
    from numloss.evaluate.answers import extract_number
    from numloss.evaluate.metrics import (
        entropy_histogram,
        numeric_distance,
        place_accuracy,
        teacher_forced_digit_stats,
    )

    prompts = [item.prompt for item in items]
    golds = [item.answer or item.output for item in items]
    started = time.perf_counter()
    outputs = [g.text.strip() for g in greedy(model, tokenizer, prompts, batch_size, golds=golds)]
    generate_seconds = time.perf_counter() - started
    correct = [out == gold for out, gold in zip(outputs, golds, strict=True)]
    preds = [extract_number(out) for out in outputs]
    gold_values = [float(g) for g in golds]
    distance = numeric_distance(preds, gold_values)
    errors = [
        abs(p - g)
        for p, g in zip(preds, gold_values, strict=True)
        if p is not None and math.isfinite(p)
    ]
    places = place_accuracy(preds, golds)
    integer_acc, decimal_acc = _place_split(places)
    started = time.perf_counter()
    stats = teacher_forced_digit_stats(model, tokenizer, prompts, golds, batch_size=tf_batch_size)
    tf_seconds = time.perf_counter() - started
    counts, edges = entropy_histogram(stats.entropies)
    return {
        **exact_match_record(sum(correct), len(correct)),
        "mae": distance.mae,
        "signed_log_mae": distance.signed_log_mae,
        "median_abs_error": statistics.median(errors) if errors else float("nan"),
        "missing": distance.missing,
        "integer_place_accuracy": integer_acc,
        "decimal_place_accuracy": decimal_acc,
        "place_accuracy": {str(e.place): [e.correct, e.total] for e in places},
        "digit_accuracy": stats.accuracy,
        "digit_entropy": stats.mean_entropy,
        "digit_entropy_histogram": {"counts": counts, "edges": edges},
        "teacher_forced_place_accuracy": {
            str(e.place): [e.correct, e.total] for e in stats.per_place
        },
        "examples": [
            {"prompt": p, "gold": g, "output": o}
            for p, g, o in list(zip(prompts, golds, outputs, strict=True))[:5]
        ],
        "seconds": {"generate": generate_seconds, "teacher_forced": tf_seconds},
    }


#: what every result holds (run_one writes it; the report reads it), with its JSON type
RESULT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "hash": str,
    "label": str,
    "seed": int,
    "steps": int,
    "objective": (dict, type(None)),
    "evaluation": dict,
    "seconds": dict,
    "curve": dict,
    "train_metrics": dict,
    "learning": (dict, type(None)),
}


class WorkerDied(OSError):
    """A worker process of a parallel grid died without a result (numloss compare: one line, status
    1)."""


class RecordError(ConfigError):
    """A kept run record is unreadable or not what its file name says; the message names the
    file."""


def result_problem(result: Any, run_hash: str, name: str | None = None) -> str | None:
    """Why `result` (parsed JSON) is not the finished result of run `name` with hash `run_hash`,
    or None when it is."""
    if not isinstance(result, dict):
        return f"is not a JSON object (it holds a {type(result).__name__})"
    if result.get("hash") != run_hash:
        return f"holds hash {result.get('hash')!r}, not {run_hash!r}"
    for key, kind in RESULT_FIELDS.items():
        value = result.get(key, _ABSENT)
        if value is _ABSENT:
            return f"has no {key!r}"
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"has a {type(value).__name__} as {key!r}"
    if not all(isinstance(v, dict) for v in result["evaluation"].values()):
        return "has an evaluation that is not a mapping of set: scores"
    if name is not None and f"{result['label']}-s{result['seed']}" != name:
        return f"is the run {result['label']}-s{result['seed']}, not {name}"
    return None


_ABSENT = object()

#: beside the run folders: one lock folder per run, held while a process clears and trains it
CLAIMS = ".claims"


def _read_json(path: Path) -> Any:
    """The JSON of `path`; ValueError (saying what is wrong) for an empty, torn or non-UTF-8
    file."""
    text = path.read_text(encoding="utf-8")  # UnicodeDecodeError is a ValueError
    if not text.strip():
        raise ValueError("the file is empty")
    return json.loads(text)


def read_result(run_dir: Path, expected_hash: str) -> dict[str, Any] | None:
    """The finished result of a run folder if its hash matches, else None (missing, stale, torn)."""
    try:
        result = _read_json(run_dir / "result.json")
    except (OSError, ValueError):  # none (FileNotFoundError), a folder, torn or empty
        return None
    return None if result_problem(result, expected_hash) else result


def record_path(records_dir: Path, name: str, run_hash: str) -> Path:
    """Where the record of run `name` (label-s<seed>) with hash `run_hash` is kept."""
    return records_dir / f"{name}-{run_hash}.json"


def read_record(records_dir: Path | None, name: str, run_hash: str) -> dict[str, Any] | None:
    """The kept record of a finished run if there is one with this hash, else None."""
    if records_dir is None:
        return None
    path = record_path(records_dir, name, run_hash)
    # refused, not skipped: a record is kept in git, so the fix is to restore it (or delete it to
    # retrain)
    fix = f"restore it from git (git checkout -- {path}) or delete it to train the run again"
    try:
        result = _read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise RecordError(f"the run record {path} is unreadable ({error}); {fix}") from None
    # a renamed or hand-edited file: never trusted silently
    problem = result_problem(result, run_hash, name)
    if problem:
        raise RecordError(f"the run record {path} {problem}; {fix}")
    return result


def write_record(records_dir: Path | None, result: dict[str, Any]) -> None:
    """Keep `result` in `records_dir` (no-op without one): compact JSON, atomically."""
    if records_dir is None:
        return
    path = record_path(records_dir, f"{result['label']}-s{result['seed']}", result["hash"])
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(path, result, compact=True)


#: the output folders this process holds (run_comparison holds it around run_grid, which holds it
#: too)
_HELD: set[Path] = set()


@contextmanager
def hold_output_dir(folder: Path) -> Iterator[None]:
    """Hold `folder` (numloss.rundir's exclusive lock) for the body, once per process; ConfigError
    in one line when another process holds it (naming it), or it is a file or not writable."""
    from numloss.rundir import RunDirBusy, RunDirLockError, hold_run_dir

    key = Path(os.path.abspath(folder))
    if key in _HELD:
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"the output folder {str(folder)!r} is a file: choose another --out (or output_dir)"
        )
    try:
        with hold_run_dir(folder, "numloss compare"):
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
    except RunDirBusy as error:
        raise ConfigError(str(error)) from None
    except RunDirLockError as error:
        raise ConfigError(
            f"{error} (the output folder must be a writable folder: choose another --out)"
        ) from None


def trained_not_scored(compare: CompareConfig, config: Any) -> bool:
    """True when the run folder of `config` holds this config's whole final/ but no result: its
    process died after training (out of memory while scoring, say). Such a run is scored, not
    trained again. Not with learning checks, whose record lives in the training process."""
    from numloss.train.folder import plan_run_dir

    run_dir = Path(config.train.output_dir)
    if (
        compare.learning is not None
        or (run_dir / "result.json").exists()
        or not (run_dir / "final").is_dir()
    ):
        return False
    probe = copy.deepcopy(config)
    probe.train.resume = True
    try:  # numloss train's own test: final/ whole, of these settings, at the last step
        return plan_run_dir(probe).action == "finished"
    except ConfigError:
        return False


def _clear_run_dir(run_dir: Path, say: Callable[[str], None]) -> None:
    """Make way for a run in `run_dir`. An interrupted run (no result.json) is deleted; a finished
    one (of other settings: another --steps, say) is never deleted but moved to
    `<output_dir>/superseded/<name>-<its hash>`, and `say` tells where."""
    runs = run_dir.parent
    if runs.name != "runs" or run_dir.resolve().parent != runs.resolve():
        # labels are checked to be plain names; this is the last guard before a delete
        raise ConfigError(
            f"refusing to clear {run_dir}: it is not a run folder directly under {runs}"
        )
    if not run_dir.exists():
        return
    result = run_dir / "result.json"
    if not result.is_file():
        shutil.rmtree(run_dir)
        return
    old = read_json_object(result)
    old_hash = "unreadable" if old is None else str(old.get("hash"))
    aside = run_dir.parent.parent / "superseded" / f"{run_dir.name}-{old_hash}"
    n = 1
    while aside.exists():
        n += 1
        aside = aside.with_name(f"{run_dir.name}-{old_hash}-{n}")
    aside.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, aside)
    say(f"numloss compare: {run_dir} held a finished run of other settings; kept as {aside}")


#: the columns of a run's log.csv its result keeps as its training curve; the digit diagnostics
#: join where the run logged them (older runs did not)
CURVE_COLUMNS = ("step", "loss", "ce", "aux", "digit_entropy")
DIAGNOSTIC_COLUMNS = ("digit_logit_mean", "pushdown_share", "digit_target_prob")


def _number(text: str | None) -> float:
    try:
        return float(text or "nan")
    except ValueError:
        return math.nan


def _training_curve(csv_path: Path) -> dict[str, list[float]]:
    """The curve of a run's log.csv: the rows with a number in every CURVE_COLUMNS column."""
    import csv

    curve: dict[str, list[float]] = {k: [] for k in CURVE_COLUMNS + DIAGNOSTIC_COLUMNS}
    if csv_path.is_file():
        with csv_path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                try:
                    values = [float(row[k]) for k in CURVE_COLUMNS]
                except (KeyError, ValueError):
                    continue
                values += [_number(row.get(k)) for k in DIAGNOSTIC_COLUMNS]
                for series, value in zip(curve.values(), values, strict=True):
                    series.append(value)
    return {k: v for k, v in curve.items() if k in CURVE_COLUMNS or any(x == x for x in v)}


def _load_trained(result_dir: Path, config: Any) -> tuple[Any, Any]:
    """The trained model and tokenizer of a finished `run_training` (LoRA adapters merged)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from numloss.textio import utf8_path

    with utf8_path(result_dir) as readable:  # tokenizers (Rust) takes only UTF-8 names (LC_ALL=C)
        tokenizer = AutoTokenizer.from_pretrained(readable)
    if config.lora.enabled:
        from peft import AutoPeftModelForCausalLM

        from numloss.extras import peft_quietly

        # else peft's FutureWarning reached the terminal at every run's scoring
        with peft_quietly():
            model = AutoPeftModelForCausalLM.from_pretrained(result_dir).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(result_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # training saved use_cache=False; greedy decoding without the KV cache recomputes every prefix
    model.config.use_cache = True
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.use_cache = True
    return model.eval(), tokenizer


def _train_text(examples: Sequence[TaskExample]) -> str:
    """The training set as the instruction JSONL a run trains on (its data_sha256 is of this)."""
    return "".join(
        json.dumps({"instruction": e.instruction, "output": e.output}) + "\n" for e in examples
    )


def input_hashes(config: Any, train_text: str) -> dict[str, str]:
    """The content hashes a result carries beside its run hash: `model_sha256` (the weights the
    run starts from, numloss.identity; absent for 'tiny', whose weights follow from the hashed
    config) and `data_sha256` (the training file's text)."""
    from numloss.identity import model_sha256, text_sha256

    hashes = {"data_sha256": text_sha256(train_text)}
    model = model_sha256(config.model.name, config.model.cache_dir)
    if model is not None:
        hashes["model_sha256"] = model
    return hashes


def check_inputs(result: dict[str, Any], where: Path, now: dict[str, str], fix: str) -> None:
    """ConfigError in one line when a finished result was made from other inputs than this run
    would use (a model replaced in place, another training set under the same hash). A result
    without a field (written before the fields existed, like the committed records) is not
    checked by it."""
    from numloss.identity import describe_change

    names = {"model_sha256": "the model's weights", "data_sha256": "the training data"}
    for key, name in names.items():
        if key in result and key in now and result[key] != now[key]:
            raise RecordError(
                f"the finished run {result.get('label')}-s{result.get('seed')} ({where}) cannot be "
                f"reused: {describe_change(name, result[key], now[key])}; {fix}"
            )


def _write_train_file(path: Path, examples: Sequence[TaskExample]) -> None:
    """The training set of a run as instruction JSONL (the record of what it saw); rewritten when
    the file holds another set (a task changed under the same output folder)."""
    text = _train_text(examples)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    write_text_atomic(path, text)


def grid_test_sets(compare: CompareConfig) -> dict[str, list[TaskExample]]:
    """The task's held-out sets, and with `learning:` its check slice as "check" (kept out of
    training like the test sets): what every run of a grid is scored on, whichever driver runs it.
    """
    test_sets = compare.task.test_sets()
    if compare.learning is not None:
        try:
            test_sets["check"] = compare.task.check_set(compare.learning.slice_size)
        except ValueError as error:  # before any training, in one line
            raise ConfigError(f"{compare.source}: {error}") from None
    return test_sets


def run_one(
    compare: CompareConfig,
    key: RunKey,
    train_examples: Sequence[TaskExample],
    test_sets: dict[str, list[TaskExample]],
    train_file: Path,
    progress_bar: bool = True,
    on_step: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """Train and evaluate one (objective, seed); write and return its result (see module doc).
    `progress_bar` False hides the training bar (display only: not in the run's hash);
    `on_step(run name, step)` is called after every training step. A run trained but not scored
    (`trained_not_scored`) is scored from its final/ without training again."""
    from numloss.compare.embeddings import digit_embeddings
    from numloss.compare.learning import exact_answer, learning_callback
    from numloss.compare.machine import machine_info
    from numloss.compare.word_task import WordProblemTask, last_number_matches
    from numloss.train import load_model_for, run_training

    run_dir = compare.output_dir / "runs" / key.name
    config = compare.run_config(key.spec, key.seed, run_dir, train_file)
    config.train.progress_bar = config.train.progress_bar and progress_bar and on_step is None
    # Grid._prepare cleared the run folder, or kept a run trained but not scored: run_training
    # hands its final/ back as it is (resume is not in the hash)
    config.train.resume = trained_not_scored(compare, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    word_task = isinstance(compare.task, WordProblemTask)
    before = tokenizer = None
    # the model the run starts from (same seed), loaded only for its embeddings or a chat template
    if compare.evaluation.embeddings or word_task:
        start, tokenizer = load_model_for(config)
        before = digit_embeddings(start, tokenizer) if compare.evaluation.embeddings else None
        del start  # not held in memory beside the model that trains
    examples, check_items = list(train_examples), test_sets.get("check", [])
    if word_task:  # chat-template prompts need the tokenizer: rendered here, once per run
        examples = WordProblemTask.render(examples, tokenizer)
        check_items = WordProblemTask.render(check_items, tokenizer)
    checker = None  # the learning checks' callback (numloss.compare.learning), with `learning:`
    if compare.learning is not None:
        checker = learning_callback(
            compare.learning,
            [e.prompt for e in check_items],
            [e.answer or e.output for e in check_items],
            match=last_number_matches if word_task else exact_answer,
            max_new_tokens=compare.task.max_new_tokens if word_task else None,
        )
    callbacks = [c for c in (checker, _step_callback(key.name, on_step)) if c is not None]
    # the caller's bar shows the steps: the run's own "step N/M" lines would break it
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        with contextlib.redirect_stdout(devnull if on_step is not None else sys.stdout):
            trained = run_training(config, callbacks=callbacks, examples=examples)
    train_seconds = time.perf_counter() - started
    model, tokenizer = _load_trained(trained.model_dir, config)
    with torch.inference_mode():  # the word task scores itself, the arithmetic task here
        evaluation = (
            compare.task.evaluate(model, tokenizer)
            if word_task
            else {
                name: evaluate_model(
                    model,
                    tokenizer,
                    test_sets[name],
                    batch_size=compare.evaluation.batch_size,
                    tf_batch_size=compare.evaluation.teacher_forced_batch_size,
                )
                for name in TEST_SETS
            }
        )
    after = digit_embeddings(model, tokenizer) if compare.evaluation.embeddings else None
    result = _jsonable(
        {
            "hash": compare.run_hash(config),
            # the examples as the file holds them
            **input_hashes(config, _train_text(train_examples)),
            "label": key.spec.label,
            "objective": {k: v for k, v in asdict(key.spec).items() if k != "label"},
            "seed": key.seed,
            "steps": trained.global_step,
            "max_steps": config.train.max_steps,
            "learning": None if checker is None else checker.record(),
            "train_metrics": trained.metrics,
            # cpu: this process's CPU time, which a busy machine does not inflate (wall times are)
            "seconds": {
                "train": train_seconds,
                "total": time.perf_counter() - started,
                "cpu": time.process_time() - cpu_started,
            },
            "evaluation": evaluation,
            "curve": _training_curve(trained.csv_path),
            "embeddings": {"before": before, "after": after},
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            # a run's outcome depends on the CPU's kernels (AVX2 against AVX-512): each run names
            # its machine, so records pooled across sessions and machines stay attributable
            "machine": machine_info(),
        }
    )
    _write_json_atomic(run_dir / "result.json", result)
    return result


def _step_callback(name: str, on_step: Callable[[str, int], None] | None) -> Any:
    """A Trainer callback calling `on_step(name, step)` after every step; None without `on_step`."""
    if on_step is None:
        return None
    from transformers import TrainerCallback

    class StepReport(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            on_step(name, state.global_step)

    return StepReport()


def _run_in_worker(
    compare: CompareConfig,
    key: RunKey,
    train_examples: Sequence[TaskExample],
    test_sets: dict[str, list[TaskExample]],
    train_file: Path,
    threads: int,
    log_level: int,
) -> dict[str, Any]:
    """`run_one` in a worker process, on the parent's data, with its own torch threads and logging;
    its steps go to the parent through the queue `_init_worker` was given."""
    torch.set_num_threads(threads)
    if log_level >= logging.ERROR:  # the parent was quietened (no --verbose): so is the worker
        from numloss.compare.logs import quiet_training_logs

        quiet_training_logs()
        # the per-log "step ..." lines of parallel runs would interleave; the parent's bar counts
        # steps
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as this one-run process
    return run_one(
        compare,
        key,
        train_examples,
        test_sets,
        train_file,
        progress_bar=False,
        on_step=lambda name, step: _STEPS.put((name, step)),
    )


_STEPS: Any = None  # a worker's queue to its parent, set by _init_worker


def _init_worker(parent: int, steps: Any) -> None:
    """A worker's initializer: it dies with its parent (`_die_with_parent`) and reports its steps
    into `steps`."""
    global _STEPS
    _STEPS = steps
    _die_with_parent(parent)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread for the body: the processes and threads started inside inherit
    the mask, so a Ctrl-C (sent to the whole process group) reaches the parent alone, which ends
    its workers (`_end_workers`). A worker interrupted itself would die mid-import or mid-run with
    its own traceback and break the pool under the parent."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: the parent still ends its workers
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        # a Ctrl-C held meanwhile arrives now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _end_workers(pool: Any) -> None:
    """Cancel the runs not started and terminate the pool's workers (their runs start again next
    time: a run without result.json is redone)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
    for process in processes:
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _die_with_parent(parent: int) -> None:
    """A worker's initializer: the kernel kills this process when its parent dies, however the
    parent dies (SIGKILL included), so a killed compare leaves no run training beside a restart of
    it."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):  # not Linux: the parent's shutdown still ends the workers
        logger.debug("PR_SET_PDEATHSIG is not available; workers outlive a killed parent")
    if os.getppid() != parent:  # the parent died before the line above: nothing would kill us later
        os._exit(1)


@contextmanager
def config_threads(compare: CompareConfig) -> Iterator[None]:
    """torch on the config's `torch_threads` for the body (as it is without one), and back after:
    two threads on two busy cores wait at every barrier."""
    threads = torch.get_num_threads()
    if compare.torch_threads is not None:
        torch.set_num_threads(compare.torch_threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_grid(
    compare: CompareConfig,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    jobs: int | None = None,
    finished_only: bool = False,
) -> list[dict[str, Any]]:
    """Every (objective, seed) of `compare` in grid order (objectives outer), skipping runs already
    finished with the same hash; `on_result` is called as each result is available.

    `finished_only` trains nothing (a report of what a grid run in slices has so far). `jobs`
    (default: `compare.jobs`) trains that many runs at once, one spawned process each, with the
    config's torch threads (else the cores shared out); results do not depend on it."""
    from tqdm.auto import tqdm

    jobs = compare.jobs if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    # here, not at the top: the report's statistics (scipy, statsmodels, pandas: 2 s of imports)
    # would load in every spawned worker, which trains and never reports
    from numloss.compare.report import exact_match_text
    from numloss.compare.summary import primary_evaluation

    keys = [RunKey(spec, seed) for spec in compare.objectives for seed in compare.seeds]
    results: dict[str, dict[str, Any]] = {}  # by run name (label-s<seed>): unique in a grid
    with hold_output_dir(compare.output_dir):
        bar = StepBar(compare.base.get("train", {}).get("max_steps", 0), enabled=progress)

        def finish(key: RunKey, done: dict[str, Any], seconds: float | None) -> None:
            results[key.name] = done
            if seconds is not None:  # trained now: its bar ends here, also when it stopped early
                bar(key.name, bar.steps_each)
                # the headline set, not the first key: a record read back has its sets in sorted
                # order
                bar.show(f"{key.name}: exact match {exact_match_text(primary_evaluation(done))}")
            if on_result is not None:
                on_result(done)

        try:
            Grid(compare, compare.records_dir).run(
                keys,
                finish,
                finished_only=finished_only,
                jobs=jobs,
                on_step=bar if progress else None,
                show=bar.show,
                say=lambda line: tqdm.write(line, file=sys.stderr),
            )
        finally:
            bar.close()
    return [results[key.name] for key in keys if key.name in results]


class StepBar:
    """One progress bar over the training steps of every run a grid trains, whichever process
    trains it: its rate and ETA are in steps, so it moves from the first step on (a bar of whole
    runs sat at 0 until the first run ended). Its total is known before any run trains
    (`Grid.run` reports each at step 0 first); scoring follows each run's last step."""

    def __init__(self, steps_each: int, enabled: bool = True) -> None:
        self.steps_each, self.enabled = int(steps_each or 0), enabled
        self.done: dict[str, int] = {}
        self.bar: Any = None

    def __call__(self, name: str, step: int) -> None:
        """Run `name` is at training step `step` (0: it is to be trained)."""
        from tqdm.auto import tqdm

        if name not in self.done:
            self.done[name] = 0
            if self.bar is None:
                self.bar = tqdm(
                    total=self.steps_each,
                    desc="training",
                    unit="step",
                    disable=not self.enabled,
                    dynamic_ncols=True,
                )
            else:
                self.bar.total += self.steps_each
        step = min(step, self.steps_each)
        if step > self.done[name]:
            self.bar.update(step - self.done[name])
            self.done[name] = step
            if step == self.steps_each:
                self.show(f"scoring {name}")

    def show(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Grid:
    """The runs of one grid config and one pass over them: what `numloss compare` (`run_grid`) and
    the grid driver for shared machines (scripts/grid_driver.py) share. Every result found or
    trained is kept in `records_dir` (when set) before it is handed on."""

    def __init__(self, compare: CompareConfig, records_dir: Path | None) -> None:
        self.compare = compare
        self.records_dir = records_dir
        self.test_sets = grid_test_sets(compare)
        held_out = {e.instruction for items in self.test_sets.values() for e in items}
        # one training set per seed, shared by its objectives: the pairing of a grid
        self.train_set = functools.cache(
            lambda seed: compare.task.train_set(seed, exclude=held_out)
        )
        self.busy: list[RunKey] = []  # runs another process was training: left to it
        (compare.output_dir / "data").mkdir(parents=True, exist_ok=True)

    def claim(self, key: RunKey) -> AbstractContextManager[Path]:
        """Hold `key`'s run for the body (rundir's lock on `runs/.claims/<name>`, outside the run
        folder that clearing deletes); RunDirBusy names another live process training it. Two
        drivers on one output folder (pretrained shards started twice) would otherwise clear
        and train into the same run folder at once."""
        from numloss.rundir import hold_run_dir

        return hold_run_dir(
            self.compare.output_dir / "runs" / CLAIMS / key.name, f"numloss compare {key.name}"
        )

    def files(self, key: RunKey) -> tuple[Path, Path]:
        """The run folder of `key` and its seed's training file."""
        out = self.compare.output_dir
        return out / "runs" / key.name, out / "data" / f"train-s{key.seed}.jsonl"

    def finished(self, key: RunKey) -> dict[str, Any] | None:
        """The finished result of `key` with this config's hash (its run folder's, else its kept
        record), refused when made from other inputs; None when the run must be trained."""
        run_dir, train_file = self.files(key)
        config = self.compare.run_config(key.spec, key.seed, run_dir, train_file)
        run_hash = self.compare.run_hash(config)
        done = read_result(run_dir, run_hash)
        where = run_dir / "result.json"
        fix = f"to train it again, move {run_dir} away (or use another --out)"
        if done is None and self.records_dir is not None:
            done = read_record(self.records_dir, key.name, run_hash)
            where = record_path(self.records_dir, key.name, run_hash)
            fix = f"to train it again, delete {where} (or use --no-records)"
        if done is not None and ("model_sha256" in done or "data_sha256" in done):
            now = input_hashes(config, _train_text(self.train_set(key.seed)))
            check_inputs(done, where, now, fix)
        return done

    def run(
        self,
        keys: Sequence[RunKey],
        finish: Callable[[RunKey, dict[str, Any], float | None], None],
        finished_only: bool = False,
        jobs: int = 1,
        progress: bool = False,
        run: Callable[..., dict[str, Any]] | None = None,
        show: Callable[[str], None] = lambda _: None,
        say: Callable[[str], None] = logger.warning,
        on_step: Callable[[str, int], None] | None = None,
    ) -> None:
        """`finish(key, result, None)` for every finished run of `keys`, then train the others
        (`run`, default `run_one`) and `finish(key, result, wall seconds)` as each ends.

        A failing run's error ends the pass (the grid driver, scripts/grid_driver.py, records it
        and goes on to the next run). `run` stands in for `run_one` (tests). `show` tells what
        trains now; `say` where a finished run of other settings was moved;
        `on_step(run name, step)`: every run to train at step 0 before any trains, then after
        every training step, whichever process trains it."""
        pending = []
        for key in keys:
            done = self.finished(key)
            if done is not None:
                logger.info(
                    "skipping %s: finished with the same config (%s)", key.name, done["hash"]
                )
                write_record(self.records_dir, done)
                finish(key, done, None)
            elif not finished_only:
                pending.append(key)
        for key in pending if on_step is not None else ():
            on_step(key.name, 0)
        if jobs > 1 and pending:
            with ExitStack() as claims:  # every run claimed for as long as the pool may train it
                pending = [key for key in pending if self._claim_into(claims, key, say)]
                if pending:
                    self._run_parallel(pending, jobs, finish, show, say, on_step)
            return
        with config_threads(self.compare):
            for key in pending:
                started = time.perf_counter()
                try:
                    with self.claim(key):
                        train_file = self._prepare(key, say)
                        show(f"training {key.name}")
                        examples = self.train_set(key.seed)
                        # a stand-in `run` takes none
                        options = {} if on_step is None else {"on_step": on_step}
                        result = (run or run_one)(
                            self.compare,
                            key,
                            examples,
                            self.test_sets,
                            train_file,
                            progress_bar=progress,
                            **options,
                        )
                    write_record(self.records_dir, result)
                    finish(key, result, time.perf_counter() - started)
                except RunDirBusy as error:
                    self.busy.append(key)  # left to the process that holds it
                    say(f"numloss compare: {key.name} skipped: {error}")

    def _prepare(self, key: RunKey, say: Callable[[str], None]) -> Path:
        """Make way for `key` in its run folder, write its seed's training file and return it."""
        run_dir, train_file = self.files(key)
        if not trained_not_scored(
            self.compare, self.compare.run_config(key.spec, key.seed, run_dir, train_file)
        ):
            # an interrupted run is redone; a finished one is kept aside
            _clear_run_dir(run_dir, say)
        _write_train_file(train_file, self.train_set(key.seed))  # rewritten only when it differs
        return train_file

    def _claim_into(self, claims: ExitStack, key: RunKey, say: Callable[[str], None]) -> bool:
        """Hold `key`'s claim until `claims` closes; False (the run left to its holder) when
        another process holds it."""
        try:
            claims.enter_context(self.claim(key))
        except RunDirBusy as error:
            self.busy.append(key)  # left to the process that holds it
            say(f"numloss compare: {key.name} skipped: {error}")
            return False
        return True

    def _run_parallel(
        self,
        pending: Sequence[RunKey],
        jobs: int,
        finish: Callable[[RunKey, dict[str, Any], float | None], None],
        show: Callable[[str], None],
        say: Callable[[str], None],
        on_step: Callable[[str, int], None] | None,
    ) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from numloss.interrupt import quiet_resource_tracker

        files = {key.name: self._prepare(key, say) for key in pending}
        # torch threads per run: the config's, else the cores shared out among the jobs
        threads = self.compare.torch_threads or max(1, (os.cpu_count() or 1) // jobs)
        log_level = logging.getLogger("numloss.train").getEffectiveLevel()
        # spawn, not fork: a forked child would inherit torch's thread pools; a fresh process a run
        context = multiprocessing.get_context("spawn")
        # a killed tracker, restarted, prints KeyErrors that are not the user's
        quiet_resource_tracker()
        steps = context.SimpleQueue()
        with ExitStack() as stack:
            # the pool's manager thread (which spawns later workers) inherits it
            with _sigint_blocked():
                pool = stack.enter_context(
                    ProcessPoolExecutor(
                        max_workers=min(jobs, len(pending)),
                        mp_context=context,
                        max_tasks_per_child=1,
                        initializer=_init_worker,
                        initargs=(os.getpid(), steps),
                    )
                )
                futures = {
                    pool.submit(
                        _run_in_worker,
                        self.compare,
                        key,
                        self.train_set(key.seed),
                        self.test_sets,
                        files[key.name],
                        threads,
                        log_level,
                    ): (key, time.perf_counter())
                    for key in pending
                }
            show(f"training {len(pending)} runs, {jobs} at a time")
            try:
                self._collect(futures, finish, steps, on_step)
            except KeyboardInterrupt:
                # Ctrl-C reaches the workers too, a SIGTERM only this process: end the runs in
                # progress here, or leaving the pool would wait for each to finish training
                _end_workers(pool)
                raise

    def _collect(
        self,
        futures: dict[Any, tuple[RunKey, float]],
        finish: Callable[[RunKey, dict[str, Any], float | None], None],
        steps: Any,
        on_step: Callable[[str, int], None] | None,
    ) -> None:
        """Keep each worker's result as it finishes, passing the workers' steps to `on_step`; the
        first failed run cancels the runs not started."""
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        remaining = set(futures)
        while remaining:
            # FIRST_COMPLETED, not FIRST_EXCEPTION: the latter returns only once every run is
            # done, which would hold the progress bar and the per-run lines back until the end
            finished, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
            while not steps.empty():
                name, step = steps.get()
                if on_step is not None:
                    on_step(name, step)
            for future in finished:
                key, started = futures[future]
                error = future.exception()
                if error is not None:
                    for other in remaining:
                        other.cancel()
                    if isinstance(error, (ConfigError, OSError)):  # one line at the CLI
                        raise error
                    # killed (out of memory, say): no traceback to show
                    if isinstance(error, BrokenProcessPool):
                        raise WorkerDied(
                            f"the process training {key.name} died (killed, or out of memory?); "
                            "every finished run is kept: run the same command to continue"
                        ) from None
                    raise RuntimeError(f"run {key.name} failed: {error}") from error
                result = future.result()
                write_record(self.records_dir, result)
                finish(key, result, time.perf_counter() - started)
