"""EMO, Earth Mover Distance Optimisation (Ren et al., 2023), token-level.

With q_t the full next-token distribution and E the L2-normalised output embedding (no
gradient), the transport cost is d_t = 1 - <E[y_t], q_t @ E>. `form="adaptive"` (default, the
cost of PolyU-VCLab/DEL's EMO baseline and emo_patch.py `emo1_adaptive`) uses
d'_t = d_t + sg(q_t[y_t]); `form="gpt2"` (DRSY/EMO gpt2.py) uses d'_t = d_t. Token loss:
`mode=1`: 0.5 * (nll_t + sg(r_t) * d'_t), r_t = nll_t / max(d'_t, 1e-6), optionally capped at
`max_ratio`, whose value is the NLL; `mode=2`: sg(d'_t / max(nll_t, 1e-6)) * nll_t + d'_t.
aux is the mean transport cost sum_t d_t / N_tok.

Why the 1e-6 floor (the official code adds 1e-10): it keeps r_t finite when d'_t rounds to 0 and
bounds how far float32 rounding in d'_t (~1e-7) is amplified; below it the EMD half fades.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from numloss.checks import ArgumentTypeError
from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss, check_number

FORMS = ("adaptive", "gpt2")
MODES = (1, 2)
# floor of the denominator of EMO's detached ratio
MIN_DENOMINATOR = 1e-6


def emo_ratio(
    nll: torch.Tensor, cost: torch.Tensor, mode: int, max_ratio: float | None
) -> torch.Tensor:
    """EMO's detached ratio: mode 1, nll / max(cost, 1e-6) (capped at max_ratio); mode 2, cost /
    max(nll, 1e-6)."""
    nll, cost = nll.detach(), cost.detach()
    if mode == 1:
        ratio = nll / cost.clamp_min(MIN_DENOMINATOR)
        return ratio if max_ratio is None else ratio.clamp_max(max_ratio)
    return cost / nll.clamp_min(MIN_DENOMINATOR)


class EMOLoss(NumericLoss):
    """EMO; needs the output-embedding matrix [V, H], read at every call (so a trained head is
    seen as it changes) and never given gradient by this loss."""

    name = "emo"
    default_alpha = 1.0
    takes_alpha = False
    needs_output_embedding = True
    choices = {"form": FORMS, "mode": MODES}

    def __init__(
        self,
        vocab: DigitVocab,
        embedding: torch.Tensor | None = None,
        form: str = "adaptive",
        mode: int = 1,
        max_ratio: float | None = None,
        **base_options,
    ) -> None:
        super().__init__(vocab, **base_options)
        if not torch.is_tensor(embedding) or embedding.dim() != 2:
            raise ArgumentTypeError(
                "emo needs embedding=<output-embedding matrix [V, H]>, e.g. build_loss('emo',"
                " vocab, embedding=model.get_output_embeddings().weight), got"
                f" {getattr(embedding, 'shape', type(embedding).__name__)}"
            )
        self.embedding = embedding
        # each assignment is checked (NumericLoss.__setattr__), mode before the cap it rules on
        self.form = form
        self.mode = mode
        self.max_ratio = max_ratio

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        super().validate_options(options)
        if options.get("max_ratio") is not None:
            check_number(cls.name, "max_ratio", options["max_ratio"], low_open=True)
            if options.get("mode", 1) != 1:
                raise ValueError(
                    f"{cls.name}: max_ratio caps mode 1's nll/d; mode 2 has no such ratio"
                )

    def transport_embedding(self, device, dtype, width):
        """Unit-length rows of the embedding, detached, in `dtype` on `device`."""
        if self.embedding.shape[0] != width:
            raise ValueError(
                f"emo: the embedding has {self.embedding.shape[0]} rows but the logits {width}"
                " columns; pass the output-embedding matrix of the model that made the logits"
            )
        return F.normalize(self.embedding.detach().to(device=device, dtype=dtype), dim=-1)

    def ratio_cost(self, nll: torch.Tensor, cost: torch.Tensor) -> torch.Tensor:
        """d' (value of the cost in the ratio): d, plus sg(q[y]) = exp(-nll) for the adaptive
        form."""
        return cost + torch.exp(-nll.detach()) if self.form == "adaptive" else cost

    def token_loss(self, nll, valid, cost):
        shifted = self.ratio_cost(nll, cost)
        ratio = emo_ratio(nll, shifted, self.mode, self.max_ratio)
        token_loss = 0.5 * (nll + ratio * shifted) if self.mode == 1 else ratio * nll + shifted
        zero = torch.zeros_like(nll)
        return torch.where(valid, token_loss, zero), torch.where(valid, cost, zero)

    def gradient_weights(self, nll, cost):
        ratio = emo_ratio(nll, self.ratio_cost(nll, cost), self.mode, self.max_ratio)
        if self.mode == 1:
            return torch.full_like(nll, 0.5), 0.5 * ratio
        return ratio, torch.ones_like(cost)
