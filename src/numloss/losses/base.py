"""The shared interface of every objective: inputs, options, normalisation, output type.

Digit objectives (DEL, NTL, DIST2; `DigitLoss`) implement `digit_terms`: one term per digit slot
from its ten digit logits; aux = sum / N_dig (or / N_tok). Token objectives (MixCE, EMO) implement
`token_loss`, the per-token loss that replaces the NLL. Each objective also owns
`gradient_weights`, its gradient rule for the fused path. loss = ce + alpha * aux.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

import torch
from torch import nn

from numloss.checks import check_bool
from numloss.digits import IGNORE_INDEX, DigitPositions, DigitVocab, find_digits
from numloss.fused import fused_loss
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
    objective: str,
    name: str,
    value: Any,
    low: float = 0.0,
    high: float = math.inf,
    low_open: bool = False,
) -> float:
    """`value` as a float, or a ValueError naming the option, value and range; a string or a
    bool is refused, so a quoted number in a config is an error rather than a conversion."""
    what = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
    if high == math.inf:
        what = f"> {low:g}" if low_open else f">= {low:g}"
    number = (
        float(value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool)
        else math.nan
    )
    if not math.isfinite(number) or number < low or number > high or (low_open and number == low):
        raise ValueError(f"{objective}: {name} must be a finite number {what}, got {value!r}")
    # the loss is computed in float32: it would be inf there
    if abs(number) > torch.finfo(torch.float32).max:
        raise ValueError(
            f"{objective}: {name} must be a finite number {what} within float32 (at most 3.4e38),"
            f" got {value!r}"
        )
    return number


def check_choice(objective: str, name: str, value: Any, choices: tuple) -> Any:
    """`value` if it is one of `choices`, else a ValueError listing them."""
    if value not in choices:
        raise ValueError(
            f"{objective}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}"
        )
    return value


def _as_count(
    value: int | float | torch.Tensor | None, fallback: torch.Tensor, name: str
) -> torch.Tensor:
    """A step-wide count as a float32 tensor on the device of `fallback`, at least 1."""
    if value is None:
        count = fallback.to(torch.float32)
    else:
        if torch.is_tensor(value) and value.dtype != torch.bool and not value.is_complex():
            if value.is_meta:
                raise ValueError(
                    f"{name} is a tensor on the meta device (no value): pass the step's count"
                )
            count = value.detach().to(device=fallback.device, dtype=torch.float32)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            count = torch.tensor(float(value), dtype=torch.float32, device=fallback.device)
        else:
            raise TypeError(
                f"{name} must be a number or a one-element tensor (a count of the whole optimizer"
                f" step), got {value!r} ({type(value).__name__})"
            )
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
    # An empty batch contributes zero; dividing by 1 keeps it finite.
    return count.clamp_min(1.0)


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


# option names per objective class, computed once (read on every attribute assignment)
_OPTION_NAMES: dict[type, list[str]] = {}


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
        if not isinstance(vocab, DigitVocab):
            raise TypeError(
                "vocab must be a numloss.DigitVocab (DigitVocab.from_tokenizer(tok)), got"
                f" {type(vocab).__name__}"
            )
        self.validate_options({"alpha": alpha, "check_finite": check_finite})
        self.vocab = vocab
        self.alpha = float(self.default_alpha if alpha is None else alpha)
        self.ignore_index = ignore_index
        self.check_finite = check_finite
        # the columns gathered at number positions: the ten digits, then multi-digit tokens
        self.register_buffer("number_columns", vocab.number_table().columns, persistent=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # An option set at any time (in __init__ or later) is checked with the other options
        # already set, so cross-option rules (DIST2's point_ends_run needs place_weight) hold too.
        options = _OPTION_NAMES.get(type(self)) or _OPTION_NAMES.setdefault(
            type(self), type(self).option_names()
        )
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

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Raise a one-line ValueError for an option value this objective refuses (needs no
        vocabulary or model, so config validation calls it before anything loads)."""
        if options.get("alpha") is not None:
            check_number(cls.name, "alpha", options["alpha"])
        if "check_finite" in options:
            check_bool(f"{cls.name}: check_finite", options["check_finite"])
        if "normalize" in options and cls.normalizations:
            check_choice(cls.name, "normalize", options["normalize"], cls.normalizations)
        for key, allowed in cls.choices.items():
            if key in options:
                check_choice(cls.name, key, options[key], allowed)

    @property
    def token_count_suffices(self) -> bool:
        """True when the step's token count alone (`num_items_in_batch`) makes the loss exact."""
        return self.normalize == "tokens"

    @property
    def aux_per_token(self) -> bool:
        """True when aux is a sum over tokens / N_tok (for logging step-wide means)."""
        return self.normalize == "tokens"

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"

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
        return torch.tensor(
            digits.token_count if self.scores_tokens else digits.count, device=labels.device
        )

    def transport_embedding(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """Unit-length rows [V, H] of a cost embedding (no gradient), or None: no transport cost."""
        return None

    def transport_cost(
        self, logits: torch.Tensor, valid: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor | None:
        """Per-token transport cost [N] from the full logits [N, V] (0 where not valid), or None."""
        return None

    def token_loss(
        self, nll: torch.Tensor, valid: torch.Tensor, cost: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(per-token loss replacing the NLL [N], reported term [N]), both 0 where not `valid`, or
        None for the NLL; `cost` is `transport_cost`'s."""
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
        flat_logits, flat_labels, digits = self._prepare(logits, labels)
        valid = flat_labels != self.ignore_index
        targets = torch.where(valid, flat_labels, torch.zeros_like(flat_labels))
        nll, number_logits, row_finite = token_nll_and_digit_logits(
            flat_logits, targets, valid, digits.rows, self.number_columns
        )
        cost = self.transport_cost(flat_logits, valid, targets)

        def diagnose(ignored_rows: torch.Tensor | None) -> NoReturn:
            self._raise_for_logits(flat_logits, valid, ignored_rows)

        return self.combine(
            nll,
            valid,
            number_logits,
            digits,
            cost,
            num_items_in_batch,
            num_digits_in_batch,
            row_finite=row_finite,
            diagnose=diagnose,
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
        """The loss (and gradients) of `hidden @ lm_head_weight.T + lm_head_bias` computed in
        chunks by `numloss.fused`, never materialising those logits."""
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
            raise TypeError(
                "logits must be a floating-point tensor, got"
                f" {getattr(logits, 'dtype', type(logits))}"
            )
        if not torch.is_tensor(labels) or labels.is_floating_point():
            raise TypeError(
                "labels must be an integer tensor of token ids (ignore_index for skipped positions)"
            )
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
        if logits.dim() not in (2, 3) or logits.shape[:-1] != labels.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not match:"
                " expected logits [B, T, V] with labels [B, T] (or [N, V] with [N]), already"
                " aligned (no shift)"
            )
        width = logits.shape[-1]
        self.vocab.check_width(width)
        digits = find_digits(labels, self.vocab, width, self.ignore_index)
        return logits.reshape(-1, width), labels.reshape(-1).long(), digits

    def combine(
        self,
        nll: torch.Tensor,
        valid: torch.Tensor,
        number_logits: torch.Tensor,
        digits: DigitPositions,
        cost: torch.Tensor | None,
        num_items_in_batch: int | torch.Tensor | None,
        num_digits_in_batch: int | torch.Tensor | None,
        row_finite: torch.Tensor | None = None,
        diagnose: Callable[[torch.Tensor | None], NoReturn] | None = None,
    ) -> NumericLossOutput:
        """Normalise and add up the per-token NLL, number-token logits [P, C] and transport cost
        (both paths). `diagnose(ignored_rows)` raises the calling path's error for a non-finite
        loss (None) or non-finite rows at ignored positions (`row_finite` False there).
        """
        num_tokens = valid.sum()
        digit_logits, support = slot_logits(
            number_logits, digits, self.vocab.number_table(nll.device)
        )
        num_digits = torch.tensor(
            digits.token_count if self.scores_tokens else digits.count, device=nll.device
        )
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
            digit_nll = nll.index_select(0, digits.index) + (target_logit - slot_target).to(
                nll.dtype
            )
            terms = self.digit_terms(digit_logits, digits.target, weights, digit_nll, support)
        if terms is not None:
            aux = terms.sum() / self._digit_denominator(token_count, digit_count)
            loss = ce + self.alpha * aux
        reshaped = self.token_loss(nll, valid, cost)
        if reshaped is not None:
            token_loss, reported = reshaped
            loss = token_loss.sum() / token_count
            aux = reported.sum() / token_count
        if self.check_finite and diagnose is not None:
            if not bool(torch.isfinite(loss)):
                diagnose(None)
            if row_finite is not None and not bool(row_finite.all()):
                diagnose(torch.nonzero(~row_finite).squeeze(1))
        entropy, logit_mean, pushdown_share, target_prob = digit_diagnostics(
            self, digit_logits, digits.target, support
        )
        return NumericLossOutput(
            loss, ce, aux, num_tokens, num_digits, entropy, logit_mean, pushdown_share, target_prob
        )

    def _digit_units(self, num_digits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """This call's share of the digit denominator, in `count_digits`'s units."""
        return num_digits

    def _digit_denominator(
        self, token_count: torch.Tensor, digit_count: torch.Tensor
    ) -> torch.Tensor:
        if self.normalize == "tokens":
            return token_count
        return digit_count

    def _raise_for_logits(
        self, logits: torch.Tensor, valid: torch.Tensor, ignored_rows: torch.Tensor | None
    ) -> NoReturn:
        if ignored_rows is not None:
            raise FloatingPointError(
                f"{self.name}: the logits hold NaN or inf at {ignored_rows.numel()} ignored"
                f" position(s) (first: flat position {int(ignored_rows[0])}); their loss gradient"
                " is zero, but back-propagating through them gives NaN weight gradients: fix the"
                " padding or attention mask that makes them (or pass check_finite=False)"
            )
        bad_rows = (~torch.isfinite(logits)).any(-1) & valid
        if bool(bad_rows.any()):
            where = int(torch.nonzero(bad_rows)[0])
            raise FloatingPointError(
                f"{self.name}: the logits hold NaN or inf at {int(bad_rows.sum())} scored"
                f" position(s) (first: flat position {where}); the model diverged or its output"
                " overflowed (lower the learning rate, check the inputs, or train in bf16 rather"
                " than fp16)"
            )
        raise FloatingPointError(
            f"{self.name}: the loss is not finite although the logits are; alpha={self.alpha} or a "
            "step-wide count may be wrong"
        )


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
                " the default "
                f"alpha ({cls.default_alpha:g}) weighs the step's digit mean: pass alpha"
                " explicitly, e.g. "
                f"{cls.default_alpha:g} x your data's tokens per digit (numloss train logs the"
                " ratio)"
            )

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, normalize={self.normalize!r}"
