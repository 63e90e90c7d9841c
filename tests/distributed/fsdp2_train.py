"""FSDP2 training of a tiny Llama with numloss objectives: the worker of tests/test_sharded.py.

    torchrun --nproc_per_node 2 tests/distributed/fsdp2_train.py OUT.pt      # gloo, CPU

Each rank shards the model with `torch.distributed.fsdp.fully_shard` (every decoder layer, then
the root, which holds the embeddings, the final norm and the tied LM head), patches it with
`numloss.patch` (fused or not) and trains 3 optimizer steps of 2 accumulated micro-batches.
The step-wide token and digit counts go through `numloss.hf.reduce_step_counts`, as in
`NumericTrainer`. Rank 0 saves, per objective and mode, the step losses (summed over ranks),
the step counts every rank saw, and the full weights after training.

`train(..., ranks=(0, 1))` in one process without a process group is the reference: the same
global batch, each micro-batch holding both ranks' rows.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

import numloss
from numloss import build_loss
from numloss.hf import count_tokens_and_digits, reduce_step_counts
from test_hf import SHAPE, VOCAB, collate  # tests/ is on the workers' PYTHONPATH (faultrun.ENV)

OBJECTIVES = ("del", "mle", "emo")
STEPS, ACCUMULATION, ROWS = 3, 2, 2  # ROWS per rank and micro-batch
WORLD = 2


def tiny_model(tied: bool = True) -> LlamaForCausalLM:
    """test_hf's tiny Llama, its LM head tied to the input embedding (as SmolLM2) or not."""
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**SHAPE, "tie_word_embeddings": tied})).float()


def make_loss(name: str, model: LlamaForCausalLM):
    if name == "emo":
        return build_loss(name, VOCAB, embedding=model.get_output_embeddings().weight.detach().clone())
    return build_loss(name, VOCAB, **({"alpha": 1.0} if name == "del" else {}))


def rank_rows(step: int, micro: int, rank: int) -> list[list[int]]:
    """ROWS rows of token ids: different lengths, digits, points and letters; some rows without digits."""
    generator = torch.Generator().manual_seed(1000 * step + 100 * micro + rank)
    rows = []
    for i in range(ROWS):
        length = int(torch.randint(6, 20, (1,), generator=generator))
        high = 11 if (step + micro + rank + i) % 4 else 39  # every fourth row mostly letters
        rows.append(torch.randint(0, high, (length,), generator=generator).tolist())
    return rows


def micro_batch(step: int, micro: int, ranks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Right-padded batch of the rows of `ranks`; the first 3 tokens of a row are its prompt (-100)."""
    rows = [row for rank in ranks for row in rank_rows(step, micro, rank)]
    return collate([{"input_ids": row, "labels": [-100] * 3 + row[3:]} for row in rows])


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every weight whole: a DTensor shard of FSDP2 gathered."""
    return {key: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
            for key, value in model.state_dict().items()}


def train(name: str, fused: bool, ranks: tuple[int, ...], shard: bool, head_unit: bool = False) -> dict:
    """3 SGD steps of `name` on this rank's share of the global batch; losses, counts, weights.

    `head_unit`: an untied LM head sharded as its own FSDP2 unit. Its weight is whole only while
    the head's own forward runs (the root, which FSDP2 keeps gathered after its forward, cannot
    show that): a fused loss that read the weight anywhere else would meet a shard.
    """
    model = tiny_model(tied=not head_unit)
    loss_fn = make_loss(name, model)
    if shard:
        for layer in model.model.layers:
            torch.distributed.fsdp.fully_shard(layer)
        if head_unit:
            torch.distributed.fsdp.fully_shard(model.lm_head)
        torch.distributed.fsdp.fully_shard(model)
    numloss.patch(model, loss_fn, fused=fused)  # after sharding, as a trainer would see it
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    world = dist.get_world_size() if shard else 1
    losses, counts = [], []
    for step in range(STEPS):
        batches = [micro_batch(step, micro, ranks) for micro in range(ACCUMULATION)]
        aligned = [F.pad(b["labels"][:, 1:], (0, 1), value=-100) for b in batches]
        local = sum(count_tokens_and_digits(labels, loss_fn) for labels in aligned)
        step_counts = reduce_step_counts(local)
        counts.append(step_counts)
        step_loss = torch.zeros(())
        for batch in batches:
            outputs = model(**batch, num_items_in_batch=step_counts[0], num_digits_in_batch=step_counts[1])
            # counts are global and FSDP averages gradients over ranks: undo that average (NumericTrainer does the same)
            (outputs.loss * world).backward()
            step_loss += outputs.loss.detach()
        optimizer.step()
        optimizer.zero_grad()
        if shard:
            dist.all_reduce(step_loss)
        losses.append(float(step_loss))
    if shard:
        # why the loss is computed inside the forward: outside it the head is a shard
        weight = model.get_output_embeddings().weight
        assert weight.to_local().shape[0] * dist.get_world_size() == weight.shape[0] == 40, weight.to_local().shape
    return {"losses": losses, "counts": torch.stack(counts), "weights": full_weights(model)}


def check_replicated_counts(rank: int) -> None:
    """Ranks that share one batch (tensor parallelism) count it once."""
    labels = F.pad(micro_batch(0, 0, (0,))["labels"][:, 1:], (0, 1), value=-100)
    own = count_tokens_and_digits(labels, make_loss("del", tiny_model()))
    shared = reduce_step_counts(own, batch_replicas=WORLD)
    assert torch.equal(shared, own), (rank, shared, own)


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != WORLD:
        raise SystemExit(f"run with torchrun --nproc_per_node {WORLD}")
    torch.set_num_threads(1)
    check_replicated_counts(rank)
    results = {}
    for name, head_unit in [*((n, False) for n in OBJECTIVES), ("del", True)]:
        for fused in (False, True):
            result = train(name, fused, ranks=(rank,), shard=True, head_unit=head_unit)
            gathered = [None] * WORLD
            dist.all_gather_object(gathered, result["counts"])
            result["counts_of_rank"] = gathered
            results[(name, fused, head_unit)] = result
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
