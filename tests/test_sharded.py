"""Fused and exact under sharding: 2 CPU processes (gloo) with FSDP2 and with DDP.

* FSDP2 (`fully_shard` on the decoder layers and the root of a tiny tied-head Llama,
  tests/distributed/fsdp2_train.py under torchrun): for DEL, MLE and EMO with gradient
  accumulation 2, the fused loss equals the unfused one (step losses and weights after 3
  optimizer steps), and both equal one process with the same global batch; every rank sees the
  step counts of the whole global batch, counted once.
* DDP with fused=True through `numloss train` and configs/accelerate/cpu_2proc.yaml equals one
  process with the same global batch.
* Context and sequence parallelism are refused with a clear error.
"""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "distributed" / "fsdp2_train.py"
TINY = ROOT / "tests" / "fixtures" / "train" / "tiny-test.yaml"
sys.path.insert(0, str(WORKER.parent))

import fsdp2_train  # noqa: E402  (tests/distributed is not a package)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    path = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def fsdp2_results(tmp_path_factory):
    """One torchrun launch trains every objective, fused and not, on 2 FSDP2 ranks."""
    out = tmp_path_factory.mktemp("fsdp2") / "results.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(_free_port()), str(WORKER), str(out)]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return torch.load(out, weights_only=False)


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("name", fsdp2_train.OBJECTIVES)
def test_fsdp2_fused_equals_unfused_and_one_process(fsdp2_results, name):
    start = fsdp2_train.tiny_model().state_dict()
    unfused, fused = fsdp2_results[(name, False)], fsdp2_results[(name, True)]
    one_process = fsdp2_train.train(name, fused=False, ranks=(0, 1), shard=False)
    moved = min(float((one_process["weights"][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-4, "training barely moved some weights: the comparison would mean little"
    # fused == unfused under FSDP2
    assert fused["losses"] == pytest.approx(unfused["losses"], rel=1e-6)
    assert _max_difference(fused["weights"], unfused["weights"]) <= 1e-6
    # both == one process, same global batch (float summation order differs, nothing more)
    for run in (unfused, fused):
        assert run["losses"] == pytest.approx(one_process["losses"], rel=1e-6)
        assert _max_difference(run["weights"], one_process["weights"]) <= 1e-6
        # every rank divided by the counts of the whole global batch, each token counted once
        for counts in run["counts_of_rank"]:
            assert torch.equal(counts, one_process["counts"])
    assert int(one_process["counts"][:, 1].min()) > 0, "no digits: DEL's digit mean untested"


def test_fsdp2_with_the_lm_head_as_its_own_unit_reads_the_whole_head_inside_its_forward(fsdp2_results):
    """An untied head sharded on its own is whole only inside its forward: the fused loss, computed
    there, equals the unfused one and one process (read after the forward it would be a shard)."""
    unfused, fused = fsdp2_results[("del", False, "head unit")], fsdp2_results[("del", True, "head unit")]
    one_process = fsdp2_train.train("del", fused=False, ranks=(0, 1), shard=False, head_unit=True)
    for run in (unfused, fused):
        assert run["losses"] == pytest.approx(one_process["losses"], rel=1e-6)
        assert _max_difference(run["weights"], one_process["weights"]) <= 1e-6
    assert "lm_head.weight" in fused["weights"] and "lm_head.weight" in one_process["weights"]


def test_ddp_fused_through_numloss_train_and_the_accelerate_config(tmp_path):
    from safetensors.torch import load_file

    from numloss.config import load_config
    from numloss.train import run_training

    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"), "--main_process_port", str(_free_port()),
               "-m", "numloss", "train", str(TINY), "--train.output_dir", str(tmp_path / "two"),
               "--train.per_device_train_batch_size", "2", "--fused", "true"]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "fused=True, world size 2, global batch 4" in done.stderr
    one = run_training(load_config(TINY, ["--train.output_dir", str(tmp_path / "one"), "--train.per_device_train_batch_size", "4",
                                          "--fused", "true"]))
    a, b = load_file(str(one.model_dir / "model.safetensors")), load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    for key in a:  # Adam turns float-order differences into up to ~2e-4 of weight (as in test_train's gloo test)
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-3, msg=key)
    rows_one = list(csv.DictReader((tmp_path / "one" / "log.csv").open()))
    rows_two = list(csv.DictReader((tmp_path / "two" / "log.csv").open()))
    assert len(rows_one) == len(rows_two) == 3
    for r1, r2 in zip(rows_one, rows_two, strict=True):
        for column in ("loss", "ce", "aux", "digit_entropy", "grad_norm"):  # grad_norm: the scale Adam hides
            assert float(r1[column]) == pytest.approx(float(r2[column]), rel=1e-5), column


def test_context_and_sequence_parallelism_are_refused(monkeypatch, tmp_path):
    from accelerate.state import AcceleratorState

    import numloss
    from numloss.hf import NumericTrainer
    from test_hf import VOCAB, collate, rows, tiny_llama, train_args

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
