"""Transcriptions of the author-side DIST2 loss, for differential tests (not used by numloss).

DIST2Loss has no official repository. The closest reference is the author-side `get_digit_loss`,
found in the search index in two variants (the index names neither repository nor path; its
file ids are given so they can be read again):

* `get_digit_loss_mean` (index file 48444934444, 4,455 chars, `target_temperature=4.0`):
  KL(q || p) at every position whose label is a digit token, mean over those positions; plus
  `get_sft_loss` (token CE mean). numloss `dist2` with `place_weight=False` (default).
* `get_digit_loss_weighted` (index file 59866784291, 2,399 chars, `target_temperature=2.0`): the
  same KL weighted by `pos`, the position of the digit from the end of its run of digit tokens
  (units 1, tens 2; '.' is not a digit token, so it ends a run), divided by the sum of `pos`;
  plus the given SFT loss. numloss `place_weight=True, point_ends_run=True, normalize="weights"`.

Both shift inside (logits[..., :-1] against labels[..., 1:]) and find digits as the vocabulary
entries matching ^[0-9]+$ (multi-digit tokens included; the tests use single-digit vocabularies,
where numloss and this agree). `tokenizer` needs only `.vocab` (a dict token -> id).
"""

from __future__ import annotations

import re

import torch
from torch import nn


def is_number_regex(input_str):
    return bool(re.match(r"^[0-9]+$", input_str))


def l2_dist(x, y):
    B, L = x.shape
    dist = (x.reshape(-1)[:, None] - y[None, :]) ** 2
    return dist.reshape(B, L, -1)


def get_sft_loss(logits, labels):
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss_fct = nn.CrossEntropyLoss()
    return loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))


def _kl_and_pos(logits, labels, tokenizer, target_temperature):
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    digits = [(k, v) for k, v in tokenizer.vocab.items() if is_number_regex(k)]
    digit_values = torch.tensor([int(k) for k, v in digits]).to(shift_labels.device).to(logits.dtype)
    digit_indices = torch.tensor([v for k, v in digits]).to(shift_labels.device)
    mask = shift_labels[..., None] == digit_indices[None, None, :]
    any_mask = mask.any(-1).flip(-1)
    x = any_mask.long()
    cumsum = torch.cumsum(x, dim=-1)
    reset_mask = x == 0
    reset_diff = torch.zeros_like(cumsum)
    reset_diff[:, 1:] = cumsum[:, :-1] * reset_mask[:, 1:].to(dtype=cumsum.dtype)
    adjusted_cumsum = cumsum - reset_diff.cummax(-1).values
    pos = adjusted_cumsum.flip(-1)
    data_targets = mask.long().argmax(-1)
    data_targets = digit_values[data_targets.reshape(-1)].reshape(*data_targets.shape)
    digit_targets = l2_dist(data_targets, digit_values)
    digit_targets = (-digit_targets / target_temperature).softmax(-1)
    digit_logits = shift_logits[..., digit_indices]
    loss_fn = nn.KLDivLoss(reduction="none")
    loss = loss_fn(digit_logits.log_softmax(-1), digit_targets)
    return loss.sum(-1), pos


def get_digit_loss_mean(logits, labels, tokenizer, target_temperature=4.0, beta: float = 1.0):
    sft_loss = get_sft_loss(logits, labels)
    loss, pos = _kl_and_pos(logits, labels, tokenizer, target_temperature)
    loss_coeff = (pos > 0).to(loss.dtype)
    loss = (loss * loss_coeff).sum() / loss_coeff.sum()
    return beta * loss + sft_loss


def get_digit_loss_weighted(loss_sft, tokenizer, logits, labels, target_temperature=2.0, beta: float = 1.0):
    loss, pos = _kl_and_pos(logits, labels, tokenizer, target_temperature)
    loss_coeff = pos.to(loss.dtype)
    loss = (loss * loss_coeff).sum() / loss_coeff.sum()
    return loss_sft + beta * loss
