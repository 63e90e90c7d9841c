"""Liger-style model patching: `model(**batch, labels=labels)` returns the numloss loss.

    numloss.patch(model, build_loss("del", vocab, normalize="tokens"), fused=True)
    loss = model(**batch).loss          # batch holds input_ids, attention_mask, labels
    numloss.unpatch(model)

Any loop or trainer that calls the model and reads `.loss` then trains with the objective: a
custom loop, accelerate, `transformers.Trainer`, Axolotl-like stacks. The patch replaces the
`forward` of that one model instance (the model under a peft or DDP wrapper), like
Liger-Kernel's instance patching, and keeps its signature, so `generate` and the Trainer's
inspection of loss kwargs are unchanged.

What the patched forward does with `labels` (or pre-shifted `shift_labels`):

* the causal shift on the labels, as `numloss.hf.NumericTrainer` does;
* the step-wide counts from the kwargs transformers already forwards: `num_items_in_batch`
  (the step's token count, which `Trainer` passes to a model that accepts loss kwargs) and,
  where the caller knows it, `num_digits_in_batch`;
* `fused=True`: the LM head is found by unwrapping the model on every call and skipped inside
  the forward; the loss is computed from the final hidden states chunk by chunk
  (`NumericLoss.from_hidden`), so the [B, T, V] logits never exist (the output's `logits` is
  then an empty [B, 0, V] tensor).

A trainer that counts both (like `NumericTrainer`) can run its fused loss through the same
mechanism: patch with `fused=True` and call the model with `labels`, `num_items_in_batch` and
`num_digits_in_batch`; the loss is then computed inside the model's forward.

It refuses what it cannot make exact: a digit objective with `normalize="digits"` given a
step-wide token count but no digit count (use `normalize="tokens"` or pass
`num_digits_in_batch`), `logits_to_keep`, encoder-decoder models. Without labels the original
forward runs untouched.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from numloss.losses.base import NumericLoss

# numloss.hf (and with it transformers.Trainer) is imported on first use: `import numloss` stays light.

_STATE = "_numloss_patch"


@dataclass
class PatchState:
    """What a patched model remembers: the objective, the mode, and the forward it replaced."""

    loss_fn: NumericLoss
    fused: bool
    #: the instance-level forward that was there before (e.g. TRL's fused-head forward), or None
    previous_forward: Any = None


def patch_target(model: nn.Module) -> nn.Module:
    """The transformers model inside `model`: through DDP/accelerate (`.module`) and peft wrappers."""
    target = model
    for _ in range(8):
        if hasattr(target, "get_base_model") and callable(target.get_base_model):
            target = target.get_base_model()
        elif isinstance(getattr(target, "module", None), nn.Module) and not hasattr(target, "get_output_embeddings"):
            target = target.module
        else:
            break
    return target


def is_patched(model: nn.Module) -> bool:
    """True when `patch` has been applied to `model` (or the model inside its wrappers)."""
    return hasattr(patch_target(model), _STATE)


def _original_forward(module: nn.Module, state: PatchState):
    """The forward to run underneath, bound to `module` (a deep copy rebinds to the copy)."""
    previous = state.previous_forward
    if previous is None:
        return functools.partial(type(module).forward, module)
    if isinstance(previous, types.MethodType):
        return types.MethodType(previous.__func__, module)
    return previous


def _numeric_forward(
    self: nn.Module,
    *args: Any,
    labels: torch.Tensor | None = None,
    shift_labels: torch.Tensor | None = None,
    num_items_in_batch: torch.Tensor | int | None = None,
    num_digits_in_batch: torch.Tensor | int | None = None,
    **kwargs: Any,
):
    from numloss.hf import (
        STEP_DIGITS_REFUSAL,
        hidden_states_without_logits,
        model_logits,
        needs_step_digit_count,
    )

    state: PatchState = getattr(self, _STATE)
    forward = _original_forward(self, state)
    if labels is None and shift_labels is None:
        return forward(*args, **kwargs)
    loss_fn = state.loss_fn
    if kwargs.get("logits_to_keep") not in (None, 0):
        raise ValueError(
            "numloss.patch: logits_to_keep keeps the logits of the last positions only, but the loss "
            "needs every position; drop logits_to_keep when passing labels"
        )
    if kwargs.get("return_dict") is False:
        raise ValueError("numloss.patch: return_dict=False is not supported with labels; leave return_dict on")
    aligned = shift_labels if shift_labels is not None else F.pad(labels[..., 1:], (0, 1), value=loss_fn.ignore_index)
    if needs_step_digit_count(loss_fn, aligned, num_items_in_batch, num_digits_in_batch):
        raise ValueError(STEP_DIGITS_REFUSAL.format(where="numloss.patch", name=loss_fn.name))
    counts = dict(num_items_in_batch=num_items_in_batch, num_digits_in_batch=num_digits_in_batch)
    if state.fused:
        hidden, head, outputs = hidden_states_without_logits(functools.partial(forward, *args), kwargs, head_of=self)
        out = loss_fn.from_hidden(hidden, head.weight, aligned.to(hidden.device), lm_head_bias=head.bias, **counts)
    else:
        outputs = forward(*args, **kwargs)
        logits = model_logits(outputs)
        out = loss_fn(logits, aligned.to(logits.device), **counts)
    outputs["loss"] = out.loss
    # ce, aux, digit_entropy and the counts of this call, for whoever logs them
    outputs.numloss_output = out
    return outputs


def patch(model: nn.Module, loss_fn: NumericLoss, fused: bool = False) -> nn.Module:
    """Make `model(..., labels=labels)` return `loss_fn`'s loss; returns `model` (patched in place).

    `fused=True` computes the loss from the final hidden states and the LM-head weight in chunks
    (never the whole logits). Patching a patched model replaces the objective. See the module
    docstring for the counts it reads and what it refuses.
    """
    if not isinstance(loss_fn, NumericLoss):
        raise TypeError(
            f"loss_fn must be a numloss objective (numloss.build_loss(name, vocab)), got {type(loss_fn).__name__}"
        )
    from numloss.hf import output_head

    target = patch_target(model)
    config = getattr(target, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"numloss.patch: {type(target).__name__} is an encoder-decoder model; the numloss objectives "
            "are for causal LMs (labels shifted by one)"
        )
    if fused:
        output_head(target)  # raises now for a head the fused path cannot apply itself
    else:
        get_head = getattr(target, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        weight = getattr(head, "weight", None)
        if weight is not None:
            loss_fn.vocab.check_width(weight.shape[0])
    previous = getattr(target, _STATE).previous_forward if hasattr(target, _STATE) else vars(target).get("forward")
    try:
        device = next(target.parameters()).device
        loss_fn = loss_fn.to(device)
    except StopIteration:
        pass
    setattr(target, _STATE, PatchState(loss_fn=loss_fn, fused=bool(fused), previous_forward=previous))
    wrapped = functools.wraps(type(target).forward)(_numeric_forward)
    target.forward = types.MethodType(wrapped, target)
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo `patch`: the model's own forward (or the one that was there before) again."""
    target = patch_target(model)
    if not hasattr(target, _STATE):
        raise ValueError(f"numloss.unpatch: {type(target).__name__} is not patched")
    state: PatchState = getattr(target, _STATE)
    delattr(target, _STATE)
    if state.previous_forward is None:
        del target.forward
    else:
        target.forward = state.previous_forward
    return model


__all__ = ["patch", "unpatch", "is_patched", "patch_target", "PatchState"]
