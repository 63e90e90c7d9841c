"""The one pass over the full logits that every objective shares.

Computes the per-token NLL [N], the number-token logits and (EMO) the transport cost from the
[N, V] logits with a custom autograd Function whose backward writes the logits' gradient once, in
row chunks and the logits' dtype; plain autograd would keep a float32 log-softmax copy and two
zero [N, V] gradients.
"""

from __future__ import annotations

import torch

from numloss.fused import compute_dtype

# Rows per chunk of the float32 work buffers (log-softmax in forward; the gradient of
# non-float32 logits in backward): about 4 MB, large enough that each kernel's parallel region
# amortises its start-up, small enough to bound the temporary memory.
_CHUNK_ELEMENTS = 1 << 20


def row_chunk(num_rows: int, width: int, elements: int = _CHUNK_ELEMENTS) -> int:
    """Rows per chunk so that one chunk holds about `elements` values (at least 8 rows)."""
    return max(1, min(num_rows, max(8, elements // max(width, 1))))


class _TokenNLLAndDigitLogits(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        logits: torch.Tensor,
        targets: torch.Tensor,
        valid: torch.Tensor,
        digit_index: torch.Tensor,
        digit_columns: torch.Tensor,
        unit: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        num_rows, width = logits.shape
        dtype = compute_dtype(logits.dtype)
        lse = torch.empty(num_rows, dtype=dtype, device=logits.device)
        cost = torch.zeros(num_rows if unit is not None else 0, dtype=dtype, device=logits.device)
        step = row_chunk(num_rows, width)
        for start in range(0, num_rows, step):
            chunk = logits[start : start + step].to(dtype)
            # The fused log-softmax kernel beats logsumexp; lse = x_m - log p_m at the row's
            # largest logit m, where log p_m is in [-log V, 0], so the difference loses nothing.
            log_probs = torch.log_softmax(chunk, dim=-1)
            largest, where = chunk.max(dim=-1, keepdim=True)
            lse[start : start + step] = (largest - log_probs.gather(1, where)).squeeze(1)
            if unit is not None:  # d = 1 - <E[y], p @ E>
                target_unit = unit.index_select(0, targets[start : start + step])
                cost[start : start + step] = 1.0 - ((log_probs.exp_() @ unit) * target_unit).sum(-1)
        target_logit = logits.gather(1, targets[:, None]).squeeze(1).to(dtype)
        nll = torch.where(valid, lse - target_logit, torch.zeros_like(lse))
        digit_logits = logits[digit_index[:, None], digit_columns[None, :]].to(dtype)
        # one O(N) check for the callers' error messages (a NaN row at an ignored position
        # poisons the weight gradient of whatever made the logits)
        row_finite = torch.isfinite(lse)
        ctx.mark_non_differentiable(row_finite)
        cost = torch.where(valid, cost, torch.zeros_like(cost)) if unit is not None else cost
        ctx.save_for_backward(logits, lse, targets, valid, digit_index, digit_columns, unit, cost)
        return nll, digit_logits, row_finite, cost

    @staticmethod
    def backward(ctx, grad_nll, grad_digit_logits, _grad_row_finite, grad_cost):  # type: ignore[override]
        logits, lse, targets, valid, digit_index, digit_columns, unit, cost = ctx.saved_tensors
        num_rows, width = logits.shape
        dtype = lse.dtype
        grad = torch.empty_like(logits)
        row_scale = torch.where(valid, grad_nll.to(dtype), torch.zeros_like(lse))
        # s * exp(x - lse) = exp(x - (lse - log s)): folding the row scale into the shift saves a
        # pass over [N, V]; s = 0 (ignored rows) gives exp(-inf) = 0. Negative scales need a mul.
        fold = bool((row_scale >= 0).all())
        shift = (lse - torch.log(row_scale)) if fold else lse
        # Logits in the compute dtype are written straight into the gradient in one pass each;
        # others (and EMO's [rows, V] similarities) go through buffers one chunk at a time.
        whole = logits.dtype == dtype and unit is None
        step = max(num_rows, 1) if whole else row_chunk(num_rows, width)
        for start in range(0, num_rows, step):
            stop = min(start + step, num_rows)
            if logits.dtype == dtype:
                buffer = torch.sub(
                    logits[start:stop], shift[start:stop, None], out=grad[start:stop]
                )
            else:
                buffer = logits[start:stop].to(dtype).sub_(shift[start:stop, None])
            buffer.exp_()
            if not fold:
                buffer.mul_(row_scale[start:stop, None])
            if unit is not None:
                # dcost/dz = -p (s - <p, s>), s = E E[y], <p, s> = 1 - cost
                scale = torch.where(valid[start:stop], grad_cost[start:stop].to(dtype), 0.0)
                part = unit.index_select(0, targets[start:stop]) @ unit.T
                part.sub_((1.0 - cost[start:stop])[:, None]).mul_(-scale[:, None])
                part.mul_(torch.exp(logits[start:stop].to(dtype) - lse[start:stop, None]))
                buffer.add_(part)
            if logits.dtype != dtype:
                grad[start:stop].copy_(buffer)
        rows = torch.arange(num_rows, device=logits.device)
        # one-hot and digit parts, added in the compute dtype on the few entries they touch
        grad[rows, targets] = (grad[rows, targets].to(dtype) - row_scale).to(grad.dtype)
        if digit_index.numel():
            touched = (digit_index[:, None], digit_columns[None, :])
            grad[touched] = (grad[touched].to(dtype) + grad_digit_logits.to(dtype)).to(grad.dtype)
        return grad, None, None, None, None, None


def token_nll_and_digit_logits(
    logits: torch.Tensor,
    targets: torch.Tensor,
    valid: torch.Tensor,
    digit_index: torch.Tensor,
    digit_columns: torch.Tensor,
    unit: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token NLL [N] (0 where not `valid`), the logits [K, C] at rows `digit_index` and columns
    `digit_columns` (differentiable), whether each row's log-normaliser is finite [N], and EMO's
    transport cost [N] for unit-length embedding rows `unit` [V, H] (empty without; 0 where not
    `valid`; differentiable)."""
    return _TokenNLLAndDigitLogits.apply(logits, targets, valid, digit_index, digit_columns, unit)
