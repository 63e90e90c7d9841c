"""One way to get (model, tokenizer) for any `model.name`: 'tiny', 'smollm2', a local folder or a
Hugging Face hub id (offline, only one in the local cache; `check_model_available` says so).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import torch

from numloss.checks import ArgumentError, check_path
from numloss.models import smollm2, tiny
from numloss.textio import read_utf8, utf8_path

BUILTIN = ("tiny", "smollm2")


class ModelUnavailableError(RuntimeError):
    """The model cannot be found (offline and not cached, or no such folder)."""


def _offline() -> bool:
    flags = (os.environ.get(name, "0") for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return any(flag not in ("", "0", "false") for flag in flags)


def _dtype(name: str) -> Any:
    """The torch dtype named `name` ("float32", "bfloat16", ...), or "auto" as it is."""
    return name if name == "auto" else getattr(torch, name)


def model_not_found(name: str, revision: str | None = None) -> ModelUnavailableError:
    """The one-line error (the same in train, eval and compare) for a `model.name` that is not
    built in, a local folder or an available hub id, naming every place looked in."""
    from huggingface_hub import constants

    folder = Path(name).expanduser()
    state = "exists but has no config.json" if folder.is_dir() else "no such folder"
    where = "" if revision is None else f" at revision {revision!r}"
    if _offline():
        hub = "not asked: HF_HUB_OFFLINE=1"
        fix = (
            f"download it once where the hub is reachable (`huggingface-cli download {name}`, or"
            " unset HF_HUB_OFFLINE for one run), pass a folder written by save_pretrained, or use"
            " tiny / smollm2 (`numloss models prepare smollm2`)"
        )
    else:
        hub = "no such model, or not reachable"
        fix = (
            "check the spelling, or pass a folder written by save_pretrained, or use tiny / smollm2"
        )
    return ModelUnavailableError(
        f"model {name!r} not found: looked for a local folder {str(folder)!r} ({state}); the"
        f" Hugging Face cache {str(constants.HF_HUB_CACHE)!r} (not there{where}); the hub ({hub})."
        f" Fix: {fix}"
    )


def check_model_available(
    name: str,
    revision: str | None = None,
    cache_dir: str | None = None,
    trust_remote_code: bool = False,
) -> None:
    """Raise ModelUnavailableError now when `name` cannot be loaded: 'smollm2' needs its package
    or a prepared folder, a path a config.json, an offline hub id the local cache. A local folder is
    read through (`check_model_folder`), so every command refuses a broken one before any work."""
    if name == "tiny":
        return
    if name == "smollm2":
        try:
            if cache_dir is not None:  # a file there would fail the conversion after minutes
                check_path("cache_dir", cache_dir, "new_dir")
            if not smollm2.is_prepared(cache_dir):
                smollm2.gguf_path()
        except (ArgumentError, smollm2.ModelNotPreparedError) as error:
            raise ModelUnavailableError(str(error)) from None
        return
    if not name.strip():
        raise ModelUnavailableError(
            "model.name is empty: give 'tiny', 'smollm2', a hub id or a local folder"
        )
    folder = Path(name).expanduser()
    if folder.is_dir() and (folder / "config.json").is_file():
        check_model_folder(folder, trust_remote_code=trust_remote_code)
        return
    if folder.is_dir() and any(folder.iterdir()):  # not a hub id: a folder short of its config
        held = ", ".join(sorted(p.name for p in folder.iterdir())[:5])
        raise ModelUnavailableError(
            f"{folder} has no config.json (it holds {held}): not a model folder written by"
            " save_pretrained; save the model and its tokenizer there (model.save_pretrained,"
            " tokenizer.save_pretrained) or pass the folder that has them"
        )
    path_like = name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()
    if path_like or (_offline() and _cached_folder(name, revision) is None):
        raise model_not_found(name, revision)


def _cached_folder(name: str, revision: str | None = None) -> Path | None:
    """The folder of hub id `name` in the local Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a valid repo id (spaces, too many slashes, ...)
        return None
    return Path(cached).parent if isinstance(cached, str) else None


#: a folder has a tokenizer when it has one of these
_TOKENIZER_FILES = (
    "tokenizer.json tokenizer_config.json tokenizer.model vocab.json vocab.txt spiece.model"
).split()
#: the JSON files of a model folder that are read as it loads
_JSON_FILES = ["config.json", *_TOKENIZER_FILES[:2], "special_tokens_map.json", "added_tokens.json"]
_JSON_FILES += ["generation_config.json", "model.safetensors.index.json"]
_RESAVE = (
    "save the folder again (model.save_pretrained and tokenizer.save_pretrained) or copy it again"
    " from its source"
)


def check_model_folder(folder: Path, weights: bool = True, trust_remote_code: bool = False) -> None:
    """ModelUnavailableError naming the file, what is wrong and the fix when the model folder
    `folder` cannot load: a JSON file that is not valid JSON, no tokenizer files (a folder of
    weights only), no weights, a safetensors file that is truncated, empty or garbled, or tensors
    whose shapes do not fit config.json. Reads only JSON and safetensors headers (no weights)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise model_not_found(str(folder))
    for path in filter(Path.is_file, (folder / name for name in _JSON_FILES)):
        try:  # not UTF-8 or unreadable: read_utf8's line
            value = json.loads(read_utf8(path, ModelUnavailableError))
        except ValueError as error:
            raise ModelUnavailableError(f"{path} is not valid JSON: {error}; {_RESAVE}") from None
        if not isinstance(value, dict):
            raise ModelUnavailableError(
                f"{path} is not a JSON object (it holds a {type(value).__name__}): {_RESAVE}"
            )
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelUnavailableError(
            f"{folder} has no tokenizer (none of {', '.join(_TOKENIZER_FILES[:3])}): a folder of"
            " weights only; save the tokenizer beside them"
            f" (tokenizer.save_pretrained({str(folder)!r})) or pass the folder that has it"
        )
    if weights:
        # checked once per state of the folder: train checks it up front and again as it loads
        files = [p for p in folder.iterdir() if p.is_file()]
        state = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
        _check_weights(folder.resolve(), trust_remote_code, state)


def _weight_shapes(folder: Path) -> dict[str, tuple[Path, tuple[int, ...]]] | None:
    """{tensor name: (file, shape)} from the safetensors headers of `folder`; None for weights in
    another format (pytorch_model.bin: not checked here). ModelUnavailableError when there are no
    weights or a file's header cannot be read."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelUnavailableError(f"{index} has no weight_map: {_RESAVE}")
        files = sorted({folder / str(name) for name in weight_map.values()})
    elif (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    elif any(folder.glob("pytorch_model*.bin")) or any(folder.glob("*.pt")):
        return None
    else:
        raise ModelUnavailableError(
            f"{folder} has no weights (no model.safetensors, model.safetensors.index.json or"
            f" pytorch_model.bin): save the model there (model.save_pretrained({str(folder)!r})) or"
            " pass the folder that has them"
        )
    shapes: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for path in files:
        if not path.is_file():
            raise ModelUnavailableError(f"{path} is missing (listed in {index.name}): {_RESAVE}")
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():
                    shapes[key] = (path, tuple(handle.get_slice(key).get_shape()))
        except Exception as error:  # noqa: BLE001 - SafetensorError, OSError: the file is damaged
            why = f"{path.stat().st_size} bytes; {_first_line(error)}"
            raise ModelUnavailableError(
                f"{path} is not a readable safetensors file ({why}): it is truncated, empty or"
                f" garbled; {_RESAVE}"
            ) from None
    return shapes


@functools.lru_cache(maxsize=8)
def _check_weights(folder: Path, trust_remote_code: bool, state: tuple) -> None:
    """The safetensors headers of `folder` are readable and their shapes fit config.json (the
    model built on the meta device, no memory)."""
    shapes = _weight_shapes(folder)
    if not shapes:
        return
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - an unknown model_type, remote code: loading says it, in one line too
        return
    for key, tensor in model.state_dict().items():
        if key in shapes and tuple(tensor.shape) != shapes[key][1]:
            path, found = shapes[key]
            raise ModelUnavailableError(
                f"{path} does not fit {folder / 'config.json'}: tensor {key} is {list(found)} in"
                f" the file but {list(tensor.shape)} by config.json; use the config.json saved with"
                " these weights"
            )


def _first_line(error: BaseException) -> str:
    """The first non-blank line of `error`'s message (transformers' run to many), or its type."""
    return next(
        (line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__
    )


def _load_error(name: str, what: str, error: BaseException) -> ModelUnavailableError:
    """One line for anything a from_pretrained raised: transformers' many-line OSError (hub
    unreachable, no weights file) or any other error of a damaged folder."""
    why = _first_line(error)
    if Path(name).expanduser().is_dir():
        return ModelUnavailableError(
            f"the {what} of model folder {name!r} cannot be loaded: {why}; {_RESAVE}"
        )
    return ModelUnavailableError(f"{model_not_found(name)} (the hub said: {why})")


def _source(name: str, cache_dir: str | None) -> str:
    return str(smollm2.prepare(cache_dir)) if name == "smollm2" else name


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
        digits_per_token = (tiny_options or {}).get("digits_per_token", 1)
        return tiny.build_char_tokenizer(digits_per_token=digits_per_token)
    check_model_available(name, revision, cache_dir, trust_remote_code)
    from transformers import AutoTokenizer

    source = _source(name, cache_dir)
    try:
        with utf8_path(source) as readable:  # tokenizers (Rust) takes only UTF-8 names
            tokenizer = AutoTokenizer.from_pretrained(
                readable, revision=revision, trust_remote_code=trust_remote_code
            )
    except Exception as error:  # noqa: BLE001 - any failure of a damaged folder is one line
        raise _load_error(name, "tokenizer", error) from None
    if tokenizer.pad_token_id is None:
        # the collator masks padding out of the labels, so reusing EOS for padding is harmless
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
    tokenizer = load_tokenizer(
        name,
        revision=revision,
        trust_remote_code=trust_remote_code,
        cache_dir=cache_dir,
        tiny_options=tiny_options,
    )
    if name == "tiny":
        options = {k: v for k, v in (tiny_options or {}).items() if k != "digits_per_token"}
        model = tiny.build_tiny_model(tokenizer, seed=seed, **options)
        return (model if dtype in ("float32", "auto") else model.to(_dtype(dtype))), tokenizer
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    source = _source(name, cache_dir)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=_dtype(dtype), **kwargs)
    except Exception as error:  # noqa: BLE001
        raise _load_error(name, "weights", error) from None
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def model_folder(name: str) -> Path | None:
    """The folder `numloss.models.load` reads for the model name `name` (smollm2 converted first if
    it is not yet), or None ('tiny', built in memory; a hub id not in the cache)."""
    if name == "tiny":
        return None
    if name == "smollm2":
        check_model_available(name)
        return smollm2.prepare()  # converted once; what loading would do next anyway
    folder = Path(name).expanduser()
    return folder if folder.is_dir() else _cached_folder(name)
