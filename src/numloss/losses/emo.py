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
        if rows.numel() == 0:
            return nll, torch.zeros_like(nll)  # all zero, but still part of the graph
        unit = self.normalised_embedding(logits.device, nll.dtype)
        row_loss, row_cost = emo_token_loss(
            nll.index_select(0, rows), transport_cost(logits, rows, targets, unit)
        )
        token_loss = torch.zeros_like(nll).index_put((rows,), row_loss)
        return token_loss, torch.zeros_like(nll).index_put((rows,), row_cost)


def emo_token_loss(nll: torch.Tensor, cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """EMO's token loss 0.5 * (nll + sg(nll / d) * d) and the clamped cost d, elementwise.

    `cost` is the unclamped transport cost; it is clamped at `_MIN_COST` first. Shared by the
    unfused and the fused paths.
    """
    cost = cost.clamp_min(_MIN_COST)
    return 0.5 * (nll + (nll / cost).detach() * cost), cost


class _TransportCost(torch.autograd.Function):
    """d = 1 - sum_v softmax(z)_v <E_y, E_v> for the given rows, in row chunks.

    Neither the probabilities nor the [n, V] similarities are kept: backward recomputes them per
    chunk, so the only [N, V] tensor is the gradient itself.
    """

    @staticmethod
    def forward(ctx, logits, rows, targets, unit):  # type: ignore[override]
        cost = torch.empty(rows.numel(), dtype=unit.dtype, device=logits.device)
        for start, stop, probs, similarity in _chunks(logits, rows, targets, unit):
            cost[start:stop] = 1.0 - (probs * similarity).sum(-1)
        ctx.save_for_backward(logits, rows, targets, unit, cost)
        return cost

    @staticmethod
    def backward(ctx, grad_cost):  # type: ignore[override]
        logits, rows, targets, unit, cost = ctx.saved_tensors
        grad = torch.zeros_like(logits)
        for start, stop, probs, similarity in _chunks(logits, rows, targets, unit):
            # d(cost)/dz_v = -q_v (s_v - <q, s>), with <q, s> = 1 - cost
            similarity.sub_((1.0 - cost[start:stop])[:, None]).mul_(probs)
            similarity.mul_(-grad_cost[start:stop, None].to(similarity.dtype))
            grad[rows[start:stop]] = similarity.to(grad.dtype)
        return grad, None, None, None


def _chunks(logits, rows, targets, unit):
    """(start, stop, softmax probabilities, similarities to the target) per chunk of rows."""
    width = logits.shape[-1]
    step = max(1, (1 << 21) // width)
    for start in range(0, rows.numel(), step):
        chunk_rows = rows[start : start + step]
        probs = torch.softmax(logits.index_select(0, chunk_rows).to(unit.dtype), dim=-1)
        similarity = unit.index_select(0, targets[chunk_rows]) @ unit.T
        yield start, start + chunk_rows.numel(), probs, similarity


def transport_cost(
    logits: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, unit: torch.Tensor
) -> torch.Tensor:
    """EMO's transport cost d [n] at `rows` of `logits` [N, V], differentiable in the logits.

    `unit` [V, H] holds unit-length embedding rows (no gradient); `targets` [N] the target ids.
    """
    return _TransportCost.apply(logits, rows, targets, unit)
