"""MLE: plain token cross-entropy, the baseline every other objective is measured against."""

from __future__ import annotations

from typing import Any

from numloss.digits import DigitVocab
from numloss.losses.base import NORMALIZATIONS, NumericLoss


class MLELoss(NumericLoss):
    """Cross-entropy only; aux is 0. Reports digit counts and entropy like the others.

    It has no alpha (no term for it to weight: `build_loss("mle", vocab, alpha=...)` is refused,
    as the command line refuses `--objective.alpha`). `normalize` ("digits" or "tokens") is
    accepted so that an A/B's arms share their options, `build_loss("mle", vocab, normalize="tokens")`
    beside a digit objective's (which takes an explicit alpha with "tokens"); with no digit term
    both give the same loss, exact from the step's token count alone.
    """

    name = "mle"
    default_alpha = 0.0
    takes_alpha = False
    normalizations: tuple[str, ...] = NORMALIZATIONS

    def __init__(self, vocab: DigitVocab, normalize: str = "tokens", **base_options: Any) -> None:
        super().__init__(vocab, **base_options)
        self.normalize = normalize

    @property
    def token_count_suffices(self) -> bool:
        return True  # no digit term: the token count makes it exact whatever `normalize` says

    @property
    def aux_per_token(self) -> bool:
        return True
