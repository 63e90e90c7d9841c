"""DEL, the Digit Entropy Loss (Zheng et al., 2026).

Per digit slot with target y, digit logits z, place weight u and p = softmax(z) (not detached):

    term = u * (1/10) * sum_k p_k * BCE(sigmoid(z_k), [k == y])

`sigmoid_input="raw"` (default, the released code) feeds the sigmoid the raw logits, which a
shift of all logits moves: on a head whose digit logits sit near +30 the term lowers them all,
and below zero it pushes the target down (docs/losses.md, "When DEL works against CE").
"centered" feeds z_k - mean_j z_j over the digits the slot can hold: shift-invariant, and equal
to "raw" at zero-mean logits. `p_weights="detached"` holds p constant in the gradient (same
value; the released code lets the gradient flow through p, which raises the logits of the least
likely wrong digits). `distance="l1"` multiplies each class term by (1 + |k - y|), our
reading of the paper's criterion-distance ablation.
"""

from __future__ import annotations

import torch

from numloss.digits import PLACE_WEIGHTINGS, DigitPositions, DigitVocab, place_weights
from numloss.losses.base import DigitLoss
from numloss.losses.del_terms import DISTANCES, P_WEIGHTS, SIGMOID_INPUTS, del_pushdown, del_term


class DigitEntropyLoss(DigitLoss):
    """DEL: cross-entropy plus alpha x the place-weighted, probability-weighted digit BCE."""

    name = "del"
    # On the step's digit mean. The largest value no recorded result calls harmful: raw DEL at 0.3
    # lost 6.4-10.4 points to MLE on a pretrained model while 0.03 was not told apart from it, and
    # no recorded run shows DEL helping (docs/losses.md, "The default alpha"). The released recipe's
    # weight is alpha=1.28.
    default_alpha = 0.03

    choices = {
        "place_weighting": PLACE_WEIGHTINGS,
        "distance": DISTANCES,
        "sigmoid_input": SIGMOID_INPUTS,
        "p_weights": P_WEIGHTS,
    }

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        place_weighting: str = "official",
        distance: str | None = None,
        sigmoid_input: str = "raw",
        p_weights: str = "attached",
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        # each assignment is checked (NumericLoss.__setattr__)
        self.place_weighting = place_weighting
        self.distance = distance
        self.sigmoid_input = sigmoid_input
        self.p_weights = p_weights

    def digit_weights(self, digits: DigitPositions) -> torch.Tensor:
        return place_weights(digits.place, self.place_weighting)

    # z: the slots' digit logits [K, 10], y: their targets [K] (NumericLoss.digit_terms)
    def digit_terms(self, z, y, weights, digit_nll, support=None):
        return del_term(z, y, weights, self.distance, self.sigmoid_input, support, self.p_weights)

    def pushdown(self, z, y, support=None):
        return del_pushdown(z, y, self.distance, self.sigmoid_input, support, self.p_weights)
