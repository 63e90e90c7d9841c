"""NTL, the Number Token Loss (Zausinger et al., 2025), in its two forms, without reweighing.

p = softmax over the ten digit logits at each digit position with target y:

* ntl-was (Wasserstein-1 between p and the one-hot target on the digit line): sum_k p_k |k - y|
* ntl-mse (squared error of the expected digit): (sum_k p_k k - y)^2

These equal `ntloss.NTLoss` / `ntloss.NTLossDotProduct` with `reweigh=False` (tested). On
multi-digit number tokens the digit level (default) applies them to each digit slot's marginal;
`level="token"` is NTL's number-token variant (`ntloss` with `digit_level=False`): p is the softmax
over every number token at a number-token position, and the distance is between token values,
sum_v p_v |v - y| or (sum_v p_v v - y)^2, one term per number token (aux = sum / N_num).
"""

from __future__ import annotations

import torch

from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss
from numloss.losses.number_tokens import token_values

LEVELS = ("digit", "token")


def _digit_values(like: torch.Tensor) -> torch.Tensor:
    return torch.arange(10, dtype=like.dtype, device=like.device)


class _NumberTokenLoss(NumericLoss):
    """Shared by both NTL forms: the `level` option."""

    def __init__(self, vocab: DigitVocab, alpha: float | None = None, level: str = "digit", **base_options) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        self.level = level

    @property
    def scores_tokens(self) -> bool:
        return self.level == "token"

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, level={self.level!r}"

    def number_terms(self, number_logits, digits):
        p, values, target = token_values(number_logits, digits, self.vocab.number_table(number_logits.device))
        return self.token_distance(p, values, target)


class NumberTokenLossWAS(_NumberTokenLoss):
    """NTL-WAS: expected absolute digit distance under the model's digit distribution."""

    name = "ntl-was"
    default_alpha = 0.3

    @staticmethod
    def token_distance(p, values, target):
        return (p * (values[None, :] - target[:, None]).abs()).sum(dim=-1)

    def digit_terms(self, digit_logits, digit_targets, places, support=None):
        values = _digit_values(digit_logits)
        distance = (values[None, :] - digit_targets[:, None].to(values.dtype)).abs()
        return (torch.softmax(digit_logits, dim=-1) * distance).sum(dim=-1)


class NumberTokenLossMSE(_NumberTokenLoss):
    """NTL-MSE: squared error between the expected digit and the target digit."""

    name = "ntl-mse"
    default_alpha = 0.3

    @staticmethod
    def token_distance(p, values, target):
        return (p @ values - target) ** 2

    def digit_terms(self, digit_logits, digit_targets, places, support=None):
        expected = torch.softmax(digit_logits, dim=-1) @ _digit_values(digit_logits)
        return (expected - digit_targets.to(expected.dtype)) ** 2
