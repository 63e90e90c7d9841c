"""Models: the tiny char-level Llama, the offline SmolLM2 conversion, and loading by name.

The names below load on first use (PEP 562), so `numloss.models.smollm2` and `numloss models
--help` do not import transformers.
"""

from __future__ import annotations

from numloss.extras import load_on_first_use

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

__getattr__, __dir__ = load_on_first_use(__name__, _HOME)
