"""DEL's arithmetic on the ten digit logits: what the sigmoid reads, the per-digit term, and
where the term alone pushes the target digit down. Imports nothing of numloss, so the base of
every objective (its `pushdown` diagnostic) and DEL's module both build on it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DISTANCES = (None, "l1")
SIGMOID_INPUTS = ("raw", "centered")
#: "attached": p = softmax(z) carries gradient, as in the released code (train-qwen-deepseek.py
#: L572, `bce_loss * probs_digit`); "detached": p is a constant weight, so only the BCE moves z
P_WEIGHTS = ("attached", "detached")


def sigmoid_logits(
    z: torch.Tensor, sigmoid_input: str = "raw", support: torch.Tensor | None = None
) -> torch.Tensor:
    """What DEL's sigmoid reads [M, 10]: the digit logits z as they are ("raw"), or minus their
    mean over the digits each slot can hold (`support` [M, 10], None: all ten) ("centered")."""
    if sigmoid_input == "raw":
        return z
    if support is None:
        return z - z.mean(dim=-1, keepdim=True)
    held = support.to(z.dtype)
    # absent digits (probability exactly 0) would drag a plain mean by ~1e4 each; they are left out
    mean = (z * held).sum(-1, keepdim=True) / held.sum(-1, keepdim=True)
    return z - mean


def class_weights(y: torch.Tensor, distance: str | None, dtype: torch.dtype) -> torch.Tensor:
    """The per-class factor of `distance` [M, 10]: (1 + |k - y|) for "l1", else all 1."""
    distances = (torch.arange(10, device=y.device)[None, :] - y[:, None]).abs()
    return (1.0 + distances if distance == "l1" else torch.ones_like(distances)).to(dtype)


def del_term(
    z: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    distance: str | None = None,
    sigmoid_input: str = "raw",
    support: torch.Tensor | None = None,
    p_weights: str = "attached",
) -> torch.Tensor:
    """DEL's per-digit term [M] from digit logits z [M, 10], targets y [M] and place weights u [M].

    term = u / 10 * sum_k p_k * w_k * BCE(sigmoid(s_k), [k == y]) with p = softmax(z), s =
    `sigmoid_logits(z, sigmoid_input, support)` and w the `distance` factor (1 by default).
    `p_weights="detached"` gives the same value with p held constant in the gradient."""
    onehot = F.one_hot(y, 10).to(z.dtype)
    bce = F.binary_cross_entropy_with_logits(
        sigmoid_logits(z, sigmoid_input, support), onehot, reduction="none"
    )
    p = torch.softmax(z, dim=-1)
    p = p.detach() if p_weights == "detached" else p
    criterion = p * bce * class_weights(y, distance, z.dtype)
    return u.to(z.dtype) * criterion.mean(dim=-1)


@torch.no_grad()
def del_pushdown(
    z: torch.Tensor,
    y: torch.Tensor,
    distance: str | None = None,
    sigmoid_input: str = "raw",
    support: torch.Tensor | None = None,
    p_weights: str = "attached",
) -> torch.Tensor:
    """Where DEL's term alone pushes the target down [M] (bool): along its closed-form gradient g,
    g_y > mean of g over the other digits the slot can hold (the margin z_y - mean z_k falls).
    The place weight, the 1/10 and the centred common part do not change the sign. With
    `p_weights="detached"` only the BCE path is left, w_k p_k (sigmoid(s_k) - [k == y]): negative
    at the target and positive elsewhere, so that form never pushes the target down.
    """
    z = z.double()
    s = sigmoid_logits(z, sigmoid_input, support)
    onehot = F.one_hot(y, 10).to(z.dtype)
    p = torch.softmax(z, dim=-1)
    bce = F.binary_cross_entropy_with_logits(s, onehot, reduction="none")
    weights = class_weights(y, distance, z.dtype)
    grad = weights * p * (torch.sigmoid(s) - onehot)
    if p_weights == "attached":  # the path through p = softmax(z)
        mean_term = (p * weights * bce).sum(-1, keepdim=True)
        grad = grad + p * (weights * bce - mean_term)
    others = (1.0 - onehot) if support is None else (1.0 - onehot) * support.to(z.dtype)
    grad_others = (grad * others).sum(-1) / others.sum(-1).clamp_min(1.0)
    return grad.gather(1, y[:, None]).squeeze(1) > grad_others
