"""The `transformers.TrainingArguments` of a config, and the checks that refuse what transformers
would accept and then fail on (or ignore) inside a run, before any model loads."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from numloss.config import Config, ConfigError
from numloss.train.errors import first_line


def bf16_supported() -> bool:
    """True where bf16 autocast runs natively: a CUDA GPU with bf16, or a CPU with
    AVX512-BF16/AMX."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def build_training_arguments(config: Config) -> Any:
    """The `transformers.TrainingArguments` of a config (the other TrainingArguments fields given,
    `train.extra`, last)."""
    from transformers import TrainingArguments

    train = config.train
    bf16 = bf16_supported() if train.bf16 is None else train.bf16
    if bf16 and not bf16_supported():
        raise ConfigError(
            "train.bf16 is true but this machine has no bf16 support (no CUDA bf16 GPU, no"
            " AVX512-BF16/AMX CPU); set train.bf16 false or null (auto)"
        )
    report_to = [r for r in train.report_to if r not in ("tensorboard", "none")]
    # the train section is TrainingArguments by its own names: its fields that are TrainingArguments
    # fields pass through, but those decided below or in _placement
    decided = {"fsdp", "fsdp_config", "deepspeed"}  # tf32 passes: None is its own default
    passed = {f.name for f in dataclasses.fields(TrainingArguments)} - decided
    kwargs: dict[str, Any] = {
        f.name: getattr(train, f.name) for f in dataclasses.fields(train) if f.name in passed
    }
    kwargs.update(
        warmup_steps=train.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps
        data_seed=train.seed,
        bf16=bf16,
        logging_first_step=True,
        save_strategy="steps" if train.save_steps > 0 else "no",
        save_steps=train.save_steps if train.save_steps > 0 else 500,
        save_total_limit=None,  # numloss rotates, after the marker (CheckpointMarkerCallback)
        report_to=report_to or "none",
        disable_tqdm=True,  # numloss's own bar (loss terms, tokens/s) replaces the default one
        remove_unused_columns=False,
        include_num_input_tokens_seen="non_padding",
    )
    if config.model.gradient_checkpointing:  # transformers 5.25 renamed it; the old name warns
        renamed = "activation_checkpointing" in TrainingArguments.__dataclass_fields__
        kwargs["activation_checkpointing" if renamed else "gradient_checkpointing"] = True
    kwargs.update(_placement(config))
    kwargs.update(train.extra)
    return TrainingArguments(**kwargs)


def _placement(config: Config) -> dict[str, Any]:
    """The TrainingArguments that place the run: FSDP, DeepSpeed, or the CPU (gloo across
    processes)."""
    import torch

    train = config.train
    kwargs: dict[str, Any] = {}
    if train.fsdp:
        if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            raise ConfigError(
                "train.fsdp: FSDP shards a model across processes; this is one CPU process (launch"
                " it with torchrun / accelerate launch on several), or drop train.fsdp"
            )
        kwargs["fsdp"] = train.fsdp
        kwargs["fsdp_config"] = dict(train.fsdp_config) or None
    if train.deepspeed:
        kwargs["deepspeed"] = train.deepspeed
    if not torch.cuda.is_available():
        kwargs["use_cpu"] = True  # transformers refuses bf16 on CPU unless told it is a CPU run
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            kwargs["ddp_backend"] = "gloo"  # CPU multi-process (tests, CPU clusters)
    return kwargs


def build_arguments_checked(config: Config) -> Any:
    """`build_training_arguments`, with transformers' own refusals (and an optimizer it cannot
    build) as one ConfigError line."""
    try:
        args = build_training_arguments(config)
    except ConfigError:
        raise
    except (ValueError, TypeError, ImportError, OSError, KeyError) as error:
        raise ConfigError(
            f"train: transformers.TrainingArguments refuses these settings: {first_line(error)}"
        ) from None
    from transformers import Trainer

    try:
        optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    except (ValueError, ImportError, TypeError) as error:
        raise ConfigError(
            f"train.optim {config.train.optim!r} cannot be used here: {first_line(error)}"
        ) from None
    check_arguments_in_context(args)
    dry_build_optimizer_and_scheduler(config, args, optimizer_cls, optimizer_kwargs)
    return args


def check_arguments_in_context(args: Any) -> None:
    """ConfigError for TrainingArguments that transformers accepts and a numloss run then fails
    on or ignores: an evaluation schedule (no evaluation set), fp16 off CUDA, negative NEFTune."""
    import torch

    if str(getattr(args, "eval_strategy", "no")) not in ("no", "IntervalStrategy.NO"):
        raise ConfigError(
            "train.eval_strategy: numloss trains without an evaluation set (compare scores the "
            "runs itself); drop eval_strategy"
        )
    if getattr(args, "fp16", False) and not torch.cuda.is_available():
        raise ConfigError(
            "train.fp16: fp16 mixed precision needs a CUDA GPU; on this machine use train.bf16 "
            "(where supported) or drop fp16"
        )
    noise = getattr(args, "neftune_noise_alpha", None)
    if noise is not None and not noise > 0:
        raise ConfigError(f"train.neftune_noise_alpha must be > 0 (or null for none), got {noise}")


def dry_build_optimizer_and_scheduler(
    config: Config, args: Any, optimizer_cls: Any, optimizer_kwargs: dict[str, Any]
) -> None:
    """Build the run's optimizer (over a stand-in parameter) and scheduler, so values they
    refuse (adam_beta1 2, a bogus lr_scheduler_kwargs key) are one ConfigError line up front."""
    import torch
    from transformers import get_scheduler

    parameter = torch.nn.Parameter(torch.zeros(1))
    try:
        optimizer = optimizer_cls([parameter], **optimizer_kwargs)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ConfigError(
            f"train: the optimizer {config.train.optim!r} refuses these settings: "
            f"{first_line(error)}"
        ) from None
    steps = args.max_steps if args.max_steps > 0 else 100
    _check_scheduler_kwargs(config, args)
    try:
        get_scheduler(
            args.lr_scheduler_type,
            optimizer,
            num_warmup_steps=args.get_warmup_steps(steps),
            num_training_steps=steps,
            scheduler_specific_kwargs=dict(args.lr_scheduler_kwargs or {}),
        )
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(
            f"train.lr_scheduler_type {config.train.lr_scheduler_type!r} refuses these settings "
            f"(train.lr_scheduler_kwargs): {first_line(error)}"
        ) from None


def _check_scheduler_kwargs(config: Config, args: Any) -> None:
    """ConfigError for a train.lr_scheduler_kwargs key the schedule does not take (some
    schedules drop the kwargs they do not take without a word)."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION
    from transformers.trainer_utils import SchedulerType

    extra = dict(args.lr_scheduler_kwargs or {})
    if not extra:
        return
    schedule = TYPE_TO_SCHEDULER_FUNCTION.get(SchedulerType(args.lr_scheduler_type))
    parameters = inspect.signature(schedule).parameters if schedule is not None else {}
    taken = set(parameters) - {"optimizer", "num_warmup_steps", "num_training_steps"}
    unknown = sorted(set(extra) - taken)
    if unknown:
        raise ConfigError(
            f"train.lr_scheduler_kwargs: the {config.train.lr_scheduler_type!r} schedule takes "
            f"{', '.join(sorted(taken)) or 'no options'}, not {', '.join(unknown)}"
        )
