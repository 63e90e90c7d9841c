"""Liger-style model patching: `model(**batch, labels=labels)` returns the numloss loss.

    numloss.patch(model, build_loss("del", vocab), fused=True)
    loss = model(**batch).loss          # batch holds input_ids, attention_mask, labels
    numloss.unpatch(model)

The patch replaces the `forward` of that one model instance (inside peft or DDP wrappers) and
keeps its signature. With labels, the patched forward shifts them, reads the step counts
`num_items_in_batch` and `num_digits_in_batch` from its kwargs, and with `fused=True` computes
the loss *as the LM head's forward* (`NumericLoss.from_hidden`): the [B, T, V] logits never
exist, and every wrapper that gathers parameters per module (FSDP1/2, DeepSpeed ZeRO-3, peft)
has the head's weight whole when it is read. It refuses what it cannot make exact: a digit mean
without the step's digit count, `logits_to_keep`, encoder-decoders, context or sequence
parallelism, and (fused) a head whose output the model transforms. `patched` is the same for a
`with` block; `NumericTrainer(fused=True)` computes its loss through it.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from numloss.checks import ArgumentTypeError, check_bool, check_type
from numloss.heads import model_logits, output_head, patch_target
from numloss.losses.base import NumericLoss, check_objective
from numloss.step_counts import (
    accelerate_sequence_split,
    needs_step_digit_count,
    refuse_split_sequences,
    step_digits_refusal,
)

_STATE = "_numloss_patch"


@dataclass
class PatchState:
    """What a patched model remembers: the objective, the mode, and the forward it replaced."""

    loss_fn: NumericLoss
    fused: bool
    #: the instance-level forward that was there before, or None
    previous_forward: Any = None
    #: fused only: on_hidden(hidden, head, aligned_labels), run while the head's weight is gathered
    on_hidden: Callable[[torch.Tensor, nn.Module, torch.Tensor], None] | None = None
    #: the `NumericLossOutput` of the latest call with labels
    last: Any = None


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
    state: PatchState = getattr(self, _STATE)
    forward = _original_forward(self, state)
    if labels is None and shift_labels is None:
        return forward(*args, **kwargs)
    loss_fn = state.loss_fn
    refuse_split_sequences("numloss.patch", *accelerate_sequence_split())
    if kwargs.get("logits_to_keep") not in (None, 0):
        raise ValueError(
            "numloss.patch: logits_to_keep keeps the logits of the last positions only, but the"
            " loss needs every position; drop logits_to_keep when passing labels"
        )
    if kwargs.get("return_dict") is False:
        raise ValueError(
            "numloss.patch: return_dict=False is not supported with labels; leave return_dict on"
        )
    aligned = shift_labels
    if aligned is None:
        aligned = F.pad(labels[..., 1:], (0, 1), value=loss_fn.ignore_index)
    if needs_step_digit_count(loss_fn, aligned, num_items_in_batch, num_digits_in_batch):
        raise ValueError(step_digits_refusal("numloss.patch", loss_fn, takes_digit_count=True))
    counts = dict(num_items_in_batch=num_items_in_batch, num_digits_in_batch=num_digits_in_batch)
    if state.fused:
        outputs, out = _forward_with_loss_as_head_output(
            self, forward, args, kwargs, state, aligned, counts
        )
    else:
        outputs = forward(*args, **kwargs)
        logits = model_logits(outputs)
        out = loss_fn(logits, aligned.to(logits.device), **counts)
        outputs["loss"] = out.loss
    state.last = out
    # ce, aux, digit_entropy and the counts of this call, for whoever logs them
    outputs.numloss_output = out
    return outputs


def _refuse_a_sharded_head(weight: torch.Tensor) -> None:
    """Refuse a head weight still sharded inside the head's forward (where FSDP and ZeRO-3 have
    gathered it): tensor parallelism, whose fused loss would need a cross-rank softmax."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return
    if isinstance(weight, DTensor) and any(p.is_shard() for p in weight.placements):
        raise NotImplementedError(
            "fused=True: the LM head's weight is still sharded inside its forward"
            f" ({weight.placements}, local {tuple(weight.to_local().shape)} of"
            f" {tuple(weight.shape)}): that is tensor parallelism, which the fused loss does not"
            " support; use fused=False (the head's logits are gathered then)"
        )


def _forward_with_loss_as_head_output(
    model, forward, args, kwargs, state: PatchState, aligned, counts
):
    """Run `forward` with the LM head computing the fused loss in place of its logits; returns
    (outputs with that loss and empty logits, the `NumericLossOutput`). The loss is the tensor the
    model returned, so what wrappers attached on the way (ZeRO-3's gather) is on its path."""
    head = output_head(model)
    calls: list[tuple[torch.Tensor, Any]] = []

    def loss_from_hidden(hidden: torch.Tensor, *rest: Any, **options: Any) -> torch.Tensor:
        labels = aligned.to(hidden.device)
        _refuse_a_sharded_head(head.weight)
        out = state.loss_fn.from_hidden(
            hidden, head.weight, labels, lm_head_bias=head.bias, **counts
        )
        if state.on_hidden is not None:
            state.on_hidden(hidden, head, labels)
        calls.append((hidden, out))
        return out.loss

    own_forward = vars(head).get("forward")
    head.forward = loss_from_hidden
    try:
        outputs = forward(*args, **kwargs)
    finally:
        if own_forward is None:
            del head.forward
        else:
            head.forward = own_forward
    if len(calls) != 1:
        raise RuntimeError(
            f"numloss.patch: the LM head ran {len(calls)} times in one forward (expected once):"
            " this model architecture is not supported by the fused path; use fused=False"
        )
    hidden, out = calls[0]
    loss = model_logits(outputs)
    if loss.dim() != 0 or not torch.equal(loss.detach(), out.loss.detach()):
        raise ValueError(
            f"numloss.patch: {type(model).__name__} transforms its LM head's output (a logit scale"
            " or soft-cap?), which the fused loss would not see; use fused=False"
        )
    outputs["loss"] = loss
    outputs["logits"] = hidden.new_zeros((*hidden.shape[:-2], 0, head.weight.shape[0]))
    return outputs, out


def _check_arguments(model: Any, fused: Any) -> None:
    """One line for a `model` that is not a module instance (None, the class itself) or a `fused`
    that is not a bool (the string "false" is true in Python)."""
    check_bool("numloss.patch: fused", fused)
    if isinstance(model, type):
        raise ArgumentTypeError(
            f"numloss.patch: model is the class {model.__name__}, not a model: pass an instance "
            f"({model.__name__}.from_pretrained(...))"
        )
    check_type(
        "numloss.patch: model",
        model,
        nn.Module,
        "a model instance (an nn.Module, e.g. AutoModelForCausalLM.from_pretrained(...))",
    )


def patch(model: nn.Module, loss_fn: NumericLoss, fused: bool = False) -> nn.Module:
    """Make `model(..., labels=labels)` return `loss_fn`'s loss (in place; returns `model`);
    `fused=True` never builds the whole logits. Patching again replaces the objective."""
    _check_arguments(model, fused)
    check_objective(loss_fn)
    target = patch_target(model)
    if not callable(getattr(target, "get_output_embeddings", None)):
        raise TypeError(
            f"numloss.patch: {type(target).__name__} is not a causal language model (it has no"
            " get_output_embeddings); patch a transformers AutoModelForCausalLM (or a peft model"
            " of one)"
        )
    config = getattr(target, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(
            f"numloss.patch: {type(target).__name__} is an encoder-decoder model; the numloss"
            " objectives are for causal LMs (labels shifted by one)"
        )
    if fused:
        output_head(target)  # raises now for a head the fused path cannot apply itself
    weight = getattr(target.get_output_embeddings(), "weight", None)
    # a sharded weight (ZeRO-3, FSDP1) is checked in the loss
    if weight is not None and weight.dim() == 2:
        loss_fn.vocab.check_width(weight.shape[0])
    state = getattr(target, _STATE, None)
    previous = state.previous_forward if state is not None else vars(target).get("forward")
    parameter = next(target.parameters(), None)
    if parameter is not None:
        loss_fn = loss_fn.to(parameter.device)
    setattr(target, _STATE, PatchState(loss_fn=loss_fn, fused=fused, previous_forward=previous))
    wrapped = functools.wraps(type(target).forward)(_numeric_forward)
    target.forward = types.MethodType(wrapped, target)
    return model


@contextlib.contextmanager
def patched(
    model: nn.Module,
    loss_fn: NumericLoss,
    fused: bool = False,
    on_hidden: Callable[[torch.Tensor, nn.Module, torch.Tensor], None] | None = None,
) -> Iterator[PatchState]:
    """`patch(model, loss_fn, fused)` for the block, yielding the `PatchState`; whatever was there
    before (a user's patch included) is restored on exit."""
    _check_arguments(model, fused)
    target = patch_target(model)
    saved = {key: vars(target)[key] for key in (_STATE, "forward") if key in vars(target)}
    patch(target, loss_fn, fused=fused)
    state: PatchState = getattr(target, _STATE)
    state.on_hidden = on_hidden
    try:
        yield state
    finally:
        for key in (_STATE, "forward"):
            if key in saved:
                setattr(target, key, saved[key])
            elif key in vars(target):
                delattr(target, key)


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


__all__ = ["patch", "unpatch", "patched", "is_patched", "patch_target", "PatchState"]
