"""The training configuration: one dataclass tree, read from YAML, overridden from the command line.

    config = load_config(
        "configs/tiny.yaml", ["--objective.name", "del", "--train.max_steps", "20"]
    )

Sections: `model`, `data`, `objective`, `train`, `lora`, and the top-level switch `fused`. The
`train` section is `transformers.TrainingArguments` by its own names (`per_device_train_batch_size`,
`gradient_accumulation_steps`, `learning_rate`, `lr_scheduler_type`, any other field of it). A key
is written `section.field` on the command line (`--train.learning_rate 1e-4`), or bare where only
one section has it (`--max_steps 20`); a value is read as YAML (`true`, `null`, `[q_proj, v_proj]`)
and checked against the field's type by pydantic. The names of earlier releases (`train.batch_size`,
`train.grad_accum`, ...: LEGACY_KEYS) still work and log one deprecation line naming the new key.
Unknown keys, wrong types and missing files are `ConfigError`s raised here, before anything heavy is
loaded. `describe_keys()` is the `--help` text."""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from numloss.extras import needs

with needs("hf", "numloss.config"):
    import yaml
    from annotated_types import Ge, Gt, Le, Lt

from numloss.checks import shown
from numloss.yamlio import YamlKeyError, load_yaml, parse_yaml


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and how to fix it."""


# the ranges are part of each key's type: torch, transformers and peft would refuse the rest later
Count = Annotated[int, Ge(1)]
NonNegative = Annotated[float, Ge(0)]
Share = Annotated[float, Ge(0), Lt(1)]
Seed = Annotated[int, Ge(0), Lt(2**32)]  # numpy takes 0 <= seed < 2**32


# each key's --help line is the docstring under it (as pydantic's use_attribute_docstrings reads)
@dataclass
class ModelConfig:
    name: str = "tiny"
    """'tiny' (random char-level Llama), 'smollm2' (offline SmolLM2-135M-Instruct), a hub id or a
    local folder"""
    revision: str | None = None
    """hub revision (branch, tag or commit) of a hub model"""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    """dtype of the loaded weights (float32 + train.bf16 = mixed precision)"""
    trust_remote_code: bool = False
    """allow a hub model's own modelling code"""
    attn_implementation: str | None = None
    """attention kernel: eager, sdpa, flash_attention_2 (None: transformers' choice)"""
    gradient_checkpointing: bool = False
    """recompute activations in backward (saves memory, costs time)"""
    tiny_layers: Annotated[int, Ge(1), Le(64)] = 6
    """tiny model: decoder layers"""
    tiny_hidden: Annotated[int, Ge(1), Le(8192)] = 384
    """tiny model: hidden width"""
    tiny_heads: Annotated[int, Ge(1), Le(256)] = 6
    """tiny model: attention heads"""
    tiny_digits_per_token: Literal[1, 3] = 1
    """tiny model: 1 (one token per digit) or 3 (numbers in Llama-3-style chunks of 1-3 digits)"""
    cache_dir: str | None = None
    """numloss model cache for 'smollm2' (default $NUMLOSS_CACHE or ~/.cache/numloss)"""


@dataclass
class DataConfig:
    source: str = "synthetic:mix"
    """synthetic:NAME, gym:NAME, a .json/.jsonl file, a dataset folder or a HF dataset name"""
    num_examples: Count | None = 4000
    """examples to generate (synthetic/gym) or to keep (files; null = all)"""
    seed: Seed = 0
    """seed of the generated sets"""
    split: str = "train"
    """split of a HF dataset"""
    subset: str | None = None
    """configuration name of a HF dataset"""
    max_length: Annotated[int, Ge(2), Le(10**7)] = 512
    """tokens per sequence; longer ones are truncated (and counted in the log)"""
    instruction_field: str = "instruction"
    """record field holding the instruction"""
    input_field: str = "input"
    """record field holding the optional input"""
    output_field: str = "output"
    """record field holding the response to learn"""
    chat_template: str | None = None
    """Jinja chat template (or a file holding one) for `messages` data; null: the tokenizer's"""


@dataclass
class ObjectiveConfig:
    name: str = "del"
    """objective: mle, del, ntl-was, ntl-mse, dist2, mixce, emo"""
    alpha: float | None = None
    """weight of the objective's term on the step-wide digit mean (null: its default, DEL 0.03;
    normalize: tokens needs one)"""
    options: dict[str, Any] = field(default_factory=dict)
    """other options of the objective, e.g. {place_weighting: continuous} or {tau: 2}"""


@dataclass
class TrainConfig:
    """`transformers.TrainingArguments` by its own names: the fields numloss gives a default of its
    own or reads itself, and (kept in `extra`) any other TrainingArguments field given by name."""

    output_dir: str = "runs/tiny"
    """where checkpoints, logs and the final model go"""
    num_train_epochs: Annotated[float, Gt(0)] = 1.0
    """passes over the data (ignored when max_steps > 0)"""
    max_steps: Literal[-1] | Count = -1
    """optimizer steps; -1 = num_train_epochs"""
    per_device_train_batch_size: Count = 8
    """sequences per device per micro-batch"""
    gradient_accumulation_steps: Count = 1
    """micro-batches per optimizer step (global batch = per_device_train_batch_size x
    gradient_accumulation_steps x devices)"""
    learning_rate: Annotated[float, Gt(0)] = 1e-3
    """peak learning rate"""
    lr_scheduler_type: str = "cosine"
    """transformers scheduler: cosine, linear, constant, constant_with_warmup, ..."""
    warmup_ratio: Share = 0.03
    """fraction of the steps spent warming up"""
    weight_decay: NonNegative = 0.0
    """AdamW weight decay"""
    max_grad_norm: NonNegative = 1.0
    """gradient clipping norm (0 = off)"""
    optim: str = "adamw_torch"
    """transformers optimizer name"""
    seed: Seed = 0
    """seed of initialisation, shuffling and dropout"""
    bf16: bool | None = None
    """bf16 autocast; null = on where the CPU/GPU supports it"""
    tf32: bool | None = None
    """TF32 matmuls on Ampere+ GPUs (null = transformers' default)"""
    logging_steps: Count = 10
    """log every N optimizer steps"""
    save_steps: Annotated[int, Ge(0)] = 0
    """checkpoint every N steps (0 = only the final model)"""
    save_total_limit: Count | None = 2
    """checkpoints kept (null = all)"""
    resume: bool | str = False
    """true: resume from the last checkpoint in output_dir; or a checkpoint path"""
    resume_changed: bool = False
    """let a resume continue under settings that change the run (objective, learning rate, ...);
    the CLI's --resume-changed"""
    overwrite: bool = False
    """train into an output_dir holding another or a finished run: its files move aside to
    output_dir/overwritten-TIME/; the CLI's --overwrite"""
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    """logging integrations besides the CSV log (tensorboard, wandb, none)"""
    progress_bar: bool = True
    """show the progress bar with loss terms and tokens/s"""
    dataloader_num_workers: Annotated[int, Ge(0)] = 0
    """data-loading worker processes"""
    fsdp: str = ""
    """FSDP mode passed to TrainingArguments, e.g. 'full_shard auto_wrap' (or use accelerate's
    config)"""
    fsdp_config: dict[str, Any] = field(default_factory=dict)
    """FSDP options passed to TrainingArguments, e.g. {transformer_layer_cls_to_wrap:
    [Qwen2DecoderLayer]}"""
    deepspeed: str | None = None
    """DeepSpeed JSON config (needs deepspeed installed), e.g. configs/accelerate/ds_zero3.json"""
    extra: dict[str, Any] = field(default_factory=dict)
    """the other transformers.TrainingArguments fields given (write each as train.NAME)"""


@dataclass
class LoraConfig:
    enabled: bool = False
    """train LoRA adapters (peft) instead of all weights"""
    r: Count = 16
    """LoRA rank"""
    alpha: Count = 32
    """LoRA scaling numerator (scale = alpha / r)"""
    dropout: Share = 0.05
    """dropout on the LoRA input"""
    target_modules: list[str] | str = "all-linear"
    """modules to adapt: 'all-linear' or a list like [q_proj, v_proj]"""
    merge: bool = False
    """also save the adapters merged into the base model (output_dir/merged)"""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    fused: bool = False
    """compute the loss from hidden states in chunks (never the whole [B, T, V] logits)"""

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (YAML/JSON-ready) of every key."""
        return dataclasses.asdict(self)


TOP_LEVEL = ("fused",)
SECTIONS: dict[str, Any] = {
    f.name: f.default_factory for f in dataclasses.fields(Config) if f.name not in TOP_LEVEL
}


# -- keys and their types --------------------------------------------------------------------------
#: the names of earlier releases -> today's (transformers'): they still work, and each use
#: logs one deprecation line naming the new key (`train.extra.X` is `train.X` alike)
LEGACY_KEYS: dict[str, str] = {
    "train.num_epochs": "train.num_train_epochs",
    "train.batch_size": "train.per_device_train_batch_size",
    "train.grad_accum": "train.gradient_accumulation_steps",
    "train.lr_scheduler": "train.lr_scheduler_type",
}
#: TrainingArguments fields numloss sets itself from other keys (a config may not set them)
TRAINING_ARGUMENTS_SET: dict[str, str] = {
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
logger = logging.getLogger("numloss.config")


# a class's type hints, once per class (get_type_hints evaluates every annotation per call)
_hints = functools.cache(functools.partial(typing.get_type_hints, include_extras=True))


@functools.cache
def _help(klass: type) -> dict[str, str]:
    """Each field of `klass` to its attribute docstring, on one line (the `--help` text)."""
    import ast
    import inspect

    try:
        body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
    except OSError:  # installed without its sources (.pyc only): the keys without their help text
        return {}
    return {
        key.target.id: " ".join(doc.value.value.split())
        for key, doc in zip(body, body[1:], strict=False)
        if isinstance(key, ast.AnnAssign) and isinstance(doc, ast.Expr)
    }


@functools.cache
def _adapter(hint: Any) -> Any:
    from pydantic import ConfigDict, TypeAdapter  # here: `numloss train --help` needs none

    return TypeAdapter(hint, config=ConfigDict(allow_inf_nan=False))


_PLAIN = {
    int: "an integer",
    float: "a finite number",
    bool: "true or false",
    str: "a string",
    type(None): "null",
}


def _type_text(hint: Any) -> str:
    """`hint` as the help and the errors write it: an integer, true or false or null, one of 'a',
    'b'."""
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    if typing.get_origin(hint) in (typing.Union, type(int | str)):
        return " or ".join(map(_type_text, typing.get_args(hint)))
    if typing.get_origin(hint) is Annotated:
        base, *bounds = typing.get_args(hint)
        ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        limits = [f"{op} {getattr(b, k)}" for b in bounds for k, op in ops.items() if hasattr(b, k)]
        return f"{_type_text(base)} {' and '.join(limits)}"
    return _PLAIN.get(hint) or re.sub(r"typing\.|<class '(\w+)'>", r"\1", str(hint))


_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # YAML 1.1 reads `1e-3` as a string


def check_value(key: str, value: Any, hint: Any) -> Any:
    """`value` checked by pydantic against `hint` in strict mode (a bool is never 1, "yes" never
    true, an int is a float where one is wanted; numbers finite and within 64 bits), else a
    ConfigError naming `key`. A string in exponent notation is a number where one is wanted
    (YAML 1.1 reads `1e-3` as a string); a lone string is a one-item list where a list is wanted,
    a comma-separated one its items (`--lora.target_modules q_proj,v_proj`)."""
    union = typing.get_origin(hint) in (typing.Union, type(int | str))
    options = typing.get_args(hint) if union else (hint,)
    takes_list = any(typing.get_origin(o) is list for o in options)
    if isinstance(value, str) and takes_list and ("," in value or str not in options):
        value = [v.strip() for v in value.split(",") if v.strip()]
    from pydantic import ValidationError

    try:
        checked = _adapter(hint).validate_python(value, strict=True)
    except ValidationError:
        number = isinstance(value, str) and _EXPONENT.fullmatch(value.strip())
        try:
            checked = _adapter(hint).validate_python(
                float(value) if number else value, strict=not number
            )
        except (ValidationError, OverflowError):
            raise ConfigError(f"{key}: expected {_type_text(hint)}, got {shown(value)}") from None
    # torch, numpy, itertools: 64 bits
    if isinstance(checked, int) and not -(2**63) <= checked < 2**63:
        raise ConfigError(f"{key}: {shown(value)} does not fit in 64 bits")
    return checked


def _unknown(key: str, known: list[str]) -> ConfigError:
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
    return ConfigError(f"unknown config key {key!r}{hint} (`numloss train --help` lists them all)")


def all_keys() -> list[str]:
    """Every key numloss declares, `section.field` and the top-level ones (the `train` section
    takes every other TrainingArguments field too)."""
    keys = [f"{name}.{key}" for name, klass in SECTIONS.items() for key in _hints(klass)]
    return [key for key in keys if key != "train.extra"] + list(TOP_LEVEL)


def _training_argument(name: str) -> Any:
    """The type of TrainingArguments field `name`, for `train.NAME`; a ConfigError for a name that
    is no field of it or one numloss sets itself."""
    import transformers

    hint = _hints(transformers.TrainingArguments).get(name)
    if hint is None:
        import difflib

        close = difflib.get_close_matches(
            name, [*_hints(TrainConfig), *_hints(transformers.TrainingArguments)], n=1
        )
        raise ConfigError(
            f"unknown config key 'train.{name}': neither a numloss key nor a transformers."
            "TrainingArguments field" + (f"; did you mean 'train.{close[0]}'?" if close else "")
        )
    if name in TRAINING_ARGUMENTS_SET:
        raise ConfigError(
            f"train.{name}: numloss sets {name} itself (from {TRAINING_ARGUMENTS_SET[name]}); set"
            " that key instead, so the two cannot disagree"
        )
    return hint


def canonical_key(key: str, warn: bool = True) -> str:
    """`key` by today's name: a name of earlier releases (LEGACY_KEYS, `train.extra.X`) logs, once
    per process when `warn`, one deprecation line naming the new key."""
    extra = key.startswith("train.extra.")
    new = "train." + key.removeprefix("train.extra.") if extra else LEGACY_KEYS.get(key)
    if new is not None and warn:
        _deprecated(key, new)
    return key if new is None else new


@functools.cache  # one line per old name and process
def _deprecated(old: str, new: str) -> None:
    logger.warning(
        "config key %s is deprecated: write %s (docs/training.md, Configuration)", old, new
    )


def _key(key: str, warn: bool) -> str:
    """`canonical_key`, and a bare name (`--max_steps`) is the key of the one section that has
    it."""
    key = canonical_key(key, warn)
    if "." in key or key in TOP_LEVEL:
        return key
    owners = [known for known in all_keys() if known.endswith(f".{key}")]
    if len(owners) > 1:
        raise ConfigError(
            f"--{key} is a key of several sections: write {' or '.join('--' + o for o in owners)}"
        )
    # else a TrainingArguments field, or unknown there
    return owners[0] if owners else f"train.{key}"


def _set(config: Config, key: str, value: Any, from_cli: bool, warn: bool = True) -> None:
    """Set `key` (dotted) to `value`, type-checked; `objective.options.X` sets one option and
    `train.NAME` any TrainingArguments field (kept in `train.extra`)."""
    key = _key(key, warn)
    section, _, rest = key.partition(".")
    name, _, entry = rest.partition(".")
    # the pass-through mapping of earlier releases: each entry is a train key
    if key == "train.extra":
        value = _parse_cli(value, dict) if from_cli else value
        if not isinstance(value, dict):
            raise ConfigError(
                f"train.extra: expected a mapping of TrainingArguments fields, got {shown(value)}"
            )
        if warn:
            _deprecated("train.extra", "each of its entries as train.NAME")
        for entry_name, entry_value in value.items():
            _set(config, f"train.{entry_name}", entry_value, from_cli=False, warn=warn)
        return
    klass = SECTIONS.get(section) if rest else type(config) if key in TOP_LEVEL else None
    hint = _hints(klass).get(name or section) if klass else None
    target: Any = getattr(config, section) if klass is not None and rest else config
    if hint is None and section == "train" and name and not entry:
        hint, target = _training_argument(name), config.train.extra
    if hint is None or (entry and typing.get_origin(hint) is not dict):
        raise _unknown(key, all_keys())
    if entry:  # one entry of a mapping
        value = {**getattr(target, name), entry: _parse_cli(value, Any) if from_cli else value}
    elif from_cli:
        if isinstance(value, str) and not value.strip():
            # YAML reads '' as null: `--objective.alpha ''` would silently mean "the default"
            give = "a value (null for none)" if rest else "true or false"
            raise ConfigError(f"--{key} is empty: give {give}, or leave the option out")
        value = _parse_cli(value, hint)
    value = check_value(key, value, hint)
    options = typing.get_args(hint)
    if isinstance(value, str) and (dict in options or dict in map(typing.get_origin, options)):
        from pydantic import ValidationError

        try:  # TrainingArguments reads a string for a mapping field as JSON, later
            _adapter(dict).validate_json(value)
        except ValidationError:
            what = "a mapping (or a JSON object string)"
            raise ConfigError(f"{key}: expected {what}, got {shown(value)}") from None
    if isinstance(target, dict):
        target[name] = value
    else:
        setattr(target, name or section, value)


def _parse_cli(text: Any, hint: Any) -> Any:
    """A command-line string as YAML, except where the field is a plain string (paths stay as
    typed: `--model.name 1e-3` is the folder '1e-3')."""
    if not isinstance(text, str) or hint is str:
        return text
    try:
        return parse_yaml(text)
    except YamlKeyError as error:  # a key given twice
        raise ConfigError(str(error)) from None
    except yaml.YAMLError:
        return text


def apply_mapping(config: Config, mapping: dict[str, Any], origin: str, warn: bool = True) -> None:
    """Apply a nested mapping (the YAML file's contents) onto `config`."""
    if not isinstance(mapping, dict):
        raise ConfigError(
            f"{origin}: the top level must be a mapping of sections, got {type(mapping).__name__}"
        )
    for name, value in mapping.items():
        if name in TOP_LEVEL:
            _set(config, name, value, from_cli=False)
        elif name in SECTIONS:
            if not isinstance(value, dict | None):  # an empty section (`train:`) is None
                raise ConfigError(
                    f"{origin}: section {name!r} must be a mapping of keys, got {value!r}"
                )
            for field_name, field_value in (value or {}).items():
                _set(config, f"{name}.{field_name}", field_value, from_cli=False, warn=warn)
        else:
            raise _unknown(str(name), list(SECTIONS) + list(TOP_LEVEL))


def parse_overrides(argv: list[str]) -> list[tuple[str, str]]:
    """`--key value` / `--key=value` pairs of the command line, in order."""
    pairs: list[tuple[str, str]] = []
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("--") or token == "--":
            raise ConfigError(
                f"unexpected argument {token!r}: overrides are written --section.key value"
            )
        key, equals, value = token[2:].partition("=")
        if not equals:
            value = next(tokens, "--")  # the end of the line, or the next option: no value
            if value.startswith("--"):
                raise ConfigError(f"--{key} needs a value (e.g. --{key} VALUE)")
        pairs.append((key, value))
    for key in dict(pairs):
        values = [v for k, v in pairs if k == key]
        if len(values) > 1:  # `--x 3 --x=2`: the last wins, as with argparse, and says so
            listed, last = ", ".join(map(repr, values)), values[-1]
            logger.warning(
                f"--{key} is given {len(values)} times ({listed}): the last, {last!r}, is used"
            )
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
        empty = "write the keys to set (numloss train --help lists them), or give no config file"
        mapping = load_yaml(path, ConfigError, empty=empty + " to train the defaults")
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
    from numloss.data.tokenize import compile_chat_template, resolve_chat_template

    _validate_objective(config.objective)
    try:  # the data source, and the chat template: a readable file or valid Jinja
        check_source(config.data.source)
        if config.data.chat_template is not None:
            compile_chat_template(resolve_chat_template(config.data.chat_template))
    except DataError as error:
        raise ConfigError(str(error)) from None
    _validate_context(config)
    if config.train.deepspeed is not None and not Path(config.train.deepspeed).is_file():
        raise ConfigError(f"train.deepspeed: config file {config.train.deepspeed!r} does not exist")
    resume = config.train.resume
    if isinstance(resume, str) and not Path(resume).is_dir():
        raise ConfigError(
            f"train.resume: checkpoint folder {resume!r} does not exist (or use true for the last"
            " one)"
        )
    _validate_names(config)


def _one_of(key: str, what: str, value: str, choices: Any, given: str | None = None) -> None:
    """ConfigError naming `key` and the choices (str enums by value) unless `value` is one."""
    names = [getattr(choice, "value", choice) for choice in choices]
    if value not in names:
        raise ConfigError(
            f"{key}: unknown {what} {given or value!r}; choose one of {', '.join(names)}"
        )


def _validate_objective(objective: ObjectiveConfig) -> None:
    """The objective's name, whether it takes alpha, and its options' names and values."""
    from numloss.losses import LOSSES

    key = objective.name.lower().replace("_", "-")
    _one_of("objective.name", "objective", key, LOSSES, objective.name)
    klass = LOSSES[key]
    allowed = [name for name in klass.option_names() if name not in ("alpha", "embedding")]
    unknown = sorted(set(objective.options) - set(allowed))
    if unknown:
        raise ConfigError(
            f"objective.options: {key!r} has no option(s) {', '.join(map(repr, unknown))}; its"
            f" options are {', '.join(allowed) or 'none'}"
        )
    if objective.alpha is not None and key == "mle":
        raise ConfigError(
            "objective.alpha: 'mle' has no term for alpha to weight (plain cross-entropy); remove"
            " it (--objective.alpha null)"
        )
    if objective.alpha is not None and not klass.takes_alpha:
        raise ConfigError(
            f"objective.alpha: {key!r} has no alpha (it reshapes the token loss); remove it"
        )
    try:  # option values (negative alpha, tau <= 0, eta outside [0, 1], ...) before any model loads
        klass.validate_options({**objective.options, "alpha": objective.alpha})
    except ValueError as error:
        raise ConfigError(f"objective: {error}") from None


#: examples a generated set (synthetic:, gym:) may be asked for: they are built in memory
GENERATED_LIMIT = 10**7


#: model names numloss builds or converts itself: a hub revision means nothing for them
BUILT_IN_MODELS = ("tiny", "smollm2")
#: the string keys that may not be blank (the optional ones may be null instead)
NOT_BLANK = "model.name data.source train.output_dir data.instruction_field data.output_field"


def _validate_context(config: Config) -> None:
    """Numbers that transformers, torch or peft would refuse later (or take silently and wrongly),
    and settings that would be ignored where they are given: each is refused, never dropped."""
    train, model, data, lora = config.train, config.model, config.data, config.lora
    from transformers.trainer_utils import SchedulerType

    # the names TrainingArguments(lr_scheduler_type=...) accepts
    _one_of("train.lr_scheduler_type", "scheduler", train.lr_scheduler_type, [*SchedulerType])
    target = lora.target_modules
    if not target or (isinstance(target, list) and not all(target)):
        raise ConfigError(
            "lora.target_modules must be 'all-linear' or a non-empty list of module names"
        )
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
    for key in NOT_BLANK.split():
        section, _, name = key.partition(".")
        if not getattr(getattr(config, section), name).strip():
            raise ConfigError(
                f"{key} is empty; give a value (numloss train --help shows the default)"
            )
    if train.resume_changed and train.resume is False:
        raise ConfigError(
            "--resume-changed (train.resume_changed) only applies with --resume; add --resume or"
            " drop it"
        )
    if lora.merge and not lora.enabled:
        raise ConfigError(
            "lora.merge is set but LoRA is off (lora.enabled false); set lora.enabled true or drop"
            " lora.merge"
        )
    if model.revision is not None and model.name in BUILT_IN_MODELS:
        raise ConfigError(
            f"model.revision {model.revision!r} means nothing for the built-in model"
            f" {model.name!r}; drop it"
        )
    if model.cache_dir is not None and model.name == "tiny":
        raise ConfigError(
            f"model.cache_dir {model.cache_dir!r} means nothing for the tiny model (it is built in "
            "memory, never cached); drop it"
        )
    if train.fsdp_config and not train.fsdp:
        raise ConfigError(
            "train.fsdp_config is set but train.fsdp is empty, so it would be ignored; set"
            " train.fsdp (e.g. 'full_shard auto_wrap') or drop train.fsdp_config"
        )
    local = Path(data.source).is_file() or data.source.endswith((".json", ".jsonl"))
    if (generated or local) and (data.split != "train" or data.subset is not None):
        what = "data.split" if data.split != "train" else "data.subset"
        where = "the generated set" if generated else "the local file"
        raise ConfigError(
            f"{what} applies to a Hugging Face dataset, not to {where} {data.source!r}; drop it"
        )
    if train.extra.get("gradient_checkpointing_kwargs") and not model.gradient_checkpointing:
        raise ConfigError(
            "train.gradient_checkpointing_kwargs is set but model.gradient_checkpointing is off, so"
            " it would be ignored; set model.gradient_checkpointing true or drop it"
        )
    if train.extra.get("label_smoothing_factor"):
        raise ConfigError(
            "train.label_smoothing_factor: numloss's objectives compute their own loss and would"
            " ignore it; drop it (objective.options of an objective say what it smooths, if"
            " anything)"
        )
    if model.attn_implementation == "flash_attention_2":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            raise ConfigError(
                "model.attn_implementation flash_attention_2 needs the flash-attn package, which is"
                " not installed; pip install flash-attn, or use sdpa"
            )


def _validate_names(config: Config) -> None:
    """Names transformers looks up later: the optimizer and the reporting integrations."""
    from transformers.training_args import OptimizerNames

    _one_of("train.optim", "optimizer", config.train.optim, [*OptimizerNames])
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    installed = set(get_available_reporting_integrations())
    for name in config.train.report_to:
        if name in ("none", "tensorboard"):
            continue
        _one_of("train.report_to", "integration", name, ["none", *INTEGRATION_TO_CALLBACK])
        if name not in installed:
            raise ConfigError(
                f"train.report_to: {name!r} is not installed (pip install it, or remove it)"
            )
    if "none" in config.train.report_to and len(config.train.report_to) > 1:
        raise ConfigError(
            f"train.report_to: 'none' cannot be combined with others, got {config.train.report_to}"
        )


def describe_keys() -> str:
    """Every key with its type, default and meaning: the body of `numloss train --help`."""
    lines: list[str] = []
    defaults = Config()
    for name, klass in [*SECTIONS.items(), ("", Config)]:
        lines.append(f"{name or 'top level'}:")
        section = getattr(defaults, name) if name else defaults
        for f in dataclasses.fields(klass):
            if f.name in SECTIONS or f.name == "extra":
                continue
            default = yaml.safe_dump(getattr(section, f.name), default_flow_style=True)
            default = default.removesuffix("...\n").strip()
            key = f"{name}.{f.name}" if name else f.name
            lines += [
                f"  --{key} ({_type_text(_hints(klass)[f.name])}, default {default})",
                f"        {_help(klass).get(f.name, '')}",
            ]
        if name == "train":
            lines.append(
                "  --train.NAME: any other transformers.TrainingArguments field, e.g."
                " --train.adam_beta2 0.95"
            )
    names = ", ".join(f"{old} -> {new}" for old, new in LEGACY_KEYS.items())
    lines += ["", f"Names of earlier releases still work, with a deprecation line: {names}; "]
    return "\n".join(lines) + "train.extra.NAME -> train.NAME."


def dump_config(config: Config) -> str:
    """The config as YAML (what `output_dir/config.yaml` holds)."""
    data = config.to_dict()
    # the other TrainingArguments fields, as written
    data["train"].update(data["train"].pop("extra"))
    return yaml.safe_dump(data, sort_keys=False)


# -- resuming: which settings change a run ---------------------------------------------------------
#: keys a resumed run may change: where things go and how they are shown, not what is learnt
RESUME_SAFE_KEYS = frozenset(
    """
    train.output_dir train.resume train.resume_changed train.overwrite train.logging_steps
    train.report_to train.progress_bar train.save_steps train.save_total_limit
    train.dataloader_num_workers model.cache_dir model.gradient_checkpointing
    model.attn_implementation fused lora.merge train.run_name train.logging_dir
    train.logging_strategy train.logging_first_step train.logging_nan_inf_filter
    train.save_only_model train.save_safetensors train.log_level
    """.split()
)


def _flat(config: Config) -> dict[str, Any]:
    """Every key's value; a mapping's entries as `key.entry` (a change then names the entry)."""
    flat: dict[str, Any] = {f"train.{name}": value for name, value in config.train.extra.items()}
    for key in all_keys():
        section, _, name = key.partition(".")
        value = getattr(getattr(config, section), name) if name else getattr(config, section)
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
    for key in sorted((set(before) | set(after)) - RESUME_SAFE_KEYS):
        a, b = before.get(key, "(unset)"), after.get(key, "(unset)")
        if a != b and not isinstance(a, dict) and not isinstance(b, dict):
            changed.append(f"{key} {a!r} -> {b!r}")
    return changed


def read_stored_config(path: Path) -> Config:
    """The Config saved in a run's config.yaml, read without validation (its data file may
    have moved since); a ConfigError when it cannot be read."""
    config = Config()
    # an old run's names: no news
    apply_mapping(config, load_yaml(path, ConfigError), str(path), warn=False)
    return config
