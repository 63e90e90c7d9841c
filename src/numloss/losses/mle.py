"""MLE: plain token cross-entropy, the baseline every other objective is measured against."""

from __future__ import annotations

from numloss.losses.base import NumericLoss


class MLELoss(NumericLoss):
    """Cross-entropy only; aux is 0. Reports digit counts and entropy like the others."""

    name = "mle"
    default_alpha = 0.0
