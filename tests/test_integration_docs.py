"""docs/integration.md: every snippet runs on the tiny model, and every path's first update is
NumericTrainer's (batch 8 in one go) wherever the page says it is exact."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from transformers import TrainingArguments

from numloss.evaluate import evaluate
from numloss.hf import NumericTrainer
from numloss.patch import is_patched
from test_docs import PAGES, python, run_strict, tiny_names
from test_eval_faults import Echo

PATHS = ["NumericTrainer", "compute_loss_func", "TRL", "patch", "plain loop"]


def run(code: str, namespace: dict | None = None) -> dict:
    """Run a snippet with every warning an error but the named ones (test_docs.ALLOWED_WARNINGS)."""
    return run_strict(code, {} if namespace is None else namespace, "docs/integration.md")


@pytest.mark.parametrize("index", range(len(PATHS)), ids=PATHS)
def test_snippet_runs_and_gives_numeric_trainers_first_update(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the snippets write runs/... folders
    setup, *paths = python("docs/integration.md")  # the shared setup, then the paths in the page's order
    assert len(paths) == len(PATHS), f"expected the setup and {len(PATHS)} paths, found {1 + len(paths)} blocks"
    namespace = run(paths[index], run(setup))
    trained = {k: v.detach() for k, v in namespace["model"].named_parameters()}
    if PATHS[index] == "TRL":  # TRL tokenises the prompt/completion records itself
        features = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in namespace["trainer"].train_dataset]
    else:
        features = namespace["train_dataset"]
    fresh = run(setup)  # the setup's initial model
    start = {k: v.detach().clone() for k, v in fresh["model"].named_parameters()}
    if PATHS[index] == "plain loop":  # what it prints is the step's loss: all 8 sequences in one call
        batch = fresh["collator"](list(fresh["train_dataset"]))
        logits = fresh["model"](input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        whole = namespace["loss_fn"](logits, fresh["shift_labels"](batch))
        assert namespace["step_loss"] == pytest.approx(whole.loss.item(), rel=1e-5)
        assert namespace["step_aux"] == pytest.approx(whole.aux.item(), rel=1e-5)
    # the reference: NumericTrainer's first step over all 8 sequences at once
    args = fresh["args"].to_dict()
    args.update(per_device_train_batch_size=8, gradient_accumulation_steps=1, output_dir="runs/reference")
    args = TrainingArguments(**{k: v for k, v in args.items() if k in TrainingArguments.__dataclass_fields__
                                and TrainingArguments.__dataclass_fields__[k].init})
    NumericTrainer(loss_fn=namespace["loss_fn"], model=fresh["model"], args=args, train_dataset=features,
                   data_collator=fresh["collator"]).train()
    reference = {k: v.detach() for k, v in fresh["model"].named_parameters()}
    size = max(float((reference[k] - start[k]).abs().max()) for k in start)
    diff = max(float((reference[k] - trained[k]).abs().max()) for k in start)
    assert size > 1e-3, "the first step did not move the weights"
    assert diff <= 1e-5 * size + 1e-6, f"{PATHS[index]}: first update differs by {diff:g} (update {size:g})"


# -- README.md: the product page ------------------------------------------------------------------


def test_readme_opens_with_make_demo_and_make_test():
    """The first lines after the title are the two commands (each may carry a comment)."""
    assert re.match(r"# numloss\n\n```bash\nmake demo\b[^\n]*\nmake test\b[^\n]*\n```\n", PAGES["README.md"])


def test_readme_python_snippets_run(tmp_path, monkeypatch):
    """The loss example, NumericTrainer and numloss.patch, in the page's order, with the names the
    text says they need (a tokenizer, a causal LM's logits and aligned labels, a model, Trainer
    arguments, a dataset, a collator, a batch) from the tiny model of docs/integration.md."""
    monkeypatch.chdir(tmp_path)
    namespace = tiny_names()
    loss_block, trainer_block, patch_block = python("README.md")
    run(loss_block, namespace)
    assert all(p.grad is not None for p in namespace["model"].parameters()), "the loss reached every weight"
    assert type(namespace["loss_fn"]).__name__ == "DigitEntropyLoss"
    namespace["model"].zero_grad()
    run(trainer_block, namespace)
    assert namespace["trainer"].state.global_step == 1 and "aux" in namespace["trainer"].state.log_history[0]
    namespace["model"].zero_grad()
    run(patch_block, namespace)
    assert not is_patched(namespace["model"])
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in namespace["model"].parameters())


def test_readme_report_tables_have_the_columns_numloss_eval_writes(tmp_path):
    """The report excerpt is what `numloss eval` writes: each table header of the README's
    Evaluation section is a table header of a report made now (two protocols, a stub model)."""
    section = PAGES["README.md"].split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    shown = [line for line, rule in zip(section.splitlines(), section.splitlines()[1:], strict=False) if rule.startswith("|---")]
    assert len(shown) == 2, "the per-protocol table and the side-by-side one"
    report = evaluate(Echo("5"), ["svamp"], data_dir=Path(__file__).parent / "fixtures" / "benchmarks", protocol="both",
                      limit=2, program_of_thought=False, allow_unisolated=False)
    lines = report.to_markdown().splitlines()
    written = {line for line, rule in zip(lines, lines[1:], strict=False) if rule.startswith("|---")}
    assert set(shown) <= written, f"README tables {shown} not among the report's {sorted(written)}"
