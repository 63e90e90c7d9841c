"""DEL, the Digit Entropy Loss (Zheng et al., 2026).

Per digit position with target y and digit logits z (ten columns), p = softmax(z):

    term = u(place) * (1/10) * sum_k p_k * BCE(sigmoid(z_k), [k == y])

p is not detached: the entropy-like weighting is part of the gradient. u is the place weight of
`numloss.digits.place_weights`. The optional `distance="l1"` multiplies each class term by
(1 + |k - y|), the criterion-distance form the paper argues against; the paper's exact ablation
form is not public, so this is our reading of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from numloss.digits import PLACE_WEIGHTINGS, DigitVocab, PlaceWeighting, place_weights
from numloss.losses.base import NumericLoss

DISTANCES = (None, "l1")


class DigitEntropyLoss(NumericLoss):
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
        if place_weighting not in PLACE_WEIGHTINGS:
            raise ValueError(f"place_weighting must be one of {PLACE_WEIGHTINGS}, got {place_weighting!r}")
        if distance not in DISTANCES:
            raise ValueError(f"distance must be None or 'l1', got {distance!r}")
        self.place_weighting = place_weighting
        self.distance = distance

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, place_weighting={self.place_weighting!r}, distance={self.distance!r}"

    def digit_terms(self, digit_logits, digit_targets, places, support=None):
        onehot = F.one_hot(digit_targets, 10).to(digit_logits.dtype)
        bce = F.binary_cross_entropy_with_logits(digit_logits, onehot, reduction="none")
        criterion = torch.softmax(digit_logits, dim=-1) * bce
        if self.distance == "l1":
            classes = torch.arange(10, device=digit_logits.device)
            criterion = criterion * (1.0 + (classes[None, :] - digit_targets[:, None]).abs())
        return place_weights(places, self.place_weighting) * criterion.mean(dim=-1)
