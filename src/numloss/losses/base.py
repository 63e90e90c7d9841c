"""The shared interface of every objective: inputs, normalisation, output type.

A subclass says what it adds to cross-entropy, as a function of small tensors:

* digit objectives (DEL, NTL, DIST2) implement `digit_terms(z, y, place)`: one term per digit
  position from the ten digit logits z [K, 10], the target digit y [K] and its place index [K];
  aux = sum of terms / N_dig.
* token objectives (MixCE, EMO) implement `token_loss(nll, valid, logits, targets)`: the
  per-token loss that replaces the NLL, and the per-token extra term they report as aux
  (sum / N_tok).

loss = sum of token losses / N_tok + alpha * aux; for digit objectives and MLE the token loss is
the NLL, so loss = ce + alpha * aux.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from numloss.digits import IGNORE_INDEX, DigitPositions, DigitVocab, find_digits
from numloss.losses.core import token_nll_and_digit_logits

NORMALIZATIONS = ("digits", "tokens")


@dataclass
class NumericLossOutput:
    """What every objective returns.

    loss: the scalar to back-propagate, ce + alpha * aux.
    ce: token cross-entropy, sum over valid tokens / num_tokens.
    aux: the objective's extra term before alpha: digit objectives, per-digit sum / num_digits;
        MixCE, sum of (w_t - 1) nll_t / num_tokens (loss = ce + aux); EMO, the mean transport
        cost d_t (its loss has the value of ce, only its gradient differs). Zero for MLE.
    num_tokens, num_digits: the valid tokens and digit positions *of this call* (for logging and
        for building step-wide counts), as 0-d long tensors.
    digit_entropy: mean entropy (nats) of the 10-digit softmax at this call's digit positions,
        detached; 0 when there are none.
    """

    loss: torch.Tensor
    ce: torch.Tensor
    aux: torch.Tensor
    num_tokens: torch.Tensor
    num_digits: torch.Tensor
    digit_entropy: torch.Tensor | None = None


def _as_count(value: int | float | torch.Tensor | None, fallback: torch.Tensor, name: str) -> torch.Tensor:
    """A step-wide count as a float32 tensor on the device of `fallback`, at least 1."""
    if value is None:
        count = fallback.to(torch.float32)
    else:
        count = torch.as_tensor(value, device=fallback.device).to(torch.float32)
        if count.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got shape {tuple(count.shape)}")
        count = count.reshape(())
        if bool(count < fallback.to(torch.float32)):
            raise ValueError(
                f"{name}={float(count):g} is smaller than the {int(fallback)} counted in this call: "
                "it must count the whole optimizer step (all micro-batches, all ranks)"
            )
    # An empty batch contributes zero; dividing by 1 keeps it finite.
    return count.clamp_min(1.0)


class NumericLoss(nn.Module):
    """Base of every numloss objective: `loss_fn(logits, labels) -> NumericLossOutput`.

    Subclasses declare their options as keyword arguments of `__init__`; anything else is a
    TypeError naming the options the objective accepts.
    """

    name: str = ""
    default_alpha: float = 0.0
    #: False for objectives that reshape the token loss instead of adding a weighted term
    takes_alpha: bool = True

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        ignore_index: int = IGNORE_INDEX,
        check_finite: bool = True,
        normalize: str = "digits",
    ) -> None:
        super().__init__()
        if normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
        #: what the digit term is divided by: the step's digit count, or its token count (exact in a
        #: hook that only sees the step's token count, like Trainer's compute_loss_func)
        self.normalize = normalize
        if not isinstance(vocab, DigitVocab):
            raise TypeError(
                f"vocab must be a numloss.DigitVocab (DigitVocab.from_tokenizer(tok)), got {type(vocab).__name__}"
            )
        self.vocab = vocab
        self.alpha = float(self.default_alpha if alpha is None else alpha)
        self.ignore_index = ignore_index
        self.check_finite = check_finite
        self.register_buffer("digit_columns", vocab.digit_ids_tensor(), persistent=False)

    @classmethod
    def option_names(cls) -> list[str]:
        """Keyword options `build_loss` accepts for this objective (its own and the base's)."""
        names: list[str] = []
        for klass in cls.__mro__:
            if issubclass(klass, NumericLoss) and "__init__" in vars(klass):
                for name, parameter in inspect.signature(klass.__init__).parameters.items():
                    if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                        continue
                    if name not in ("self", "vocab") and name not in names:
                        names.append(name)
        return [name for name in names if cls.takes_alpha or name != "alpha"]

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"

    # -- hooks ----------------------------------------------------------------------------------
    def digit_terms(
        self, digit_logits: torch.Tensor, digit_targets: torch.Tensor, places: torch.Tensor
    ) -> torch.Tensor | None:
        """Per-digit extra terms [K] (float32), or None when the objective has none."""
        return None

    def token_loss(
        self, nll: torch.Tensor, valid: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(per-token loss replacing the NLL [N], per-token reported term [N]), or None for the NLL.

        Both must be 0 where not `valid`.
        """
        return None

    def as_compute_loss_func(self):
        """This objective as `transformers.Trainer(compute_loss_func=...)` (and TRL's).

        The hook does the causal shift and reads the logits from the model output; see
        `numloss.hf.compute_loss_func` for what is exact under accumulation.
        """
        from numloss.hf import compute_loss_func  # numloss.hf imports this module

        return compute_loss_func(self)

    # -- the call -------------------------------------------------------------------------------
    def forward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None = None,
        num_digits_in_batch: int | torch.Tensor | None = None,
    ) -> NumericLossOutput:
        """Loss of aligned `logits` [B, T, V] (or [N, V]) against `labels` [B, T] (or [N]).

        No causal shift happens here (see `numloss.hf` for the glue that does it). Labels equal to
        `ignore_index` are skipped. `num_items_in_batch` / `num_digits_in_batch` are the counts of
        valid tokens / digit positions over the whole optimizer step; by default, this call's.
        """
        flat_logits, flat_labels, digits = self._prepare(logits, labels)
        valid = flat_labels != self.ignore_index
        targets = torch.where(valid, flat_labels, torch.zeros_like(flat_labels))
        nll, digit_logits = token_nll_and_digit_logits(
            flat_logits, targets, valid, digits.index, self.digit_columns
        )
        return self.combine(
            nll, valid, digit_logits, digits, flat_logits, targets, num_items_in_batch, num_digits_in_batch
        )

    def from_hidden(
        self,
        hidden: torch.Tensor,
        lm_head_weight: torch.Tensor,
        labels: torch.Tensor,
        lm_head_bias: torch.Tensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        num_digits_in_batch: int | torch.Tensor | None = None,
        chunk_size: int | None = None,
    ) -> NumericLossOutput:
        """The loss of `hidden @ lm_head_weight.T + lm_head_bias` without materialising those logits.

        Same result and gradients (for hidden, weight and bias) as calling the objective on the
        logits; computed in chunks of rows by `numloss.fused`. `hidden` [B, T, H] or [N, H],
        `labels` aligned with it; `chunk_size` None picks one from V and H.
        """
        from numloss.fused import fused_loss  # numloss.fused imports this module

        return fused_loss(
            self,
            hidden,
            lm_head_weight,
            labels,
            lm_head_bias=lm_head_bias,
            num_items_in_batch=num_items_in_batch,
            num_digits_in_batch=num_digits_in_batch,
            chunk_size=chunk_size,
        )

    def _prepare(
        self, logits: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, DigitPositions]:
        if not torch.is_tensor(logits) or not logits.is_floating_point():
            raise TypeError(f"logits must be a floating-point tensor, got {getattr(logits, 'dtype', type(logits))}")
        if not torch.is_tensor(labels) or labels.is_floating_point():
            raise TypeError("labels must be an integer tensor of token ids (ignore_index for skipped positions)")
        if logits.dim() not in (2, 3) or logits.shape[:-1] != labels.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not match: expected "
                "logits [B, T, V] with labels [B, T] (or [N, V] with [N]), already aligned (no shift)"
            )
        width = logits.shape[-1]
        self.vocab.check_width(width)
        digits = find_digits(labels, self.vocab, width, self.ignore_index)
        return logits.reshape(-1, width), labels.reshape(-1).long(), digits

    def combine(
        self,
        nll: torch.Tensor,
        valid: torch.Tensor,
        digit_logits: torch.Tensor,
        digits: DigitPositions,
        logits: torch.Tensor | None,
        targets: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None,
        num_digits_in_batch: int | torch.Tensor | None,
        token_losses: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> NumericLossOutput:
        """Normalise and add up the per-token NLL and digit logits; shared by every code path.

        `logits` [N, V] is only read by objectives whose token loss needs the full distribution
        (EMO); the fused path passes None and hands in `token_losses` (what `token_loss` would
        return) that it computed chunk by chunk.
        """
        num_tokens = valid.sum()
        num_digits = torch.tensor(digits.count, device=nll.device)
        token_count = _as_count(num_items_in_batch, num_tokens, "num_items_in_batch")
        digit_count = _as_count(num_digits_in_batch, num_digits, "num_digits_in_batch")
        ce = nll.sum() / token_count
        loss = ce
        aux = torch.zeros((), dtype=torch.float32, device=nll.device)
        terms = self.digit_terms(digit_logits, digits.target, digits.place)
        if terms is not None:
            aux = terms.sum() / (token_count if self.normalize == "tokens" else digit_count)
            loss = ce + self.alpha * aux
        reshaped = token_losses if token_losses is not None else self.token_loss(nll, valid, logits, targets)
        if reshaped is not None:
            token_loss, reported = reshaped
            loss = token_loss.sum() / token_count
            aux = reported.sum() / token_count
        if self.check_finite:
            self._raise_if_not_finite(loss, logits, valid)
        with torch.no_grad():
            if digits.count:
                log_p = torch.log_softmax(digit_logits, dim=-1)
                entropy = -(log_p.exp() * log_p).sum(-1).mean()
            else:
                entropy = torch.zeros((), device=nll.device)
        return NumericLossOutput(loss, ce, aux, num_tokens, num_digits, entropy)

    def _raise_if_not_finite(
        self, loss: torch.Tensor, logits: torch.Tensor | None, valid: torch.Tensor
    ) -> None:
        if bool(torch.isfinite(loss)):
            return
        if logits is None:
            raise FloatingPointError(
                f"{self.name}: the loss is not finite: the hidden states or the LM-head weight hold "
                "NaN or inf (the model diverged or overflowed; lower the learning rate, use bf16 not fp16)"
            )
        bad_rows = (~torch.isfinite(logits)).any(-1) & valid
        if bool(bad_rows.any()):
            where = int(torch.nonzero(bad_rows)[0])
            raise FloatingPointError(
                f"{self.name}: the logits hold NaN or inf at {int(bad_rows.sum())} scored position(s) "
                f"(first: flat position {where}); the model diverged or its output overflowed "
                "(lower the learning rate, check the inputs, or train in bf16 rather than fp16)"
            )
        raise FloatingPointError(
            f"{self.name}: the loss is not finite although the logits are; alpha={self.alpha} or a "
            "step-wide count may be wrong"
        )
