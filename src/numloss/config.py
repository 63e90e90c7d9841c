"""The training configuration: one dataclass tree, read from YAML, overridden from the command line.

    config = load_config("configs/tiny.yaml", ["--objective.name", "del", "--train.max_steps", "20"])

Sections: `model`, `data`, `objective`, `train`, `lora`, and the top-level switch `fused`. A key
is written `section.field` on the command line (`--train.learning_rate 1e-4`); a value is read
as YAML (`true`, `null`, `[q_proj, v_proj]`) and checked against the field's type. Unknown keys,
wrong types and missing files are `ConfigError`s raised here, before anything heavy is loaded.
`describe_keys()` is the `--help` text: every key, its default and what it means.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from numloss.extras import needs

with needs("hf", "numloss.config"):
    import yaml

from numloss.yamlio import YamlKeyError, load_yaml, parse_yaml


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and how to fix it."""


def _f(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


@dataclass
class ModelConfig:
    name: str = _f("tiny", "'tiny' (random char-level Llama), 'smollm2' (offline SmolLM2-135M-Instruct), a hub id or a local folder")
    revision: str | None = _f(None, "hub revision (branch, tag or commit) of a hub model")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _f("float32", "dtype of the loaded weights (float32 + train.bf16 = mixed precision)")
    trust_remote_code: bool = _f(False, "allow a hub model's own modelling code")
    attn_implementation: str | None = _f(None, "attention kernel: eager, sdpa, flash_attention_2 (None: transformers' choice)")
    gradient_checkpointing: bool = _f(False, "recompute activations in backward (saves memory, costs time)")
    tiny_layers: int = _f(6, "tiny model: decoder layers")
    tiny_hidden: int = _f(384, "tiny model: hidden width")
    tiny_heads: int = _f(6, "tiny model: attention heads")
    tiny_digits_per_token: int = _f(1, "tiny model: 1 (one token per digit) or 3 (numbers in Llama-3-style chunks of 1-3 digits)")
    cache_dir: str | None = _f(None, "numloss model cache for 'smollm2' (default $NUMLOSS_CACHE or ~/.cache/numloss)")


@dataclass
class DataConfig:
    source: str = _f("synthetic:mix", "synthetic:NAME, gym:NAME, a .json/.jsonl file, a dataset folder or a HF dataset name")
    num_examples: int | None = _f(4000, "examples to generate (synthetic/gym) or to keep (files; null = all)")
    seed: int = _f(0, "seed of the generated sets")
    split: str = _f("train", "split of a HF dataset")
    subset: str | None = _f(None, "configuration name of a HF dataset")
    max_length: int = _f(512, "tokens per sequence; longer ones are truncated (and counted in the log)")
    instruction_field: str = _f("instruction", "record field holding the instruction")
    input_field: str = _f("input", "record field holding the optional input")
    output_field: str = _f("output", "record field holding the response to learn")
    chat_template: str | None = _f(None, "Jinja chat template (or a file holding one) for `messages` data; null: the tokenizer's")


@dataclass
class ObjectiveConfig:
    name: str = _f("del", "objective: mle, del, ntl-was, ntl-mse, dist2, mixce, emo")
    alpha: float | None = _f(None, "weight of the objective's term on the step-wide digit mean (null: its default, DEL 0.03; normalize: tokens needs one)")
    options: dict[str, Any] = _f({}, "other options of the objective, e.g. {place_weighting: continuous} or {tau: 2}")


@dataclass
class TrainConfig:
    output_dir: str = _f("runs/tiny", "where checkpoints, logs and the final model go")
    num_epochs: float = _f(1.0, "passes over the data (ignored when max_steps > 0)")
    max_steps: int = _f(-1, "optimizer steps; -1 = num_epochs")
    batch_size: int = _f(8, "sequences per device per micro-batch")
    grad_accum: int = _f(1, "micro-batches per optimizer step (global batch = batch_size x grad_accum x devices)")
    learning_rate: float = _f(1e-3, "peak learning rate")
    lr_scheduler: str = _f("cosine", "transformers scheduler: cosine, linear, constant, constant_with_warmup, ...")
    warmup_ratio: float = _f(0.03, "fraction of the steps spent warming up")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    max_grad_norm: float = _f(1.0, "gradient clipping norm (0 = off)")
    optim: str = _f("adamw_torch", "transformers optimizer name")
    seed: int = _f(0, "seed of initialisation, shuffling and dropout")
    bf16: bool | None = _f(None, "bf16 autocast; null = on where the CPU/GPU supports it")
    tf32: bool | None = _f(None, "TF32 matmuls on Ampere+ GPUs (null = transformers' default)")
    logging_steps: int = _f(10, "log every N optimizer steps")
    save_steps: int = _f(0, "checkpoint every N steps (0 = only the final model)")
    save_total_limit: int | None = _f(2, "checkpoints kept (null = all)")
    resume: bool | str = _f(False, "true: resume from the last checkpoint in output_dir; or a checkpoint path")
    resume_changed: bool = _f(False, "let a resume continue under settings that change the run (objective, learning rate, ...); the CLI's --resume-changed")
    overwrite: bool = _f(False, "train into an output_dir holding another or a finished run: its files move aside to output_dir/overwritten-TIME/; the CLI's --overwrite")
    report_to: list[str] = _f(["tensorboard"], "logging integrations besides the CSV log (tensorboard, wandb, none)")
    progress_bar: bool = _f(True, "show the progress bar with loss terms and tokens/s")
    dataloader_num_workers: int = _f(0, "data-loading worker processes")
    fsdp: str = _f("", "FSDP mode passed to TrainingArguments, e.g. 'full_shard auto_wrap' (or use accelerate's config)")
    fsdp_config: dict[str, Any] = _f({}, "FSDP options passed to TrainingArguments, e.g. {transformer_layer_cls_to_wrap: [Qwen2DecoderLayer]}")
    deepspeed: str | None = _f(None, "DeepSpeed JSON config (needs deepspeed installed), e.g. configs/accelerate/ds_zero3.json")
    extra: dict[str, Any] = _f({}, "any other transformers.TrainingArguments field, by name")


@dataclass
class LoraConfig:
    enabled: bool = _f(False, "train LoRA adapters (peft) instead of all weights")
    r: int = _f(16, "LoRA rank")
    alpha: int = _f(32, "LoRA scaling numerator (scale = alpha / r)")
    dropout: float = _f(0.05, "dropout on the LoRA input")
    target_modules: list[str] | str = _f("all-linear", "modules to adapt: 'all-linear' or a list like [q_proj, v_proj]")
    merge: bool = _f(False, "also save the adapters merged into the base model (output_dir/merged)")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    fused: bool = _f(False, "compute the loss from hidden states in chunks (never the whole [B, T, V] logits)")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON-ready) of every key."""
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "objective": ObjectiveConfig,
    "train": TrainConfig,
    "lora": LoraConfig,
}
TOP_LEVEL = ("fused",)


# -- type checking --------------------------------------------------------------------------------
@functools.cache
def _hints(klass: type) -> dict[str, Any]:
    """`typing.get_type_hints(klass)`, once per class: it evaluates every annotation on each call,
    and a config is set key by key (uncached, more than half of a config load's time)."""
    return typing.get_type_hints(klass)


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(hint))
    if origin is list:
        return f"list of {_type_name(typing.get_args(hint)[0])}"
    if origin is dict:
        return "mapping"
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def coerce(value: Any, hint: Any, key: str) -> Any:
    """`value` checked against (and, for a string from the command line, converted to) `hint`.

    Ints are accepted where floats are expected; a string is parsed as a number for numeric
    fields (YAML reads `1e-3` as a string). Anything else that does not fit is a ConfigError.
    """
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        return _coerce_union(value, hint, key)
    if origin is Literal:
        if value in typing.get_args(hint):
            return value
        raise ConfigError(f"{key}: expected one of {_type_name(hint)}, got {value!r}")
    if origin is list:
        if isinstance(value, str):  # `--lora.target_modules q_proj,v_proj`
            value = [v.strip() for v in value.split(",") if v.strip()] if "," in value else [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {_type_name(hint)}, got {value!r}")
        return [coerce(v, typing.get_args(hint)[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping like {{name: value}}, got {value!r}")
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint in (int, float):
        return _coerce_number(value, hint, key)
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r} ({type(value).__name__}); quote it in YAML")
    raise TypeError(f"config field {key} has an unsupported type {hint!r}")


def _coerce_union(value: Any, hint: Any, key: str) -> Any:
    """`coerce` for `A | B`: a value of one of the types keeps it, else the first that converts."""
    options = typing.get_args(hint)
    if value is None and type(None) in options:
        return None
    # "all-linear" stays a str, not [str]; "q_proj,v_proj" where a list may go is the list
    list_allowed = any(typing.get_origin(o) is list for o in options)
    comma_list = isinstance(value, str) and "," in value and list_allowed
    if type(value) in options and not comma_list:
        return value
    # str last: "true" on the command line is the bool, a path is the str
    for option in sorted((o for o in options if o is not type(None)), key=lambda o: o is str):
        try:
            return coerce(value, option, key)
        except ConfigError:
            continue
    raise ConfigError(f"{key}: expected {_type_name(hint)}, got {value!r}")


def _coerce_number(value: Any, hint: type, key: str) -> int | float:
    """`coerce` for int (64-bit) and float (finite); a number or a string that parses as one."""
    number = None
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = hint(value)
        except OverflowError:  # an int beyond float range
            number = math.inf
        except ValueError:
            pass
    if hint is int and (number is None or isinstance(value, float)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if number is None:
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if hint is int and not -(2**63) <= number < 2**63:  # torch, numpy and itertools take 64 bits
        raise ConfigError(f"{key}: {number} does not fit in 64 bits")
    if not math.isfinite(number):
        raise ConfigError(f"{key}: expected a finite number, got {value!r}")
    return number


def yaml_load(text: str) -> Any:
    """YAML text as Python values (safe types only); a key given twice is a ConfigError."""
    try:
        return parse_yaml(text)
    except YamlKeyError as error:
        raise ConfigError(str(error)) from None


def _unknown(key: str, known: list[str]) -> ConfigError:
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"unknown config key {key!r}{hint} (`numloss train --help` lists them all)")


def all_keys() -> list[str]:
    """Every settable key, `section.field` and the top-level ones."""
    keys = [f"{name}.{f.name}" for name, klass in SECTIONS.items() for f in dataclasses.fields(klass)]
    return keys + list(TOP_LEVEL)


def _set(config: Config, key: str, value: Any, from_cli: bool) -> None:
    """Set `key` (dotted) to `value`, type-checked; `objective.options.X` sets one option."""
    section, _, rest = key.partition(".")
    name, _, entry = rest.partition(".")
    klass = SECTIONS.get(section) if rest else type(config) if key in TOP_LEVEL else None
    hint = _hints(klass).get(name or section) if klass else None
    if hint is None or (entry and typing.get_origin(hint) is not dict):
        raise _unknown(key, all_keys())
    target = getattr(config, section) if rest else config
    if entry:  # one entry of a mapping
        value = {**getattr(target, name), entry: _parse_cli(value, Any) if from_cli else value}
    elif from_cli:
        if isinstance(value, str) and not value.strip():
            # YAML reads '' as null: `--objective.alpha ''` would silently mean "the default"
            give = "a value (null for none)" if rest else "true or false"
            raise ConfigError(f"--{key} is empty: give {give}, or leave the option out")
        value = _parse_cli(value, hint)
    setattr(target, name or section, coerce(value, hint, key))


def _parse_cli(text: Any, hint: Any) -> Any:
    """A command-line string as YAML, except where the field is a plain string (paths stay as
    typed: `--model.name 1e-3` is the folder '1e-3')."""
    if not isinstance(text, str) or hint is str:
        return text
    try:
        return yaml_load(text)
    except yaml.YAMLError:
        return text


def apply_mapping(config: Config, mapping: dict[str, Any], origin: str) -> None:
    """Apply a nested mapping (the YAML file's contents) onto `config`."""
    if not isinstance(mapping, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections, got {type(mapping).__name__}")
    for name, value in mapping.items():
        if name in TOP_LEVEL:
            _set(config, name, value, from_cli=False)
        elif name in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{origin}: section {name!r} must be a mapping of keys, got {value!r}")
            for field_name, field_value in value.items():
                _set(config, f"{name}.{field_name}", field_value, from_cli=False)
        else:
            raise _unknown(str(name), list(SECTIONS) + list(TOP_LEVEL))


def parse_overrides(argv: list[str]) -> list[tuple[str, str]]:
    """`--key value` / `--key=value` pairs of the command line, in order."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r}: overrides are written --section.key value")
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise ConfigError(f"--{key} needs a value (e.g. --{key} VALUE)")
            value = argv[i + 1]
            i += 2
        pairs.append((key, value))
    keys = [key for key, _ in pairs]
    for key in dict.fromkeys(keys):
        if keys.count(key) > 1:  # `--x 3 --x=2`: the last wins, as with argparse, and says so
            given = [value for k, value in pairs if k == key]
            logging.getLogger("numloss.config").warning(
                "--%s is given %d times (%s): the last, %r, is used", key, len(given), ", ".join(map(repr, given)), given[-1])
    return pairs


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file at `path` (if any), then `overrides` (`--key value` strings),
    then `validate`. Raises ConfigError on any problem."""
    config = Config()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        # an empty file would train every default, which is never what a file was written for
        mapping = load_yaml(path, ConfigError, empty="write the keys to set (numloss train --help lists them), "
                            "or give no config file to train the defaults")
        apply_mapping(config, mapping, str(path))
    for key, value in parse_overrides(list(overrides or [])):
        _set(config, key, value, from_cli=True)
    validate(config)
    return config


def config_from_dict(mapping: dict[str, Any]) -> Config:
    """A validated Config from a nested mapping (the Python-API twin of a YAML file)."""
    config = Config()
    apply_mapping(config, mapping, "config")
    validate(config)
    return config


def validate(config: Config) -> None:
    """Cross-field checks that need no model: objective and options, data source, numbers, paths.

    Does not load a model or data; a hub model id is checked against the local cache when
    running offline (see `numloss.models.load.check_model_available`).
    """
    from numloss.data.instructions import DataError
    from numloss.data.sources import check_source

    _validate_objective(config.objective)
    try:
        check_source(config.data.source)
    except DataError as error:
        raise ConfigError(str(error)) from None
    _validate_ranges(config)
    if config.train.deepspeed is not None and not Path(config.train.deepspeed).is_file():
        raise ConfigError(f"train.deepspeed: config file {config.train.deepspeed!r} does not exist")
    resume = config.train.resume
    if isinstance(resume, str) and not Path(resume).is_dir():
        raise ConfigError(f"train.resume: checkpoint folder {resume!r} does not exist (or use true for the last one)")
    _validate_extra(config.train.extra)
    _validate_names(config)
    _validate_context(config)
    check_chat_template(config.data.chat_template)


def _validate_objective(objective: ObjectiveConfig) -> None:
    """The objective's name, whether it takes alpha, and its options' names and values."""
    from numloss.losses import LOSSES

    key = objective.name.lower().replace("_", "-")
    if key not in LOSSES:
        raise ConfigError(f"objective.name: unknown objective {objective.name!r}; choose one of {', '.join(LOSSES)}")
    klass = LOSSES[key]
    allowed = [name for name in klass.option_names() if name not in ("alpha", "embedding")]
    unknown = sorted(set(objective.options) - set(allowed))
    if unknown:
        raise ConfigError(
            f"objective.options: {key!r} has no option(s) {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(allowed) or 'none'}"
        )
    if objective.alpha is not None and key == "mle":
        raise ConfigError("objective.alpha: 'mle' has no term for alpha to weight (plain cross-entropy); remove it (--objective.alpha null)")
    if objective.alpha is not None and not klass.takes_alpha:
        raise ConfigError(f"objective.alpha: {key!r} has no alpha (it reshapes the token loss); remove it")
    try:  # option values (negative alpha, tau <= 0, eta outside [0, 1], ...) before any model loads
        klass.validate_options({**objective.options, "alpha": objective.alpha})
    except ValueError as error:
        raise ConfigError(f"objective: {error}") from None


def _validate_extra(extra: dict[str, Any]) -> None:
    """train.extra may name TrainingArguments fields, but none that numloss sets itself."""
    import transformers

    known = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    bad = sorted(map(str, set(extra) - known))
    if bad:
        raise ConfigError(f"train.extra: {', '.join(map(repr, bad))} is not a transformers.TrainingArguments field")
    for name in extra:
        if name in TRAINING_ARGUMENTS_SET:
            raise ConfigError(
                f"train.extra.{name}: numloss sets {name} itself ({TRAINING_ARGUMENTS_SET[name]}); set that key "
                "instead of passing it through train.extra, so the two cannot disagree"
            )


#: TrainingArguments fields numloss fills from its own keys (train.extra may not set them)
TRAINING_ARGUMENTS_SET: dict[str, str] = {
    **{name: f"train.{name}" for name in (
        "output_dir", "max_steps", "learning_rate", "warmup_ratio", "weight_decay", "max_grad_norm",
        "optim", "seed", "bf16", "tf32", "logging_steps", "save_steps", "save_total_limit", "report_to",
        "dataloader_num_workers", "fsdp", "fsdp_config", "deepspeed")},
    "num_train_epochs": "train.num_epochs",
    "per_device_train_batch_size": "train.batch_size",
    "gradient_accumulation_steps": "train.grad_accum",
    "lr_scheduler_type": "train.lr_scheduler",
    "warmup_steps": "train.warmup_ratio",
    "data_seed": "train.seed",
    "save_strategy": "train.save_steps",
    "disable_tqdm": "train.progress_bar",
    "remove_unused_columns": "numloss's collator",
    "include_num_input_tokens_seen": "numloss's logging",
    "gradient_checkpointing": "model.gradient_checkpointing",
    "use_cpu": "numloss, from the machine",
    "resume_from_checkpoint": "train.resume",
}

#: examples a generated set (synthetic:, gym:) may be asked for: they are built in memory
GENERATED_LIMIT = 10**7

#: seeds go to numpy, which takes 0 <= seed < 2**32
SEED_LIMIT = 2**32

#: the tiny model is for tests and demos; beyond these it is no longer tiny (and exhausts memory)
TINY_LIMITS = {"model.tiny_layers": 64, "model.tiny_hidden": 8192, "model.tiny_heads": 256}

#: (key, the test its value must pass, what it must be): a failure is "KEY must be WHAT, got VALUE"
_BOUNDS: list[tuple[str, Callable[[Any], bool], str]] = [
    *((key, lambda v: v >= 1, ">= 1") for key in (
        "data.max_length", "train.batch_size", "train.grad_accum", "train.logging_steps", "lora.r",
        "model.tiny_layers", "model.tiny_hidden", "model.tiny_heads",
        "model.tiny_digits_per_token")),
    ("data.max_length", lambda v: v >= 2, ">= 2"),
    ("data.num_examples", lambda v: v is None or v >= 1, ">= 1 or null"),
    ("train.max_steps", lambda v: v > 0 or v == -1, "> 0 or -1 (use num_epochs)"),
    ("train.warmup_ratio", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.learning_rate", lambda v: v > 0, "> 0"),
    ("train.save_steps", lambda v: v >= 0, ">= 0"),
    ("train.seed", lambda v: 0 <= v < SEED_LIMIT, "in [0, 2**32)"),
    ("data.seed", lambda v: 0 <= v < SEED_LIMIT, "in [0, 2**32)"),
    ("train.weight_decay", lambda v: v >= 0, ">= 0"),
    ("train.max_grad_norm", lambda v: v >= 0, ">= 0 (0 = no clipping)"),
    ("train.dataloader_num_workers", lambda v: v >= 0, ">= 0 (0 = load in the main process)"),
    ("train.num_epochs", lambda v: v > 0, "> 0"),
    ("lora.dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("lora.alpha", lambda v: v >= 1, ">= 1"),
    *((key, lambda v, limit=limit: v <= limit, f"<= {limit} (the tiny model is for tests)")
      for key, limit in TINY_LIMITS.items()),
    ("model.tiny_digits_per_token", lambda v: v in (1, 3), "1 or 3"),
    ("data.max_length", lambda v: v <= 10**7, "<= 10**7"),
]


def _value(config: Config, key: str) -> Any:
    """The value of a `section.field` or top-level key."""
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name) if name else getattr(config, section)


def _validate_ranges(config: Config) -> None:
    """Numbers that transformers, torch or peft would refuse later (or take silently and wrongly)."""
    train, lora, model, data = config.train, config.lora, config.model, config.data
    for key, test, what in _BOUNDS:
        if not test(_value(config, key)):
            raise ConfigError(f"{key} must be {what}, got {_value(config, key)}")
    schedulers = _lr_schedulers()
    if train.lr_scheduler not in schedulers:
        raise ConfigError(f"train.lr_scheduler: unknown scheduler {train.lr_scheduler!r}; "
                          f"choose one of {', '.join(schedulers)}")
    if train.save_total_limit is not None and train.save_total_limit < 1:
        raise ConfigError(
            f"train.save_total_limit must be >= 1 or null (keep all), got {train.save_total_limit}; "
            "use train.save_steps 0 for no checkpoints"
        )
    target = lora.target_modules
    if not target or (isinstance(target, list) and not all(target)):
        raise ConfigError("lora.target_modules must be 'all-linear' or a non-empty list of module names")
    generated = data.source.startswith(("synthetic:", "gym:"))
    if generated and (data.num_examples or 0) > GENERATED_LIMIT:
        raise ConfigError(
            f"data.num_examples must be <= {GENERATED_LIMIT:,} for a generated set (data.source "
            f"{data.source!r}), got {data.num_examples}"
        )
    if model.tiny_hidden % model.tiny_heads:
        raise ConfigError(
            f"model.tiny_hidden ({model.tiny_hidden}) must be a multiple of model.tiny_heads "
            f"({model.tiny_heads})"
        )


#: model names numloss builds or converts itself: a hub revision means nothing for them
BUILT_IN_MODELS = ("tiny", "smollm2")


def _is_local_file(source: str) -> bool:
    return not source.startswith(("synthetic:", "gym:")) and (Path(source).is_file() or source.endswith((".json", ".jsonl")))


def _validate_context(config: Config) -> None:
    """Settings that would be ignored where they are given: each is refused, never dropped."""
    train, model, data, lora = config.train, config.model, config.data, config.lora
    for name, value in (("model.name", model.name), ("data.source", data.source), ("train.output_dir", train.output_dir),
                        ("data.instruction_field", data.instruction_field), ("data.output_field", data.output_field)):
        if not value.strip():
            raise ConfigError(f"{name} is empty; give a value (numloss train --help shows the default)")
    if train.resume_changed and train.resume is False:
        raise ConfigError("--resume-changed (train.resume_changed) only applies with --resume; add --resume or drop it")
    if lora.merge and not lora.enabled:
        raise ConfigError("lora.merge is set but LoRA is off (lora.enabled false); set lora.enabled true or drop lora.merge")
    if model.revision is not None and model.name in BUILT_IN_MODELS:
        raise ConfigError(f"model.revision {model.revision!r} means nothing for the built-in model {model.name!r}; drop it")
    if model.cache_dir is not None and model.name == "tiny":
        raise ConfigError(f"model.cache_dir {model.cache_dir!r} means nothing for the tiny model (it is built in "
                          "memory, never cached); drop it")
    if train.fsdp_config and not train.fsdp:
        raise ConfigError("train.fsdp_config is set but train.fsdp is empty, so it would be ignored; set train.fsdp "
                          "(e.g. 'full_shard auto_wrap') or drop train.fsdp_config")
    generated = data.source.startswith(("synthetic:", "gym:"))
    if (generated or _is_local_file(data.source)) and (data.split != "train" or data.subset is not None):
        what = "data.split" if data.split != "train" else "data.subset"
        where = "the generated set" if generated else "the local file"
        raise ConfigError(f"{what} applies to a Hugging Face dataset, not to {where} {data.source!r}; drop it")
    smoothing = train.extra.get("label_smoothing_factor", 0)
    if smoothing:
        raise ConfigError("train.extra.label_smoothing_factor: numloss's objectives compute their own loss and would "
                          "ignore it; drop it (objective.options of an objective say what it smooths, if anything)")
    if model.attn_implementation == "flash_attention_2":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            raise ConfigError("model.attn_implementation flash_attention_2 needs the flash-attn package, which is not "
                              "installed; pip install flash-attn, or use sdpa")
    if model.name == "tiny" and lora.enabled and lora.r > model.tiny_hidden:
        raise ConfigError(f"lora.r {lora.r} is larger than the model's width ({model.tiny_hidden}); a rank above it "
                          "adds nothing (and a huge one exhausts memory): give at most the width")


def _validate_names(config: Config) -> None:
    """Names transformers looks up later: the optimizer and the reporting integrations."""
    from transformers.training_args import OptimizerNames

    optimizers = [o.value for o in OptimizerNames]
    if config.train.optim not in optimizers:
        raise ConfigError(f"train.optim: unknown optimizer {config.train.optim!r}; choose one of {', '.join(optimizers)}")
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    installed = set(get_available_reporting_integrations())
    for name in config.train.report_to:
        if name in ("none", "tensorboard"):
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise ConfigError(
                f"train.report_to: unknown integration {name!r}; choose from none, {', '.join(INTEGRATION_TO_CALLBACK)}"
            )
        if name not in installed:
            raise ConfigError(f"train.report_to: {name!r} is not installed (pip install it, or remove it)")
    if "none" in config.train.report_to and len(config.train.report_to) > 1:
        raise ConfigError(f"train.report_to: 'none' cannot be combined with others, got {config.train.report_to}")


def check_chat_template(chat_template: str | None) -> None:
    """Raise ConfigError when data.chat_template is neither a readable file nor valid Jinja."""
    if chat_template is None:
        return
    from numloss.data.instructions import DataError
    from numloss.data.tokenize import compile_chat_template, resolve_chat_template

    try:
        compile_chat_template(resolve_chat_template(chat_template))
    except DataError as error:
        raise ConfigError(str(error)) from None


def _lr_schedulers() -> list[str]:
    """The scheduler names `transformers.TrainingArguments(lr_scheduler_type=...)` accepts."""
    from transformers.trainer_utils import SchedulerType

    return [scheduler.value for scheduler in SchedulerType]


def describe_keys() -> str:
    """Every key with its type, default and meaning: the body of `numloss train --help`."""
    lines: list[str] = []
    defaults = Config()
    for name, klass in SECTIONS.items():
        lines.append(f"{name}:")
        section = getattr(defaults, name)
        hints = _hints(klass)
        for f in dataclasses.fields(klass):
            default = getattr(section, f.name)
            lines.append(
                f"  --{name}.{f.name} ({_type_name(hints[f.name])}, default {yaml.safe_dump(default, default_flow_style=True).strip().removesuffix('...').strip()})"
            )
            lines.append(f"        {f.metadata.get('help', '')}")
    for name in TOP_LEVEL:
        f = next(f for f in dataclasses.fields(Config) if f.name == name)
        lines.append(f"--{name} (bool, default {str(getattr(defaults, name)).lower()})")
        lines.append(f"        {f.metadata.get('help', '')}")
    return "\n".join(lines)


def dump_config(config: Config) -> str:
    """The config as YAML (what `output_dir/config.yaml` holds)."""
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


# -- resuming: which settings change a run ---------------------------------------------------------
#: keys a resumed run may change: where things go and how they are shown, not what is learnt
RESUME_SAFE_KEYS = frozenset({
    "train.output_dir", "train.resume", "train.resume_changed", "train.overwrite", "train.logging_steps",
    "train.report_to", "train.progress_bar", "train.save_steps", "train.save_total_limit",
    "train.dataloader_num_workers", "model.cache_dir", "model.gradient_checkpointing",
    "model.attn_implementation", "fused", "lora.merge",
})
#: train.extra fields of the same kind
RESUME_SAFE_EXTRA = frozenset({"run_name", "logging_dir", "logging_strategy", "logging_first_step",
                               "logging_nan_inf_filter", "save_only_model", "save_safetensors", "log_level"})


def _flat(config: Config) -> dict[str, Any]:
    """Every key's value; a mapping's entries as `key.entry` (a change then names the entry)."""
    flat: dict[str, Any] = {}
    for key in all_keys():
        value = _value(config, key)
        if isinstance(value, dict):
            flat.update({f"{key}.{entry}": item for entry, item in value.items()})
        else:
            flat[key] = value
    return flat


def changed_settings(old: Config, new: Config) -> list[str]:
    """The settings that differ between `old` (a run's config.yaml) and `new` and change what
    the run learns, as 'key old -> new' (empty when a resume may go on); see RESUME_SAFE_KEYS."""
    before, after = _flat(old), _flat(new)
    changed = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key, "(unset)"), after.get(key, "(unset)")
        if a == b or isinstance(a, dict) or isinstance(b, dict):
            continue
        if key in RESUME_SAFE_KEYS or (key.startswith("train.extra.") and key.split(".", 2)[2] in RESUME_SAFE_EXTRA):
            continue
        changed.append(f"{key} {a!r} -> {b!r}")
    return changed


def read_stored_config(path: Path) -> Config:
    """The Config saved in a run's config.yaml, read without validation (its data file may
    have moved since); a ConfigError when it cannot be read."""
    config = Config()
    apply_mapping(config, load_yaml(path, ConfigError), str(path))
    return config
