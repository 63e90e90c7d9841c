"""A causal LM's output head and logits, found through its wrappers (DDP, FSDP, DeepSpeed,
torch.compile, peft): what `numloss.hf` and `numloss.patch` both need.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _unwrap_compiled(model: nn.Module, keep_torch_compile: bool = False) -> nn.Module:
    """torch.compile's wrapper unwrapped (what accelerate's helper does first); DDP and other
    `.module` wrappers are unwrapped by `patch_target`'s own rule."""
    inner = vars(model).get("_modules", {}).get("_orig_mod")
    return inner if isinstance(inner, nn.Module) and not keep_torch_compile else model


def patch_target(model: nn.Module) -> nn.Module:
    """The transformers model inside `model`: DDP, FSDP1, DeepSpeed and torch.compile
    unwrapped by class (FSDP1 forwards attribute lookups), then peft; FSDP2 does not wrap."""
    try:
        from accelerate.utils import extract_model_from_parallel
    # the core install: no accelerate, so no accelerate/DeepSpeed wrapper
    except ModuleNotFoundError:
        extract_model_from_parallel = _unwrap_compiled

    target = model
    for _ in range(8):
        target = extract_model_from_parallel(target, keep_torch_compile=False)
        inner = vars(target).get("_modules", {}).get("module")
        if callable(getattr(type(target), "get_base_model", None)):
            target = target.get_base_model()
        elif isinstance(inner, nn.Module) and not hasattr(type(target), "get_output_embeddings"):
            target = inner  # another wrapper that keeps the model as .module
        else:
            break
    return target


def output_head(model: nn.Module) -> nn.Module:
    """The LM-head module of a causal LM (found by unwrapping, never through a wrapper); raises
    when it cannot be applied as ``hidden @ weight.T + bias`` (peft-adapted or not linear)."""
    base = patch_target(model)
    get_head = getattr(base, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is None:
        raise ValueError(
            f"{type(base).__name__} has no output embeddings (get_output_embeddings() is None): the"
            " fused path needs a causal LM with a linear LM head; use fused=False"
        )
    if type(head).__module__.startswith("peft") or not isinstance(head, nn.Linear):
        raise ValueError(
            f"the LM head is a {type(head).__module__}.{type(head).__name__}, not a plain nn.Linear"
            " (LoRA or modules_to_save on lm_head?): the fused path applies the head as hidden @"
            " weight.T + bias itself; leave lm_head out of the adapter or use fused=False"
        )
    config = getattr(base, "config", None)
    if getattr(config, "final_logit_softcapping", None):
        raise ValueError(
            "the model soft-caps its logits (final_logit_softcapping), which the fused path does "
            "not reproduce; use fused=False"
        )
    return head


def model_logits(outputs: Any) -> torch.Tensor:
    """The logits of a model's output: a `ModelOutput` / dict with "logits", a tuple (logits first,
    as `return_dict=False` returns them without labels), or a tensor."""
    if torch.is_tensor(outputs):
        return outputs
    if isinstance(outputs, dict):
        if "logits" not in outputs:
            raise ValueError(
                f"the model output ({type(outputs).__name__}) has no 'logits' (its keys:"
                f" {', '.join(map(str, outputs.keys()))}); the numloss loss needs a causal LM's"
                " logits"
            )
        return outputs["logits"]
    if isinstance(outputs, (tuple, list)) and outputs and torch.is_tensor(outputs[0]):
        return outputs[0]
    raise TypeError(f"cannot find the logits in a model output of type {type(outputs).__name__}")


__all__ = ["patch_target", "output_head", "model_logits"]
