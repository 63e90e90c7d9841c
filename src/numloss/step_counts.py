"""The counts of one optimizer step (valid tokens and digit positions over all micro-batches and
ranks), and what a path that lacks them must refuse: a digit mean known only by its token count,
and context or sequence parallelism (one sequence split over ranks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from numloss.digits import label_classes
from numloss.losses.base import NumericLoss


def count_tokens_and_digits(labels: torch.Tensor, loss_fn: NumericLoss) -> torch.Tensor:
    """[scored tokens, digit positions] of aligned `labels`, as a long tensor: what a step's
    `num_items_in_batch` / `num_digits_in_batch` sum over its micro-batches (and ranks).

    Digit positions as the objective counts them when it says (`loss_fn.count_digits`).
    """
    tokens = labels.ne(loss_fn.ignore_index).sum()
    count_digits = getattr(loss_fn, "count_digits", None)
    if callable(count_digits):
        digits = torch.as_tensor(count_digits(labels)).to(tokens.device)
    else:
        classes = label_classes(labels, loss_fn.vocab, ignore_index=loss_fn.ignore_index)
        digits = ((classes >= 0) & (classes < 10)).sum()
    return torch.stack([tokens, digits])


def reduce_step_counts(counts: torch.Tensor, batch_replicas: int = 1) -> torch.Tensor:
    """This rank's step counts ([tokens, digits], long) summed over all ranks, each batch once.

    The sum runs over the default process group, which holds every rank whatever shards the
    model: DDP, FSDP and DeepSpeed ranks each see their own batch. `batch_replicas` ranks see
    the same batch (the tensor-parallel degree); the sum holds each of those batches that many
    times and is divided by it. Without an initialised process group the counts are this
    process's, unchanged. Context and sequence parallelism, which split one sequence over
    ranks, are refused where the loss is computed, not here.
    """
    total = counts.clone()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if batch_replicas > 1:
        if bool((total % batch_replicas).any()):
            raise RuntimeError(
                f"step counts {total.tolist()} summed over ranks are not a multiple of the {batch_replicas} "
                "ranks said to share each batch: the tensor-parallel ranks were given different batches"
            )
        total = total // batch_replicas
    return total


def refuse_split_sequences(where: str, cp_size: int, sp_size: int) -> None:
    """Raise NotImplementedError under context or sequence parallelism (cp_size or sp_size > 1).

    Those split one sequence over ranks: a digit run, its place values and the shift by one
    would straddle ranks, and every rank would count tokens of the same rows. Rather than a
    wrong number, a clear error.
    """
    if (cp_size or 1) > 1 or (sp_size or 1) > 1:
        raise NotImplementedError(
            f"{where} does not support context or sequence parallelism (cp_size={cp_size}, sp_size={sp_size}): "
            "the digit runs of a sequence would be split across ranks; use data parallelism "
            "(DDP, FSDP, DeepSpeed ZeRO) with cp_size=sp_size=1"
        )


def accelerate_sequence_split() -> tuple[int, int]:
    """(cp_size, sp_size) of the parallelism config accelerate was set up with, (1, 1) without one."""
    try:
        from accelerate.state import AcceleratorState
    except ModuleNotFoundError:  # the core install: without accelerate there is no such config
        return 1, 1
    config = AcceleratorState._shared_state.get("parallelism_config")
    return getattr(config, "cp_size", 1) or 1, getattr(config, "sp_size", 1) or 1


def has_digit_term(loss_fn: NumericLoss) -> bool:
    """True for objectives with a per-digit term (DEL, NTL, DIST2), whose `normalize` matters."""
    return type(loss_fn).digit_terms is not NumericLoss.digit_terms


def token_count_suffices(loss_fn: NumericLoss) -> bool:
    """True when the step's token count alone makes `loss_fn` exact across micro-batches and ranks:
    objectives without a digit term, and digit objectives built with `normalize="tokens"`."""
    declared = getattr(loss_fn, "token_count_suffices", None)
    if isinstance(declared, bool):
        return declared
    return not has_digit_term(loss_fn) or getattr(loss_fn, "normalize", "digits") == "tokens"


def needs_step_digit_count(
    loss_fn: NumericLoss,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | float | None,
    num_digits_in_batch: torch.Tensor | int | None,
) -> bool:
    """True when `loss_fn` divides by the step's digit count but only its token count is known.

    That is the case when a training step spans more than these (aligned) `labels`: gradient
    accumulation makes `num_items_in_batch` larger than the tokens counted here, and several
    ranks each see only their share (even when the Trainer counts tokens per rank). Evaluation
    (no `num_items_in_batch`) normalises each batch by itself and is never refused.
    """
    if num_items_in_batch is None or num_digits_in_batch is not None:
        return False
    if token_count_suffices(loss_fn):
        return False
    if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        return True
    if not (torch.is_tensor(num_items_in_batch) or isinstance(num_items_in_batch, (int, float))) or isinstance(
        num_items_in_batch, bool
    ):
        return False  # not a count: the loss itself raises the error that says so
    local = int(labels.ne(loss_fn.ignore_index).sum())
    return float(num_items_in_batch) > local


def step_digits_refusal(where: str, loss_fn: NumericLoss, takes_digit_count: bool = False) -> str:
    """The one-line refusal of a path that knows the step's token count but not its digit count.

    Names the objective's own `normalize` and what it divides by (DIST2's "weights": the sum of
    the place weights), and the ways out (passing the digit count where the path takes one)."""
    normalize = getattr(loss_fn, "normalize", "digits")
    what = "sum of the place weights" if normalize == "weights" else "digit count"
    pass_it = "pass num_digits_in_batch (numloss.step_counts.count_tokens_and_digits), " if takes_digit_count else ""
    return (
        f"{where}: {loss_fn.name} with normalize=\"{normalize}\" divides by the {what} of the whole "
        "optimizer step, which this path does not receive (gradient accumulation or several ranks); "
        f"{pass_it}build the loss with normalize=\"tokens\" or train with numloss.hf.NumericTrainer "
        "(\"tokens\" takes its own alpha: the digit alpha x the data's tokens per digit)"
    )


__all__ = [
    "count_tokens_and_digits",
    "reduce_step_counts",
    "refuse_split_sequences",
    "accelerate_sequence_split",
    "has_digit_term",
    "token_count_suffices",
    "needs_step_digit_count",
    "step_digits_refusal",
]
