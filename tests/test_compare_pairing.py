"""Arms of a comparison are paired by seed: for one seed every objective starts from the same
weights and sees the same training batches in the same order; another seed changes both.

Checked end to end through the compare path (`CompareConfig.run_config` -> `run_training`): the
batches each optimizer step receives and the initial weights are recorded and compared."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from numloss.compare.config import load_compare_config
from numloss.compare.runner import _write_train_file
from numloss.hf import NumericTrainer
from numloss.train import run_training

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "compare-mul.yaml"
STEPS = 2


def _trace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, label: str, seed: int) -> dict[str, list[str]]:
    """The initial-weight fingerprint and each step's input batch of one short run."""
    compare = load_compare_config(CONFIG)
    spec = next(s for s in compare.objectives if s.label == label)
    held_out = {e.instruction for items in compare.task.test_sets().values() for e in items}
    examples = compare.task.train_set(seed, exclude=held_out)[: STEPS * 32 * 2]
    run_dir = tmp_path / f"{label}-s{seed}"
    train_file = tmp_path / f"train-s{seed}.jsonl"
    _write_train_file(train_file, examples)
    config = compare.run_config(spec, seed, run_dir, train_file)
    config.train.max_steps = STEPS
    config.train.progress_bar = False
    seen: dict[str, list[str]] = {"weights": [], "batches": []}
    original = NumericTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        if not seen["weights"]:
            digest = hashlib.sha256()
            for name, tensor in sorted(model.state_dict().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().cpu().to(torch.float32).numpy().tobytes())
            seen["weights"].append(digest.hexdigest())
        seen["batches"].append(hashlib.sha256(inputs["input_ids"].cpu().numpy().tobytes()).hexdigest())
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(NumericTrainer, "compute_loss", recording)
    run_training(config, examples=list(examples))
    monkeypatch.setattr(NumericTrainer, "compute_loss", original)
    return seen


def test_same_seed_same_init_and_data_order_across_objectives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    mle = _trace(monkeypatch, tmp_path, "mle", seed=5)
    assert len(mle["batches"]) == STEPS
    for label in ("del-a0.3", "ntl-was"):  # del-noplace is del with other weights: the same path
        other = _trace(monkeypatch, tmp_path, label, seed=5)
        assert other["weights"] == mle["weights"], f"{label} seed 5 starts from other weights than mle seed 5"
        assert other["batches"] == mle["batches"], f"{label} seed 5 sees other batches (or order) than mle seed 5"
    reseeded = _trace(monkeypatch, tmp_path, "mle", seed=6)
    assert reseeded["weights"] != mle["weights"], "another seed must draw other initial weights"
    assert reseeded["batches"] != mle["batches"], "another seed must draw other data"
