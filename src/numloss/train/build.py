"""What a run trains with: its examples tokenised, the tokenizer, the model (tiny, SmolLM2 or a
hub model; LoRA), the objective; and every check of them that needs no weights (`prepare_run`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from numloss.config import Config, ConfigError
from numloss.train.args import build_arguments_checked
from numloss.train.errors import first_line

logger = logging.getLogger("numloss.train")


def tiny_options_for(config: Any) -> dict[str, Any]:
    """The options of the tiny model (and its tokenizer) for `config`."""
    return {
        "num_layers": config.model.tiny_layers,
        "hidden_size": config.model.tiny_hidden,
        "num_heads": config.model.tiny_heads,
        "digits_per_token": config.model.tiny_digits_per_token,
        "max_position_embeddings": max(2048, config.data.max_length),
    }


def _source(config: Any) -> dict[str, Any]:
    """The options `numloss.models` reads the tokenizer and the model of `config` with."""
    source = {
        key: getattr(config.model, key) for key in ("revision", "trust_remote_code", "cache_dir")
    }
    return {**source, "tiny_options": tiny_options_for(config)}


def load_tokenizer_for(config: Any) -> Any:
    """The tokenizer `load_model_for(config)` will return, without loading any weights."""
    from numloss.models import ModelUnavailableError, load_tokenizer

    try:
        return load_tokenizer(config.model.name, **_source(config))
    except ModelUnavailableError as error:  # a damaged folder: its one line, before any training
        raise ConfigError(f"model.name: {error}") from None


def load_model_for(config: Any) -> tuple[Any, Any]:
    """(model, tokenizer) that a run of `config` starts from, before any training or LoRA."""
    from numloss.models import ModelUnavailableError, load_model_and_tokenizer

    try:
        return load_model_and_tokenizer(
            config.model.name,
            dtype=config.model.dtype,
            seed=config.train.seed,
            attn_implementation=config.model.attn_implementation,
            **_source(config),
        )
    except ModelUnavailableError as error:  # a damaged folder: its one line, before any training
        raise ConfigError(f"model.name: {error}") from None


def check_model_name(config: Config) -> None:
    """ConfigError when model.name is neither built in nor available (local folder, cache, hub)."""
    from numloss.models import ModelUnavailableError, check_model_available

    model = config.model
    try:
        check_model_available(model.name, model.revision, model.cache_dir, model.trust_remote_code)
    except ModelUnavailableError as error:
        raise ConfigError(f"model.name: {error}") from None


def digit_vocab_for(config: Config, tokenizer: Any) -> Any:
    """The DigitVocab of `tokenizer` for `config`'s objective, or a ConfigError (before the model
    loads, so a tokenizer without digit tokens fails in a second)."""
    from numloss.digits import DigitVocab, DigitVocabError

    name = config.objective.name.lower().replace("_", "-")
    try:
        # plain cross-entropy needs no digit tokens: allow any tokenizer for it
        return DigitVocab.from_tokenizer(tokenizer, allow_multi_digit=(name == "mle"))
    except DigitVocabError as error:
        raise ConfigError(f"model.name {config.model.name!r}: {error}") from None


def build_loss_for(config: Config, model: Any, tokenizer: Any, vocab: Any = None) -> Any:
    """The objective of `config` for this tokenizer (and, for EMO, this model's output
    embedding)."""
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

    from numloss.extras import peft_quietly

    lora = config.lora
    target = lora.target_modules
    peft_config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=target if isinstance(target, str) else list(target),
        task_type="CAUSAL_LM",
    )
    with peft_quietly():  # it printed peft's FutureWarning once per run (three times in the demo)
        model = get_peft_model(model, peft_config)
    if config.model.gradient_checkpointing:
        model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
    return model


def load_training_examples(config: Config) -> list[Any]:
    """The examples of `config.data` (read before any model is loaded, so a bad source fails
    fast)."""
    from numloss.data import load_examples

    # load_examples' options by the names of data's keys
    keys = "num_examples seed split subset instruction_field input_field output_field".split()
    return load_examples(config.data.source, **{key: getattr(config.data, key) for key in keys})


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
                        f"data: example {index} has a lone surrogate"
                        f" (U+{ord(text[error.start]):04X}) in its {name} at character"
                        f" {error.start}: not valid Unicode, so it cannot be tokenised; fix that"
                        " record"
                    ) from None


def prepare_data(config: Config, examples: list[Any], tokenizer: Any) -> Any:
    """`examples` tokenised with completion-only labels; the truncation counts go to the log."""
    from numloss.data import DataError, tokenize_examples

    try:
        dataset = tokenize_examples(
            examples, tokenizer, config.data.max_length, chat_template=config.data.chat_template
        )
    except DataError as error:
        raise ConfigError(f"data: {error}") from None
    logger.warning("data %s: %s", config.data.source, dataset.summary())
    if dataset.num_without_target == len(dataset):
        raise ConfigError(
            f"data.max_length={config.data.max_length}: every prompt fills the limit, so no"
            " response token is left to learn; raise data.max_length"
        )
    return dataset


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
    tokens, digits = (
        int(n) for n in count_tokens_and_digits(torch.tensor([row], dtype=torch.long), loss_fn)
    )
    if not has_digit_term(loss_fn):
        digits = 0
    if digits:
        ratio = tokens / digits
        # DIST2's count is its sum of place weights
        if getattr(loss_fn, "normalize", "") == "weights":
            counted, per, normalize = "place weights", "unit of place weight", "weights"
        else:
            counted, per, normalize = "digit positions", "digit", "digits"
        logger.warning(
            f"data: {tokens} learnt tokens, {digits} {counted} in the first {len(features)}"
            f' examples: {ratio:.2f} tokens per {per} (normalize="tokens" matches "{normalize}" on'
            f" average at alpha x {ratio:.2f})"
        )
    return tokens, digits


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

    source = (
        str(smollm2.prepare(config.model.cache_dir))
        if config.model.name == "smollm2"
        else config.model.name
    )
    model_config = AutoConfig.from_pretrained(
        source, revision=config.model.revision, trust_remote_code=config.model.trust_remote_code
    )
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
            raise ConfigError(
                f"model.attn_implementation: unknown kernel {attention!r}; choose one of"
                f" {', '.join(known)}"
            )
    try:
        model = _meta_model(config, tokenizer)
    # an unknown kernel, a missing package, a bad config.json
    except (ValueError, ImportError) as error:
        raise ConfigError(
            f"model: {config.model.name!r} cannot be built with these settings: {first_line(error)}"
        ) from None
    except Exception as error:  # noqa: BLE001 - a model that cannot be built on the meta device
        logger.warning(
            "could not check %s without its weights (%s); LoRA targets are checked when it loads",
            config.model.name,
            first_line(error),
        )
        return
    if config.lora.enabled:
        _check_lora(config, model)


def _check_lora(config: Config, model: Any) -> None:
    """ConfigError when `config.lora` does not fit `model` (built on the meta device): a rank
    above its width, a target module it has not, or anything else peft refuses."""
    width = getattr(getattr(model, "config", None), "hidden_size", None)
    if isinstance(width, int) and config.lora.r > width:
        raise ConfigError(
            f"lora.r {config.lora.r} is larger than the model's width ({width}); a rank above it"
            " adds nothing (and a huge one exhausts memory): give at most the width"
        )
    target = config.lora.target_modules
    names = [name for name, _ in model.named_modules() if name]
    leaves = ", ".join(sorted({name.rsplit(".", 1)[-1] for name in names})[:40])
    if isinstance(target, list):  # peft names only the case where no target matches at all
        for wanted in target:
            if not any(name == wanted or name.endswith(f".{wanted}") for name in names):
                raise ConfigError(
                    f"lora.target_modules: the model has no module named {wanted!r}; its module"
                    f" names are {leaves}"
                )
    try:
        apply_lora(config, model)
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(
            f"lora: {first_line(error)}; the model's module names are {leaves}"
        ) from None


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


def prepare_run(config: Config, examples: list[Any] | None = None) -> Prepared:
    """Every check that needs no training (data, digit tokens, rendering, TrainingArguments,
    model structure), what `--dry-run` runs. Raises ConfigError."""
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
    from numloss.checks import ArgumentError
    from numloss.hf import check_training_arguments, check_training_data

    try:  # what NumericTrainer checks, before any weights load
        check_training_arguments(args, "train.")
        check_training_data(args, dataset)
    except ArgumentError as error:
        raise ConfigError(
            str(error) if str(error).startswith("train.") else f"train: {error}"
        ) from None
    check_model_structure(config, tokenizer)
    return Prepared(config, examples, tokenizer, vocab, dataset, args)
