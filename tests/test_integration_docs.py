"""docs/integration.md: every snippet runs on the tiny model, and every path's first update is
NumericTrainer's (batch 8 in one go) wherever the page says it is exact."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[1] / "docs" / "integration.md"
PATHS = ["NumericTrainer", "compute_loss_func", "TRL", "patch", "plain loop"]


def snippets() -> tuple[str, list[str]]:
    """(the shared setup, the five paths' snippets), in the page's order."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1 + len(PATHS), f"expected the setup and {len(PATHS)} paths, found {len(blocks)} blocks"
    return blocks[0], blocks[1:]


def run(code: str, namespace: dict | None = None) -> dict:
    namespace = {} if namespace is None else namespace
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def reference_update(setup: str, loss_fn, features) -> dict[str, torch.Tensor]:
    """NumericTrainer's first step over all 8 sequences at once, from the setup's initial model."""
    from transformers import TrainingArguments

    from numloss.hf import NumericTrainer

    fresh = run(setup)
    args = fresh["args"].to_dict()
    args.update(per_device_train_batch_size=8, gradient_accumulation_steps=1, output_dir="runs/reference")
    args = TrainingArguments(**{k: v for k, v in args.items() if k in TrainingArguments.__dataclass_fields__
                                and TrainingArguments.__dataclass_fields__[k].init})
    model = fresh["model"]
    NumericTrainer(loss_fn=loss_fn, model=model, args=args, train_dataset=features,
                   data_collator=fresh["collator"]).train()
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize("index", range(len(PATHS)), ids=PATHS)
def test_snippet_runs_and_gives_numeric_trainers_first_update(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the snippets write runs/... folders
    setup, paths = snippets()
    start = {k: v.detach().clone() for k, v in run(setup)["model"].named_parameters()}
    namespace = run(paths[index], run(setup))
    trained = {k: v.detach().clone() for k, v in namespace["model"].named_parameters()}
    if PATHS[index] == "TRL":  # TRL tokenises the prompt/completion records itself
        features = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in namespace["trainer"].train_dataset]
    else:
        features = namespace["train_dataset"]
    reference = reference_update(setup, namespace["loss_fn"], features)
    size = max(float((reference[k] - start[k]).abs().max()) for k in start)
    diff = max(float((reference[k] - trained[k]).abs().max()) for k in start)
    assert size > 1e-3, "the first step did not move the weights"
    assert diff <= 1e-5 * size + 1e-6, f"{PATHS[index]}: first update differs by {diff:g} (update {size:g})"
