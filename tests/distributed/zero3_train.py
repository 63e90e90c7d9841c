"""DeepSpeed ZeRO-3 on 2 CPU processes (gloo): fused == unfused == one process. A check by hand,
not part of the test suite (deepspeed is not a numloss dependency):

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 tests/distributed/zero3_train.py   # deepspeed installed

The same tiny tied-head Llama, data, objectives and 3 steps x 2 accumulated micro-batches as
fsdp2_train.py, under `deepspeed.initialize` with every parameter partitioned
(stage3_param_persistence_threshold 0: outside a module's forward its weight is an empty
tensor). `numloss.patch` is applied to the engine (the model is found by unwrapping it). Rank
0 then compares with one process holding the global batch and exits 1 on a mismatch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from deepspeed.utils import safe_get_full_fp32_param

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]  # fsdp2_train, test_hf
import fsdp2_train as w  # noqa: E402

import numloss  # noqa: E402
from numloss.hf import count_tokens_and_digits, reduce_step_counts  # noqa: E402


def train(name: str, fused: bool) -> dict:
    model = w.tiny_model()
    loss_fn = w.make_loss(name, model)
    config = {
        "train_micro_batch_size_per_gpu": w.ROWS, "gradient_accumulation_steps": w.ACCUMULATION,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True, "gradient_clipping": 0.0, "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), config=config)
    numloss.patch(engine, loss_fn, fused=fused)
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = []
    for step in range(w.STEPS):
        batches = [w.micro_batch(step, micro, (rank,)) for micro in range(w.ACCUMULATION)]
        aligned = [F.pad(b["labels"][:, 1:], (0, 1), value=-100) for b in batches]
        counts = reduce_step_counts(sum(count_tokens_and_digits(a, loss_fn) for a in aligned))
        total = torch.zeros(())
        for batch in batches:
            out = engine(**batch, num_items_in_batch=counts[0], num_digits_in_batch=counts[1])
            # step-wide counts: no division by the accumulation steps, and undo the mean over ranks
            engine.backward(out.loss * world, scale_wrt_gas=False)
            engine.step()
            total += out.loss.detach()
        dist.all_reduce(total)
        losses.append(float(total))
    head = engine.module.get_output_embeddings().weight
    assert head.numel() == 0 and tuple(head.ds_shape) == (40, 32), "the head was not partitioned"
    weights = {k: safe_get_full_fp32_param(p).detach().clone() for k, p in engine.module.named_parameters()}
    return {"losses": losses, "weights": weights}


def main() -> int:
    deepspeed.init_distributed("gloo")
    torch.set_num_threads(1)
    results = {(name, fused): train(name, fused) for name in w.OBJECTIVES for fused in (False, True)}
    rank = dist.get_rank()
    dist.destroy_process_group()
    if rank != 0:
        return 0
    failures = 0
    for (name, fused), got in results.items():
        ref = w.train(name, fused=False, ranks=(0, 1), shard=False)
        loss_diff = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], ref["losses"], strict=True))
        weight_diff = max(float((got["weights"][k] - ref["weights"][k]).abs().max()) for k in got["weights"])
        ok = loss_diff <= 1e-6 and weight_diff <= 1e-6
        failures += not ok
        print(f"zero3 {name} fused={fused}: losses {got['losses']} rel.diff {loss_diff:.1e}, "
              f"max weight diff {weight_diff:.1e} vs one process: {'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
