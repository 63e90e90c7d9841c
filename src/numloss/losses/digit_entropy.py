"""DEL, the Digit Entropy Loss (Zheng et al., 2026).

Per digit position with target y, digit logits z (ten columns) and place weight u, p = softmax(z):

    term = u * (1/10) * sum_k p_k * BCE(sigmoid(z_k), [k == y])

p is not detached: the entropy-like weighting is part of the gradient. u is the place weight of
`numloss.digits.place_weights`. The optional `distance="l1"` multiplies each class term by
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


def del_term(z: torch.Tensor, y: torch.Tensor, u: torch.Tensor, distance: str | None = None) -> torch.Tensor:
    """DEL's per-digit term [M] from digit logits z [M, 10], targets y [M] and place weights u [M]."""
    onehot = F.one_hot(y, 10).to(z.dtype)
    bce = F.binary_cross_entropy_with_logits(z, onehot, reduction="none")
    criterion = torch.softmax(z, dim=-1) * bce
    if distance == "l1":
        classes = torch.arange(10, device=z.device)
        criterion = criterion * (1.0 + (classes[None, :] - y[:, None]).abs())
    return u.to(z.dtype) * criterion.mean(dim=-1)


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
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        self.validate_options({"place_weighting": place_weighting, "distance": distance})
        self.place_weighting = place_weighting
        self.distance = distance

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if "place_weighting" in options:
            check_choice(cls.name, "place_weighting", options["place_weighting"], PLACE_WEIGHTINGS)
        if "distance" in options:
            check_choice(cls.name, "distance", options["distance"], DISTANCES)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, place_weighting={self.place_weighting!r}, distance={self.distance!r}"

    def digit_weights(self, digits: DigitPositions) -> torch.Tensor:
        return place_weights(digits.place, self.place_weighting)

    def digit_terms(self, digit_logits, digit_targets, weights, digit_nll):
        return del_term(digit_logits, digit_targets, weights, self.distance)
