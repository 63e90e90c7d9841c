"""MLE: plain token cross-entropy, the baseline every other objective is measured against."""

from __future__ import annotations

from typing import Any

from numloss.digits import DigitVocab
from numloss.losses.base import NORMALIZATIONS, NumericLoss


class MLELoss(NumericLoss):
    """Cross-entropy only (aux 0), with the others' digit counts and diagnostics. No alpha;
    `normalize` is accepted so both arms of an A/B share their options."""

    name = "mle"
    default_alpha = 0.0
    takes_alpha = False
    normalizations: tuple[str, ...] = NORMALIZATIONS

    def __init__(self, vocab: DigitVocab, normalize: str = "tokens", **base_options: Any) -> None:
        super().__init__(vocab, **base_options)
        self.normalize = normalize
