"""Models: the tiny char-level Llama, the offline SmolLM2 conversion, and loading by name.

The names below load on first use (PEP 562), so `numloss.models.smollm2` and `numloss models
--help` do not import transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the submodule that defines it
_HOME = {
    "BUILTIN": "load",
    "ModelUnavailableError": "load",
    "check_model_available": "load",
    "load_model_and_tokenizer": "load",
    "load_tokenizer": "load",
    "model_not_found": "load",
    "build_char_tokenizer": "tiny",
    "build_tiny_model": "tiny",
}

__all__ = list(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'numloss.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"numloss.models.{_HOME[name]}"), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
