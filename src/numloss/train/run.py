"""The loop's glue: `run_training` locks the run folder, prepares the run, builds the Trainer,
trains (or resumes) and commits final/; `check_run` is the same without training (--dry-run)."""

from __future__ import annotations

import logging
import math
import os
import shutil
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numloss.atomic import write_json_atomic
from numloss.checkpoints import FINAL, FINAL_RECORD, begin_final, commit_final, recover_final
from numloss.config import Config, ConfigError
from numloss.textio import utf8_path
from numloss.train import build, folder
from numloss.train.errors import first_line, train_error

logger = logging.getLogger("numloss.train")


@dataclass
class TrainResult:
    """What a finished run produced: the folder, the final model (LoRA: adapters), the merged
    model or None, the final metrics and the logs; `already_finished` when nothing was trained."""

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


def _checked_output_dir(config: Config) -> Path:
    """The run folder of `config`, after the checks before any lock: the config, the model's
    name, a folder that can be written."""
    from numloss.config import validate

    validate(config)
    build.check_model_name(config)
    output_dir = Path(config.train.output_dir)
    folder.check_output_dir(output_dir)
    return output_dir


def check_run(
    config: Config, examples: list[Any] | None = None
) -> tuple[folder.RunPlan, build.Prepared]:
    """What `numloss train --dry-run` does: every check of a real run, no lock, nothing written."""
    from numloss.rundir import RunDirBusy, check_not_busy

    output_dir = _checked_output_dir(config)
    try:
        check_not_busy(output_dir)
    except RunDirBusy as error:
        raise ConfigError(f"train.output_dir: {error}") from None
    plan = folder.plan_run_dir(config)
    if isinstance(config.train.resume, str):
        folder.check_resume_folder(Path(config.train.resume))
    prepared = build.prepare_run(config, examples)
    if plan.action == "resume":
        folder.check_inputs_unchanged(
            config, output_dir, folder.run_inputs(config, prepared.examples)
        )
    return plan, prepared


def run_training(
    config: Config, callbacks: list[Any] | None = None, examples: list[Any] | None = None
) -> TrainResult:
    """Train per `config` (validated) with extra `callbacks`, on `examples` when given, and save
    the final model, holding the run folder's lock throughout. Resumes from the newest intact
    checkpoint. Raises ConfigError for a bad config or folder, DiskFullError for a full disk.
    """
    from numloss.rundir import RunDirBusy, RunDirLockError, hold_run_dir

    output_dir = _checked_output_dir(config)
    if examples is not None and not examples:
        raise ConfigError("run_training: no training examples (examples is empty)")
    main_process = int(os.environ.get("RANK", "0")) == 0
    with ExitStack() as stack:
        if main_process:  # the other ranks of a distributed run write into the folder rank 0 holds
            try:
                stack.enter_context(hold_run_dir(output_dir, "numloss train"))
            except (RunDirBusy, RunDirLockError) as error:
                raise ConfigError(f"train.output_dir: {error}") from None
        return _run_locked(config, output_dir, main_process, callbacks, examples)
    raise AssertionError("unreachable")  # pragma: no cover


def _run_locked(
    config: Config,
    output_dir: Path,
    main_process: bool,
    callbacks: list[Any] | None,
    examples: list[Any] | None,
) -> TrainResult:
    """`run_training` once the folder is held: plan, prepare, load, train, save final/."""
    if main_process and config.train.resume is True and recover_final(output_dir):
        logger.warning(
            "--resume: completed the save of final/ that an interrupted run had finished writing"
        )
    plan = folder.plan_run_dir(config)
    if plan.action == "finished":
        return _finished_result(output_dir, plan.record or {}, config)
    checkpoint = folder.ready_folder(config, output_dir, plan, main_process)
    prepared = build.prepare_run(config, examples)
    inputs = folder.run_inputs(config, prepared.examples)
    if plan.action == "resume":  # checked before any weights load
        for change in folder.check_inputs_unchanged(config, output_dir, inputs):
            logger.warning("--resume-changed: continuing although %s", change)
    model, tokenizer, loss_fn = _load_model(config, prepared)
    from numloss.train.callbacks import own_callbacks

    replaced_at = checkpoint if plan.changed else None
    own = own_callbacks(config, prepared.args, output_dir, replaced_at, inputs)
    trainer = _build_trainer(
        config, prepared, model, tokenizer, loss_fn, own + list(callbacks or [])
    )
    main_process = trainer.is_world_process_zero()
    try:
        if checkpoint is not None and folder.checkpoint_at_end(checkpoint, config):
            metrics = _save_last_checkpoint(
                trainer, checkpoint, config, replaced_at, inputs, main_process
            )
        else:
            output = trainer.train(
                resume_from_checkpoint=None if checkpoint is None else str(checkpoint)
            )
            metrics = dict(output.metrics)
    except Exception as error:
        raise train_error(error, output_dir, trainer, checkpoint) from None
    history = trainer.state.log_history
    _add_logged_metrics(metrics, history)
    history_path = output_dir / "log_history.json"
    if main_process:
        write_json_atomic(history_path, history)
    merged_dir = _save_final(trainer, tokenizer, config, output_dir, metrics, main_process)
    trainer.accelerator.wait_for_everyone()
    if any(isinstance(value, float) and not math.isfinite(value) for value in metrics.values()):
        logger.warning("a final metric is not finite: %s", metrics)
    return TrainResult(
        output_dir=output_dir,
        model_dir=output_dir / FINAL,
        merged_dir=merged_dir,
        metrics=metrics,
        log_history_path=history_path,
        csv_path=output_dir / "log.csv",
        global_step=trainer.state.global_step,
        config=config,
    )


def _load_model(config: Config, prepared: build.Prepared) -> tuple[Any, Any, Any]:
    """(model, tokenizer, objective) of the run: the start weights (LoRA applied), seeded."""
    from transformers import set_seed

    set_seed(config.train.seed)
    model, model_tokenizer = build.load_model_for(config)
    if model_tokenizer.get_vocab() != prepared.tokenizer.get_vocab():
        raise RuntimeError(
            "numloss: the tokenizer loaded before the model differs from the model's own; the data"
            " were tokenised with the first (a bug in numloss.models.load_tokenizer)"
        )
    tokenizer = model_tokenizer
    loss_fn = build.build_loss_for(config, model, tokenizer, prepared.vocab)
    build.log_digit_density(prepared.dataset, loss_fn)
    if config.lora.enabled:
        try:
            model = build.apply_lora(config, model)
        except ValueError as error:  # peft: no target module matched
            raise ConfigError(f"lora: {first_line(error)}") from None
    if hasattr(model, "config"):
        model.config.use_cache = False  # the KV cache is useless in training and costs memory
    return model, tokenizer, loss_fn


def _build_trainer(
    config: Config,
    prepared: build.Prepared,
    model: Any,
    tokenizer: Any,
    loss_fn: Any,
    callbacks: list[Any],
) -> Any:
    """The NumericTrainer of the run (without the Trainer's printer: numloss's bar replaces it)."""
    from transformers.trainer_callback import PrinterCallback

    from numloss.data import CompletionCollator
    from numloss.hf import NumericTrainer

    args = prepared.args
    trainer = NumericTrainer(
        loss_fn=loss_fn,
        fused=config.fused,
        model=model,
        args=args,
        train_dataset=prepared.dataset,
        data_collator=CompletionCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)
    if trainer.is_world_process_zero():
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        batch = (
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        )
        logger.warning(
            f"model {config.model.name} ({trainable:,} trainable parameters), objective {loss_fn},"
            f" bf16={args.bf16}, fused={config.fused}, world size {args.world_size}, global batch"
            f" {batch}"
        )
    return trainer


def _save_last_checkpoint(
    trainer: Any,
    checkpoint: Path,
    config: Config,
    replaced_at: Path | None,
    inputs: dict[str, str],
    main_process: bool,
) -> dict[str, Any]:
    """A resume from the run's last step: load the checkpoint into the Trainer without training
    (the Trainer would train one step more from a checkpoint at max_steps: a kill after the last
    checkpoint, before final/ was committed, must not train a 21st of 20 steps)."""
    from transformers.trainer_callback import TrainerState

    logger.warning(
        "--resume: %s is the run's last step; saving it as final/ without training", checkpoint.name
    )
    trainer._load_from_checkpoint(str(checkpoint))
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
    if main_process:
        folder.record_run(config, Path(config.train.output_dir), replaced_at, inputs)
    return {}


def _add_logged_metrics(metrics: dict[str, Any], history: list[dict[str, Any]]) -> None:
    """Add the last logged ce / aux / digit_entropy and the mean tokens_per_second to `metrics`."""
    for entry in reversed(history):
        if "ce" in entry:
            metrics.update({k: entry[k] for k in ("ce", "aux", "digit_entropy") if k in entry})
            break
    rates = [entry["tokens_per_second"] for entry in history if "tokens_per_second" in entry]
    rates = rates[1:] or rates  # the first interval holds the warm-up (batches, allocator, threads)
    if rates:
        metrics["tokens_per_second"] = sum(rates) / len(rates)


def _save_final(
    trainer: Any,
    tokenizer: Any,
    config: Config,
    output_dir: Path,
    metrics: dict[str, Any],
    main_process: bool,
) -> Path | None:
    """Write final/ (as final.partial/, marked, renamed) and merged/ for LoRA with lora.merge;
    returns merged/ or None."""
    merged_dir: Path | None = None
    partial = output_dir / "final.partial"
    try:
        if main_process:
            begin_final(output_dir)
        trainer.accelerator.wait_for_everyone()
        trainer.save_model(str(partial))
        if main_process:
            with utf8_path(partial) as folder:  # tokenizers (Rust) takes only UTF-8 names
                tokenizer.save_pretrained(folder)
            record = {
                "metrics": metrics,
                "global_step": trainer.state.global_step,
                "config": config.to_dict(),
            }
            write_json_atomic(partial / FINAL_RECORD, record)
        if config.lora.enabled and config.lora.merge:
            merged_dir = output_dir / "merged"
            if main_process:
                _save_merged(trainer, tokenizer, merged_dir)
        if main_process:
            commit_final(output_dir, trainer.state.global_step)
    except Exception as error:
        raise train_error(error, output_dir, trainer, None, saving=partial) from None
    return merged_dir


def _save_merged(trainer: Any, tokenizer: Any, merged_dir: Path) -> None:
    """The LoRA adapters merged into the base model, written under a temporary name and renamed."""
    partial = merged_dir.with_name(merged_dir.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
    merged.save_pretrained(partial)
    with utf8_path(partial) as folder:
        tokenizer.save_pretrained(folder)
    if merged_dir.exists():
        shutil.rmtree(merged_dir)  # the same run's earlier merge, superseded by this one
    os.replace(partial, merged_dir)


def _finished_result(output_dir: Path, record: dict[str, Any], config: Config) -> TrainResult:
    """The TrainResult of a run that already finished, read back from final/numloss_train.json."""
    step = int(record.get("global_step", config.train.max_steps))
    logger.warning(
        f"--resume: the run in {output_dir} already finished (step {step}); final/ is left as it"
        " is. Raise train.max_steps (with --resume-changed) to train further, or use a new"
        " train.output_dir"
    )
    merged = output_dir / "merged"
    return TrainResult(
        output_dir,
        output_dir / FINAL,
        merged if merged.is_dir() else None,
        dict(record.get("metrics", {})),
        output_dir / "log_history.json",
        output_dir / "log.csv",
        step,
        config,
        already_finished=True,
    )
