"""numloss.patch: model(**batch, labels=...) returns the numloss loss, step-wide counts, unpatch."""

from __future__ import annotations

import copy
import importlib
import sys

import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from transformers import Trainer

import numloss
from numloss import build_loss
from numloss.hf import shift_labels
from numloss.patch import is_patched
from test_hf import (
    VOCAB,
    collate,
    max_update_difference,
    numeric_trainer_update,
    params,
    rows,
    tiny_llama,
    train_args,
)


def test_a_patched_model_still_generates():
    """(Without labels the forward is the model's own: tests/test_patch_core.py.)"""
    model = numloss.patch(tiny_llama(), build_loss("del", VOCAB), fused=True)
    generated = model.generate(collate(rows())["input_ids"][:1, :4], max_new_tokens=3, do_sample=False, pad_token_id=39)
    assert generated.shape == (1, 7)


@pytest.mark.parametrize("driver", ["Trainer", "Trainer, fused", "a loop passing both counts", "accelerate, fused"])
def test_a_patched_model_takes_numeric_trainers_step(driver, tmp_path):
    """One SGD step on rows() equals NumericTrainer's (8 rows at once): transformers.Trainer passes
    num_items_in_batch to the patched forward (2 x 4 accumulation, normalize="tokens"); a plain
    loop over 4 micro-batches of 2 passes the step's token and digit counts; accelerate's
    prepare/backward wraps one batch of 8."""
    options = {} if "loop" in driver else {"normalize": "tokens"}
    start = params(tiny_llama())
    reference = numeric_trainer_update("del", tmp_path / "ref", 8, 1, **options)
    model = numloss.patch(tiny_llama(), build_loss("del", VOCAB, alpha=1.0, **options), fused="fused" in driver)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if driver.startswith("Trainer"):
        Trainer(model=model, args=train_args(tmp_path / "p", 2, 4), train_dataset=rows(), data_collator=collate).train()
    elif "loop" in driver:
        micro_batches = [collate(rows()[i : i + 2]) for i in range(0, 8, 2)]
        aligned = [shift_labels(b) for b in micro_batches]
        tokens = sum(int(a.ne(-100).sum()) for a in aligned)
        digits = sum(int(build_loss("del", VOCAB).count_digits(a)) for a in aligned)
        for micro_batch in micro_batches:
            model(**micro_batch, num_items_in_batch=tokens, num_digits_in_batch=digits).loss.backward()
        optimizer.step()
    else:
        # accelerate's state is process-wide: a Trainer of an earlier test leaves its
        # accumulation state behind (an optimizer step then waits for more micro-batches)
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        accelerator = Accelerator(cpu=True)
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.backward(model(**collate(rows())).loss)
        optimizer.step()
    diff, size = max_update_difference(reference, params(model), start)
    assert size > 1e-3 and diff <= 1e-5 * size + 1e-7, (diff, size)


def test_patch_reaches_through_peft_and_copies_stay_independent():
    model = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    loss_fn = build_loss("ntl-was", VOCAB)
    numloss.patch(model, loss_fn, fused=True)
    batch = collate(rows())
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        expected = loss_fn(model(**inputs).logits, shift_labels(batch)).loss
        assert float(model(**batch).loss) == pytest.approx(float(expected), rel=1e-5)
        clone = copy.deepcopy(model)
        numloss.unpatch(model)
        assert is_patched(clone) and float(clone(**batch).loss) == pytest.approx(float(expected), rel=1e-5)


def test_what_cannot_be_exact_is_refused():
    model = numloss.patch(tiny_llama(), build_loss("del", VOCAB))
    batch = collate(rows())
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(**batch, logits_to_keep=1)
    with pytest.raises(TypeError, match="numloss objective"):
        numloss.patch(tiny_llama(), torch.nn.CrossEntropyLoss())
    adapted_head = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["lm_head"]))
    with pytest.raises(ValueError, match="lm_head"):
        numloss.patch(adapted_head, build_loss("del", VOCAB), fused=True)
    with pytest.raises(ValueError, match="return_dict=False is not supported"):
        model(**batch, return_dict=False)
    # a step count that is not a count: the loss's own TypeError through the patch, not a refusal
    with pytest.raises(TypeError, match=r"num_items_in_batch must be a number or a one-element tensor.*'100'"):
        model(**batch, num_items_in_batch="100")
    seq2seq = tiny_llama()
    seq2seq.config.is_encoder_decoder = True  # what a T5/BART config says
    with pytest.raises(ValueError, match="encoder-decoder model"):
        numloss.patch(seq2seq, build_loss("del", VOCAB))


def test_numloss_trl_without_trl_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl now raises ImportError
    monkeypatch.delitem(sys.modules, "numloss.trl", raising=False)
    with pytest.raises(ImportError, match=r"numloss.trl needs trl, which is not installed: install numloss with its \[trl\] extra"):
        importlib.import_module("numloss.trl")


def test_a_head_still_sharded_inside_its_forward_is_refused(tmp_path):
    """A weight split over ranks inside the head's forward is tensor parallelism: refused, never
    a fused loss computed on a shard. (One gloo rank; a Shard(0) DTensor head.)"""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = tiny_llama()
        mesh = init_device_mesh("cpu", (1,))
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(distribute_tensor(head.weight.detach(), mesh, [Shard(0)]))
        numloss.patch(model, build_loss("del", VOCAB), fused=True)
        with pytest.raises(NotImplementedError, match="tensor parallelism.*fused=False"):
            model(**collate(rows()))
    finally:
        dist.destroy_process_group()
