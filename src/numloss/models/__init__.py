"""Models: the tiny char-level Llama, the offline SmolLM2 conversion, and loading by name."""

from numloss.models.load import (
    BUILTIN,
    ModelUnavailableError,
    check_model_available,
    load_model_and_tokenizer,
    load_tokenizer,
    model_not_found,
)
from numloss.models.tiny import build_char_tokenizer, build_tiny_model

__all__ = [
    "BUILTIN",
    "ModelUnavailableError",
    "check_model_available",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "model_not_found",
    "build_char_tokenizer",
    "build_tiny_model",
]
