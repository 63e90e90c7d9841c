"""MixCE (Zhang et al., 2023): a mixture of forward and reverse cross-entropy, token-level.

token loss = w_t * nll_t with w_t = eta + (1 - eta) * sg(exp(-nll_t)), the approximation of the
MixCE paper's released code. Reported as ce + aux, aux = sum_t (w_t - 1) nll_t / N_tok.
"""

from __future__ import annotations

import torch

from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss


class MixCELoss(NumericLoss):
    """MixCE with mixing ratio eta (1.0 is plain MLE)."""

    name = "mixce"
    default_alpha = 1.0
    takes_alpha = False

    def __init__(self, vocab: DigitVocab, eta: float = 0.5, **base_options) -> None:
        if "alpha" in base_options:
            raise TypeError("mixce has no alpha: it reshapes the token loss; set eta (1.0 is plain MLE)")
        super().__init__(vocab, **base_options)
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        self.eta = float(eta)

    def extra_repr(self) -> str:
        return f"eta={self.eta}"

    def token_loss(self, nll, valid, logits, targets):
        weight = self.eta + (1.0 - self.eta) * torch.exp(-nll.detach())
        token_loss = torch.where(valid, weight * nll, torch.zeros_like(nll))
        return token_loss, token_loss - nll
