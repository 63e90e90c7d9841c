"""EMO, Earth Mover Distance Optimisation (Ren et al., 2023), token-level.

With q_t the model's full next-token distribution and E the L2-normalised rows of the output
embedding (no gradient), the expected transport cost to the target is
d_t = 1 - <E[y_t], q_t @ E>, and the token loss is 0.5 * (nll_t + sg(nll_t / d_t) * d_t):
the EMD term rescaled to the size of the NLL. Its value equals the NLL (only the gradient
differs), so the reported aux is the mean transport cost sum_t d_t / N_tok.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from numloss.digits import DigitVocab
from numloss.losses.base import NumericLoss

# d_t is at most 2; below this the rescaling nll/d would blow up.
_MIN_COST = 1e-6


class EMOLoss(NumericLoss):
    """EMO; needs the output-embedding matrix [V, H] (e.g. `model.get_output_embeddings().weight`).

    The matrix is read at every call, so a trained head is seen as it changes; it never receives
    gradient from this loss.
    """

    name = "emo"
    default_alpha = 1.0
    takes_alpha = False

    def __init__(self, vocab: DigitVocab, embedding: torch.Tensor | None = None, **base_options) -> None:
        if "alpha" in base_options:
            raise TypeError("emo has no alpha: it reshapes the token loss")
        super().__init__(vocab, **base_options)
        if embedding is None:
            raise TypeError(
                "emo needs embedding=<output-embedding matrix [V, H]>, e.g. "
                "build_loss('emo', vocab, embedding=model.get_output_embeddings().weight)"
            )
        if not torch.is_tensor(embedding) or embedding.dim() != 2:
            raise ValueError(f"embedding must be a [V, H] tensor, got {getattr(embedding, 'shape', type(embedding))}")
        self.embedding = embedding

    def normalised_embedding(self, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Unit-length rows of the embedding, detached, in `dtype` on `device`."""
        return F.normalize(self.embedding.detach().to(device=device, dtype=dtype), dim=-1)

    def token_loss(self, nll, valid, logits, targets):
        if logits is None:
            raise ValueError("emo needs the full logits; its fused path computes them per chunk")
        width = logits.shape[-1]
        if self.embedding.shape[0] != width:
            raise ValueError(
                f"emo: the embedding has {self.embedding.shape[0]} rows but the logits {width} columns; "
                "pass the output-embedding matrix of the model that made the logits"
            )
        rows = torch.nonzero(valid).squeeze(1)
        token_loss = torch.zeros_like(nll)
        cost = torch.zeros_like(nll)
        if rows.numel() == 0:
            return nll, cost  # all zero, but still part of the graph
        unit = self.normalised_embedding(logits.device, nll.dtype)
        probs = torch.softmax(logits.index_select(0, rows).to(nll.dtype), dim=-1)
        expected = probs @ unit  # [n, H]
        row_cost = 1.0 - (expected * unit.index_select(0, targets[rows])).sum(-1)
        row_cost = row_cost.clamp_min(_MIN_COST)
        row_nll = nll.index_select(0, rows)
        row_loss = 0.5 * (row_nll + (row_nll / row_cost).detach() * row_cost)
        return token_loss.index_put((rows,), row_loss), cost.index_put((rows,), row_cost)
