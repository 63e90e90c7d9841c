"""DIST2Loss: KL from a discretised Gaussian around the target digit to the digit distribution.

q = softmax(-(k - y)^2 / tau) over k = 0..9, p = softmax of the ten digit logits;
term = KL(q || p) = sum_k q_k (log q_k - log p_k). With `place_weight=True` integer digits are
weighted by (i + 1) (units 1, tens 2, ...); decimal digits keep weight 1. On a digit slot of a
multi-digit token that cannot hold every digit (irregular BPE merges), q is restricted to the
digits it can hold (p is 0 elsewhere, and KL to a zero would be infinite).
"""

from __future__ import annotations

import torch

from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss


class Dist2Loss(NumericLoss):
    """DIST2: soft-label KL on the digit distribution."""

    name = "dist2"
    default_alpha = 0.1

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        tau: float = 1.0,
        place_weight: bool = False,
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        if not tau > 0:
            raise ValueError(f"tau must be positive, got {tau}")
        self.tau = float(tau)
        self.place_weight = bool(place_weight)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, tau={self.tau}, place_weight={self.place_weight}"

    def digit_terms(self, digit_logits, digit_targets, places, support=None):
        values = torch.arange(10, dtype=digit_logits.dtype, device=digit_logits.device)
        soft = -((values[None, :] - digit_targets[:, None]) ** 2) / self.tau
        if support is not None and not bool(support.all()):
            soft = soft.masked_fill(~support, float("-inf"))
        log_q = torch.log_softmax(soft, dim=-1)
        log_p = torch.log_softmax(digit_logits, dim=-1)
        q = log_q.exp()
        # q = 0 outside the support: those entries contribute 0 (not 0 * -inf)
        terms = torch.where(q > 0, q * (log_q - log_p), torch.zeros_like(q)).sum(dim=-1)
        if self.place_weight:
            terms = terms * torch.where(places >= 0, places + 1, torch.ones_like(places)).to(terms.dtype)
        return terms
