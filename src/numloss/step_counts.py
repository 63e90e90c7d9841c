"""The counts of one optimizer step (valid tokens and digit positions over all micro-batches and
ranks), and what a path that lacks them must refuse: a digit mean known only by its token count,
and context or sequence parallelism (one sequence split over ranks).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from numloss.losses.base import NumericLoss


def count_tokens_and_digits(labels: torch.Tensor, loss_fn: NumericLoss) -> torch.Tensor:
    """[scored tokens, digits as `loss_fn.count_digits` counts them] of aligned `labels` (long):
    what a step's `num_items_in_batch` / `num_digits_in_batch` sum over micro-batches and ranks."""
    tokens = labels.ne(loss_fn.ignore_index).sum()
    digits = torch.as_tensor(loss_fn.count_digits(labels)).to(tokens.device)
    return torch.stack([tokens, digits])


def reduce_step_counts(counts: torch.Tensor, batch_replicas: int = 1) -> torch.Tensor:
    """This rank's step counts ([tokens, digits], long) summed over the default process group,
    each batch once: `batch_replicas` ranks (the tensor-parallel degree) share each batch."""
    total = counts.clone()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if batch_replicas > 1:
        if bool((total % batch_replicas).any()):
            raise RuntimeError(
                f"step counts {total.tolist()} summed over ranks are not a multiple of the"
                f" {batch_replicas} ranks said to share each batch: the tensor-parallel ranks were"
                " given different batches"
            )
        total = total // batch_replicas
    return total


def refuse_split_sequences(where: str, cp_size: int, sp_size: int) -> None:
    """Raise NotImplementedError under context or sequence parallelism: a digit run, its places
    and the shift by one would straddle ranks, giving a wrong number."""
    if (cp_size or 1) > 1 or (sp_size or 1) > 1:
        raise NotImplementedError(
            f"{where} does not support context or sequence parallelism (cp_size={cp_size},"
            f" sp_size={sp_size}): the digit runs of a sequence would be split across ranks; use"
            " data parallelism (DDP, FSDP, DeepSpeed ZeRO) with cp_size=sp_size=1"
        )


def accelerate_sequence_split() -> tuple[int, int]:
    """(cp_size, sp_size) of the parallelism config accelerate was set up with, (1, 1) without
    one."""
    try:
        from accelerate.state import AcceleratorState
    except ModuleNotFoundError:  # the core install: without accelerate there is no such config
        return 1, 1
    config = AcceleratorState._shared_state.get("parallelism_config")
    return getattr(config, "cp_size", 1) or 1, getattr(config, "sp_size", 1) or 1


def has_digit_term(loss_fn: NumericLoss) -> bool:
    """True for objectives with a per-digit term (DEL, NTL, DIST2), whose `normalize` matters."""
    return type(loss_fn).digit_terms is not NumericLoss.digit_terms


def needs_step_digit_count(
    loss_fn: NumericLoss,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | float | None,
    num_digits_in_batch: torch.Tensor | int | None,
) -> bool:
    """True when `loss_fn` divides by the step's digit count, only its token count is known, and
    the step spans more than these `labels` (accumulation or several ranks); never in evaluation."""
    if num_items_in_batch is None or num_digits_in_batch is not None:
        return False
    if loss_fn.token_count_suffices:
        return False
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return True
    if not (
        torch.is_tensor(num_items_in_batch) or isinstance(num_items_in_batch, (int, float))
    ) or isinstance(num_items_in_batch, bool):
        return False  # not a count: the loss itself raises the error that says so
    local = int(labels.ne(loss_fn.ignore_index).sum())
    return float(num_items_in_batch) > local


def step_digits_refusal(where: str, loss_fn: NumericLoss, takes_digit_count: bool = False) -> str:
    """The one-line refusal of a path that knows the step's token count but not its digit count,
    naming what the objective divides by and the ways out."""
    normalize = getattr(loss_fn, "normalize", "digits")
    what = "sum of the place weights" if normalize == "weights" else "digit count"
    count_it = "pass num_digits_in_batch (numloss.step_counts.count_tokens_and_digits), "
    pass_it = count_it if takes_digit_count else ""
    return (
        f'{where}: {loss_fn.name} with normalize="{normalize}" divides by the {what} of the whole'
        " optimizer step, which this path does not receive (gradient accumulation or several"
        f' ranks); {pass_it}build the loss with normalize="tokens" or train with'
        ' numloss.hf.NumericTrainer ("tokens" takes its own alpha: the digit alpha x the data\'s'
        " tokens per digit)"
    )
