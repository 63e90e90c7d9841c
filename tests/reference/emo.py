"""Transcriptions of the published EMO losses, for differential tests (not used by numloss).

* `emo_gpt2`: DRSY/EMO, commit 2370f6f553669857ff266eabb35c5064e5dc704d,
  language_modeling/gpt2.py, `GPT2MIXModel.forward`, branch `mode == 'emo'` (with the final
  masked mean). numloss `form="gpt2"`.
* `emo_adaptive`: PolyU-VCLab/DEL, commit 9f6ad5c747c5b9fc62b83f1804bd7c6ac99db1ab,
  train-qwen-deepseek.py, `custom_compute_loss.EMOloss` with the composition written beside it
  (`((mle_loss / (emo_loss + 1e-10)).detach() * emo_loss + mle_loss) * 0.5`, masked mean): the
  target probability is removed, detached, from q before the transport, i.e. d' = d + sg(q_y).
  The EMO README's instruction-tuning `emo_patch.py` `emo1_adaptive` is this form; that
  function is not in the search index (DRSY/EMO emo_patch.py there, commit
  54a78809671e3df015de3b89ff9f4a7e0e0e8ace, holds the capped form of `emoloss_pypi` mode 1).
  numloss `form="adaptive"` (default).
* `emoloss_pypi`: PyPI EMOLoss 0.0.3 (by the EMO authors), emo/loss.py, `EMOLoss(..., mode)`:
  mode 1 caps the detached ratio at 3 (numloss `form="gpt2", max_ratio=3`), mode 2 is
  sg(d / nll) * nll + d (numloss `form="gpt2", mode=2`).

All three shift inside (logits[:, :-1] predict labels[:, 1:]); the tests pass numloss the
shifted tensors. Variable names follow the originals.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _mle_and_shift(logits: torch.Tensor, labels: torch.Tensor):
    mask = labels[:, 1:].contiguous().view(-1)
    mask = (mask != -100).to(logits.dtype)
    loss_fct = torch.nn.CrossEntropyLoss(reduction="none")
    logits = logits[:, :-1, :].contiguous().view(-1, logits.shape[-1])
    labels = labels[:, 1:].contiguous().view(-1)
    mle_loss = loss_fct(logits, labels)
    return logits, labels, mask, mle_loss


def _cost(logits, labels, cost_embedding, adaptive: bool):
    labels_tmp = labels.clone()
    labels_tmp[labels_tmp == (-100)] = 0
    one_hot = F.one_hot(labels_tmp, num_classes=logits.shape[-1]).to(logits.dtype)
    stable_onehot = (one_hot + 1e-15) / torch.linalg.vector_norm((one_hot + 1e-15), ord=1, dim=-1, keepdim=True)
    embedding_matrix = cost_embedding.to(logits.dtype)
    embedding_matrix = embedding_matrix / torch.linalg.vector_norm(embedding_matrix, ord=2, dim=1, keepdim=True)
    p_contextual_repr = stable_onehot @ embedding_matrix
    q_grad = torch.log_softmax(logits, dim=-1).exp()
    if adaptive:
        gt_q = (q_grad * one_hot).detach()
        q_grad = q_grad - gt_q
    q_contextual_repr = q_grad @ embedding_matrix
    return 1 - torch.sum(p_contextual_repr * q_contextual_repr, dim=-1)


def emo_gpt2(logits: torch.Tensor, labels: torch.Tensor, cost_embedding: torch.Tensor) -> torch.Tensor:
    """DRSY/EMO language_modeling/gpt2.py mode 'emo'."""
    logits, labels, mask, mle_loss = _mle_and_shift(logits, labels)
    emo_loss = _cost(logits, labels, cost_embedding, adaptive=False)
    mle_loss = (mle_loss + (mle_loss / (emo_loss + 1e-10)).detach() * emo_loss) * 0.5
    return (mle_loss * mask).sum() / (1e-15 + mask.sum())


def emo_adaptive(logits: torch.Tensor, labels: torch.Tensor, cost_embedding: torch.Tensor) -> torch.Tensor:
    """PolyU-VCLab/DEL train-qwen-deepseek.py EMOloss and its composition."""
    logits, labels, mask, mle_loss = _mle_and_shift(logits, labels)
    emo_loss = _cost(logits, labels, cost_embedding, adaptive=True) * mask
    loss = ((mle_loss / (emo_loss + 1e-10)).detach() * emo_loss + mle_loss) * 0.5
    return (loss * mask).sum() / (1e-15 + mask.sum())


def emoloss_pypi(logits: torch.Tensor, labels: torch.Tensor, cost_embedding: torch.Tensor, mode: int = 1) -> torch.Tensor:
    """PyPI EMOLoss 0.0.3 `EMOLoss`."""
    logits, labels, mask, mle_loss = _mle_and_shift(logits, labels)
    emo_loss = _cost(logits, labels, cost_embedding, adaptive=False) * mask
    if mode == 1:
        cap = torch.ones_like(mle_loss, dtype=mle_loss.dtype, device=mle_loss.device) * 3.0
        loss = (torch.min((mle_loss / (emo_loss + 1e-10)).detach(), cap) * emo_loss + mle_loss) * 0.5
    else:
        loss = (emo_loss / (mle_loss + 1e-10)).detach() * mle_loss + emo_loss
    return (loss * mask).sum() / (1e-15 + mask.sum())
