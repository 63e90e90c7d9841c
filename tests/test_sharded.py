"""Fused and exact under sharding: 2 CPU processes (gloo) with FSDP2 and with DDP.

* FSDP2 (`fully_shard` on the decoder layers and the root of a tiny tied-head Llama, or an
  untied head as its own unit; tests/distributed/fsdp2_train.py under torchrun): for DEL, MLE
  and EMO with gradient accumulation 2, the fused loss equals the unfused one (step losses and
  weights after 3 optimizer steps), and both equal one process with the same global batch;
  every rank sees the step counts of the whole global batch, counted once.
* DDP through `numloss train` on 2 processes (torchrun unfused; accelerate launch with
  configs/accelerate/cpu_2proc.yaml fused) equals one process with the same global batch.
* Context and sequence parallelism are refused with a clear error.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from accelerate.state import AcceleratorState
from safetensors.torch import load_file

import numloss
from faultrun import ENV, ROOT, TINY, free_port
from numloss.config import load_config
from numloss.hf import NumericTrainer
from numloss.models import build_char_tokenizer, build_tiny_model
from numloss.train import run_training
from test_hf import VOCAB, collate, max_update_difference, rows, tiny_llama, train_args

WORKER = ROOT / "tests" / "distributed" / "fsdp2_train.py"
sys.path.insert(0, str(WORKER.parent))

import fsdp2_train  # noqa: E402  (tests/distributed is not a package)


@pytest.fixture(scope="module")
def fsdp2_results(tmp_path_factory):
    """One torchrun launch trains every objective, fused and not, on 2 FSDP2 ranks."""
    out = tmp_path_factory.mktemp("fsdp2") / "results.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(free_port()), str(WORKER), str(out)]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize(("name", "head_unit"), [*((name, False) for name in fsdp2_train.OBJECTIVES), ("del", True)],
                         ids=[*fsdp2_train.OBJECTIVES, "del-head-unit"])
def test_fsdp2_fused_equals_unfused_and_one_process(fsdp2_results, name, head_unit):
    """head_unit: an untied head sharded on its own is whole only inside its forward; the fused
    loss, computed there, equals the unfused one and one process (read after it, a shard)."""
    start = fsdp2_train.tiny_model(tied=not head_unit).state_dict()
    unfused, fused = fsdp2_results[(name, False, head_unit)], fsdp2_results[(name, True, head_unit)]
    one_process = fsdp2_train.train(name, fused=False, ranks=(0, 1), shard=False, head_unit=head_unit)
    moved = min(float((one_process["weights"][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-4, "training barely moved some weights: the comparison would mean little"
    # fused == unfused under FSDP2
    assert fused["losses"] == pytest.approx(unfused["losses"], rel=1e-6)
    assert max_update_difference(fused["weights"], unfused["weights"], start)[0] <= 1e-6
    # both == one process, same global batch (float summation order differs, nothing more)
    for run in (unfused, fused):
        assert run["losses"] == pytest.approx(one_process["losses"], rel=1e-6)
        assert max_update_difference(run["weights"], one_process["weights"], start)[0] <= 1e-6
        # every rank divided by the counts of the whole global batch, each token counted once
        for counts in run["counts_of_rank"]:
            assert torch.equal(counts, one_process["counts"])
    assert int(one_process["counts"][:, 1].min()) > 0, "no digits: DEL's digit mean untested"


# slow: torchrun, unfused (docs/training.md's DDP row); fast: the same through accelerate launch, fused,
# and test_hf.py's two-rank test (the unfused loss on two ranks)
@pytest.mark.parametrize("launcher", [pytest.param("torchrun", marks=pytest.mark.slow), "accelerate"])
def test_ddp_through_numloss_train_equals_one_process(launcher, tmp_path):
    """`numloss train` on 2 gloo processes, batch 2 each (torchrun unfused; accelerate launch with
    configs/accelerate/cpu_2proc.yaml, --fused true) == one process, batch 4."""
    fused = ["--fused", "true"] if launcher == "accelerate" else []
    launch = (["torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())] if not fused else
              ["accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"),
               "--main_process_port", str(free_port())])
    command = [sys.executable, "-m", *launch, "-m", "numloss", "train", str(TINY), "--train.output_dir",
               str(tmp_path / "two"), "--train.per_device_train_batch_size", "2", *fused]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"fused={bool(fused)}, world size 2, global batch 4" in done.stderr
    one = run_training(load_config(TINY, ["--train.output_dir", str(tmp_path / "one"),
                                          "--train.per_device_train_batch_size", "4", *fused]))
    a, b = load_file(str(one.model_dir / "model.safetensors")), load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    init = build_tiny_model(build_char_tokenizer(), num_layers=2, hidden_size=64, num_heads=2, seed=0).state_dict()
    for key in a:
        # float reduction order differs between 1 and 2 processes, and Adam divides each gradient by
        # its own size, so a parameter whose gradient is near zero turns that noise into up to ~2e-4
        # of weight (measured); the training moved every weight matrix over 10x the tolerance. Adam also
        # hides a wrong gradient scale, which the grad_norm column below catches.
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-3, msg=key)
        assert key.endswith("norm.weight") or (a[key] - init[key]).abs().max() > 1e-2, key
    # the logged loss terms and the gradient norm are the global ones, equal in both runs
    rows_one = list(csv.DictReader((tmp_path / "one" / "log.csv").open()))
    rows_two = list(csv.DictReader((tmp_path / "two" / "log.csv").open()))
    assert len(rows_one) == len(rows_two) == 3
    for r1, r2 in zip(rows_one, rows_two, strict=True):
        for column in ("loss", "ce", "aux", "digit_entropy", "grad_norm"):
            assert float(r1[column]) == pytest.approx(float(r2[column]), rel=1e-5), column


def test_context_and_sequence_parallelism_are_refused(monkeypatch, tmp_path):
    batch = collate(rows()[:2])
    model = numloss.patch(tiny_llama(), numloss.build_loss("del", VOCAB), fused=True)
    monkeypatch.setitem(AcceleratorState._shared_state, "parallelism_config", SimpleNamespace(cp_size=2, sp_size=1))
    with pytest.raises(NotImplementedError, match="context or sequence parallelism"):
        model(**batch)
    monkeypatch.delitem(AcceleratorState._shared_state, "parallelism_config")
    assert torch.isfinite(model(**batch).loss)  # and without it the patched model works
    numloss.unpatch(model)
    trainer = NumericTrainer(loss_fn=numloss.build_loss("del", VOCAB), fused=True, model=model,
                             args=train_args(tmp_path, 2, 1), train_dataset=rows(), data_collator=collate)
    for split in ("get_cp_size", "get_sp_size"):
        with monkeypatch.context() as m:
            m.setattr(trainer, split, lambda: 2)
            with pytest.raises(NotImplementedError, match="context or sequence parallelism"):
                trainer.compute_loss(model, dict(batch))
