"""Digit logits of number tokens of any length: the per-slot marginals of the digit objectives.

For a target of L digits, pool the logits of the number tokens of its length and spacing (its
*group*) by their j-th digit: z_j(k) = logsumexp of the group's logits whose j-th digit is k.
softmax(z_j) is the slot-j digit marginal; for L = 1 z is the ten digit logits themselves. A
digit no token of the group has in slot j gets probability 0 (logit 10^4 below the slot's
largest; `support` marks it). All of it works on the [P, C] number-token logits, never [N, V].
"""

from __future__ import annotations

import torch

from numloss.digits import DigitPositions, NumberTable

#: how far below a slot's largest logit an absent digit's logit sits: exp(-1e4) is 0 in float64
ABSENT_GAP = 1.0e4


def bucket_logsumexp(x: torch.Tensor, bucket: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(z [R, 10], support [10]): z[:, k] = logsumexp of x[:, bucket == k], each bucket shifted
    by its own detached maximum; an empty bucket gets support False and a logit ABSENT_GAP below
    the row's largest (probability 0, finite gradient). At least one bucket must be non-empty.
    """
    rows = x.shape[0]
    support = torch.bincount(bucket, minlength=10) > 0
    index = bucket.expand(rows, -1)
    with torch.no_grad():
        top = x.new_full((rows, 10), float("-inf")).scatter_reduce(1, index, x, reduce="amax")
        top = torch.where(support, top, torch.zeros_like(top))
    total = x.new_zeros((rows, 10)).scatter_add(1, index, torch.exp(x - top.gather(1, index)))
    z = torch.log(torch.where(support, total, torch.ones_like(total))) + top
    if not bool(support.all()):
        # a function of the present logits (not detached), so the value and its gradient agree;
        # the objectives' gradient with respect to a probability-0 digit is 0 anyway
        floor = z[:, support].amax(dim=1, keepdim=True)
        z = torch.where(support, z, (floor - ABSENT_GAP).expand_as(z))
    return z, support


def slot_logits(
    number_logits: torch.Tensor, digits: DigitPositions, table: NumberTable
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z [K, 10], support [K, 10]): the digit logits of every slot of `digits`, from the
    `number_logits` [P, C] at `digits.rows`; differentiable."""
    count = digits.count
    support = torch.ones((count, 10), dtype=torch.bool, device=number_logits.device)
    if len(table.groups) == 1:  # only the ten digits: z is their logits, unchanged
        return number_logits, support
    group_of_slot = table.group[digits.column]
    first_slots = digits.slot == 0  # a token's slots are consecutive, slot 0 first
    pieces: list[torch.Tensor] = []
    order: list[torch.Tensor] = []
    for g, (length, _, columns) in enumerate(table.groups):
        # [P_g] slot-0 indices
        firsts = torch.nonzero(first_slots & (group_of_slot == g)).squeeze(1)
        if not firsts.numel():
            continue
        x = number_logits[digits.row_of[firsts]][:, columns]  # [P_g, n_g]
        complete = table.complete[g]  # every digit string once: columns in digit order
        grid = x.view(-1, *([10] * length)) if complete else None
        for j in range(length):
            if complete:
                others = [d + 1 for d in range(length) if d != j]
                z = torch.logsumexp(grid, dim=others) if others else grid
            else:
                z, present = bucket_logsumexp(x, table.digits[columns, j])
                support[firsts + j] = present
            pieces.append(z)
            order.append(firsts + j)
    if not pieces:
        return number_logits.new_zeros((0, 10)), support
    stacked = torch.cat(pieces)
    where = torch.cat(order)
    inverse = torch.empty_like(where)
    inverse[where] = torch.arange(where.numel(), device=where.device)
    return stacked[inverse], support


def token_values(
    number_logits: torch.Tensor, digits: DigitPositions, table: NumberTable
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p [P, C], values [C], target value [P]) for the token-level variant: the softmax over all
    number tokens (NTL's `digit_level=False`) and the integers they spell."""
    p = torch.softmax(number_logits, dim=-1)
    values = table.values.to(device=number_logits.device, dtype=number_logits.dtype)
    target_column = digits.column[digits.slot == 0]  # one slot 0 per number-token position
    return p, values, values[target_column]
