"""Hugging Face `Trainer` glue: causal shift, step-wide counts, per-term logging, fused head.

    trainer = NumericTrainer(loss_fn=build_loss("del", vocab), model=model, args=args,
                             train_dataset=data, data_collator=collator)

`NumericTrainer` shifts the labels (never the logits), divides every micro-batch by the valid
tokens and digit positions of the whole optimizer step (all micro-batches, all ranks), logs
`ce`, `aux`, `digit_entropy` and the digit diagnostics beside `loss`, and with `fused=True`
computes the loss inside the model's forward (`numloss.patch.patched`). `compute_loss_func`
serves a plain `Trainer`: it sees the step's token count only, so it refuses a digit mean.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from numloss.extras import needs

with needs("hf", "numloss.hf"):
    from transformers import Trainer

from numloss import heads
from numloss.checks import (
    ArgumentError,
    ArgumentTypeError,
    check_bool,
    check_float,
    check_int,
    check_type,
)
from numloss.digits import digit_coverage
from numloss.heads import *  # noqa: F403 - re-exported (see __all__)
from numloss.heads import model_logits
from numloss.losses.base import NumericLoss, NumericLossOutput, check_objective
from numloss.patch import patched
from numloss.step_counts import (  # the first two and reduce_step_counts re-exported (__all__)
    count_tokens_and_digits,
    has_digit_term,
    needs_step_digit_count,
    reduce_step_counts,
    refuse_split_sequences,
    step_digits_refusal,
)
from numloss.textio import utf8_path

# Slots of the on-device logging accumulator (float64 so long intervals do not lose counts).
_CE_SUM, _TOKENS, _AUX_SUM, _AUX_COUNT, _ENTROPY_SUM, _DIGITS = range(6)
#: the per-digit diagnostics of `NumericLossOutput`, logged as means over the interval's digit
#: positions in accumulator slots 6, 7, 8 (after the six above); then, for `digit_share`, the
#: label digits that get the numeric term and all label digits
DIGIT_DIAGNOSTICS = ("digit_logit_mean", "pushdown_share", "digit_target_prob")
_SCORED, _LABEL_DIGITS = 6 + len(DIGIT_DIAGNOSTICS), 7 + len(DIGIT_DIAGNOSTICS)
_SLOTS = _LABEL_DIGITS + 1
_DIAGNOSTIC_FIELDS = ("digit_entropy", *DIGIT_DIAGNOSTICS)


def shift_labels(inputs: dict[str, Any], ignore_index: int = -100) -> torch.Tensor:
    """Labels aligned with a causal LM's logits: a collator's `shift_labels` as they are, else
    ``labels[..., 1:]`` with `ignore_index` appended (the logits need no slicing)."""
    if "shift_labels" in inputs:
        return inputs["shift_labels"]
    if "labels" not in inputs:
        raise ValueError(
            "the batch has no 'labels': NumericTrainer needs token labels (-100 for prompt and "
            "padding positions); use a collator that sets them"
        )
    labels = inputs["labels"]
    return F.pad(labels[..., 1:], (0, 1), value=ignore_index)


class NumericComputeLoss:
    """`loss_fn` as a `compute_loss_func(outputs, labels, num_items_in_batch=None) -> loss`:
    shifts the labels and divides by the step's token count; `last` is the latest output."""

    def __init__(self, loss_fn: NumericLoss) -> None:
        check_objective(loss_fn)
        self.loss_fn = loss_fn
        self.last: NumericLossOutput | None = None
        # digit positions and diagnostic sums since `pop_diagnostics`, kept on the device so a
        # training step never waits for them
        self._diagnostic_sums: torch.Tensor | None = None

    def pop_diagnostics(self) -> dict[str, float]:
        """Means over the digit positions since the last call of `digit_entropy` and the digit
        diagnostics ({} without digits), for `DigitDiagnosticsCallback`."""
        if self._diagnostic_sums is None:
            return {}
        digits, *sums = self._diagnostic_sums.tolist()
        self._diagnostic_sums = None
        if not digits:
            return {}
        return {name: total / digits for name, total in zip(_DIAGNOSTIC_FIELDS, sums, strict=True)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.loss_fn!r})"

    def __call__(
        self,
        outputs: Any,
        labels: torch.Tensor | None,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        if labels is None:
            raise ValueError(
                "compute_loss_func got no labels: the batch needs token labels (-100 for prompt and"
                " padding positions); use a collator that sets them"
            )
        logits = model_logits(outputs)
        aligned = F.pad(labels[..., 1:], (0, 1), value=self.loss_fn.ignore_index).to(logits.device)
        if needs_step_digit_count(self.loss_fn, aligned, num_items_in_batch, None):
            raise ValueError(step_digits_refusal("compute_loss_func", self.loss_fn))
        self.last = self.loss_fn(logits, aligned, num_items_in_batch=num_items_in_batch)
        with torch.no_grad():
            digits = self.last.num_digits.double()
            sums = [getattr(self.last, name).double() * digits for name in _DIAGNOSTIC_FIELDS]
            update = torch.stack([digits, *sums])
            self._diagnostic_sums = (
                update if self._diagnostic_sums is None else self._diagnostic_sums + update
            )
        return self.last.loss


def compute_loss_func(loss_fn: NumericLoss) -> NumericComputeLoss:
    """A `compute_loss_func` for `transformers.Trainer` and TRL's trainers: exact for objectives
    normalised by tokens; `normalize="digits"` refuses a step wider than one micro-batch."""
    return NumericComputeLoss(loss_fn)


#: the largest float32: a learning rate beyond it is infinite in the weights' own dtype
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _check_trainer_arguments(kwargs: dict[str, Any]) -> None:
    """One line for what `Trainer` would take and fail on later (or take silently): args that are
    not TrainingArguments (a dict), no model, a learning rate that is NaN or overflows float32,
    gradient accumulation below 1, label smoothing (which NumericTrainer's loss_fn would ignore)."""
    from transformers import TrainingArguments

    model = kwargs.get("model")
    if model is None and kwargs.get("model_init") is None:
        raise ArgumentTypeError(
            "NumericTrainer: model is None: pass a model"
            " (AutoModelForCausalLM.from_pretrained(...)) or a model_init"
        )
    if isinstance(model, type):
        raise ArgumentTypeError(
            f"NumericTrainer: model is the class {model.__name__}, not a model: pass an instance "
            f"({model.__name__}.from_pretrained(...))"
        )
    args = kwargs.get("args")
    if args is not None:
        check_type(
            "NumericTrainer: args",
            args,
            TrainingArguments,
            "a transformers TrainingArguments (TrainingArguments(**options))",
        )
        check_training_arguments(args)


def check_training_arguments(args: Any, where: str = "NumericTrainer: args.") -> None:
    """ArgumentError naming `where` + the field for TrainingArguments NumericTrainer cannot train
    with: a learning rate that is NaN or overflows float32, gradient accumulation or a batch below
    1, label smoothing (loss_fn computes the loss and would ignore it)."""
    check_float(f"{where}learning_rate", args.learning_rate, 0, _FLOAT32_MAX)
    check_int(f"{where}gradient_accumulation_steps", args.gradient_accumulation_steps, 1)
    check_int(f"{where}per_device_train_batch_size", args.per_device_train_batch_size, 1)
    if args.label_smoothing_factor != 0:
        raise ArgumentError(
            f"{where}label_smoothing_factor is {args.label_smoothing_factor}, but loss_fn computes"
            " the loss and would ignore it: set it to 0 (smoothing is not one of numloss's"
            " objectives)"
        )


def check_training_data(args: Any, dataset: Any, ignore_index: int = -100) -> None:
    """ArgumentError for training data a run cannot learn from as configured: no examples, a
    global batch (per_device_train_batch_size x gradient_accumulation_steps x processes) larger
    than the examples (each step would use fewer than it says), or tokenised rows whose labels are
    all `ignore_index` (the loss is 0 and nothing is learnt). Datasets without a length, or
    without a `labels` column (a collator makes them), are checked as far as they can be."""
    if not hasattr(dataset, "__len__"):
        return
    examples = len(dataset)
    if examples == 0:
        raise ArgumentError("train_dataset is empty: pass at least one training example")
    batch, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    processes = args.world_size
    if batch * accumulation * processes > examples:
        raise ArgumentError(
            f"the global batch per_device_train_batch_size {batch} x gradient_accumulation_steps"
            f" {accumulation} x {processes} process(es) = {batch * accumulation * processes} is"
            f" larger than the {examples} training examples, so each step would use only"
            f" {examples}: lower them to a product of at most {examples}"
        )
    for index in range(examples):
        row = dataset[index]
        labels = row.get("labels") if isinstance(row, dict) else None
        if labels is None:
            return
        values = labels.tolist() if torch.is_tensor(labels) else labels
        if any(int(label) != ignore_index for label in values):
            return
    raise ArgumentError(
        f"every label of the {examples} training examples is ignore_index ({ignore_index}): nothing"
        " would be learnt (the loss is 0); check the labels (a prompt that fills the length limit"
        " leaves no answer token to learn)"
    )


class NumericTrainer(Trainer):
    """`transformers.Trainer` that trains with `loss_fn`, normalised by the step-wide token and
    digit counts (batch 8 and 2 x 4 accumulation give one update); `fused`: chunked LM head."""

    # divided by step-wide counts already: the Trainer must not divide by accumulation steps
    loss_is_scaled_for_ga = True

    def __init__(self, *, loss_fn: NumericLoss, fused: bool = False, **trainer_kwargs: Any) -> None:
        check_bool("NumericTrainer: fused", fused)
        check_objective(loss_fn)
        if trainer_kwargs.get("compute_loss_func") is not None:
            raise TypeError(
                "NumericTrainer computes the loss with loss_fn; do not pass compute_loss_func"
            )
        _check_trainer_arguments(trainer_kwargs)
        super().__init__(**trainer_kwargs)
        if self.train_dataset is not None:  # after super(): SFTTrainer tokenises it there
            check_training_data(self.args, self.train_dataset, loss_fn.ignore_index)
        self.loss_fn = loss_fn.to(self.args.device)
        self.fused = fused
        from numloss.diagnostics import PushdownWarning

        self.add_callback(PushdownWarning(loss_fn))
        # digit count of the current optimizer step, set in get_batch_samples
        self._step_digits: torch.Tensor | None = None
        self._log_sums = torch.zeros(_SLOTS, dtype=torch.float64, device=self.args.device)
        self._aux_per_token = loss_fn.aux_per_token

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """`Trainer.save_model` through `numloss.textio.utf8_path`, so the tokenizer (Rust) saves
        into a folder whose name this locale cannot encode (checkpoints and final/ alike)."""
        with utf8_path(output_dir if output_dir is not None else self.args.output_dir) as folder:
            super().save_model(folder, _internal_call)

    def count_tokens_and_digits(self, inputs: dict[str, Any]) -> torch.Tensor:
        """[valid tokens, digit positions] of one micro-batch after the shift, as a long tensor;
        also adds up the label digits that get the numeric term for the `digit_share` log."""
        labels = shift_labels(inputs, self.loss_fn.ignore_index)
        scored, total = digit_coverage(labels, self.loss_fn.vocab, self.loss_fn.ignore_index)
        self._log_sums[_SCORED] += scored
        self._log_sums[_LABEL_DIGITS] += total
        return count_tokens_and_digits(labels, self.loss_fn)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The micro-batches of one step and its token count; the digit count goes to
        `self._step_digits`. Both are summed over ranks with `average_tokens_across_devices`."""
        batch_samples = list(itertools.islice(epoch_iterator, num_batches))
        self._step_digits = None
        if not batch_samples or not all(
            "labels" in b or "shift_labels" in b for b in batch_samples
        ):
            return batch_samples, None
        counts = sum(self.count_tokens_and_digits(batch).to(device) for batch in batch_samples)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            counts = reduce_step_counts(counts, batch_replicas=self.get_tp_size())
        self._step_digits = counts[1]
        return batch_samples, counts[0]

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """Shift the labels, run the model and apply `loss_fn`; evaluation batches are normalised
        by themselves (the step's digit count would be the last training step's)."""
        refuse_split_sequences("NumericTrainer", self.get_cp_size(), self.get_sp_size())
        labels = shift_labels(inputs, self.loss_fn.ignore_index)
        inputs = {k: v for k, v in inputs.items() if k not in ("labels", "shift_labels")}
        step_wide = num_items_in_batch is not None and model.training
        if not step_wide:
            num_items_in_batch = None
        num_digits = self._step_digits if step_wide else None
        out, outputs = self.numeric_loss(model, inputs, labels, num_items_in_batch, num_digits)
        loss = out.loss
        if model.training:
            self._accumulate_for_log(out, num_items_in_batch, num_digits)
        if step_wide and self.args.average_tokens_across_devices:
            # counts are global; DDP averages gradients over ranks, so undo that average
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        if return_outputs:
            outputs["loss"] = loss
            return loss, outputs
        return loss

    def numeric_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        labels: torch.Tensor,
        num_items_in_batch: torch.Tensor | int | None,
        num_digits_in_batch: torch.Tensor | int | None,
    ) -> tuple[NumericLossOutput, Any]:
        """(loss output, model outputs) of one micro-batch with aligned `labels` [B, T]."""
        counts = {
            "num_items_in_batch": num_items_in_batch,
            "num_digits_in_batch": num_digits_in_batch,
        }
        if self.fused:
            # The loss is computed inside the model's forward, as its LM head's output, so that
            # the head's weight is whole under FSDP and ZeRO-3: numloss.patch's mechanism.
            def on_hidden(hidden: torch.Tensor, head: nn.Module, aligned: torch.Tensor) -> None:
                self.record_token_metrics(inputs, aligned, hidden=hidden, head=head)

            with patched(
                self.accelerator.unwrap_model(model), self.loss_fn, fused=True, on_hidden=on_hidden
            ) as state:
                outputs = model(**inputs, shift_labels=labels, **counts)
            # the loss as it came out of the wrapper (DDP, the DeepSpeed engine), on its autograd
            # path
            return dataclasses.replace(state.last, loss=outputs["loss"]), outputs
        outputs = model(**inputs)
        logits = model_logits(outputs)
        out = self.loss_fn(logits, labels, **counts)
        self.record_token_metrics(inputs, labels, logits=logits)
        return out, outputs

    def record_token_metrics(
        self,
        inputs: dict[str, Any],
        labels: torch.Tensor,
        logits: torch.Tensor | None = None,
        hidden: torch.Tensor | None = None,
        head: nn.Module | None = None,
    ) -> None:
        """Called after each loss with the logits (or, fused, the hidden states and head); a hook
        for subclasses that log more per-token metrics (`numloss.trl.NumericSFTTrainer`)."""

    def _accumulate_for_log(
        self,
        out: NumericLossOutput,
        num_items_in_batch: torch.Tensor | int | None,
        num_digits_in_batch: torch.Tensor | int | None,
    ) -> None:
        """Add this micro-batch's raw sums (this rank's share) to the logging accumulator."""
        with torch.no_grad():
            tokens = out.num_tokens.to(torch.float64)
            digits = out.num_digits.to(torch.float64)

            def denominator(step_count, call_count):
                count = call_count if step_count is None else torch.as_tensor(step_count)
                return count.to(device=tokens.device, dtype=torch.float64).clamp_min(1.0)

            token_den = denominator(num_items_in_batch, tokens)
            digit_den = denominator(num_digits_in_batch, digits)

            def per_digit(value: torch.Tensor | None) -> torch.Tensor:
                value = torch.zeros(()) if value is None else value
                return value.to(tokens.device).double() * digits

            aux_den, aux_count = (token_den, tokens) if self._aux_per_token else (digit_den, digits)
            update = torch.stack(
                [
                    out.ce.detach().double() * token_den,
                    tokens,
                    out.aux.detach().double() * aux_den,
                    aux_count,
                    per_digit(out.digit_entropy),
                    digits,
                    *(per_digit(getattr(out, name)) for name in DIGIT_DIAGNOSTICS),
                ]
            )
            self._log_sums[:_SCORED] += update.to(self._log_sums.device)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add the interval's means over all ranks of `ce` (per token), `aux` (per its count),
        `digit_entropy` and `DIGIT_DIAGNOSTICS` (per digit) and `digit_share` to the logs."""
        if "loss" in logs:
            sums = self._log_sums
            if self.args.world_size > 1:
                sums = self.accelerator.reduce(sums.clone(), reduction="sum")
            sums = sums.tolist()
            self._log_sums.zero_()
            if sums[_TOKENS] > 0:
                logs["ce"] = sums[_CE_SUM] / sums[_TOKENS]
                logs["aux"] = sums[_AUX_SUM] / sums[_AUX_COUNT] if sums[_AUX_COUNT] > 0 else 0.0
            if sums[_DIGITS] > 0:
                logs["digit_entropy"] = sums[_ENTROPY_SUM] / sums[_DIGITS]
                for slot, name in enumerate(DIGIT_DIAGNOSTICS, start=6):
                    logs[name] = sums[slot] / sums[_DIGITS]
            if sums[_LABEL_DIGITS] > 0:  # share of label digits that got the numeric term
                logs["digit_share"] = sums[_SCORED] / sums[_LABEL_DIGITS]
        super().log(logs, start_time)


# helpers shared with numloss.patch stay importable from here, where they always were
__all__ = [
    "NumericTrainer",
    "NumericComputeLoss",
    "compute_loss_func",
    "shift_labels",
    "count_tokens_and_digits",
    "has_digit_term",
    "reduce_step_counts",
    *heads.__all__,
]
