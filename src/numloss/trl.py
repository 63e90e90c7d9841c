"""TRL integration: `NumericSFTTrainer`, TRL's `SFTTrainer` trained with a numloss objective.

    trainer = NumericSFTTrainer(loss_fn=build_loss("del", vocab), model=model, args=SFTConfig(...),
                                train_dataset=dataset, processing_class=tokenizer)

TRL's data preparation, packing and metrics stay; the loss is normalised step-wide as in
`NumericTrainer`. Chat data (`messages`) learns the assistant turns only, as `numloss train`
does, labelled by `numloss.data.tokenize.conversation_ids`, so stock templates without
`{% generation %}` markers work; `assistant_only=False` trains on every token, TRL's default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from numloss.extras import needs

with needs("trl", "numloss.trl"):  # tests/test_patch.py hides trl to check the message
    from trl import SFTTrainer

from numloss.checks import check_bool
from numloss.data.examples import Conversation
from numloss.data.tokenize import conversation_ids
from numloss.hf import NumericTrainer
from numloss.losses.base import NumericLoss

# rows of logits per chunk when computing TRL's metrics (bounds the float32 work buffer)
_METRIC_ROWS = 1024


@torch.no_grad()
def entropy_and_correct(
    labels: torch.Tensor,
    logits: torch.Tensor | None = None,
    hidden: torch.Tensor | None = None,
    head: nn.Module | None = None,
    ignore_index: int = -100,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of next-token entropies, top-1 hits, scored positions): TRL's `entropy` and
    `mean_token_accuracy`, from the logits or (fused) the hidden states and head, in chunks."""
    flat_labels = labels.reshape(-1)
    valid = flat_labels != ignore_index
    source = logits if logits is not None else hidden
    rows = source.reshape(-1, source.shape[-1])[valid.to(source.device)]
    targets = flat_labels[valid].to(source.device)
    entropy = torch.zeros((), dtype=torch.float32, device=source.device)
    correct = torch.zeros((), dtype=torch.long, device=source.device)
    for start in range(0, rows.shape[0], _METRIC_ROWS):
        chunk = rows[start : start + _METRIC_ROWS]
        if logits is None:
            chunk = F.linear(chunk, head.weight, head.bias)
        log_p = torch.log_softmax(chunk.float(), dim=-1)
        entropy += -(log_p.exp() * log_p).sum()
        correct += (chunk.argmax(-1) == targets[start : start + _METRIC_ROWS]).sum()
    return entropy, correct, valid.sum().to(source.device)


class NumericSFTTrainer(NumericTrainer, SFTTrainer):
    """`trl.SFTTrainer` whose loss is `loss_fn`, normalised step-wide like `NumericTrainer`;
    options that replace the loss are refused. `assistant_only`: chat learns assistant turns."""

    def __init__(
        self,
        *,
        loss_fn: NumericLoss,
        fused: bool = False,
        assistant_only: bool = True,
        **trainer_kwargs: Any,
    ) -> None:
        args = trainer_kwargs.get("args")
        check_bool("NumericSFTTrainer: assistant_only", assistant_only)
        if getattr(args, "assistant_only_loss", False):
            # numloss labels the assistant turns itself; TRL's path would need {% generation %}
            # markers
            assistant_only = True
            args = dataclasses.replace(args, assistant_only_loss=False)
            trainer_kwargs["args"] = args
        if assistant_only:
            tokenizer = trainer_kwargs.get("processing_class")
            for key in ("train_dataset", "eval_dataset"):
                if trainer_kwargs.get(key) is not None:
                    trainer_kwargs[key] = assistant_turns_only(trainer_kwargs[key], tokenizer)
        # label smoothing: NumericTrainer's own argument check refuses it
        if getattr(args, "loss_type", "nll") != "nll":
            raise ValueError(
                "NumericSFTTrainer computes the loss with loss_fn;"
                f" SFTConfig.loss_type={args.loss_type!r} would replace it: leave loss_type at"
                " 'nll'"
            )
        super().__init__(loss_fn=loss_fn, fused=fused, **trainer_kwargs)
        if getattr(self, "aux_loss_enabled", False):
            raise ValueError(
                "NumericSFTTrainer: the model adds a MoE router loss (router_aux_loss_coef), which"
                " the numloss objectives do not include; set SFTConfig.router_aux_loss_coef=0.0"
            )

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """NumericTrainer's loss; TRL's `num_tokens` counted as SFTTrainer counts it."""
        inputs["use_cache"] = False
        result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            if "attention_mask" in inputs:
                local = inputs["attention_mask"].sum()
            elif "position_ids" in inputs:  # padding-free: one packed row, no mask
                positions = inputs["position_ids"]
                local = torch.tensor(positions.size(1), device=positions.device)
            else:
                raise ValueError(
                    "NumericSFTTrainer: expected 'attention_mask' or 'position_ids' in the batch"
                )
            self._total_train_tokens += (
                self.accelerator.gather_for_metrics(local).sum().item() // self._tp_size
            )
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return result

    def record_token_metrics(self, inputs, labels, logits=None, hidden=None, head=None) -> None:
        """TRL's `entropy` and `mean_token_accuracy` of this micro-batch (all ranks)."""
        mode = "train" if self.model.training else "eval"
        entropy, correct, valid = entropy_and_correct(
            labels, logits, hidden, head, self.loss_fn.ignore_index
        )
        gather = self.accelerator.gather_for_metrics
        num_valid = gather(valid).sum()
        for name, total in (("entropy", entropy), ("mean_token_accuracy", correct)):
            mean = (gather(total).sum() / num_valid).item() if num_valid > 0 else 0.0
            self._metrics[mode][name].append(mean)


def assistant_turns_only(dataset: Any, tokenizer: Any) -> Any:
    """`dataset` (or a dict of them) with `messages` records tokenised to learn the assistant
    turns only; a dataset without `messages`, or already tokenised, is returned as it is."""
    if isinstance(dataset, dict):
        return {name: assistant_turns_only(part, tokenizer) for name, part in dataset.items()}
    columns = getattr(dataset, "column_names", None)
    if not columns or "messages" not in columns or "input_ids" in columns:
        return dataset
    if tokenizer is None:
        raise ValueError(
            "NumericSFTTrainer: chat data needs processing_class=<the tokenizer> to render its"
            " messages"
        )

    def tokenize(record: dict[str, Any]) -> dict[str, list[int]]:
        input_ids, labels = conversation_ids(
            Conversation.from_messages(record["messages"]), tokenizer
        )
        return {"input_ids": input_ids, "labels": labels}

    return dataset.map(tokenize, remove_columns=list(columns))


__all__ = ["NumericSFTTrainer", "assistant_turns_only", "entropy_and_correct"]
