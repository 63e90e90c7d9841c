"""Transcription of the published MixCE loss, for differential tests (not used by numloss).

bloomberg/MixCE-acl2023, commit 7f8f9b258c9fd3fd2cbc85b7599c89e1482e688c, gpt2.py,
`GPT2MIXModel.forward`: per-token CE (the model shifts inside), q = exp(-nll) without gradient,
loss = mixing_ratio * nll + (1 - mixing_ratio) * q * nll, then the masked mean (reduction "mean").
The mask here is labels != -100 after the shift (the original uses the shifted attention mask,
which marks the same positions when labels are -100 exactly on padding).
"""

from __future__ import annotations

import torch


def mixce(logits: torch.Tensor, labels: torch.Tensor, mixing_ratio: float) -> torch.Tensor:
    loss_fct = torch.nn.CrossEntropyLoss(reduction="none")
    shift_logits = logits[:, :-1, :].contiguous().view(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].contiguous().view(-1)
    mle_loss = loss_fct(shift_logits, shift_labels)
    mask = (shift_labels != -100).to(logits.dtype)
    with torch.no_grad():
        q = torch.exp(-mle_loss.detach())
    mle_loss = mixing_ratio * mle_loss + (1.0 - mixing_ratio) * q * mle_loss
    return (mle_loss * mask).sum() / (1e-15 + mask.sum())
