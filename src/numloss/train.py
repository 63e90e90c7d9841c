"""`numloss train CONFIG.yaml [--section.key value ...]`: config -> model, data, objective -> Trainer.

    from numloss.config import load_config
    from numloss.train import run_training
    result = run_training(load_config("configs/tiny.yaml", ["--train.max_steps", "20"]))
    result.model_dir        # the final model folder (transformers loads it as is)

What lands in `train.output_dir`:

    config.yaml          the full resolved configuration
    checkpoint-N/        Trainer checkpoints (train.save_steps), what `--resume` continues from; one
                         counts only once numloss_checkpoint.json (written last) lists its files
    partial-checkpoint-N/  an incomplete or damaged checkpoint that `--resume` set aside
    log.csv              one row per logging step: loss, ce, aux, digit_entropy, learning_rate, ...
    log_history.json     the Trainer's whole log history (the CSV's source, plus final metrics)
    tensorboard/         the same scalars for TensorBoard
    final/               the trained model + tokenizer (LoRA: the adapters + tokenizer)
    merged/              LoRA with lora.merge: base model with the adapters merged in

Distribution is the Trainer's (accelerate): launch the same command under `torchrun` or
`accelerate launch` (configs/accelerate/ for FSDP and DeepSpeed) and nothing else changes.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numloss.config import Config, ConfigError, describe_keys, dump_config, load_config

logger = logging.getLogger("numloss.train")

CSV_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "ce",
    "aux",
    "digit_entropy",
    "digit_share",
    "learning_rate",
    "grad_norm",
    "num_input_tokens_seen",
    "tokens_per_second",
)


#: what the progress bar shows, by the names they are logged under
PROGRESS_KEYS = ("loss", "ce", "aux", "digit_entropy", "learning_rate", "tokens_per_second")

#: written last into a checkpoint folder: the files (and sizes) of a complete checkpoint
CHECKPOINT_MARKER = "numloss_checkpoint.json"


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
            kept: list[dict[str, str]] = []
            if self.path.is_file() and state.global_step > 0:
                with self.path.open(newline="") as handle:
                    kept = [row for row in csv.DictReader(handle) if int(row["step"]) <= state.global_step]
            with self.path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(kept)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or logs is None or "loss" not in logs:
                return
            row = {"step": state.global_step, **{k: logs.get(k, "") for k in CSV_COLUMNS if k != "step"}}
            row["num_input_tokens_seen"] = state.num_input_tokens_seen
            with self.path.open("a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=CSV_COLUMNS).writerow(row)

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
        """Marks each checkpoint complete once the Trainer has written all of it (all ranks)."""

        def on_save(self, args, state, control, **kwargs):
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.barrier()  # every rank's shards are on disk before the marker says so
            if state.is_world_process_zero:
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if folder.is_dir():
                    write_checkpoint_marker(folder, state.global_step)

    return ThroughputCallback, CSVLogCallback, ProgressBarCallback, StopAfterStepCallback, CheckpointMarkerCallback


# -- checkpoints that survive a bad kill -------------------------------------------------------------
def write_checkpoint_marker(folder: Path, step: int) -> None:
    """Record every file of `folder` with its size, atomically (temporary file + rename), last."""
    files = {
        str(path.relative_to(folder)): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(CHECKPOINT_MARKER)
    }
    temporary = folder / f"{CHECKPOINT_MARKER}.tmp"
    temporary.write_text(json.dumps({"step": step, "files": files}, indent=1) + "\n")
    os.replace(temporary, folder / CHECKPOINT_MARKER)


def checkpoint_problem(folder: Path) -> str | None:
    """None when `folder` is a complete checkpoint; otherwise what is wrong with it."""
    marker = folder / CHECKPOINT_MARKER
    if not marker.is_file():
        return "it has no completion marker (the run was killed while saving it)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "its completion marker is unreadable"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{name} is damaged ({actual} bytes, {size} when it was saved)"
    return None


def _checkpoint_step(folder: Path) -> int:
    try:
        return int(folder.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def newest_complete_checkpoint(output_dir: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the complete checkpoint with the highest step or None, [(newer incomplete one, why)])."""
    if not output_dir.is_dir():
        return None, []
    folders = [f for f in output_dir.glob("checkpoint-*") if f.is_dir() and _checkpoint_step(f) >= 0]
    skipped: list[tuple[Path, str]] = []
    for folder in sorted(folders, key=_checkpoint_step, reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append((folder, problem))
    return None, skipped


def set_aside(folder: Path) -> Path:
    """Rename an incomplete checkpoint to partial-checkpoint-N (kept for inspection, out of the
    Trainer's way: it would otherwise be overwritten in place or rotated as if complete)."""
    target = folder.with_name(f"partial-{folder.name}")
    number = 1
    while target.exists():
        number += 1
        target = folder.with_name(f"partial-{folder.name}.{number}")
    folder.rename(target)
    return target


def finished_run(output_dir: Path, config: Config) -> dict[str, Any] | None:
    """The saved record of a run in `output_dir` that already reached `config`'s length, or None."""
    record_path = output_dir / "final" / "numloss_train.json"
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text())
        saved_train = record["config"]["train"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    step = int(record.get("global_step", 0))
    if config.train.max_steps > 0:
        done = step >= config.train.max_steps if step else saved_train.get("max_steps") == config.train.max_steps
    else:
        done = saved_train.get("max_steps") == -1 and float(saved_train.get("num_epochs", 0)) >= config.train.num_epochs
    return record if done else None


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
        save_total_limit=train.save_total_limit,
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
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")


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
    Resuming (`train.resume`) continues from the last checkpoint in `output_dir` (or the given
    folder) with the optimizer, scheduler, RNG and data position restored.
    """
    from numloss.config import validate
    from numloss.data import CompletionCollator
    from numloss.hf import NumericTrainer
    from numloss.models import check_model_available

    validate(config)
    check_model_available(config.model.name, config.model.revision, config.model.cache_dir)
    output_dir = Path(config.train.output_dir)
    main_process = int(os.environ.get("RANK", "0")) == 0
    resume: bool | str = config.train.resume
    checkpoint: str | None = None
    if resume is True:
        finished = finished_run(output_dir, config)
        if finished is not None:
            return _finished_result(output_dir, finished, config)
        check_output_dir(output_dir)  # before a partial checkpoint is renamed in it
        found, skipped = newest_complete_checkpoint(output_dir)
        for folder, problem in skipped:
            if main_process:
                moved = set_aside(folder)
                logger.warning("--resume: skipping %s: %s; moved it to %s", folder.name, problem, moved.name)
        if found is None:
            raise ConfigError(
                f"train.resume: no complete checkpoint-* folder in {str(output_dir)!r} to resume from; run without "
                "--resume (and with train.save_steps > 0 to write checkpoints), or pass a checkpoint folder"
            )
        checkpoint = str(found)
        logger.warning("--resume: continuing from %s", found.name)
    elif isinstance(resume, str):
        checkpoint = resume
    check_output_dir(output_dir)

    from transformers import set_seed

    from numloss.data import DataError

    try:
        if examples is None:
            examples = load_training_examples(config)
    except DataError as error:
        raise ConfigError(f"data: {error}") from None
    if not examples:
        raise ConfigError("run_training: no training examples (examples is empty)")
    # the tokenizer's digit tokens and the data's rendering are checked before the weights load
    tokenizer = load_tokenizer_for(config)
    vocab = digit_vocab_for(config, tokenizer)
    dataset = prepare_data(config, examples, tokenizer)
    args = build_training_arguments(config)  # also sets up the process group under torchrun
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
        model = apply_lora(config, model)
    if hasattr(model, "config"):
        model.config.use_cache = False  # the KV cache is useless in training and costs memory

    throughput, csv_log, progress, stop_after, checkpoint_marker = _callbacks_module()
    csv_path = output_dir / "log.csv"
    own_callbacks: list[Any] = [throughput(), checkpoint_marker()]
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
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(dump_config(config))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.warning(
            "model %s (%s trainable parameters), objective %s, bf16=%s, fused=%s, world size %d, global batch %d",
            config.model.name, f"{trainable:,}", loss_fn, args.bf16, config.fused, args.world_size,
            args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        )
    output = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = dict(output.metrics)
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
    model_dir = output_dir / "final"
    merged_dir: Path | None = None
    stopped_early = stop_after_step is not None and trainer.state.global_step < trainer.state.max_steps
    if main_process:
        _write_json(history_path, history)
    if not stopped_early:
        trainer.save_model(str(model_dir))
        if main_process:
            tokenizer.save_pretrained(model_dir)
            record = {"metrics": metrics, "global_step": trainer.state.global_step, "config": config.to_dict()}
            _write_json(model_dir / "numloss_train.json", record)
        if config.lora.enabled and config.lora.merge:
            merged_dir = output_dir / "merged"
            if main_process:
                merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
                merged.save_pretrained(merged_dir)
                tokenizer.save_pretrained(merged_dir)
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


def _finished_result(output_dir: Path, record: dict[str, Any], config: Config) -> TrainResult:
    """The TrainResult of a run that already finished, read back from final/numloss_train.json."""
    step = int(record.get("global_step", config.train.max_steps))
    logger.warning(
        "--resume: the run in %s already finished (step %d); final/ is left as it is. Raise train.max_steps "
        "to train further, or use a new train.output_dir", output_dir, step,
    )
    merged = output_dir / "merged"
    return TrainResult(
        output_dir=output_dir,
        model_dir=output_dir / "final",
        merged_dir=merged if merged.is_dir() else None,
        metrics=dict(record.get("metrics", {})),
        log_history_path=output_dir / "log_history.json",
        csv_path=output_dir / "log.csv",
        global_step=step,
        config=config,
        already_finished=True,
    )


# -- command line ---------------------------------------------------------------------------------
USAGE = """usage: numloss train [CONFIG.yaml] [--resume] [--dry-run] [--threads N] [--section.key VALUE ...]

Fine-tune a causal LM with a numloss objective. CONFIG.yaml holds any of the keys below
(nested by section); --section.key VALUE overrides it (VALUE is read as YAML).
  --resume     continue from the newest complete checkpoint in train.output_dir (= --train.resume
               true); a finished run is left as it is
  --dry-run    check the config (and that the model is available), print it, train nothing
  --threads N  torch CPU threads (as in `numloss eval` and `numloss compare`)
Multi-GPU / multi-node: run the same command under `torchrun` or `accelerate launch`
(FSDP / DeepSpeed configs in configs/accelerate/).

keys:
"""


def pop_threads(argv: list[str]) -> tuple[int | None, list[str]]:
    """(`--threads N` / `--threads=N` as an int or None, the other arguments); N must be >= 1."""
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
            continue
        rest.append(token)
        i += 1
    return threads, rest


def main(argv: list[str] | None = None) -> int:
    """`numloss train` entry point; returns the exit status (2 for a bad config)."""
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
    if "--resume" in argv:
        index = argv.index("--resume")
        argv[index : index + 1] = ["--train.resume", "true"]
    path = None
    if argv and not argv[0].startswith("--"):
        path, argv = argv[0], argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        config = load_config(path, argv)
        from numloss.models import ModelUnavailableError, check_model_available

        try:
            check_model_available(config.model.name, config.model.revision, config.model.cache_dir)
        except ModelUnavailableError as error:
            raise ConfigError(f"model.name: {error}") from None
    except ConfigError as error:
        print(f"numloss train: {error}", file=sys.stderr)
        return 2
    if dry_run:
        print(dump_config(config), end="")
        return 0
    try:
        result = run_training(config)
    except ConfigError as error:
        print(f"numloss train: {error}", file=sys.stderr)
        return 2
    if result.already_finished:
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"numloss train: the run in {result.output_dir} already finished ({result.global_step} steps); "
                  f"{result.model_dir} is left as it is. Raise train.max_steps to train further.")
        return 0
    if result.model_dir.exists() and int(os.environ.get("RANK", "0")) == 0:
        summary = {k: round(v, 5) if isinstance(v, float) else v for k, v in result.metrics.items()}
        print(f"numloss train: done, {result.global_step} steps; model in {result.model_dir}; metrics {summary}")
    return 0
