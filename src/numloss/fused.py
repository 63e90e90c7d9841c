"""Every objective straight from hidden states and the LM-head weight, without the full logits.

    out = loss_fn.from_hidden(hidden, model.lm_head.weight, labels)   # hidden [B, T, H]

One custom autograd Function computes the per-token NLL, the number-token logits and (EMO) the
transport cost in chunks of rows, so only a [chunk, V] slice of the logits exists (Liger-Kernel's
fused linear cross-entropy, in plain PyTorch). The gradient is computed in forward, while the
chunk's softmax is at hand, with the objective's `gradient_weights` (so no objective code lives
here); backward checks that the incoming gradient is that prediction times one scalar, and
otherwise recomputes the logits chunk by chunk (always, with `strategy="recompute"`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import torch
import torch.nn.functional as F

from numloss.checks import check_choice, check_int

if TYPE_CHECKING:  # the objectives import this module, never the other way round
    from numloss.losses.base import NumericLoss, NumericLossOutput

STRATEGIES = ("forward", "recompute")

# Working memory per chunk: the [chunk, V] float32 probabilities plus [chunk, H] rows.
_CHUNK_ELEMENTS = 1 << 24

# (nll, cost) of a chunk -> predicted (a, b) per-token gradient weights, up to one scalar: an
# objective's `gradient_weights` method.
GradientRule = Callable[
    [torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]
]


def default_chunk_size(vocab_size: int, hidden_size: int) -> int:
    """Rows per chunk so one chunk's float32 work (V + H values per row) is about 64 MiB."""
    return max(16, _CHUNK_ELEMENTS // (vocab_size + hidden_size))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax and loss arithmetic: float64 stays float64 (gradcheck), everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Chunk:
    """One chunk's forward: e = exp(z - max) [c, V] in place of the logits, nll, cost; the
    softmax's division by the row total is folded into the gradient's row scale (one pass less)."""

    def __init__(self, hidden, weight, bias, targets, valid, unit, math):
        logits = F.linear(hidden, weight, bias)
        z = logits if logits.dtype == math else logits.to(math)
        self.raw_logits = z  # read the digit columns before z turns into e
        self.target_logit = z.gather(1, targets[:, None]).squeeze(1)
        self.targets = targets
        self.valid = valid
        self.unit = unit

    def finish(self) -> None:
        e = self.raw_logits
        top = e.amax(dim=1, keepdim=True)
        e.sub_(top).exp_()
        self.e = e
        self.total = e.sum(dim=1)
        lse = top.squeeze(1) + self.total.log()
        self.row_finite = torch.isfinite(lse)
        self.nll = torch.where(self.valid, lse - self.target_logit, torch.zeros_like(lse))
        self.cost = None
        if self.unit is not None:
            self.target_unit = self.unit.index_select(0, self.targets)
            # 1 - <E[y], p @ E>; kept unclamped so that <p, E E[y]> = 1 - cost in the gradient
            inner = ((e @ self.unit) * self.target_unit).sum(dim=1) / self.total
            self.cost = torch.where(self.valid, 1.0 - inner, torch.zeros_like(inner))

    def logit_gradient(self, a: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """a_t (p_t - onehot(y_t)) + b_t dcost_t/dlogits_t, written over e; rows with a = b = 0
        vanish."""
        e = self.e
        transport_part = None
        if b is not None and self.unit is not None and bool((b != 0).any()):
            # dcost/dz = -p * (s - <p, s>), s = E E[y], <p, s> = 1 - cost
            transport_part = self.target_unit @ self.unit.T
            transport_part.sub_((1.0 - self.cost)[:, None]).mul_(e).mul_((-b / self.total)[:, None])
        e.mul_((a / self.total)[:, None])
        rows = torch.arange(e.shape[0], device=e.device)
        e[rows, self.targets] -= a
        if transport_part is not None:
            e.add_(transport_part)
        return e


def _accumulate(grad_z, h, weight, d_hidden, d_weight, d_bias, start, stop) -> None:
    """dH[start:stop] = g @ W; dW += g^T h; db += sum g, with g the chunk's logit gradient."""
    g = grad_z if grad_z.dtype == weight.dtype else grad_z.to(weight.dtype)
    d_hidden[start:stop] = g @ weight
    if d_weight is not None:
        if d_weight.dtype == g.dtype:
            d_weight.addmm_(g.T, h)
        else:  # half-precision weights: add each chunk's product into a float32 accumulator
            d_weight.add_(g.T @ h)
    if d_bias is not None:
        d_bias.add_(grad_z.sum(dim=0))


class _FusedLinearLoss(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        valid: torch.Tensor,
        digit_index: torch.Tensor,
        digit_columns: torch.Tensor,
        unit: torch.Tensor | None,
        rule: GradientRule | None,
        chunk_size: int,
        strategy: str,
    ):
        num_rows = hidden.shape[0]
        math = compute_dtype(hidden.dtype)
        device = hidden.device
        nll = torch.zeros(num_rows, dtype=math, device=device)
        cost = torch.zeros(num_rows if unit is not None else 0, dtype=math, device=device)
        digit_logits = nll.new_zeros((digit_index.numel(), digit_columns.numel()))
        row_finite = torch.ones(num_rows, dtype=torch.bool, device=device)
        in_forward = any(ctx.needs_input_grad[:3]) and rule is not None and strategy == "forward"
        stored = _gradient_buffers(ctx, hidden, weight, bias, unit, math) if in_forward else None
        starts = torch.arange(0, num_rows + chunk_size, chunk_size, device=device)
        bounds = torch.searchsorted(digit_index, starts).tolist()  # digit rows of each chunk
        for chunk_number, start in enumerate(range(0, num_rows, chunk_size)):
            stop = min(start + chunk_size, num_rows)
            chunk = _Chunk(
                hidden[start:stop], weight, bias, targets[start:stop], valid[start:stop], unit, math
            )
            lo, hi = bounds[chunk_number], bounds[chunk_number + 1]
            if hi > lo:
                rows = digit_index[lo:hi] - start
                digit_logits[lo:hi] = chunk.raw_logits[rows[:, None], digit_columns[None, :]]
            chunk.finish()
            nll[start:stop] = chunk.nll
            row_finite[start:stop] = chunk.row_finite
            if unit is not None:
                cost[start:stop] = chunk.cost
            if stored is not None:
                _gradient_in_forward(chunk, rule, stored, hidden, weight, start, stop)
            del chunk
        ctx.save_for_backward(
            hidden, weight, bias, targets, valid, digit_index, digit_columns, unit
        )
        ctx.chunk_size = chunk_size
        ctx.stored = stored
        ctx.mark_non_differentiable(row_finite)
        return nll, cost, digit_logits, row_finite

    @staticmethod
    def backward(ctx, grad_nll, grad_cost, grad_digits, _grad_row_finite):  # type: ignore[override]
        hidden, weight, bias, targets, valid, digit_index, digit_columns, unit = ctx.saved_tensors
        math = compute_dtype(hidden.dtype)
        # unused outputs arrive as zeros (autograd materialises them)
        grad_nll = torch.where(valid, grad_nll.to(math), 0.0)
        grad_cost = torch.where(valid, grad_cost.to(math), 0.0) if unit is not None else None
        stored, ctx.stored = ctx.stored, None  # stored gradients are scaled in place: use once
        scale = _common_scale(stored, grad_nll, grad_cost) if stored is not None else None
        if scale is not None:
            d_hidden, d_weight, d_bias = stored[:3]
            for buffer in (b for b in stored[:3] if b is not None):
                buffer.mul_(scale.to(buffer.dtype))
        else:
            d_hidden, d_weight, d_bias = _recompute(
                ctx, hidden, weight, bias, targets, valid, unit, grad_nll, grad_cost, math
            )
        if digit_index.numel():
            g = grad_digits.to(math)
            rows = hidden.index_select(0, digit_index).to(math)
            columns = weight.index_select(0, digit_columns).to(math)
            d_hidden.index_add_(0, digit_index, (g @ columns).to(d_hidden.dtype))
            if d_weight is not None:
                d_weight.index_add_(0, digit_columns, (g.T @ rows).to(d_weight.dtype))
            if d_bias is not None:
                d_bias.index_add_(0, digit_columns, g.sum(dim=0))
        d_hidden = d_hidden.to(hidden.dtype) if ctx.needs_input_grad[0] else None
        d_weight, d_bias = (g if g is None else g.to(weight.dtype) for g in (d_weight, d_bias))
        return d_hidden, d_weight, d_bias, None, None, None, None, None, None, None, None


def _gradient_buffers(ctx, hidden, weight, bias, unit, math):
    """Zeroed (d_hidden, d_weight, d_bias, a, b) in the math dtype, None where not wanted."""
    rows, device = hidden.shape[0], hidden.device
    d_hidden = torch.empty((rows, hidden.shape[1]), dtype=math, device=device)
    wants_weight = ctx.needs_input_grad[1]
    d_weight = torch.zeros(weight.shape, dtype=math, device=device) if wants_weight else None
    wants_bias = bias is not None and ctx.needs_input_grad[2]
    d_bias = torch.zeros(weight.shape[0], dtype=math, device=device) if wants_bias else None
    a_all = torch.zeros(rows, dtype=math, device=device)
    b_all = torch.zeros(rows, dtype=math, device=device) if unit is not None else None
    return d_hidden, d_weight, d_bias, a_all, b_all


def _gradient_in_forward(chunk, rule, stored, hidden, weight, start, stop) -> None:
    """Add the chunk's gradient under the objective's predicted weights (a, b) to `stored`."""
    d_hidden, d_weight, d_bias, a_all, b_all = stored
    a, b = rule(chunk.nll, chunk.cost)
    a = a_all[start:stop] = torch.where(chunk.valid, a, 0.0)
    if b_all is not None:
        b = b_all[start:stop] = torch.where(chunk.valid, b, 0.0)
    grad_z = chunk.logit_gradient(a, b)
    _accumulate(grad_z, hidden[start:stop], weight, d_hidden, d_weight, d_bias, start, stop)


def _common_scale(
    stored, grad_nll: torch.Tensor, grad_cost: torch.Tensor | None
) -> torch.Tensor | None:
    """The scalar c with grad = c * predicted weights, or None when the prediction does not hold."""
    _, _, _, a, b = stored
    predicted = a if b is None else torch.cat([a, b])
    actual = grad_nll if b is None else torch.cat([grad_nll, grad_cost])
    norm = (predicted * predicted).sum()
    if not bool(norm > 0):
        return torch.zeros((), dtype=a.dtype, device=a.device) if not bool(actual.any()) else None
    scale = (actual * predicted).sum() / norm
    residual = (actual - scale * predicted).abs().max()
    tolerance = 64 * torch.finfo(a.dtype).eps * (scale.abs() * predicted.abs().max())
    return scale if bool(residual <= tolerance) else None


def _recompute(ctx, hidden, weight, bias, targets, valid, unit, grad_nll, grad_cost, math):
    """The logits' gradient chunk by chunk from the incoming per-token gradients."""
    num_rows = hidden.shape[0]
    d_hidden, d_weight, d_bias, _, _ = _gradient_buffers(ctx, hidden, weight, bias, None, math)
    step = ctx.chunk_size
    for start in range(0, num_rows, step):
        stop = min(start + step, num_rows)
        chunk = _Chunk(
            hidden[start:stop], weight, bias, targets[start:stop], valid[start:stop], unit, math
        )
        chunk.finish()
        b = grad_cost[start:stop] if grad_cost is not None else None
        grad_z = chunk.logit_gradient(grad_nll[start:stop], b)
        _accumulate(grad_z, hidden[start:stop], weight, d_hidden, d_weight, d_bias, start, stop)
        del chunk
    return d_hidden, d_weight, d_bias


def check_aligned(name: str, x: torch.Tensor, labels: torch.Tensor, last: str) -> None:
    """One line unless `x` is a floating-point [B, T, `last`] (or [N, `last`]) tensor `name` with
    integer `labels` [B, T] (or [N]), already aligned."""
    if not torch.is_tensor(x) or not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor [B, T, {last}] or [N, {last}], got"
            f" {getattr(x, 'dtype', type(x))}"
        )
    if not torch.is_tensor(labels) or labels.is_floating_point():
        raise TypeError(
            "labels must be an integer tensor of token ids (ignore_index for skipped positions)"
        )
    if x.dim() not in (2, 3) or x.shape[:-1] != labels.shape:
        raise ValueError(
            f"{name} {tuple(x.shape)} and labels {tuple(labels.shape)} do not match: expected"
            f" {name} [B, T, {last}] with labels [B, T] (or [N, {last}] with [N]), already aligned"
            " (no shift)"
        )


def fused_loss(
    loss_fn: NumericLoss,
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    lm_head_bias: torch.Tensor | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    num_digits_in_batch: int | torch.Tensor | None = None,
    chunk_size: int | None = None,
    strategy: str = "forward",
) -> NumericLossOutput:
    """`loss_fn(hidden @ W.T + b, labels, ...)` without materialising the [N, V] logits
    (`loss_fn.from_hidden(hidden, lm_head_weight, labels, ...)` is this function).

    `hidden` [B, T, H] or [N, H] with aligned `labels`, `lm_head_weight` [V, H], `lm_head_bias`
    [V] or None; the matmul runs in their common dtype, softmax and loss in float32 (float64 for
    float64). `chunk_size` None picks `default_chunk_size(V, H)`.
    """
    check_aligned("hidden", hidden, labels, "H")
    weight, bias = lm_head_weight, lm_head_bias
    if not torch.is_tensor(weight) or weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(
            "lm_head_weight must be a floating-point [V, H] matrix"
            f" (model.get_output_embeddings().weight), got {tuple(getattr(weight, 'shape', ()))}"
        )
    if hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"hidden size {hidden.shape[-1]} does not match lm_head_weight {tuple(weight.shape)}:"
            " the weight must be [V, H], the LM head of the model whose hidden states these are"
        )
    if bias is not None and (not torch.is_tensor(bias) or bias.shape != (weight.shape[0],)):
        raise ValueError(
            f"lm_head_bias must be a [V] = [{weight.shape[0]}] vector, got"
            f" {tuple(getattr(bias, 'shape', ()))}"
        )
    check_choice("strategy", strategy, STRATEGIES)
    vocab_size, hidden_size = weight.shape
    if chunk_size is None:
        chunk_size = default_chunk_size(vocab_size, hidden_size)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    valid, targets, digits = loss_fn.aligned_targets(labels, vocab_size)
    compute = torch.promote_types(hidden.dtype, weight.dtype)
    flat_hidden = hidden.reshape(-1, hidden_size).to(compute)
    weight = weight.to(compute)
    bias = bias.to(compute) if bias is not None else None
    math = compute_dtype(compute)
    unit = loss_fn.transport_embedding(hidden.device, math, vocab_size)
    digit_columns = loss_fn.number_columns.to(hidden.device)
    empty = torch.zeros(0, dtype=math, device=hidden.device)
    # the objective's own gradient rule; None (unknown) makes backward recompute the logits
    has_rule = loss_fn.gradient_weights(empty, empty if unit is not None else None) is not None
    rule = loss_fn.gradient_weights if has_rule else None
    nll, cost, digit_logits, row_finite = _FusedLinearLoss.apply(
        flat_hidden,
        weight,
        bias,
        targets,
        valid,
        digits.rows,
        digit_columns,
        unit,
        rule,
        chunk_size,
        strategy,
    )
    inputs = [("hidden states", flat_hidden), ("LM-head weight", weight), ("LM-head bias", bias)]
    counts, cost = (num_items_in_batch, num_digits_in_batch), cost if unit is not None else None
    return loss_fn.combine(nll, valid, digit_logits, digits, cost, *counts, row_finite, inputs)


def raise_not_finite(
    name: str,
    inputs: list[tuple[str, torch.Tensor | None]],
    valid: torch.Tensor,
    ignored_rows: torch.Tensor | None,
) -> NoReturn:
    """Say why a loss (or its rows at `ignored_rows`) is not finite: which of `inputs` (the
    logits, or the hidden states and LM-head weight and bias; rows first) hold NaN or inf."""
    first, rows = inputs[0]
    broken = [label for label, x in inputs if x is not None and not bool(torch.isfinite(x).all())]
    kind = "ignored"
    advice = (
        "their loss gradient is zero, but back-propagating through them gives NaN weight"
        " gradients: fix the padding or attention mask that makes them (or pass"
        " check_finite=False)"
    )
    if ignored_rows is None:
        kind, ignored_rows = "scored", torch.nonzero((~torch.isfinite(rows)).any(-1) & valid)
        advice = (
            "the model diverged or its output overflowed (lower the learning rate, check the"
            " inputs, or train in bf16 rather than fp16)"
        )
    first_row = int(ignored_rows.flatten()[0]) if ignored_rows.numel() else None
    where = f" at {ignored_rows.numel()} {kind} position(s) (first: flat position {first_row})"
    where = where if first_row is not None else ""
    if broken:
        raise FloatingPointError(
            f"{name}: the {' and '.join(broken)} hold NaN or inf{where}; {advice}"
        )
    if rows.dtype == torch.float16 and first != "logits":
        raise FloatingPointError(
            f"{name}: the fp16 logits overflowed{where}: hidden states and LM-head weight are"
            " finite, but hidden @ weight.T exceeds fp16's largest value 65504; train in bf16 or"
            " float32"
        )
    held = " and ".join(label for label, x in inputs if x is not None)
    raise FloatingPointError(
        f"{name}: the loss is not finite{where} although the {held} are; alpha or a step-wide"
        " count may be wrong"
    )
