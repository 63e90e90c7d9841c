"""DIST2Loss: KL from a discretised Gaussian around the target digit to the digit distribution.

q = softmax(-(k - y)^2 / tau), p = softmax of the ten digit logits, term = u * KL(q || p).
No official repository; tests/reference/dist2.py transcribes the author-side `get_digit_loss`.
Unweighted (default) equals it; its place-weighted variant (u = position from the end of a run of
digit tokens, '.' ending a run, divided by the sum of weights) is `place_weight=True,
point_ends_run=True, normalize="weights"`. numloss's own place weighting gives integer digits
i + 1 and decimals 1. On a slot that cannot hold every digit, q is restricted to those it can.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from numloss.checks import check_bool
from numloss.digits import DigitPositions, DigitVocab, find_digits
from numloss.losses.base import NORMALIZATIONS, DigitLoss, check_number


def dist2_term(
    z: torch.Tensor,
    y: torch.Tensor,
    u: torch.Tensor,
    tau: float,
    support: torch.Tensor | None = None,
) -> torch.Tensor:
    """u * KL(q || p) per digit [M], q = softmax(-(k - y)^2 / tau) restricted to `support`,
    p = softmax(z)."""
    values = torch.arange(10, dtype=z.dtype, device=z.device)
    soft = -((values[None, :] - y[:, None]) ** 2) / tau
    support = torch.ones_like(soft, dtype=torch.bool) if support is None else support
    log_q = torch.log_softmax(soft.masked_fill(~support, float("-inf")), dim=-1)
    q = log_q.exp()
    kl = torch.where(support, q * (log_q - torch.log_softmax(z, dim=-1)), torch.zeros_like(q))
    return u.to(z.dtype) * kl.sum(dim=-1)


def digit_run_weights(index: torch.Tensor, places: torch.Tensor) -> torch.Tensor:
    """Per digit: its position from the end of its run of digit tokens (last = 1); a run breaks
    where the flat index jumps by more than 1 or the place does not fall by one."""
    count = index.numel()
    if count == 0:
        return torch.zeros(0, dtype=torch.float32, device=index.device)
    starts = torch.ones(count, dtype=torch.bool, device=index.device)
    step = index[1:] - index[:-1]
    starts[1:] = (step > 1) | (places[1:] != places[:-1] - 1)
    run = torch.cumsum(starts.long(), 0) - 1
    length = torch.bincount(run)
    first = torch.nonzero(starts).squeeze(1)
    j = torch.arange(count, device=index.device) - first[run]
    return (length[run] - j).to(torch.float32)


class Dist2Loss(DigitLoss):
    """DIST2: soft-label KL on the digit distribution."""

    name = "dist2"
    default_alpha = 0.1
    normalizations = (*NORMALIZATIONS, "weights")

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        tau: float = 1.0,
        place_weight: bool = False,
        point_ends_run: bool = False,
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        # each assignment is checked (NumericLoss.__setattr__), place_weight before its dependant
        self.tau = tau
        self.place_weight = place_weight
        self.point_ends_run = point_ends_run

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if "tau" in options:
            check_number(cls.name, "tau", options["tau"], low_open=True)
        for flag in ("place_weight", "point_ends_run"):
            if flag in options:
                check_bool(f"{cls.name}: {flag}", options[flag])
        if options.get("point_ends_run") and not options.get("place_weight", False):
            raise ValueError(
                f"{cls.name}: point_ends_run only changes place weights; set place_weight=True too"
            )

    def digit_weights(self, digits: DigitPositions) -> torch.Tensor:
        if not self.place_weight:
            return super().digit_weights(digits)
        if self.point_ends_run:
            return digit_run_weights(digits.index, digits.place)
        return (digits.place + 1).clamp_min(1).to(torch.float32)  # i + 1, decimals 1

    def digit_terms(self, digit_logits, digit_targets, weights, digit_nll, support=None):
        return dist2_term(digit_logits, digit_targets, weights, self.tau, support)

    def count_digits(self, labels: torch.Tensor) -> torch.Tensor:
        """N_dig of aligned `labels`; with normalize="weights" the sum of their place weights (whole
        numbers), which a trainer sums over the step as `num_digits_in_batch`, so a step split into
        micro-batches or ranks divides by the step's weight sum, as one batch would."""
        if self.normalize != "weights":
            return super().count_digits(labels)
        weights = self.digit_weights(find_digits(labels, self.vocab, None, self.ignore_index))
        return weights.sum().round().long()

    def _digit_units(self, num_digits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        if self.normalize == "weights":
            return weights.sum().to(num_digits.device)
        return num_digits
