"""`numloss.patch` with the core install alone (torch, no transformers, no accelerate).

The model here is plain torch written the way transformers writes a causal LM (an output
embedding, `forward(input_ids, labels=...)` returning a dict with `logits`), so these tests run in
CI's venv that holds the bare wheel; tests/test_patch.py covers transformers models, peft and
accelerate.
"""

from __future__ import annotations

import sys

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


def toy():
    """(model, an identical copy, a batch, the vocabulary) of the plain-torch causal LM."""
    return ToyCausalLM(), ToyCausalLM(), batch(), VOCAB


def llama():
    """The same from transformers: a tiny LlamaForCausalLM (tests/test_hf.py)."""
    from test_hf import VOCAB, collate, rows, tiny_llama

    return tiny_llama(), tiny_llama(), collate(rows()), VOCAB


@pytest.mark.parametrize("build", [toy, pytest.param(llama, marks=pytest.mark.hf)])
@pytest.mark.parametrize("fused, wrap", [(False, False), (True, False), (True, True)])
def test_patch_makes_the_model_return_the_numloss_loss_and_unpatch_restores_it(build, fused, wrap, monkeypatch):
    """`wrap`: inside nn.DataParallel (the class accelerate's extract_model_from_parallel unwraps,
    like DDP), which has no get_output_embeddings: the patch reaches the model by the wrapper's
    class, not by attribute lookup, and the wrapper's call gets the numloss loss. The toy runs
    without accelerate, as in the core install: the wrapper is unwrapped by its `.module`."""
    if build is toy:
        for name in ("accelerate", "accelerate.utils", "accelerate.state"):
            monkeypatch.setitem(sys.modules, name, None)
    model, plain, data, vocab = build()
    loss_fn = build_loss("del", vocab, alpha=0.5)
    own = model(**data).loss
    inputs = {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"]}
    expected = loss_fn(plain(**inputs).logits, F.pad(data["labels"][:, 1:], (0, 1), value=-100))  # shifted
    target = nn.DataParallel(model) if wrap else model
    assert hasattr(target, "get_output_embeddings") != wrap
    numloss.patch(target, loss_fn, fused=fused)
    assert is_patched(model) and is_patched(target)
    torch.testing.assert_close(target(**inputs).logits, plain(**inputs).logits)  # without labels: unchanged
    out = target(**data)
    torch.testing.assert_close(out.loss, expected.loss, rtol=1e-6, atol=1e-6)
    assert float(out.numloss_output.aux) == pytest.approx(float(expected.aux), rel=1e-6)
    assert not torch.allclose(out.loss, own)  # the digit term changes the loss
    if fused:
        assert out.logits.shape[-2] == 0  # the [B, T, V] logits never exist
    out.loss.backward()
    expected.loss.backward()
    for (key, a), b in zip(plain.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-7, msg=key)
    numloss.unpatch(target)
    assert not is_patched(model) and "forward" not in vars(model)
    torch.testing.assert_close(model(**data).loss, own)
    with pytest.raises(ValueError, match="not patched"):
        numloss.unpatch(model)
