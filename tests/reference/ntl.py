"""Transcription of the published Number Token Loss, for differential tests (not used by numloss).

ntloss 0.3.2 (PyPI), ntloss/core.py; the repository file is ai4sd/number-token-loss at commit
c1803888d75c0bcf217a03c0779b7462679cb5ba, ntloss/core.py (its `reweigh_fn` and the functions
below read the same as the package's; tests/test_losses.py also runs the installed package):
`NTLoss.forward`
(Wasserstein form, `setup_distance_lookup` without squash factor), `NTLossDotProduct.forward`
(MSE of the expected value, `setup_max_dist`), `AbstractNTLoss.reweigh_fn` and
`_apply_reduction(reduction="mean")` with unit loss weights, digit_level=True. The tokenizer
set-up is replaced by the ids of the ten digit tokens; no shift (ntloss takes aligned labels).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _setup(digit_ids: list[int], vocab_size: int):
    number_values = torch.full((vocab_size,), float("nan"))
    for value, token_id in enumerate(digit_ids):
        number_values[token_id] = float(value)
    is_number_token = ~torch.isnan(number_values)
    nan_id = torch.where(~is_number_token)[0][0].item()
    return number_values, is_number_token, nan_id


def _reweigh(logits, loss, number_token_positions, is_number_token, max_dist):
    nt_logits = logits[number_token_positions]
    nt_ids = torch.nonzero(is_number_token, as_tuple=False).squeeze(1)
    nt_probs = torch.softmax(nt_logits, dim=-1)
    nt_mass = nt_probs.index_select(dim=-1, index=nt_ids).sum(dim=-1)
    loss = loss * nt_mass
    return loss + 1.01 * max_dist.to(dtype=loss.dtype) * (1 - nt_mass)


def _mean(loss: torch.Tensor) -> torch.Tensor:
    loss_weights = torch.ones_like(loss)
    return torch.dot(loss.flatten(), loss_weights.flatten()) / loss_weights.sum().clamp_min(torch.finfo(loss.dtype).eps)


def ntl_was(logits: torch.Tensor, labels: torch.Tensor, digit_ids: list[int], reweigh: bool, ignore_index: int = -100):
    number_values, is_number_token, nan_id = _setup(digit_ids, logits.shape[-1])
    labels = labels.masked_fill(labels == ignore_index, nan_id)
    y = number_values[labels]
    number_token_positions = ~torch.isnan(y)
    if not number_token_positions.any():
        return torch.tensor(0, dtype=logits.dtype)
    num_ids = torch.nonzero(is_number_token, as_tuple=True)[0]
    vocab_to_dist_idx = torch.full((logits.shape[-1],), -1, dtype=torch.long)
    vocab_to_dist_idx[num_ids] = torch.arange(num_ids.size(0), dtype=torch.long)
    vals = number_values[is_number_token].unsqueeze(0)
    dist_lookup = torch.abs(vals - vals.t())
    max_dist = dist_lookup.max()
    nt_logits = logits[:, :, is_number_token]
    softmax_probs = F.softmax(nt_logits, dim=-1)
    abs_diff = dist_lookup.to(dtype=logits.dtype)[vocab_to_dist_idx[labels[number_token_positions]]]
    loss = (abs_diff * softmax_probs[number_token_positions]).sum(dim=-1)
    if reweigh:
        loss = _reweigh(logits, loss, number_token_positions, is_number_token, max_dist)
    return _mean(loss)


def ntl_mse(logits: torch.Tensor, labels: torch.Tensor, digit_ids: list[int], reweigh: bool, ignore_index: int = -100):
    number_values, is_number_token, nan_id = _setup(digit_ids, logits.shape[-1])
    labels = labels.masked_fill(labels == ignore_index, nan_id)
    y = number_values[labels]
    number_token_positions = ~torch.isnan(y)
    if not number_token_positions.any():
        return torch.tensor(0, dtype=logits.dtype)
    vals = number_values[is_number_token]
    max_dist = torch.maximum(
        torch.abs(F.mse_loss(vals.min(), vals.max())), torch.abs(F.mse_loss(vals.max(), vals.min()))
    )
    nt_logits = logits[:, :, is_number_token]
    softmax_probs = F.softmax(nt_logits, dim=-1)
    values = vals.to(dtype=logits.dtype)
    yhat = torch.sum(softmax_probs[number_token_positions] * values, dim=-1)
    loss = F.mse_loss(yhat, y[number_token_positions].to(logits.dtype), reduction="none")
    if reweigh:
        loss = _reweigh(logits, loss, number_token_positions, is_number_token, max_dist)
    return _mean(loss)
