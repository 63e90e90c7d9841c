"""NTL, the Number Token Loss (Zausinger et al., 2025), in its two forms, without reweighing.

p = softmax over the ten digit logits at each digit position with target y:

* ntl-was (Wasserstein-1 between p and the one-hot target on the digit line): sum_k p_k |k - y|
* ntl-mse (squared error of the expected digit): (sum_k p_k k - y)^2

These equal `ntloss.NTLoss` / `ntloss.NTLossDotProduct` with `reweigh=False` (tested).
"""

from __future__ import annotations

import torch

from numloss.losses.base import NumericLoss


def _digit_values(like: torch.Tensor) -> torch.Tensor:
    return torch.arange(10, dtype=like.dtype, device=like.device)


class NumberTokenLossWAS(NumericLoss):
    """NTL-WAS: expected absolute digit distance under the model's digit distribution."""

    name = "ntl-was"
    default_alpha = 0.3

    def digit_terms(self, digit_logits, digit_targets, places):
        values = _digit_values(digit_logits)
        distance = (values[None, :] - digit_targets[:, None].to(values.dtype)).abs()
        return (torch.softmax(digit_logits, dim=-1) * distance).sum(dim=-1)


class NumberTokenLossMSE(NumericLoss):
    """NTL-MSE: squared error between the expected digit and the target digit."""

    name = "ntl-mse"
    default_alpha = 0.3

    def digit_terms(self, digit_logits, digit_targets, places):
        expected = torch.softmax(digit_logits, dim=-1) @ _digit_values(digit_logits)
        return (expected - digit_targets.to(expected.dtype)) ** 2
