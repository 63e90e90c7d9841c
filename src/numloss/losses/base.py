"""The shared interface of every objective: inputs, options, normalisation, output type.

Digit objectives (DEL, NTL, DIST2; `DigitLoss`) implement `digit_terms`: one term per digit slot
from its ten digit logits; aux = sum / N_dig (or / N_tok). Token objectives (MixCE, EMO) implement
`token_loss`, the per-token loss that replaces the NLL. Each objective also owns
`gradient_weights`, its gradient rule for the fused path. loss = ce + alpha * aux.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from numloss.checks import check_bool, check_choice, check_float, check_type
from numloss.digits import IGNORE_INDEX, DigitPositions, DigitVocab, find_digits
from numloss.fused import check_aligned, compute_dtype, fused_loss, raise_not_finite
from numloss.losses.core import token_nll_and_digit_logits
from numloss.losses.del_terms import del_pushdown
from numloss.losses.number_tokens import slot_logits


@dataclass
class NumericLossOutput:
    """What every objective returns (tensors; counts and diagnostics are this call's, detached).

    loss = ce + alpha * aux; ce = NLL sum / num_tokens; aux = the objective's term before alpha
    (0 for MLE). digit_entropy, digit_logit_mean, pushdown_share and digit_target_prob are means
    over the digit slots (0 without any): the 10-digit softmax entropy, the mean raw digit logit,
    the share where the DEL term pushes the target down (DEL's own term, with its own options such
    as `sigmoid_input`; for every other objective, raw DEL's term at these logits), the target
    digit's probability.
    """

    loss: torch.Tensor
    ce: torch.Tensor
    aux: torch.Tensor
    num_tokens: torch.Tensor
    num_digits: torch.Tensor
    digit_entropy: torch.Tensor | None = None
    digit_logit_mean: torch.Tensor | None = None
    pushdown_share: torch.Tensor | None = None
    digit_target_prob: torch.Tensor | None = None


def check_number(
    objective: str, name: str, value: Any, low: float = 0.0, high: float = math.inf, **open_ends
) -> float:
    """`value` as a float in range and within float32 (the loss is computed there), or a one-line
    error naming the option; a string or a bool is refused, never converted."""
    high = min(high, torch.finfo(torch.float32).max)
    return check_float(f"{objective}: {name}", value, low, high, **open_ends)


def _as_count(
    value: int | float | torch.Tensor | None, fallback: torch.Tensor, name: str
) -> torch.Tensor:
    """A step-wide count as a float32 tensor on the device of `fallback`, at least 1."""
    if value is None:
        return fallback.to(torch.float32).clamp_min(1.0)
    tensor = torch.is_tensor(value) and value.dtype != torch.bool and not value.is_complex()
    if not tensor and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise TypeError(
            f"{name} must be a number or a one-element tensor (a count of the whole optimizer"
            f" step), got {value!r} ({type(value).__name__})"
        )
    if tensor and value.is_meta:
        raise ValueError(f"{name} is a tensor on the meta device (no value): pass the step's count")
    count = torch.as_tensor(value.detach() if tensor else float(value))
    count = count.to(device=fallback.device, dtype=torch.float32)
    if count.numel() != 1:
        raise ValueError(f"{name} must be a scalar, got shape {tuple(count.shape)}")
    count = count.reshape(())
    if not bool(torch.isfinite(count)):
        raise ValueError(f"{name} must be a finite count, got {float(count)}")
    if bool(count < fallback.to(torch.float32)):
        raise ValueError(
            f"{name}={float(count):g} is smaller than the {int(fallback)} counted in this call:"
            " it must count the whole optimizer step (all micro-batches, all ranks)"
        )
    return count.clamp_min(1.0)  # an empty batch contributes zero; dividing by 1 keeps it finite


@torch.no_grad()
def digit_diagnostics(
    loss_fn: NumericLoss, digit_logits: torch.Tensor, targets: torch.Tensor, support: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(digit_entropy, digit_logit_mean, pushdown_share, digit_target_prob) from the [K, 10]
    slot logits the pass already has (zeros when K = 0; see `NumericLossOutput`)."""
    if not digit_logits.shape[0]:
        zero = torch.zeros((), device=digit_logits.device)
        return zero, zero, zero, zero
    log_p = torch.log_softmax(digit_logits, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1).mean()
    held = support.to(digit_logits.dtype)
    logit_mean = ((digit_logits * held).sum(-1) / held.sum(-1)).mean()
    pushdown_share = loss_fn.pushdown(digit_logits, targets, support).float().mean()
    target_prob = log_p.gather(1, targets[:, None]).exp().mean()
    return entropy, logit_mean, pushdown_share, target_prob


class NumericLoss(nn.Module):
    """Base of every objective: `loss_fn(logits, labels) -> NumericLossOutput`; its options are
    `__init__`'s keywords, checked when built and when assigned (`loss_fn.alpha = -1` raises)."""

    name: str = ""
    default_alpha: float = 0.0
    #: False for objectives that reshape the token loss instead of adding a weighted term
    takes_alpha: bool = True
    #: built with `embedding=<the model's output-embedding matrix>` (numloss train passes it)
    needs_output_embedding: bool = False
    #: what aux is divided by; digit objectives take it as an option
    normalize: str = "tokens"
    #: the `normalize` values the objective accepts (none: no `normalize` option)
    normalizations: tuple[str, ...] = ()
    #: the values each choice option may take
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {}

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        ignore_index: int = IGNORE_INDEX,
        check_finite: bool = True,
    ) -> None:
        super().__init__()
        if alpha is not None and not self.takes_alpha:
            raise TypeError(f"{self.name} has no alpha: it adds no weighted term to the token loss")
        check_type("vocab", vocab, DigitVocab, "a numloss.DigitVocab (DigitVocab.from_tokenizer)")
        self.validate_options({"alpha": alpha})
        self.vocab = vocab
        self.alpha = float(self.default_alpha if alpha is None else alpha)
        self.ignore_index = ignore_index
        self.check_finite = check_finite
        # the columns gathered at number positions: the ten digits, then multi-digit tokens
        self.register_buffer("number_columns", vocab.number_table().columns, persistent=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # An option set at any time (in __init__ or later) is checked with the other options
        # already set, so cross-option rules (DIST2's point_ends_run needs place_weight) hold too.
        options = type(self).option_names()
        if name in options and name != "embedding":
            current = {
                key: getattr(self, key) for key in options if key != name and key in vars(self)
            }
            type(self).validate_options({**current, name: value})
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        if name == "as_compute_loss_func":
            raise AttributeError(
                "as_compute_loss_func moved to the Trainer glue: use"
                " numloss.hf.compute_loss_func(loss_fn)"
            )
        return super().__getattr__(name)

    @classmethod
    @functools.cache
    def option_names(cls) -> tuple[str, ...]:
        """Keyword options `build_loss` accepts for this objective (its own and the base's)."""
        names: list[str] = []
        for klass in cls.__mro__:
            if issubclass(klass, NumericLoss) and "__init__" in vars(klass):
                for name, parameter in inspect.signature(klass.__init__).parameters.items():
                    if parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                        continue
                    if name not in ("self", "vocab") and name not in names:
                        names.append(name)
        return tuple(name for name in names if cls.takes_alpha or name != "alpha")

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Raise a one-line ValueError for an option value this objective refuses (needs no
        vocabulary or model, so config validation calls it before anything loads)."""
        if options.get("alpha") is not None:
            check_number(cls.name, "alpha", options["alpha"])
        if "check_finite" in options:
            check_bool(f"{cls.name}: check_finite", options["check_finite"])
        choices = (
            {**cls.choices, "normalize": cls.normalizations} if cls.normalizations else cls.choices
        )
        for key, allowed in choices.items():
            if key in options:
                check_choice(f"{cls.name}: {key}", options[key], allowed)

    @property
    def token_count_suffices(self) -> bool:
        """True when the step's token count alone (`num_items_in_batch`) makes the loss exact, and
        aux is a sum over tokens / N_tok (`aux_per_token`, for logging step-wide means): a digit
        term divided by the token count, or none (MLE, whatever its `normalize` says)."""
        return self.normalize == "tokens" or type(self).digit_terms is NumericLoss.digit_terms

    aux_per_token = token_count_suffices

    def extra_repr(self) -> str:
        hidden = ("embedding", "ignore_index", "check_finite")
        shown = [name for name in self.option_names() if name not in hidden]
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)

    # -- hooks ----------------------------------------------------------------------------------
    def digit_weights(self, digits: DigitPositions) -> torch.Tensor:
        """Place weight u [K] (float32) of each digit position; 1 unless the objective weighs
        places."""
        return torch.ones(digits.count, dtype=torch.float32, device=digits.index.device)

    def digit_terms(
        self,
        digit_logits: torch.Tensor,
        digit_targets: torch.Tensor,
        weights: torch.Tensor,
        digit_nll: torch.Tensor,
        support: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """Per-digit extra terms [K], or None; `support` [K, 10] (None: all) marks the digits each
        slot can hold (the others have probability 0)."""
        return None

    def pushdown(
        self,
        digit_logits: torch.Tensor,
        digit_targets: torch.Tensor,
        support: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Where raw DEL's term would push the target digit down [K] (bool), logged by every
        objective as `pushdown_share`; DEL overrides it with its own options."""
        return del_pushdown(digit_logits, digit_targets, support=support)

    def number_terms(
        self, number_logits: torch.Tensor, digits: DigitPositions
    ) -> torch.Tensor | None:
        """Per number-token terms [P] at `level="token"` from `number_logits` [P, C], or None."""
        return None

    @property
    def scores_tokens(self) -> bool:
        """True when the numeric term is one per number token (`level="token"`), not per digit."""
        return False

    def count_digits(self, labels: torch.Tensor) -> torch.Tensor:
        """The objective's N_dig of aligned `labels` (digit slots, or number tokens at
        `level="token"`): what a trainer sums over a step as `num_digits_in_batch`."""
        digits = find_digits(labels, self.vocab, None, self.ignore_index)
        return torch.tensor(self._terms(digits), device=labels.device)

    def _terms(self, digits: DigitPositions) -> int:
        """How many terms the objective scores on `digits`: number tokens or digit slots."""
        return digits.token_count if self.scores_tokens else digits.count

    def transport_embedding(
        self, device: torch.device, dtype: torch.dtype, width: int
    ) -> torch.Tensor | None:
        """Unit-length rows [V, H] of a cost embedding (no gradient) for logits of `width`
        columns, or None: no transport cost (EMO's d_t = 1 - <E[y_t], q_t @ E>)."""
        return None

    def token_loss(
        self, nll: torch.Tensor, valid: torch.Tensor, cost: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(per-token loss replacing the NLL [N], reported term [N]), both 0 where not `valid`, or
        None for the NLL; `cost` is the transport cost [N] of `transport_embedding`."""
        return None

    def gradient_weights(
        self, nll: torch.Tensor, cost: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """Per-token (a_t, b_t) with dloss/dnll_t = c * a_t and dloss/dcost_t = c * b_t for one c,
        which the fused path uses in forward; None makes it recompute the logits in backward."""
        if type(self).token_loss is not NumericLoss.token_loss:
            return None
        return torch.ones_like(nll), None

    # -- the call -------------------------------------------------------------------------------
    def forward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None = None,
        num_digits_in_batch: int | torch.Tensor | None = None,
    ) -> NumericLossOutput:
        """Loss of aligned (unshifted) `logits` [B, T, V] or [N, V] against `labels` [B, T] or [N];
        the counts are the step's (default: this call's)."""
        check_aligned("logits", logits, labels, "V")
        if logits.device != labels.device or logits.is_meta:
            where = f"logits on {logits.device}, labels on {labels.device}"
            fix = (
                "the meta device holds no values: load the model's weights (or run it on a real"
                " device) before computing a loss"
                if logits.is_meta or labels.is_meta
                else "move the labels to the logits' device (labels.to(logits.device))"
            )
            raise ValueError(
                f"{self.name}: logits and labels must be on one device with values ({where}): {fix}"
            )
        flat_logits = logits.reshape(-1, logits.shape[-1])
        valid, targets, digits = self.aligned_targets(labels, logits.shape[-1])
        unit = self.transport_embedding(
            logits.device, compute_dtype(logits.dtype), logits.shape[-1]
        )
        nll, number_logits, row_finite, cost = token_nll_and_digit_logits(
            flat_logits, targets, valid, digits.rows, self.number_columns, unit
        )
        cost = cost if unit is not None else None
        counts = (num_items_in_batch, num_digits_in_batch)
        return self.combine(
            nll, valid, number_logits, digits, cost, *counts, row_finite, [("logits", flat_logits)]
        )

    #: the loss (and gradients) of `hidden @ lm_head_weight.T + lm_head_bias`, computed in chunks
    #: by `numloss.fused` without materialising those logits: `numloss.fused.fused_loss`
    from_hidden = fused_loss

    def aligned_targets(
        self, labels: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor, DigitPositions]:
        """(valid [N], targets [N] with 0 at ignored positions, the digit slots) of `labels`, for
        logits of `width` columns (both paths)."""
        digits = find_digits(labels, self.vocab, width, self.ignore_index)
        flat = labels.reshape(-1).long()
        valid = flat != self.ignore_index
        return valid, torch.where(valid, flat, torch.zeros_like(flat)), digits

    def combine(
        self,
        nll: torch.Tensor,
        valid: torch.Tensor,
        number_logits: torch.Tensor,
        digits: DigitPositions,
        cost: torch.Tensor | None,
        num_items_in_batch: int | torch.Tensor | None,
        num_digits_in_batch: int | torch.Tensor | None,
        row_finite: torch.Tensor,
        inputs: list[tuple[str, torch.Tensor | None]],
    ) -> NumericLossOutput:
        """Normalise and add up the per-token NLL, number-token logits [P, C] and transport cost
        (both paths). A non-finite loss, or non-finite rows at ignored positions (`row_finite`
        False there), raise naming which of the path's `inputs` holds NaN or inf.
        """
        num_tokens = valid.sum()
        digit_logits, support = slot_logits(
            number_logits, digits, self.vocab.number_table(nll.device)
        )
        num_digits = torch.tensor(self._terms(digits), device=nll.device)
        weights = self.digit_weights(digits)
        token_count = _as_count(num_items_in_batch, num_tokens, "num_items_in_batch")
        digit_count = _as_count(
            num_digits_in_batch, self._digit_units(num_digits, weights), "num_digits_in_batch"
        )
        ce = nll.sum() / token_count
        loss = ce
        aux = torch.zeros((), dtype=torch.float32, device=nll.device)
        terms = self.number_terms(number_logits, digits) if self.scores_tokens else None
        if terms is None:
            # the full-vocabulary NLL of each slot's target digit: -log of the mass of the group's
            # tokens with that digit there (the token's NLL for a single digit, exactly)
            target_logit = number_logits[digits.row_of, digits.column]
            slot_target = digit_logits.gather(1, digits.target[:, None]).squeeze(1)
            gap = (target_logit - slot_target).to(nll.dtype)
            digit_nll = nll.index_select(0, digits.index) + gap
            terms = self.digit_terms(digit_logits, digits.target, weights, digit_nll, support)
        if terms is not None:
            aux = terms.sum() / (token_count if self.normalize == "tokens" else digit_count)
            loss = ce + self.alpha * aux
        reshaped = self.token_loss(nll, valid, cost)
        if reshaped is not None:
            token_loss, reported = reshaped
            loss = token_loss.sum() / token_count
            aux = reported.sum() / token_count
        if self.check_finite:
            if not bool(torch.isfinite(loss)):
                raise_not_finite(self.name, inputs, valid, None)
            if not bool(row_finite.all()):
                raise_not_finite(self.name, inputs, valid, torch.nonzero(~row_finite).squeeze(1))
        entropy, logit_mean, pushdown_share, target_prob = digit_diagnostics(
            self, digit_logits, digits.target, support
        )
        return NumericLossOutput(
            loss, ce, aux, num_tokens, num_digits, entropy, logit_mean, pushdown_share, target_prob
        )

    def _digit_units(self, num_digits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """This call's share of the digit denominator, in `count_digits`'s units."""
        return num_digits


def check_objective(loss_fn: Any) -> NumericLoss:
    """`loss_fn`, or a TypeError when it is not a numloss objective."""
    if not isinstance(loss_fn, NumericLoss):
        raise TypeError(
            "loss_fn must be a numloss objective (numloss.build_loss(name, vocab)), "
            f"got {type(loss_fn).__name__}"
        )
    return loss_fn


NORMALIZATIONS = ("digits", "tokens")


class DigitLoss(NumericLoss):
    """Base of the digit objectives: CE + alpha x (sum of per-digit terms / N_dig), or / N_tok
    with `normalize="tokens"` (exact from `num_items_in_batch` alone; needs its own alpha)."""

    normalizations: tuple[str, ...] = NORMALIZATIONS

    def __init__(
        self,
        vocab: DigitVocab,
        alpha: float | None = None,
        normalize: str = "digits",
        **base_options,
    ) -> None:
        super().__init__(vocab, alpha=alpha, **base_options)
        self.validate_options({"normalize": normalize, "alpha": alpha})
        self.normalize = normalize

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Also refuses `normalize="tokens"` without an alpha: the default alpha weighs a digit
        mean, several times larger than the per-token one."""
        super().validate_options(options)
        if options.get("normalize") == "tokens" and "alpha" in options and options["alpha"] is None:
            raise ValueError(
                f'{cls.name}: normalize="tokens" divides the term by the step\'s token count, but'
                f" the default alpha ({cls.default_alpha:g}) weighs the step's digit mean: pass"
                f" alpha explicitly, e.g. {cls.default_alpha:g} x your data's tokens per digit"
                " (numloss train logs the ratio)"
            )
