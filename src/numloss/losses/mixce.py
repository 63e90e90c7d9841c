"""MixCE (Zhang et al., 2023): a mixture of forward and reverse cross-entropy, token-level.

token loss = w_t * nll_t with w_t = eta + (1 - eta) * sg(exp(-nll_t)), the approximation of the
MixCE paper's released code (bloomberg/MixCE-acl2023, gpt2.py). Reported as ce + aux,
aux = sum_t (w_t - 1) nll_t / N_tok.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss, check_number


class MixCELoss(NumericLoss):
    """MixCE with mixing ratio eta (1.0 is plain MLE)."""

    name = "mixce"
    default_alpha = 1.0
    takes_alpha = False

    def __init__(self, vocab: DigitVocab, eta: float = 0.5, **base_options) -> None:
        super().__init__(vocab, **base_options)
        self.eta = eta  # checked on assignment (NumericLoss.__setattr__)

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if "eta" in options:
            check_number(cls.name, "eta", options["eta"], 0.0, 1.0)

    def token_weight(self, nll: torch.Tensor) -> torch.Tensor:
        """w_t = eta + (1 - eta) * exp(-nll_t), no gradient."""
        return self.eta + (1.0 - self.eta) * torch.exp(-nll.detach())

    def token_loss(self, nll, valid, cost):
        token_loss = torch.where(valid, self.token_weight(nll) * nll, torch.zeros_like(nll))
        return token_loss, token_loss - nll

    def gradient_weights(self, nll, cost):
        return self.token_weight(nll), None
