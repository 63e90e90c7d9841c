"""Digit diagnostics while training: a warning when DEL's term works against CE, and a callback.

`PushdownWarning` warns once when DEL pushed the target digit down at most digit positions for
several logs in a row (NumericTrainer adds it for DEL); `DigitDiagnosticsCallback` logs the
diagnostics (and warns) for a plain `Trainer` using `numloss.hf.compute_loss_func(loss_fn)`.
"""

from __future__ import annotations

import logging
from typing import Any

from numloss.checks import check_float, check_int
from numloss.extras import needs
from numloss.losses.base import NumericLoss

with needs("hf", "numloss.diagnostics"):
    from transformers import TrainerCallback

logger = logging.getLogger("numloss.diagnostics")


def pushdown_message(
    loss_fn: NumericLoss, share: float, steps: int, logit_mean: float | None
) -> str:
    """The one warning line for a DEL run whose term keeps pushing the target digit down."""
    where = f"{share:.0%} of digit positions for {steps} logging steps in a row"
    mean = "" if logit_mean is None else f"; mean raw digit logit {logit_mean:.1f}"
    if getattr(loss_fn, "sigmoid_input", "raw") == "raw":
        return (
            "numloss: DEL's term pushes the target digit down, relative to the other digits, at"
            f" {where}{mean}: its sigmoid reads the raw digit logits, which a shift of all logits"
            " moves; set objective.options.sigmoid_input='centered' (build_loss('del', vocab,"
            " sigmoid_input='centered')) or lower alpha (docs/losses.md, 'When DEL works against"
            " CE')"
        )
    return (
        "numloss: DEL's term (sigmoid_input='centered') pushes the target digit down at"
        f" {where}{mean}: lower alpha (docs/losses.md, 'When DEL works against CE')"
    )


class PushdownWarning(TrainerCallback):
    """Warn once when `pushdown_share` stays above `threshold` for `patience` logging steps;
    silent for objectives other than DEL (theirs is what raw DEL *would* do)."""

    def __init__(self, loss_fn: NumericLoss, threshold: float = 0.5, patience: int = 3) -> None:
        self.loss_fn = loss_fn
        self.threshold = check_float("PushdownWarning: threshold", threshold, 0, 1, high_open=True)
        self.patience = check_int("PushdownWarning: patience", patience, 1)
        self.streak = 0
        self.warned = False

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = kwargs.get("logs") or {}  # the interval's means, as transformers passes them
        share = logs.get("pushdown_share")
        loss = self.loss_fn  # DEL with a term: the others' share is what raw DEL *would* do
        if share is None or getattr(loss, "name", "") != "del" or not getattr(loss, "alpha", 0):
            return
        self.streak = self.streak + 1 if share > self.threshold else 0
        if self.streak >= self.patience and not self.warned:
            self.warned = True
            logger.warning(
                pushdown_message(self.loss_fn, share, self.streak, logs.get("digit_logit_mean"))
            )


class DigitDiagnosticsCallback(PushdownWarning):
    """The digit diagnostics of a `NumericComputeLoss` for a plain `Trainer`: each log gets the
    interval's means (also in `state.log_history`), then warns as `PushdownWarning` does."""

    def __init__(self, compute_loss: Any, threshold: float = 0.5, patience: int = 3) -> None:
        loss_fn = getattr(compute_loss, "loss_fn", None)
        if not isinstance(loss_fn, NumericLoss) or not hasattr(compute_loss, "pop_diagnostics"):
            raise TypeError(
                "DigitDiagnosticsCallback needs the object numloss.hf.compute_loss_func(loss_fn)"
                " returned (the one passed as compute_loss_func), got"
                f" {type(compute_loss).__name__}"
            )
        super().__init__(loss_fn, threshold, patience)
        self.compute_loss = compute_loss

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = kwargs.get("logs")
        if logs is None or "loss" not in logs:
            return
        means = self.compute_loss.pop_diagnostics()
        logs.update(means)
        last = (getattr(state, "log_history", None) or [{}])[-1]
        if last.get("step") == getattr(state, "global_step", None) and "loss" in last:
            last.update(means)
        super().on_log(args, state, control, **kwargs)
