"""The SmolLM2 GPU comparison (configs/compare-smollm2-gpu.yaml, bench/device_compare.sh): its
config, the chat-template word-problem task, and the whole path run on CPU with --smoke."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numloss.compare.config import load_compare_config
from numloss.compare.word_task import ChatExample, WordProblemTask, chat_prompt, last_number_matches

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "compare-smollm2-gpu.yaml"


def test_gpu_config_is_the_issue_17_grid() -> None:
    compare = load_compare_config(CONFIG)
    assert compare.base["model"]["name"] == "smollm2" and compare.base["train"]["bf16"] is True
    assert not compare.base.get("lora", {}).get("enabled"), "full fine-tuning"
    assert {s.name for s in compare.objectives} == {"mle", "del", "ntl-was", "ntl-mse", "dist2", "mixce", "emo"}
    assert len(compare.objectives) == 12 and compare.seeds == [0, 1, 2]
    task = compare.task
    assert isinstance(task, WordProblemTask)
    assert task.benchmarks == ("gsm8k", "svamp") and task.benchmark_limit == 200
    assert 0 < task.gsm_share < 1, "gsm_symbolic and the arithmetic word problems"
    steps, batch = compare.base["train"]["max_steps"], compare.base["train"]["batch_size"]
    assert task.train_size == steps * batch


def test_word_problems_render_in_the_chat_template_with_completion_only_labels(tmp_path) -> None:
    from numloss.data import tokenize_examples
    from numloss.models.tiny import build_char_tokenizer

    task = WordProblemTask(train_size=6, cache_dir=str(tmp_path / "items"))
    items = task.train_set(0)
    assert len(items) == 6 and all(e.output.endswith(f"The answer is {e.answer}.") for e in items)
    assert not any("####" in e.output for e in items), "gsm_symbolic's '#### N' line is replaced"
    assert task.train_set(0) == items, "read back from the cache unchanged"
    tokenizer = build_char_tokenizer()
    rendered = WordProblemTask.render(items, tokenizer)
    assert rendered[0].prompt == chat_prompt(tokenizer, items[0].instruction)
    assert rendered[0].prompt.endswith("<|assistant|>\n") and items[0].instruction in rendered[0].prompt
    features = tokenize_examples(rendered[:1], tokenizer, max_length=2048)[0]
    target = [t for t, label in zip(features["input_ids"], features["labels"], strict=True) if label != -100]
    answer = tokenizer(items[0].output, add_special_tokens=False)["input_ids"]
    assert target == answer + [tokenizer.eos_token_id], "loss on the assistant turn (and its end) only"
    with pytest.raises(ValueError, match="render"):
        ChatExample("q", "a").prompt  # noqa: B018 - the property raises
    check = {e.instruction for e in task.check_set(5)}
    assert not check & {e.instruction for e in task.train_set(1, exclude=check)}


def test_last_number_criterion() -> None:
    assert last_number_matches("6 * 2 = 12. The answer is 12.", "12")
    assert last_number_matches("so 4.50 dollars", "4.5")
    assert not last_number_matches("The answer is 13.", "12") and not last_number_matches("no idea", "12")


def test_device_script_smoke_runs_every_objective_on_cpu(tmp_path) -> None:
    out = tmp_path / "smoke"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "device_compare.sh"), "--smoke", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 12
    for run in data["runs"]:
        assert set(run["evaluation"]) == {"gsm8k", "svamp"}
        assert all(ev["n"] == 3 for ev in run["evaluation"].values())
        assert [c[0] for c in run["learning"]["checks"]] == [1, 2]
    report = (out / "report.md").read_text()
    assert "## gsm8k" in report and "## svamp" in report and "## Learning speed" in report
    assert "_Machine: " in report
