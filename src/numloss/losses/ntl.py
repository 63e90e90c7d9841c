"""NTL, the Number Token Loss (Zausinger et al., 2025), in its two forms.

With p = softmax of the ten digit logits and target y: ntl-was = sum_k p_k |k - y|, ntl-mse =
(sum_k p_k k - y)^2. `reweigh=True` (ntloss's default, off here): term' = m * term + 1.01 * D *
(1 - m), m the full-vocabulary mass on the digits, D the largest term. Equal to ntloss 0.3.2's
NTLoss / NTLossDotProduct (tested). `level="token"` is ntloss's `digit_level=False`: the
distance between number-token values, one term per number token (no place weight, no reweigh).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from numloss.checks import check_bool
from numloss.digits import DigitVocab
from numloss.losses.base import DigitLoss
from numloss.losses.number_tokens import token_values

LEVELS = ("digit", "token")


def was_distance(p: torch.Tensor, values: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """NTL-WAS [M]: sum_k p_k |v_k - y| for probabilities p [M, C] over values v [C] (the ten
    digits, or every number token at the token level) and targets y [M]."""
    return (p * (values[None, :] - target[:, None].to(values.dtype)).abs()).sum(dim=-1)


def mse_distance(p: torch.Tensor, values: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """NTL-MSE [M]: (sum_k p_k v_k - y)^2."""
    return (p @ values - target.to(values.dtype)) ** 2


def reweighed(
    term: torch.Tensor, z: torch.Tensor, y: torch.Tensor, nll: torch.Tensor, largest: float
) -> torch.Tensor:
    """ntloss's reweighing m * term + 1.01 * largest * (1 - m), with the digit mass
    m = exp(logsumexp(z) - (nll + z_y)) from the digit logits and the target's NLL alone."""
    log_mass = torch.logsumexp(z, dim=-1) - (nll.to(z.dtype) + z.gather(1, y[:, None]).squeeze(1))
    mass = log_mass.exp()
    return mass * term + 1.01 * largest * (1.0 - mass)


class _NumberTokenLoss(DigitLoss):
    default_alpha = 0.3
    largest_term: float = 0.0
    choices = {"level": LEVELS}

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        reweigh: bool = False,
        level: str = "digit",
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        self.reweigh = reweigh  # checked on assignment (NumericLoss.__setattr__)
        self.level = level

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if "reweigh" in options:
            check_bool(f"{cls.name}: reweigh", options["reweigh"])
        if options.get("level") == "token" and options.get("reweigh"):
            raise ValueError(
                f"{cls.name}: reweigh applies to the digit level only; drop it or use level='digit'"
            )

    @property
    def scores_tokens(self) -> bool:
        return self.level == "token"

    def number_terms(self, number_logits, digits):
        table = self.vocab.number_table(number_logits.device)
        return self.distance(*token_values(number_logits, digits, table))

    def digit_terms(self, digit_logits, digit_targets, weights, digit_nll, support=None):
        values = torch.arange(10, dtype=digit_logits.dtype, device=digit_logits.device)
        p = torch.softmax(digit_logits, dim=-1)
        terms = weights.to(p.dtype) * self.distance(p, values, digit_targets)
        if self.reweigh:
            terms = reweighed(terms, digit_logits, digit_targets, digit_nll, self.largest_term)
        return terms

    def gradient_weights(self, nll, cost):
        # the reweighed term depends on the NLL at digit positions: not one weight per token
        return None if self.reweigh else super().gradient_weights(nll, cost)


class NumberTokenLossWAS(_NumberTokenLoss):
    """NTL-WAS: expected absolute digit distance under the model's digit distribution."""

    name = "ntl-was"
    largest_term = 9.0
    distance = staticmethod(was_distance)


class NumberTokenLossMSE(_NumberTokenLoss):
    """NTL-MSE: squared error between the expected digit and the target digit."""

    name = "ntl-mse"
    largest_term = 81.0
    distance = staticmethod(mse_distance)
