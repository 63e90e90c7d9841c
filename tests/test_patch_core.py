"""`numloss.patch` with the core install alone (torch, no transformers, no accelerate).

The model here is plain torch written the way transformers writes a causal LM (an output
embedding, `forward(input_ids, labels=...)` returning a dict with `logits`), so these tests run in
CI's venv that holds the bare wheel; tests/test_patch.py covers transformers models, peft and
accelerate.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import numloss
from numloss import DigitVocab, build_loss
from numloss.patch import is_patched

VOCAB = DigitVocab(digit_ids=range(10), decimal_point_id=10)
VOCAB_SIZE = 16


class Output(dict):
    """A dict whose keys are also attributes, like transformers' ModelOutput."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class ToyCausalLM(nn.Module):
    """Embedding -> one linear layer -> LM head: the causal-LM surface numloss.patch relies on."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB_SIZE, 8)
        self.body = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, VOCAB_SIZE, bias=False)

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> Output:
        logits = self.lm_head(torch.tanh(self.body(self.embed(input_ids))))
        loss = None
        if labels is not None:  # the model's own loss: plain next-token cross-entropy
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return Output(logits=logits, loss=loss)


def batch() -> dict[str, torch.Tensor]:
    input_ids = torch.tensor([[12, 1, 2, 13, 3, 10, 5, 14], [12, 7, 13, 4, 2, 14, 15, 15]])
    labels = input_ids.clone()
    labels[:, :3] = -100  # the prompt
    labels[1, 6:] = -100  # padding
    return {"input_ids": input_ids, "attention_mask": (labels != -100) | (input_ids != 15), "labels": labels}


def aligned(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels[:, 1:], (0, 1), value=-100)


@pytest.mark.parametrize("fused", [False, True])
def test_patch_makes_the_model_return_the_numloss_loss_and_unpatch_restores_it(fused):
    model, plain, data = ToyCausalLM(), ToyCausalLM(), batch()
    loss_fn = build_loss("del", VOCAB, alpha=0.5)
    own = model(**data).loss
    expected = loss_fn(plain(input_ids=data["input_ids"]).logits, aligned(data["labels"])).loss
    numloss.patch(model, loss_fn, fused=fused)
    assert is_patched(model)
    out = model(**data)
    assert torch.allclose(out.loss, expected, atol=1e-6)
    assert not torch.allclose(out.loss, own)  # the digit term changes the loss
    if fused:
        assert out.logits.shape[-2] == 0  # the [B, T, V] logits never exist
    out.loss.backward()
    expected.backward()
    assert torch.allclose(model.lm_head.weight.grad, plain.lm_head.weight.grad, atol=1e-6)
    numloss.unpatch(model)
    assert not is_patched(model)
    assert torch.allclose(model(**data).loss, own)


def test_a_wrapper_is_unwrapped_without_accelerate(monkeypatch):
    """Without accelerate the patch still finds the model inside a `.module` wrapper (DDP's form)."""
    import sys

    monkeypatch.setitem(sys.modules, "accelerate", None)  # as in the core install
    monkeypatch.setitem(sys.modules, "accelerate.utils", None)
    monkeypatch.setitem(sys.modules, "accelerate.state", None)
    model, data = ToyCausalLM(), batch()
    wrapped = nn.DataParallel(model)
    loss_fn = build_loss("mle", VOCAB)
    numloss.patch(wrapped, loss_fn)
    assert is_patched(model)
    expected = loss_fn(model.lm_head(torch.tanh(model.body(model.embed(data["input_ids"])))),
                       aligned(data["labels"])).loss
    assert torch.allclose(model(**data).loss, expected, atol=1e-6)
