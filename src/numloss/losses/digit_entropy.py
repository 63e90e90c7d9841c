"""DEL, the Digit Entropy Loss (Zheng et al., 2026).

Per digit position with target y, digit logits z (ten columns) and place weight u, p = softmax(z):

    term = u * (1/10) * sum_k p_k * BCE(sigmoid(z_k), [k == y])

p is not detached: the entropy-like weighting is part of the gradient. u is the place weight of
`numloss.digits.place_weights`.

`sigmoid_input` says what the sigmoid reads. "raw" (the default, the released code) feeds it the
raw digit logits z_k. softmax ignores a shift of all logits by one constant, the sigmoid does
not: on a pretrained head whose digit logits sit near +30, every wrong digit's BCE is about z_k,
and the term's gradient lowers all logits together (CE cannot resist a shift of the whole
vocabulary). Below zero the target's own BCE exceeds the p-weighted mean, and the term then
pushes the target down relative to the other digits (docs/losses.md, "When DEL works against
CE"). "centered" feeds it z_k - mean_j z_j over the digits the slot can hold (all ten for
single-digit tokens and complete multi-digit groups): the term is then invariant to any common
shift of the logits, p is unchanged, and at zero-mean digit logits it equals "raw" in value. The optional `distance="l1"` multiplies each class term by
(1 + |k - y|), the criterion-distance form the paper argues against; the paper's exact ablation
form is not public, so this is our reading of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from numloss.digits import (
    PLACE_WEIGHTINGS,
    DigitPositions,
    DigitVocab,
    PlaceWeighting,
    place_weights,
)
from numloss.losses.base import DigitLoss, check_choice

DISTANCES = (None, "l1")
SIGMOID_INPUTS = ("raw", "centered")


def sigmoid_logits(z: torch.Tensor, sigmoid_input: str = "raw", support: torch.Tensor | None = None) -> torch.Tensor:
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


def class_weights(y: torch.Tensor, distance: str | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The per-class factor of `distance` [M, 10] ((1 + |k - y|) for "l1"), or None (all 1)."""
    if distance != "l1":
        return None
    classes = torch.arange(10, device=y.device)
    return (1.0 + (classes[None, :] - y[:, None]).abs()).to(dtype)


def del_term(
    z: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    distance: str | None = None,
    sigmoid_input: str = "raw",
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """DEL's per-digit term [M] from digit logits z [M, 10], targets y [M] and place weights u [M].

    term = u / 10 * sum_k p_k * w_k * BCE(sigmoid(s_k), [k == y]) with p = softmax(z), s =
    `sigmoid_logits(z, sigmoid_input, support)` and w the `distance` factor (1 by default)."""
    onehot = F.one_hot(y, 10).to(z.dtype)
    bce = F.binary_cross_entropy_with_logits(sigmoid_logits(z, sigmoid_input, support), onehot, reduction="none")
    criterion = torch.softmax(z, dim=-1) * bce
    weights = class_weights(y, distance, z.dtype)
    if weights is not None:
        criterion = criterion * weights
    return u.to(z.dtype) * criterion.mean(dim=-1)


@torch.no_grad()
def del_pushdown(
    z: torch.Tensor,
    y: torch.Tensor,
    distance: str | None = None,
    sigmoid_input: str = "raw",
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """Where DEL's term alone pushes the target down [M] (bool): descent along its gradient g
    (with respect to z) lowers the margin z_y - mean_{k != y} z_k, i.e. g_y > mean_{k != y} g_k
    over the other digits the slot can hold.

    g is written out, not taken by autograd (the term's [M, 10] in closed form):
    g_j = p_j (w_j b_j - L) + w_j p_j (sigmoid(s_j) - [j == y]) (+ a part common to all j when
    centered, which the margin does not see), with b the BCE, L = sum_k p_k w_k b_k; the place
    weight and the 1/10 are positive factors and drop out of the sign.
    """
    z = z.double()
    s = sigmoid_logits(z, sigmoid_input, support)
    onehot = F.one_hot(y, 10).to(z.dtype)
    p = torch.softmax(z, dim=-1)
    bce = F.binary_cross_entropy_with_logits(s, onehot, reduction="none")
    weights = class_weights(y, distance, z.dtype)
    weights = torch.ones_like(z) if weights is None else weights
    mean_term = (p * weights * bce).sum(-1, keepdim=True)
    grad = p * (weights * bce - mean_term) + weights * p * (torch.sigmoid(s) - onehot)
    others = (1.0 - onehot) if support is None else (1.0 - onehot) * support.to(z.dtype)
    grad_others = (grad * others).sum(-1) / others.sum(-1).clamp_min(1.0)
    return grad.gather(1, y[:, None]).squeeze(1) > grad_others


class DigitEntropyLoss(DigitLoss):
    """DEL: cross-entropy plus alpha x the place-weighted, probability-weighted digit BCE."""

    name = "del"
    default_alpha = 1.0

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        place_weighting: PlaceWeighting = "official",
        distance: str | None = None,
        sigmoid_input: str = "raw",
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        self.validate_options({"place_weighting": place_weighting, "distance": distance, "sigmoid_input": sigmoid_input})
        self.place_weighting = place_weighting
        self.distance = distance
        self.sigmoid_input = sigmoid_input

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if "place_weighting" in options:
            check_choice(cls.name, "place_weighting", options["place_weighting"], PLACE_WEIGHTINGS)
        if "distance" in options:
            check_choice(cls.name, "distance", options["distance"], DISTANCES)
        if "sigmoid_input" in options:
            check_choice(cls.name, "sigmoid_input", options["sigmoid_input"], SIGMOID_INPUTS)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, place_weighting={self.place_weighting!r}, distance={self.distance!r}, "
            f"sigmoid_input={self.sigmoid_input!r}"
        )

    def digit_weights(self, digits: DigitPositions) -> torch.Tensor:
        return place_weights(digits.place, self.place_weighting)

    def digit_terms(self, digit_logits, digit_targets, weights, digit_nll, support=None):
        return del_term(digit_logits, digit_targets, weights, self.distance, self.sigmoid_input, support)

    def pushdown(self, digit_logits, digit_targets, support=None):
        return del_pushdown(digit_logits, digit_targets, self.distance, self.sigmoid_input, support)
