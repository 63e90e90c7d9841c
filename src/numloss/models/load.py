"""One way to get (model, tokenizer) for any `model.name`: 'tiny', 'smollm2', a local folder or a
Hugging Face hub id (offline, only one in the local cache; `check_model_available` says so).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from numloss.models import smollm2, tiny

BUILTIN = ("tiny", "smollm2")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


class ModelUnavailableError(RuntimeError):
    """The model cannot be found (offline and not cached, or no such folder)."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false") or os.environ.get(
        "TRANSFORMERS_OFFLINE", "0"
    ) not in ("", "0", "false")


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()


def _hub_cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def model_not_found(name: str, revision: str | None = None) -> ModelUnavailableError:
    """The one-line error (the same in train, eval and compare) for a `model.name` that is not
    built in, a local folder or an available hub id, naming every place looked in."""
    folder = Path(name).expanduser()
    where = "" if revision is None else f" at revision {revision!r}"
    looked = [
        f"a local folder {str(folder)!r} ({'exists but has no config.json' if folder.is_dir() else 'no such folder'})",
        f"the Hugging Face cache {_hub_cache()!r} (not there{where})",
    ]
    if _offline():
        looked.append("the hub (not asked: HF_HUB_OFFLINE=1)")
        fix = (
            f"download it once where the hub is reachable (`huggingface-cli download {name}`, or unset "
            "HF_HUB_OFFLINE for one run), pass a folder written by save_pretrained, or use tiny / smollm2 "
            "(`numloss models prepare smollm2`)"
        )
    else:
        looked.append("the hub (no such model, or not reachable)")
        fix = "check the spelling, or pass a folder written by save_pretrained, or use tiny / smollm2"
    return ModelUnavailableError(f"model {name!r} not found: looked for {'; '.join(looked)}. Fix: {fix}")


def check_model_available(name: str, revision: str | None = None, cache_dir: str | None = None) -> None:
    """Raise ModelUnavailableError now when `name` cannot be loaded: 'smollm2' needs its package
    or a prepared folder, a path a config.json, an offline hub id the local cache."""
    if name == "tiny":
        return
    if name == "smollm2":
        if not smollm2.is_prepared(cache_dir):
            try:
                smollm2.gguf_path()
            except smollm2.ModelNotPreparedError as error:
                raise ModelUnavailableError(str(error)) from None
        return
    if not name.strip():
        raise ModelUnavailableError("model.name is empty: give 'tiny', 'smollm2', a hub id or a local folder")
    folder = Path(name).expanduser()
    if folder.is_dir() and (folder / "config.json").is_file():
        return
    if _looks_like_path(name) or folder.exists():
        raise model_not_found(name, revision)
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(name, "config.json", revision=revision)
        except ValueError:  # not a valid repo id (spaces, too many slashes, ...)
            cached = None
        if not isinstance(cached, str):
            raise model_not_found(name, revision)


def load_tokenizer(
    name: str,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
    tiny_options: dict[str, Any] | None = None,
) -> Any:
    """The tokenizer `load_model_and_tokenizer` returns for the same arguments (padding included),
    without weights, for the checks that run first."""
    if name == "tiny":
        options = dict(tiny_options or {})
        tokenizer_options = {"digits_per_token": options["digits_per_token"]} if "digits_per_token" in options else {}
        return tiny.build_char_tokenizer(**tokenizer_options)
    check_model_available(name, revision, cache_dir)
    from transformers import AutoTokenizer

    source = str(smollm2.prepare(cache_dir)) if name == "smollm2" else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    except OSError:
        raise model_not_found(name, revision) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def load_model_and_tokenizer(
    name: str,
    *,
    revision: str | None = None,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    tiny_options: dict[str, int] | None = None,
    cache_dir: str | None = None,
    seed: int = 0,
) -> tuple[Any, Any]:
    """(causal LM, tokenizer with a pad token) for `name`: 'tiny' built with seeded random
    weights, 'smollm2' converted on first use, anything else `from_pretrained`."""
    if name == "tiny":
        options = dict(tiny_options or {})
        tokenizer = tiny.build_char_tokenizer(digits_per_token=options.pop("digits_per_token", 1))
        model = tiny.build_tiny_model(tokenizer, seed=seed, **options)
        if dtype not in ("float32", "auto"):
            model = model.to(_DTYPES[dtype])
        return model, tokenizer
    check_model_available(name, revision, cache_dir)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(smollm2.prepare(cache_dir)) if name == "smollm2" else name
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype], **kwargs)
    except OSError as error:  # transformers' many lines (hub unreachable, no weights file) as one
        raise _unavailable(name, error) from None
    if tokenizer.pad_token_id is None:
        # the collator masks padding out of the labels, so reusing EOS for padding is harmless
        tokenizer.pad_token = tokenizer.eos_token
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    tokenizer.padding_side = "right"
    return model, tokenizer


def _unavailable(name: str, error: OSError) -> ModelUnavailableError:
    """One line for transformers' many-line OSError: `model_not_found`'s message (the same as
    train's and compare's) with the first line of why the hub did not have it."""
    why = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    if Path(name).expanduser().is_dir():
        return ModelUnavailableError(f"model folder {name!r} cannot be loaded: {why}")
    return ModelUnavailableError(f"{model_not_found(name)} (the hub said: {why})")


def model_folder(name: str) -> Path | None:
    """The folder `numloss.models.load` reads for the model name `name` (smollm2 converted first if
    it is not yet), or None ('tiny', built in memory; a hub id not in the cache)."""
    if name == "tiny":
        return None
    if name == "smollm2":
        check_model_available(name)
        return smollm2.prepare()  # converted once; what loading would do next anyway
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a valid repo id
        return None
    return Path(cached).parent if isinstance(cached, str) else None
