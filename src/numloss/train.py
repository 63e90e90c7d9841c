"""`numloss train CONFIG.yaml [--section.key value ...]`: config -> model, data, objective -> Trainer.

    from numloss.config import load_config
    from numloss.train import run_training
    result = run_training(load_config("configs/tiny.yaml", ["--train.max_steps", "20"]))
    result.model_dir        # the final model folder (transformers loads it as is)

What lands in `train.output_dir`:

    .numloss.lock        the run's lock (numloss.rundir): who holds the folder, or held it last
    config.yaml          the full resolved configuration
    checkpoint-N/        Trainer checkpoints (train.save_steps), what `--resume` continues from; one
                         counts only once numloss_checkpoint.json (written last) lists its files
                         with their SHA-256 and they all match (numloss.checkpoints)
    partial-checkpoint-N/  an incomplete or damaged checkpoint that `--resume` set aside
    overwritten-TIME/    a run that --overwrite moved aside
    log.csv              one row per logging step: loss, ce, aux, digit_entropy, the digit
                         diagnostics (digit_logit_mean, pushdown_share, digit_target_prob), learning_rate, ...
    log_history.json     the Trainer's whole log history (the CSV's source, plus final metrics)
    tensorboard/         the same scalars for TensorBoard
    final/               the trained model + tokenizer (LoRA: the adapters + tokenizer), written as
                         final.partial/ and renamed once its marker is written: always complete
    merged/              LoRA with lora.merge: base model with the adapters merged in

Distribution is the Trainer's (accelerate): launch the same command under `torchrun` or
`accelerate launch` (configs/accelerate/ for FSDP and DeepSpeed) and nothing else changes.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import math
import os
import shutil
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from numloss.atomic import write_text_atomic
from numloss.checkpoints import (
    FINAL,
    FINAL_PARTIAL,
    FINAL_RECORD,
    MARKER,
    begin_final,
    checkpoint_step,
    commit_final,
    final_record,
    folder_problem,
    move_aside,
    newest_intact_checkpoint,
    recover_final,
    run_entries,
    set_aside,
    write_marker,
)
from numloss.config import (
    Config,
    ConfigError,
    changed_settings,
    describe_keys,
    dump_config,
    load_config,
    read_stored_config,
)

logger = logging.getLogger("numloss.train")

CSV_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "ce",
    "aux",
    "digit_entropy",
    "digit_logit_mean",
    "pushdown_share",
    "digit_target_prob",
    "digit_share",
    "learning_rate",
    "grad_norm",
    "num_input_tokens_seen",
    "tokens_per_second",
)


#: what the progress bar shows, by the names they are logged under
PROGRESS_KEYS = ("loss", "ce", "aux", "digit_entropy", "learning_rate", "tokens_per_second")

#: written last into a checkpoint or final folder: its files, sizes and SHA-256 (numloss.checkpoints)
CHECKPOINT_MARKER = MARKER


def rotate_checkpoints(output_dir: Path, keep: int | None) -> None:
    """Remove the oldest whole checkpoint-N folders beyond the newest `keep` (None: keep all)."""
    if keep is None:
        return
    whole = sorted((f for f in output_dir.glob("checkpoint-*") if f.is_dir() and checkpoint_step(f) >= 0
                    and (f / MARKER).is_file()), key=checkpoint_step)
    for folder in whole[:-keep]:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class TrainResult:
    """What a finished run produced.

    output_dir: the run folder; model_dir: the final model (LoRA: adapters) that
    `AutoModelForCausalLM.from_pretrained` (with peft installed, for adapters) loads; merged_dir:
    the merged LoRA model or None; already_finished: `--resume` of a finished run (nothing
    trained, nothing written); metrics: the Trainer's final metrics (train_loss,
    train_runtime, ...) plus the last logged ce / aux / digit_entropy and the run's mean
    tokens_per_second; log_history_path / csv_path: the logs; global_step: optimizer steps done.
    """

    output_dir: Path
    model_dir: Path
    merged_dir: Path | None
    metrics: dict[str, float]
    log_history_path: Path
    csv_path: Path
    global_step: int
    config: Config
    #: True when `--resume` found the run already finished and trained nothing
    already_finished: bool = False


# -- callbacks ------------------------------------------------------------------------------------
def _callbacks_module():
    from transformers import TrainerCallback

    class ThroughputCallback(TrainerCallback):
        """Adds `tokens_per_second` (input tokens, padding excluded, all ranks, since the last log)
        to every training log, before the progress bar, CSV and TensorBoard see it."""

        def __init__(self) -> None:
            self._last_time: float | None = None
            self._last_tokens = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self._last_time = time.perf_counter()
            self._last_tokens = state.num_input_tokens_seen

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None or "loss" not in logs or self._last_time is None:
                return
            now = time.perf_counter()
            tokens = state.num_input_tokens_seen - self._last_tokens
            if now > self._last_time and tokens > 0:
                logs["tokens_per_second"] = tokens / (now - self._last_time)
                # Trainer.log appended a copy to the history before calling back; keep them equal
                if state.log_history and state.log_history[-1].get("step") == state.global_step:
                    state.log_history[-1]["tokens_per_second"] = logs["tokens_per_second"]
            self._last_time, self._last_tokens = now, state.num_input_tokens_seen

    class CSVLogCallback(TrainerCallback):
        """Appends one row per training log to `path` (rank 0 only). On resume, rows after the
        checkpoint's step (logged by the interrupted run) are dropped first, so steps are unique."""

        def __init__(self, path: Path) -> None:
            self.path = path

        def on_train_begin(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            kept = read_log_rows(self.path, state.global_step) if state.global_step > 0 else []
            # a new file beside the old one, renamed over it: a failed write (file-size limit, full
            # disk) keeps the earlier steps, which a rewrite in place would have truncated
            buffer = io.StringIO(newline="")
            writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept)
            write_text_atomic(self.path, buffer.getvalue())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or logs is None or "loss" not in logs:
                return
            row = {"step": state.global_step, **{k: logs.get(k, "") for k in CSV_COLUMNS if k != "step"}}
            row["num_input_tokens_seen"] = state.num_input_tokens_seen
            buffer = io.StringIO(newline="")
            csv.DictWriter(buffer, fieldnames=CSV_COLUMNS).writerow(row)
            # one write per row, flushed: a kill tears at most this row, which the next resume drops
            with self.path.open("a", newline="") as handle:
                handle.write(buffer.getvalue())
                handle.flush()

    class ProgressBarCallback(TrainerCallback):
        """A tqdm bar over optimizer steps whose postfix shows the last logged loss terms and
        tokens/s; with `bar=False`, one plain line per log instead (for CI logs)."""

        def __init__(self, bar: bool = True) -> None:
            self.bar_enabled = bar
            self.bar = None
            self._step = 0

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero and self.bar_enabled:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="train", dynamic_ncols=True)
            self._step = state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(state.global_step - self._step)
            self._step = state.global_step

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or logs is None or "loss" not in logs:
                return
            # the names of the logged keys (log.csv, TensorBoard), so a bar reading is found in the logs
            shown = {key: logs.get(key) for key in PROGRESS_KEYS}
            text = {
                k: (f"{v:.0f}" if k == "tokens_per_second" else f"{v:.4g}")
                for k, v in shown.items()
                if isinstance(v, (int, float))
            }
            if self.bar is not None:
                self.bar.set_postfix(text, refresh=True)
            else:
                print(f"step {state.global_step}/{state.max_steps} " + " ".join(f"{k}={v}" for k, v in text.items()), flush=True)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    class StopAfterStepCallback(TrainerCallback):
        """Ends training after optimizer step `step` as if the process had been killed there (the
        checkpoint at that step, if any, is already written). For tests and time-boxed runs."""

        def __init__(self, step: int) -> None:
            self.step = step

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= self.step:
                control.should_training_stop = True
            return control

    class CheckpointMarkerCallback(TrainerCallback):
        """Marks each checkpoint complete once the Trainer has written all of it (all ranks), then
        removes the oldest whole checkpoints beyond `keep` (train.save_total_limit). The Trainer's
        own rotation is off: it runs before the marker, so with a limit of 1 a kill between the
        two would leave no whole checkpoint."""

        def __init__(self, keep: int | None) -> None:
            self.keep = keep

        def on_save(self, args, state, control, **kwargs):
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.barrier()  # every rank's shards are on disk before the marker says so
            if state.is_world_process_zero:
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if folder.is_dir():
                    try:
                        write_marker(folder, state.global_step)
                    except OSError as error:
                        full = disk_full_error(error, folder)
                        if full is not None:
                            raise full from None
                        raise
                    rotate_checkpoints(Path(args.output_dir), self.keep)

    class ConfigRecordCallback(TrainerCallback):
        """Writes config.yaml and inputs.json once the Trainer has loaded everything and training
        begins (rank 0), so a resume that fails while loading its checkpoint leaves the run's
        record as it was."""

        def __init__(self, config: Config, replaced_at: Path | None, inputs: dict[str, str] | None = None) -> None:
            self.config, self.replaced_at, self.inputs = config, replaced_at, inputs

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                record_config(self.config, Path(args.output_dir), self.replaced_at)
                if self.inputs is not None:
                    record_inputs(self.inputs, Path(args.output_dir))

    return (ThroughputCallback, CSVLogCallback, ProgressBarCallback, StopAfterStepCallback, CheckpointMarkerCallback,
            ConfigRecordCallback)


def read_log_rows(path: Path, up_to_step: int) -> list[dict[str, str]]:
    """The whole rows of log.csv at `path` with step <= `up_to_step` (a resume drops the steps the
    interrupted run logged after its checkpoint). A torn last row (a kill mid-append: no final
    newline) and any row that is not a whole row (wrong number of fields, a step that is not an
    integer) are dropped, so they never reappear as a bogus step between two real ones."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # the torn tail of the last append
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header or "step" not in header:
        return []
    kept: list[dict[str, str]] = []
    for fields in reader:
        if len(fields) != len(header):
            continue
        row = dict(zip(header, fields, strict=True))
        try:
            step = int(row["step"])
        except ValueError:
            continue
        if 0 < step <= up_to_step and (not kept or step > int(kept[-1]["step"])):
            kept.append(row)
    return kept


#: beside config.yaml: the content hashes of what the run trains on (its data, its start weights)
INPUTS_FILE = "inputs.json"


def run_inputs(config: Config, examples: list[Any]) -> dict[str, str]:
    """The content hashes a resume is checked against: `data_sha256` of the examples as loaded
    (whatever their source: a file, a generated set, a dataset) and `model_sha256` of the start
    weights (numloss.identity; absent for 'tiny', whose weights follow from the config)."""
    from dataclasses import asdict, is_dataclass

    from numloss.identity import json_sha256, model_sha256

    rows = [asdict(e) if is_dataclass(e) else e for e in examples]
    inputs = {"data_sha256": json_sha256(rows)}
    weights = model_sha256(config.model.name, config.model.cache_dir)
    if weights is not None:
        inputs["model_sha256"] = weights
    return inputs


def record_inputs(inputs: dict[str, str], output_dir: Path) -> None:
    """Write output_dir/inputs.json (atomically)."""
    write_text_atomic(output_dir / INPUTS_FILE, json.dumps(inputs, indent=1, sort_keys=True) + "\n")


def check_inputs_unchanged(config: Config, output_dir: Path, inputs: dict[str, str]) -> list[str]:
    """For a resume: what changed between the run's inputs.json and `inputs`, as one-line parts.
    A ConfigError unless --resume-changed; with it, the changes are returned (for a warning).
    A run without inputs.json (written before it existed) is not checked."""
    from numloss.identity import describe_change

    try:
        stored = json.loads((output_dir / INPUTS_FILE).read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    names = {"data_sha256": f"the training data ({config.data.source})", "model_sha256": f"the start weights ({config.model.name})"}
    changed = [describe_change(name, stored.get(key), inputs.get(key)) for key, name in names.items()
               if stored.get(key) != inputs.get(key) and (key in stored or key in inputs)]
    if changed and not config.train.resume_changed:
        raise ConfigError(
            f"--resume: {'; '.join(changed)} since the run in {output_dir} started; put them back, or pass "
            "--resume-changed to continue on the new ones"
        )
    return changed


def record_config(config: Config, output_dir: Path, replaced_at: Path | None) -> None:
    """Write output_dir/config.yaml (atomically); with `replaced_at` (a --resume-changed resume
    from that checkpoint) the old one is kept as config-before-step-N.yaml first."""
    path = output_dir / "config.yaml"
    if replaced_at is not None and path.is_file():
        path.rename(output_dir / f"config-before-step-{checkpoint_step(replaced_at)}.yaml")
    write_text_atomic(path, dump_config(config))


# -- the run folder: what it holds, what a new run may do with it -------------------------------------
class DiskFullError(OSError):
    """A save ran out of space (ENOSPC, a quota, RLIMIT_FSIZE); the message names the path."""


_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
# torch.save reports a short write as "enforce fail ... file write failed" or "... unexpected pos
# N vs M" (the bytes it meant to have written), with the errno lost on the way
_DISK_FULL_TEXT = ("No space left on device", "File too large", "Disk quota exceeded", "file write failed",
                   "StorageFull", "FileTooLarge", "unexpected pos", "PytorchStreamWriter failed")


def disk_full_error(error: BaseException, where: Path) -> DiskFullError | None:
    """A DiskFullError for `error` (or anything in its chain) if it is a full disk or a file-size
    limit: OSError ENOSPC/EFBIG/EDQUOT, torch.save's "enforce fail ... file write failed",
    safetensors' SafetensorError; None for any other error. `where`: what was being written."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    path, reason = where, None
    for item in chain:
        if isinstance(item, OSError) and item.errno in _DISK_FULL_ERRNOS:
            path = Path(item.filename) if item.filename else where
            reason = os.strerror(item.errno)
            break
    if reason is None:
        text = " ".join(str(item) for item in chain)
        if not any(marker in text for marker in _DISK_FULL_TEXT):
            return None
        reason = next((m for m in _DISK_FULL_TEXT[:3] if m in text), "a write failed (no space, or a file-size limit)")
    return DiskFullError(
        f"disk full at {path}: {reason}; free space (or raise the file-size limit)"
    )


@dataclass
class RunPlan:
    """What a run does with its output_dir (`plan_run_dir`).

    action: "new" (nothing of value there), "overwrite" (`entries` move aside first), "resume"
    (continue; `changed` lists the settings --resume-changed let through), "finished" (`--resume`
    of a run that reached its end: `record` is final/'s record).
    """

    action: str
    entries: list[Path] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None
    note: str | None = None


def _reached_end(record: dict[str, Any], config: Config) -> bool:
    try:
        step = int(record.get("global_step", 0))
        saved_train = record["config"]["train"]
        if config.train.max_steps > 0:
            return step >= config.train.max_steps if step else saved_train.get("max_steps") == config.train.max_steps
        return saved_train.get("max_steps") == -1 and float(saved_train.get("num_epochs", 0)) >= config.train.num_epochs
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def finished_run(output_dir: Path, config: Config) -> dict[str, Any] | None:
    """The record of a run in `output_dir` whose whole final/ reached `config`'s length, or None."""
    record, _ = final_record(output_dir)
    return record if record is not None and _reached_end(record, config) else None


def plan_run_dir(config: Config) -> RunPlan:
    """What this run may do with `train.output_dir`, decided from what is there; reads only.

    A folder holding nothing numloss or a Trainer wrote is "new". Otherwise, without --resume:
    "overwrite" with --overwrite, "new" when it holds only the config and logs of an attempt of
    this same config that saved nothing; anything else (a finished run, checkpoints, another
    config's run, Trainer files without a config.yaml) is refused. With --resume the stored
    config.yaml must agree with this one in every setting that changes the run
    (`numloss.config.changed_settings`), unless --resume-changed. Raises ConfigError.
    """
    train = config.train
    out = Path(train.output_dir)
    resume = train.resume
    if train.overwrite and resume is not False:
        raise ConfigError(
            "--overwrite and --resume contradict each other (--resume continues the run in train.output_dir, "
            "--overwrite moves it aside and starts again); give one"
        )
    entries = run_entries(out)
    config_path = out / "config.yaml"
    if not config_path.is_file() and isinstance(resume, str):
        config_path = Path(resume).parent / "config.yaml"  # a checkpoint of a run elsewhere
    stored: Config | None = None
    if config_path.is_file():
        try:
            stored = read_stored_config(config_path)
        except ConfigError as error:
            stored_problem = f"its config.yaml cannot be read ({error})"
    else:
        stored_problem = "it has no config.yaml (Trainer files, or a run from elsewhere)"
    if not entries:
        if resume is True:
            raise ConfigError(
                f"train.resume: no complete checkpoint-* folder in {str(out)!r} to resume from; run without "
                "--resume (and with train.save_steps > 0 to write checkpoints), or pass a checkpoint folder"
            )
        if resume is False:
            return RunPlan("new")
        if stored is None:  # a checkpoint named explicitly, from a run without numloss's config.yaml
            return RunPlan("resume", note=f"train.resume {resume!r} has no config.yaml beside it; its settings "
                                          "cannot be compared with this config")
    changed = changed_settings(stored, config) if stored is not None else []
    record, final_problem = final_record(out)
    finished = record is not None and _reached_end(record, config)
    if resume is False:
        if train.overwrite:
            return RunPlan("overwrite", entries)
        progress = [e for e in entries if e.name.startswith(("checkpoint-", "final", "merged", "partial-"))]
        whole = [e for e in progress if _whole_progress(e)]
        if stored is not None and not changed and not whole and not (out / "trainer_state.json").exists():
            # killed before its first whole save (a checkpoint without its marker, a torn
            # final.partial): nothing can be resumed, so the same command starts again
            note = "an earlier attempt of this config saved nothing; starting again"
            if progress:
                note = (f"an earlier attempt of this config was killed before a whole save "
                        f"({', '.join(sorted(e.name for e in progress)[:3])}); starting again (partial folders kept as partial-*)")
            return RunPlan("new", entries, note=note)
        if record is not None:
            state = f"a finished run (final/, step {record.get('global_step', '?')})"
        elif progress:
            state = f"an unfinished run ({', '.join(sorted(e.name for e in progress)[:3])})"
        else:
            state = "a run"
        if stored is None:
            whose = f" whose settings are unknown: {stored_problem}"
        elif changed:
            whose = f" of another config ({'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''})"
        else:
            whose = " of this config"
        raise ConfigError(
            f"train.output_dir {str(out)!r} already holds {state}{whose}; nothing was changed. --resume continues "
            f"it, --overwrite moves its files to {out}/overwritten-TIME/ and starts again, or choose another "
            "train.output_dir"
        )
    if stored is None and not train.resume_changed:
        raise ConfigError(
            f"--resume: {str(out)!r} cannot be checked against this config: {stored_problem}; pass "
            "--resume-changed to resume anyway"
        )
    if changed and not train.resume_changed:
        raise ConfigError(
            f"--resume: these settings differ from the run's config.yaml and change what it learns: "
            f"{'; '.join(changed)}. Put them back, or pass --resume-changed to continue under the new ones"
        )
    if finished and resume is True:
        return RunPlan("finished", entries, changed=changed, record=record)
    note = f"final/ fails its check ({final_problem}); training from the newest intact checkpoint" if final_problem else None
    return RunPlan("resume", entries, changed=changed, note=note)


def _whole_progress(entry: Path) -> bool:
    """True when a run-folder entry holds training progress a resume can use: a checkpoint that
    passes its check, a whole final/ (or a final.partial/ whose marker is written: --resume
    completes its rename), a merged model or a kept final-step-N/."""
    name = entry.name
    if name.startswith("partial-"):
        return False
    if name.startswith("checkpoint-") or name == FINAL_PARTIAL:
        return folder_problem(entry) is None
    return True


def _set_partial_aside(output_dir: Path) -> None:
    """Before a run starts again: checkpoint-N folders a kill cut short (no marker) are renamed
    partial-checkpoint-N, so the new run's saves neither overwrite nor count them."""
    for folder in sorted(output_dir.glob("checkpoint-*")):
        if folder.is_dir() and checkpoint_step(folder) >= 0 and folder_problem(folder) is not None:
            moved = set_aside(folder)
            logger.warning("%s: %s was cut short by a kill; kept as %s", output_dir, folder.name, moved.name)


def check_output_dir(output_dir: Path) -> None:
    """Raise ConfigError now (before any model loads) when `output_dir` cannot be created or written."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / f".numloss-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(
            f"train.output_dir {str(output_dir)!r} cannot be written ({reason}); choose a folder you can write "
            "to (--train.output_dir DIR)"
        ) from None


# -- pieces ---------------------------------------------------------------------------------------
def bf16_supported() -> bool:
    """True where bf16 autocast runs natively: a CUDA GPU with bf16, or a CPU with AVX512-BF16/AMX."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def build_training_arguments(config: Config) -> Any:
    """The `transformers.TrainingArguments` of a config (train.extra last, overriding)."""
    from transformers import TrainingArguments

    train = config.train
    bf16 = bf16_supported() if train.bf16 is None else train.bf16
    if bf16 and not bf16_supported():
        raise ConfigError(
            "train.bf16 is true but this machine has no bf16 support (no CUDA bf16 GPU, no AVX512-BF16/AMX "
            "CPU); set train.bf16 false or null (auto)"
        )
    report_to = [r for r in train.report_to if r not in ("tensorboard", "none")]
    kwargs: dict[str, Any] = dict(
        output_dir=train.output_dir,
        num_train_epochs=train.num_epochs,
        max_steps=train.max_steps,
        per_device_train_batch_size=train.batch_size,
        gradient_accumulation_steps=train.grad_accum,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=train.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        optim=train.optim,
        seed=train.seed,
        data_seed=train.seed,
        bf16=bf16,
        logging_steps=train.logging_steps,
        logging_first_step=True,
        save_strategy="steps" if train.save_steps > 0 else "no",
        save_steps=train.save_steps if train.save_steps > 0 else 500,
        save_total_limit=None,  # numloss rotates, after the marker (CheckpointMarkerCallback)
        report_to=report_to or "none",
        disable_tqdm=True,  # numloss's own bar (loss terms, tokens/s) replaces the default one
        dataloader_num_workers=train.dataloader_num_workers,
        remove_unused_columns=False,
        include_num_input_tokens_seen="non_padding",
    )
    if config.model.gradient_checkpointing:
        kwargs["gradient_checkpointing"] = True
    if train.tf32 is not None:
        kwargs["tf32"] = train.tf32
    if train.fsdp:
        import torch

        if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            raise ConfigError("train.fsdp: FSDP shards a model across processes; this is one CPU process (launch it "
                              "with torchrun / accelerate launch on several), or drop train.fsdp")
        kwargs["fsdp"] = train.fsdp
        kwargs["fsdp_config"] = dict(train.fsdp_config) or None
    if train.deepspeed:
        kwargs["deepspeed"] = train.deepspeed
    import torch

    if not torch.cuda.is_available():
        kwargs["use_cpu"] = True  # transformers refuses bf16 on CPU unless told it is a CPU run
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            kwargs["ddp_backend"] = "gloo"  # CPU multi-process (tests, CPU clusters)
    kwargs.update(train.extra)
    return TrainingArguments(**kwargs)


def digit_vocab_for(config: Config, tokenizer: Any) -> Any:
    """The DigitVocab of `tokenizer` for `config`'s objective; a ConfigError when it has none.

    Called before the model loads, so a tokenizer without digit tokens fails in a second.
    """
    from numloss.digits import DigitVocab, DigitVocabError

    name = config.objective.name.lower().replace("_", "-")
    try:
        # plain cross-entropy needs no digit tokens: allow any tokenizer for it
        return DigitVocab.from_tokenizer(tokenizer, allow_multi_digit=(name == "mle"))
    except DigitVocabError as error:
        raise ConfigError(f"model.name {config.model.name!r}: {error}") from None


def build_loss_for(config: Config, model: Any, tokenizer: Any, vocab: Any = None) -> Any:
    """The objective of `config` for this tokenizer (and, for EMO, this model's output embedding)."""
    from numloss.losses import LOSSES, build_loss

    name = config.objective.name.lower().replace("_", "-")
    vocab = vocab if vocab is not None else digit_vocab_for(config, tokenizer)
    options = dict(config.objective.options)
    if config.objective.alpha is not None:
        options["alpha"] = config.objective.alpha
    if LOSSES[name].needs_output_embedding:
        options["embedding"] = model.get_output_embeddings().weight
    return build_loss(name, vocab, **options)


def apply_lora(config: Config, model: Any) -> Any:
    """`model` wrapped with LoRA adapters per `config.lora` (only adapters train)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    lora = config.lora
    target = lora.target_modules
    peft_config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=target if isinstance(target, str) else list(target),
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, peft_config)
    if config.model.gradient_checkpointing:
        model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
    return model


def load_training_examples(config: Config) -> list[Any]:
    """The examples of `config.data` (read before any model is loaded, so a bad source fails fast)."""
    from numloss.data import load_examples

    data = config.data
    return load_examples(
        data.source,
        num_examples=data.num_examples,
        seed=data.seed,
        split=data.split,
        subset=data.subset,
        instruction_field=data.instruction_field,
        input_field=data.input_field,
        output_field=data.output_field,
    )


DENSITY_EXAMPLES = 2000  # examples read for the logged tokens-per-digit ratio


def log_digit_density(dataset: Any, loss_fn: Any) -> tuple[int, int]:
    """Log the learnt tokens N_tok and the objective's digit positions N_dig of the first
    DENSITY_EXAMPLES examples, and the alpha with which normalize="tokens" equals "digits" on
    average (docs/integration.md); returns (N_tok, N_dig)."""
    import torch

    from numloss.hf import count_tokens_and_digits, has_digit_term

    features = dataset.features[:DENSITY_EXAMPLES]
    # one row: each example's labels aligned with its prediction positions, an ignored position
    # between examples so that no number runs from one into the next
    row = [label for f in features for label in (*f["labels"][1:], loss_fn.ignore_index)]
    tokens, digits = (int(n) for n in count_tokens_and_digits(torch.tensor([row], dtype=torch.long), loss_fn))
    if not has_digit_term(loss_fn):
        digits = 0
    if digits:
        ratio = tokens / digits
        if getattr(loss_fn, "normalize", "") == "weights":  # DIST2's count is its sum of place weights
            counted, per, normalize = "place weights", "unit of place weight", "weights"
        else:
            counted, per, normalize = "digit positions", "digit", "digits"
        logger.warning(
            "data: %d learnt tokens, %d %s in the first %d examples: %.2f tokens per %s "
            "(normalize=\"tokens\" matches \"%s\" on average at alpha x %.2f)",
            tokens, digits, counted, len(features), ratio, per, normalize, ratio,
        )
    return tokens, digits


def prepare_data(config: Config, examples: list[Any], tokenizer: Any) -> Any:
    """`examples` tokenised with completion-only labels; the truncation counts go to the log."""
    from numloss.data import DataError, tokenize_examples

    try:
        dataset = tokenize_examples(examples, tokenizer, config.data.max_length, chat_template=config.data.chat_template)
    except DataError as error:
        raise ConfigError(f"data: {error}") from None
    logger.warning("data %s: %s", config.data.source, dataset.summary())
    if dataset.num_without_target == len(dataset):
        raise ConfigError(
            f"data.max_length={config.data.max_length}: every prompt fills the limit, so no response token "
            "is left to learn; raise data.max_length"
        )
    return dataset


def _write_json(path: Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=1, default=str) + "\n")


# -- the run --------------------------------------------------------------------------------------
def tiny_options_for(config: Any) -> dict[str, Any]:
    """The options of the tiny model (and its tokenizer) for `config`."""
    return {
        "num_layers": config.model.tiny_layers,
        "hidden_size": config.model.tiny_hidden,
        "num_heads": config.model.tiny_heads,
        "digits_per_token": config.model.tiny_digits_per_token,
        "max_position_embeddings": max(2048, config.data.max_length),
    }


def load_tokenizer_for(config: Any) -> Any:
    """The tokenizer `load_model_for(config)` will return, without loading any weights."""
    from numloss.models import load_tokenizer

    return load_tokenizer(
        config.model.name,
        revision=config.model.revision,
        trust_remote_code=config.model.trust_remote_code,
        cache_dir=config.model.cache_dir,
        tiny_options=tiny_options_for(config),
    )


def load_model_for(config: Any) -> tuple[Any, Any]:
    """(model, tokenizer) that a run of `config` starts from, before any training or LoRA."""
    from numloss.models import load_model_and_tokenizer

    return load_model_and_tokenizer(
        config.model.name,
        revision=config.model.revision,
        dtype=config.model.dtype,
        trust_remote_code=config.model.trust_remote_code,
        attn_implementation=config.model.attn_implementation,
        tiny_options=tiny_options_for(config),
        cache_dir=config.model.cache_dir,
        seed=config.train.seed,
    )


@dataclass
class Prepared:
    """Everything a run needs before its weights load (`prepare_run`): the examples, the
    tokenizer, its DigitVocab, the tokenised data and the TrainingArguments."""

    config: Config
    examples: list[Any]
    tokenizer: Any
    vocab: Any
    dataset: Any
    args: Any


def _check_model_name(config: Config) -> None:
    from numloss.models import ModelUnavailableError, check_model_available

    try:
        check_model_available(config.model.name, config.model.revision, config.model.cache_dir)
    except ModelUnavailableError as error:
        raise ConfigError(f"model.name: {error}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _meta_model(config: Config, tokenizer: Any) -> Any:
    """The model of `config` built on the meta device (module names and shapes, no weights)."""
    import torch

    if config.model.name == "tiny":
        from numloss.models import build_tiny_model

        options = tiny_options_for(config)
        options.pop("digits_per_token", None)
        with torch.device("meta"):
            return build_tiny_model(tokenizer, seed=config.train.seed, **options)
    from transformers import AutoConfig, AutoModelForCausalLM

    from numloss.models import smollm2

    source = str(smollm2.prepare(config.model.cache_dir)) if config.model.name == "smollm2" else config.model.name
    model_config = AutoConfig.from_pretrained(source, revision=config.model.revision,
                                              trust_remote_code=config.model.trust_remote_code)
    kwargs: dict[str, Any] = {"trust_remote_code": config.model.trust_remote_code}
    if config.model.attn_implementation:
        kwargs["attn_implementation"] = config.model.attn_implementation
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(model_config, **kwargs)


def check_model_structure(config: Config, tokenizer: Any) -> None:
    """The model's structure without its weights: the attention kernel and the LoRA target
    modules exist. Raises ConfigError."""
    attention = config.model.attn_implementation
    if attention is not None and config.model.name == "tiny":
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        known = ["eager", *(name for name in ALL_ATTENTION_FUNCTIONS.keys() if "|" not in name)]
        if attention not in known:
            raise ConfigError(f"model.attn_implementation: unknown kernel {attention!r}; choose one of {', '.join(known)}")
    try:
        model = _meta_model(config, tokenizer)
    except (ValueError, ImportError) as error:  # an unknown kernel, a missing package, a bad config.json
        raise ConfigError(f"model: {config.model.name!r} cannot be built with these settings: {_first_line(error)}") from None
    except Exception as error:  # noqa: BLE001 - a model that cannot be built on the meta device
        logger.warning("could not check %s without its weights (%s); LoRA targets are checked when it loads",
                       config.model.name, _first_line(error))
        return
    width = getattr(getattr(model, "config", None), "hidden_size", None)
    if config.lora.enabled and isinstance(width, int) and config.lora.r > width:
        raise ConfigError(f"lora.r {config.lora.r} is larger than the model's width ({width}); a rank above it adds "
                          "nothing (and a huge one exhausts memory): give at most the width")
    if config.lora.enabled:
        target = config.lora.target_modules
        names = [name for name, _ in model.named_modules() if name]
        if isinstance(target, list):  # peft names only the case where no target matches at all
            for wanted in target:
                if not any(name == wanted or name.endswith(f".{wanted}") for name in names):
                    leaves = sorted({name.rsplit(".", 1)[-1] for name in names})
                    raise ConfigError(
                        f"lora.target_modules: the model has no module named {wanted!r}; its module names are "
                        f"{', '.join(leaves[:40])}"
                    )
        try:
            apply_lora(config, model)
        except (ValueError, TypeError, KeyError) as error:
            names = sorted({name.rsplit(".", 1)[-1] for name, _ in model.named_modules() if name})
            raise ConfigError(
                f"lora: {_first_line(error)}; the model's module names are {', '.join(names[:40])}"
            ) from None


def check_output_dir_writable(output_dir: Path) -> None:
    """ConfigError when `output_dir` could not be created or written; creates nothing (dry run)."""
    folder = output_dir
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"train.output_dir {str(output_dir)!r} cannot be written ({str(folder)!r} is not a writable folder); "
            "choose a folder you can write to (--train.output_dir DIR)"
        )


def build_arguments_checked(config: Config) -> Any:
    """`build_training_arguments`, with transformers' own refusals (and an optimizer it cannot
    build) as one ConfigError line."""
    try:
        args = build_training_arguments(config)
    except ConfigError:
        raise
    except (ValueError, TypeError, ImportError, OSError, KeyError) as error:
        raise ConfigError(f"train: transformers.TrainingArguments refuses these settings: {_first_line(error)}") from None
    from transformers import Trainer

    try:
        optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    except (ValueError, ImportError, TypeError) as error:
        raise ConfigError(f"train.optim {config.train.optim!r} cannot be used here: {_first_line(error)}") from None
    check_arguments_in_context(args)
    dry_build_optimizer_and_scheduler(config, args, optimizer_cls, optimizer_kwargs)
    return args


def check_arguments_in_context(args: Any) -> None:
    """TrainingArguments that transformers accepts and then fails on (or ignores) inside a run of
    numloss's: an evaluation schedule without an evaluation set, fp16 or FSDP where they cannot
    run, a negative NEFTune noise. Raises ConfigError."""
    import torch

    if str(getattr(args, "eval_strategy", "no")) not in ("no", "IntervalStrategy.NO"):
        raise ConfigError("train.extra.eval_strategy: numloss trains without an evaluation set (compare scores the "
                          "runs itself); drop eval_strategy")
    if getattr(args, "fp16", False) and not torch.cuda.is_available():
        raise ConfigError("train.extra.fp16: fp16 mixed precision needs a CUDA GPU; on this machine use train.bf16 "
                          "(where supported) or drop fp16")
    noise = getattr(args, "neftune_noise_alpha", None)
    if noise is not None and not noise > 0:
        raise ConfigError(f"train.extra.neftune_noise_alpha must be > 0 (or null for none), got {noise}")


def dry_build_optimizer_and_scheduler(config: Config, args: Any, optimizer_cls: Any, optimizer_kwargs: dict[str, Any]) -> None:
    """Build the optimizer (over one stand-in parameter) and the learning-rate scheduler a run
    will build, so train.extra values they refuse (adam_beta1 2, adam_epsilon -1, a bogus
    lr_scheduler_kwargs key, cosine_with_min_lr without its kwargs) are one line before any
    model loads, not a traceback from inside the first step. Raises ConfigError."""
    import torch
    from transformers import get_scheduler

    parameter = torch.nn.Parameter(torch.zeros(1))
    try:
        optimizer = optimizer_cls([parameter], **optimizer_kwargs)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ConfigError(f"train: the optimizer {config.train.optim!r} refuses these settings (train.extra): "
                          f"{_first_line(error)}") from None
    steps = args.max_steps if args.max_steps > 0 else 100
    extra = dict(args.lr_scheduler_kwargs or {})
    if extra:  # some schedules drop the kwargs they do not take without a word
        import inspect

        from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
        from transformers.trainer_utils import SchedulerType

        schedule = TYPE_TO_SCHEDULER_FUNCTION.get(SchedulerType(args.lr_scheduler_type))
        taken = set(inspect.signature(schedule).parameters) - {"optimizer", "num_warmup_steps", "num_training_steps"} \
            if schedule is not None else set()
        unknown = sorted(set(extra) - taken)
        if unknown:
            raise ConfigError(f"train.extra.lr_scheduler_kwargs: the {config.train.lr_scheduler!r} schedule takes "
                              f"{', '.join(sorted(taken)) or 'no options'}, not {', '.join(unknown)}")
    try:
        get_scheduler(args.lr_scheduler_type, optimizer, num_warmup_steps=args.get_warmup_steps(steps),
                      num_training_steps=steps, scheduler_specific_kwargs=dict(args.lr_scheduler_kwargs or {}))
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(f"train.lr_scheduler {config.train.lr_scheduler!r} refuses these settings (train.extra."
                          f"lr_scheduler_kwargs): {_first_line(error)}") from None


def prepare_run(config: Config, examples: list[Any] | None = None) -> Prepared:
    """Every check that needs no training, in order: the data, the tokenizer's digit tokens, the
    rendering (chat template included), the TrainingArguments and optimizer, the model's
    structure (attention, LoRA targets). What `--dry-run` runs after the config and run-folder
    checks. Raises ConfigError."""
    from numloss.data import DataError

    try:
        if examples is None:
            examples = load_training_examples(config)
    except DataError as error:
        raise ConfigError(f"data: {error}") from None
    if not examples:
        raise ConfigError("run_training: no training examples (examples is empty)")
    check_text(examples)
    tokenizer = load_tokenizer_for(config)
    vocab = digit_vocab_for(config, tokenizer)
    dataset = prepare_data(config, examples, tokenizer)
    args = build_arguments_checked(config)  # also sets up the process group under torchrun
    check_model_structure(config, tokenizer)
    return Prepared(config, examples, tokenizer, vocab, dataset, args)


def check_text(examples: list[Any]) -> None:
    """ConfigError naming the example and field when a text is not valid Unicode (a lone
    surrogate from a JSON escape like "\\ud800"): no tokenizer can encode it."""
    for index, example in enumerate(examples):
        for name in ("instruction", "input", "output"):
            text = getattr(example, name, None)
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as error:
                    raise ConfigError(
                        f"data: example {index} has a lone surrogate (U+{ord(text[error.start]):04X}) in its {name} at "
                        f"character {error.start}: not valid Unicode, so it cannot be tokenised; fix that record"
                    ) from None


def check_run(config: Config, examples: list[Any] | None = None) -> tuple[RunPlan, Prepared]:
    """What `numloss train --dry-run` does: every check of a real run, no lock, nothing written."""
    from numloss.config import validate

    validate(config)
    _check_model_name(config)
    output_dir = Path(config.train.output_dir)
    check_output_dir_writable(output_dir)
    from numloss.rundir import RunDirBusy, check_not_busy

    try:
        check_not_busy(output_dir)
    except RunDirBusy as error:
        raise ConfigError(f"train.output_dir: {error}") from None
    plan = plan_run_dir(config)
    if isinstance(config.train.resume, str):
        _check_resume_folder(Path(config.train.resume))
    prepared = prepare_run(config, examples)
    if plan.action == "resume":
        check_inputs_unchanged(config, output_dir, run_inputs(config, prepared.examples))
    return plan, prepared


def _check_resume_folder(folder: Path) -> None:
    problem = folder_problem(folder, require_marker=False)
    if problem is not None:
        raise ConfigError(f"train.resume: {str(folder)!r} cannot be resumed from: {problem}")


def run_training(
    config: Config,
    callbacks: list[Any] | None = None,
    stop_after_step: int | None = None,
    examples: list[Any] | None = None,
) -> TrainResult:
    """Train per `config` (already validated by `load_config`) and save the final model.

    `callbacks`: extra `transformers.TrainerCallback`s. `stop_after_step`: end after that optimizer
    step as if killed there (the checkpoint schedule is unchanged; no final model is saved), to
    test resuming. `examples`: train on these `numloss.data.Example`s instead of reading
    `config.data.source` (`numloss compare` passes its task's set, whose prompts are bare).

    The output folder is locked for the whole run (`numloss.rundir.hold_run_dir`) and handled
    per `plan_run_dir`: a finished or foreign run is refused unless train.overwrite (it moves
    aside), a resume with changed settings unless train.resume_changed. Resuming continues from
    the newest checkpoint that passes its check (markers with SHA-256), with the optimizer,
    scheduler, RNG and data position restored. Raises ConfigError for anything wrong with the
    config or the folder, DiskFullError when a save runs out of space.
    """
    from numloss.config import validate
    from numloss.rundir import RunDirBusy, RunDirLockError, hold_run_dir

    validate(config)
    _check_model_name(config)
    if examples is not None and not examples:
        raise ConfigError("run_training: no training examples (examples is empty)")
    output_dir = Path(config.train.output_dir)
    check_output_dir(output_dir)
    main_process = int(os.environ.get("RANK", "0")) == 0
    with ExitStack() as stack:
        if main_process:  # the other ranks of a distributed run write into the folder rank 0 holds
            try:
                stack.enter_context(hold_run_dir(output_dir, "numloss train"))
            except (RunDirBusy, RunDirLockError) as error:
                raise ConfigError(f"train.output_dir: {error}") from None
        return _run_locked(config, output_dir, main_process, callbacks, stop_after_step, examples)
    raise AssertionError("unreachable")  # pragma: no cover


def _resume_checkpoint(config: Config, output_dir: Path, main_process: bool) -> Path:
    """The checkpoint a resume starts from; damaged or partial newer ones are set aside, each
    said in one warning line."""
    if isinstance(config.train.resume, str):
        folder = Path(config.train.resume)
        _check_resume_folder(folder)
        return folder
    found, skipped = newest_intact_checkpoint(output_dir)
    for folder, problem in skipped:
        if main_process:
            moved = set_aside(folder)
            logger.warning("--resume: %s fails its check: %s; moved it to %s", folder.name, problem, moved.name)
    if found is None:
        raise ConfigError(
            f"train.resume: no complete checkpoint-* folder in {str(output_dir)!r} to resume from"
            + (f" (every one failed its check: {skipped[0][1]})" if skipped else "")
            + "; run the same command without --resume: it starts the run again from step 0 (partial folders are "
            "kept aside), or pass a checkpoint folder"
        )
    if not any(entry.name.startswith(("optimizer", "global_step")) for entry in found.iterdir()):
        # save_only_model: the Trainer would resume with a fresh optimizer and schedule, and the
        # weights would drift from the uninterrupted run's without a word
        why = (f"{found.name} holds no optimizer or scheduler state (train.extra.save_only_model), so a resume "
               "from it cannot continue the run as it was")
        if not config.train.resume_changed:
            raise ConfigError(f"train.resume: {why}; pass --resume-changed to continue with a fresh optimizer and "
                              "schedule, or --overwrite to start again")
        logger.warning("--resume-changed: %s; continuing with a fresh optimizer and schedule", why)
    if skipped:
        logger.warning("--resume: falling back to %s, the newest intact checkpoint", found.name)
    else:
        logger.warning("--resume: continuing from %s", found.name)
    return found


def _run_locked(
    config: Config,
    output_dir: Path,
    main_process: bool,
    callbacks: list[Any] | None,
    stop_after_step: int | None,
    examples: list[Any] | None,
) -> TrainResult:
    from transformers import set_seed

    from numloss.data import CompletionCollator
    from numloss.hf import NumericTrainer

    if main_process and config.train.resume is True and recover_final(output_dir):
        logger.warning("--resume: completed the save of final/ that an interrupted run had finished writing")
    plan = plan_run_dir(config)
    if plan.action == "finished":
        return _finished_result(output_dir, plan.record or {}, config)
    if plan.note:
        logger.warning("%s: %s", output_dir, plan.note)
    if plan.action == "overwrite" and main_process:
        moved = move_aside(output_dir, plan.entries)
        logger.warning("--overwrite: moved the run that was in %s to %s", output_dir, moved)
    if plan.action == "new" and plan.entries and main_process:
        _set_partial_aside(output_dir)
    checkpoint: Path | None = None
    if plan.action == "resume":
        checkpoint = _resume_checkpoint(config, output_dir, main_process)
        if plan.changed:
            logger.warning("--resume-changed: continuing under new settings: %s", "; ".join(plan.changed))

    prepared = prepare_run(config, examples)
    tokenizer, vocab, dataset, args = prepared.tokenizer, prepared.vocab, prepared.dataset, prepared.args
    inputs = run_inputs(config, prepared.examples)
    if plan.action == "resume":  # checked before any weights load
        for change in check_inputs_unchanged(config, output_dir, inputs):
            logger.warning("--resume-changed: continuing although %s", change)
    set_seed(config.train.seed)
    model, model_tokenizer = load_model_for(config)
    if model_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise RuntimeError(
            "numloss: the tokenizer loaded before the model differs from the model's own; the data were "
            "tokenised with the first (a bug in numloss.models.load_tokenizer)"
        )
    tokenizer = model_tokenizer
    loss_fn = build_loss_for(config, model, tokenizer, vocab)
    log_digit_density(dataset, loss_fn)
    if config.lora.enabled:
        try:
            model = apply_lora(config, model)
        except ValueError as error:  # peft: no target module matched
            raise ConfigError(f"lora: {_first_line(error)}") from None
    if hasattr(model, "config"):
        model.config.use_cache = False  # the KV cache is useless in training and costs memory

    throughput, csv_log, progress, stop_after, checkpoint_marker, config_record = _callbacks_module()
    csv_path = output_dir / "log.csv"
    own_callbacks: list[Any] = [throughput(), checkpoint_marker(config.train.save_total_limit),
                                config_record(config, checkpoint if plan.changed else None, inputs)]
    if "tensorboard" in config.train.report_to and args.process_index == 0:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        own_callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(output_dir / "tensorboard"))))
    own_callbacks += [csv_log(csv_path), progress(config.train.progress_bar)]
    if stop_after_step is not None:
        own_callbacks.append(stop_after(stop_after_step))
    trainer = NumericTrainer(
        loss_fn=loss_fn,
        fused=config.fused,
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=CompletionCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=own_callbacks + list(callbacks or []),
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    main_process = trainer.is_world_process_zero()
    if main_process:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.warning(
            "model %s (%s trainable parameters), objective %s, bf16=%s, fused=%s, world size %d, global batch %d",
            config.model.name, f"{trainable:,}", loss_fn, args.bf16, config.fused, args.world_size,
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        )
    try:
        if checkpoint is not None and _checkpoint_at_end(checkpoint, config):
            # the Trainer would train one step more from a checkpoint at max_steps: a kill after
            # the last checkpoint, before final/ was committed, must not train a 21st of 20 steps
            from transformers.trainer_callback import TrainerState

            logger.warning("--resume: %s is the run's last step; saving it as final/ without training", checkpoint.name)
            trainer._load_from_checkpoint(str(checkpoint))
            trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
            if main_process:
                record_config(config, output_dir, checkpoint if plan.changed else None)
                record_inputs(inputs, output_dir)
            metrics: dict[str, Any] = {}
        else:
            output = trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
            metrics = dict(output.metrics)
    except Exception as error:
        raise _train_error(error, output_dir, trainer, checkpoint) from None
    history = trainer.state.log_history
    for entry in reversed(history):
        if "ce" in entry:
            metrics.update({k: entry[k] for k in ("ce", "aux", "digit_entropy") if k in entry})
            break
    rates = [entry["tokens_per_second"] for entry in history if "tokens_per_second" in entry]
    if len(rates) > 1:
        rates = rates[1:]  # the first interval holds the warm-up (first batches, allocator, threads)
    if rates:
        metrics["tokens_per_second"] = sum(rates) / len(rates)
    history_path = output_dir / "log_history.json"
    model_dir = output_dir / FINAL
    merged_dir: Path | None = None
    stopped_early = stop_after_step is not None and trainer.state.global_step < trainer.state.max_steps
    if main_process:
        _write_json(history_path, history)
    if not stopped_early:
        partial = output_dir / "final.partial"
        try:
            if main_process:
                begin_final(output_dir)
            trainer.accelerator.wait_for_everyone()
            trainer.save_model(str(partial))
            if main_process:
                tokenizer.save_pretrained(partial)
                record = {"metrics": metrics, "global_step": trainer.state.global_step, "config": config.to_dict()}
                _write_json(partial / FINAL_RECORD, record)
            if config.lora.enabled and config.lora.merge:
                merged_dir = output_dir / "merged"
                if main_process:
                    _save_merged(trainer, tokenizer, merged_dir)
            if main_process:
                commit_final(output_dir, trainer.state.global_step)
        except Exception as error:
            raise _train_error(error, output_dir, trainer, None, saving=partial) from None
    trainer.accelerator.wait_for_everyone()
    for value in metrics.values():
        if isinstance(value, float) and not math.isfinite(value):
            logger.warning("a final metric is not finite: %s", metrics)
            break
    return TrainResult(
        output_dir=output_dir,
        model_dir=model_dir,
        merged_dir=merged_dir,
        metrics=metrics,
        log_history_path=history_path,
        csv_path=csv_path,
        global_step=trainer.state.global_step,
        config=config,
    )


def _checkpoint_at_end(checkpoint: Path, config: Config) -> bool:
    """True when `checkpoint` holds the run's last optimizer step already."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        step, planned = int(state["global_step"]), int(state.get("max_steps") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    end = config.train.max_steps if config.train.max_steps > 0 else planned
    return end > 0 and step >= end


def _save_merged(trainer: Any, tokenizer: Any, merged_dir: Path) -> None:
    """The LoRA adapters merged into the base model, written under a temporary name and renamed."""
    partial = merged_dir.with_name(merged_dir.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
    merged.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    if merged_dir.exists():
        shutil.rmtree(merged_dir)  # the same run's earlier merge, superseded by this one
    os.replace(partial, merged_dir)


def _train_error(error: Exception, output_dir: Path, trainer: Any, checkpoint: Path | None,
                 saving: Path | None = None) -> Exception:
    """The one-line error for what went wrong inside training or the final save, or `error`
    itself when it is not one numloss can explain (a bug: its traceback is wanted)."""
    if isinstance(error, (ConfigError, DiskFullError)):
        return error
    where = saving if saving is not None else output_dir / f"checkpoint-{trainer.state.global_step}"
    full = disk_full_error(error, where)
    if full is not None:
        return full
    text = str(error)
    if checkpoint is not None and isinstance(error, RuntimeError) and ("size mismatch" in text or "state_dict" in text):
        detail = next((line.strip() for line in text.splitlines() if "size mismatch" in line), _first_line(error))
        return ConfigError(
            f"train.resume: {checkpoint} was saved from a model of another shape ({detail}); resume with the model "
            "settings it was trained with"
        )
    if checkpoint is not None and isinstance(error, (ValueError, KeyError, OSError, EOFError)) or (
        checkpoint is not None and type(error).__name__ in ("SafetensorError", "UnpicklingError", "JSONDecodeError")
    ):
        return ConfigError(f"train.resume: {checkpoint} cannot be loaded: {_first_line(error)}")
    return error


def _finished_result(output_dir: Path, record: dict[str, Any], config: Config) -> TrainResult:
    """The TrainResult of a run that already finished, read back from final/numloss_train.json."""
    step = int(record.get("global_step", config.train.max_steps))
    logger.warning(
        "--resume: the run in %s already finished (step %d); final/ is left as it is. Raise train.max_steps "
        "(with --resume-changed) to train further, or use a new train.output_dir", output_dir, step,
    )
    merged = output_dir / "merged"
    return TrainResult(
        output_dir=output_dir,
        model_dir=output_dir / FINAL,
        merged_dir=merged if merged.is_dir() else None,
        metrics=dict(record.get("metrics", {})),
        log_history_path=output_dir / "log_history.json",
        csv_path=output_dir / "log.csv",
        global_step=step,
        config=config,
        already_finished=True,
    )


# -- command line ---------------------------------------------------------------------------------
USAGE = """usage: numloss train [CONFIG.yaml] [--resume [--resume-changed]] [--overwrite] [--dry-run] [--threads N]
                     [--section.key VALUE ...]

Fine-tune a causal LM with a numloss objective. CONFIG.yaml holds any of the keys below
(nested by section); --section.key VALUE overrides it (VALUE is read as YAML).
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
"""


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
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--threads" or token.startswith("--threads="):
            value = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in token else 2
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"--threads needs a positive integer, got {value!r}")
            threads = int(value)
            cores = machine_cores()
            if threads > cores:
                raise ValueError(f"--threads {threads}: this machine has {cores} cores; give 1 to {cores}")
            continue
        rest.append(token)
        i += 1
    return threads, rest


#: command-line switches and the keys they set
FLAGS = {"--resume": "--train.resume", "--resume-changed": "--train.resume_changed", "--overwrite": "--train.overwrite"}


def main(argv: list[str] | None = None) -> int:
    """`numloss train` entry point; returns the exit status (2 for a bad config or run folder,
    1 for a full disk)."""
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
    for flag, key in FLAGS.items():
        while flag in argv:
            index = argv.index(flag)
            argv[index : index + 1] = [key, "true"]
    path = None
    if argv and not argv[0].startswith("--"):
        path, argv = argv[0], argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    config: Config | None = None
    try:
        config = load_config(path, argv)
        _check_model_name(config)
        if dry_run:
            plan, prepared = check_run(config)
            print(dump_config(config), end="")
            print(f"numloss train: dry run passed: {len(prepared.dataset)} examples; {_plan_text(plan, config)}",
                  file=sys.stderr)
            return 0
        try:
            result = run_training(config)
        except BaseException:
            _end_process_group(finished=False)
            raise
        _end_process_group(finished=True)
    except ConfigError as error:
        print(f"numloss train: {error}", file=sys.stderr)
        return 2
    except DiskFullError as error:
        print(f"numloss train: {error}{_continue_with(config)}", file=sys.stderr)
        return 1
    except OSError as error:  # a write that failed for another reason than space (EIO, a folder gone)
        where = f" {error.filename}" if error.filename else ""
        print(f"numloss train: cannot write{where}: {error.strerror or error}{_continue_with(config)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if int(os.environ.get("RANK", "0")) == 0:
            line = "interrupted before training began; nothing was written" if config is None else \
                interrupted_line(Path(config.train.output_dir))
            print(f"numloss train: {line}", file=sys.stderr)
        return 130
    if result.already_finished:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"numloss train: the run in {result.output_dir} already finished ({result.global_step} steps); "
                  f"{result.model_dir} is left as it is. Raise train.max_steps (with --resume-changed) to train further.")
        return 0
    if result.model_dir.exists() and int(os.environ.get("RANK", "0")) == 0:
        summary = {k: round(v, 5) if isinstance(v, float) else v for k, v in result.metrics.items()}
        print(f"numloss train: done, {result.global_step} steps; model in {result.model_dir}; metrics {summary}")
    return 0


def _continue_with(config: Config | None) -> str:
    """The end of a failed run's line: the command that continues it, from what the folder holds."""
    if config is None:
        return ""
    found, _ = newest_intact_checkpoint(Path(config.train.output_dir))
    if found is not None:
        return f"; then run the same command with --resume to continue from {found.name}"
    return "; then run the same command: no checkpoint was whole, so it starts again"


def interrupted_line(output_dir: Path) -> str:
    """The one line a Ctrl-C prints: what the run folder kept and the command that continues."""
    found, _ = newest_intact_checkpoint(output_dir)
    if found is not None:
        return (f"interrupted; {found} is the newest whole checkpoint: run the same command with --resume to "
                "continue from it")
    if (output_dir / FINAL).is_dir():
        return f"interrupted; {output_dir / FINAL} is kept as it was"
    return (f"interrupted before the first whole checkpoint; nothing to resume in {output_dir}: run the same "
            "command to start again")


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
        "resume": f"would resume in {out}" + (f" under changed settings: {'; '.join(plan.changed)}" if plan.changed else ""),
        "finished": f"the run in {out} already finished; nothing to train",
    }[plan.action]
