"""The GPU plan (configs/compare-smollm2-gpu.yaml, bench/device_compare.sh): its config, its
three calls' timing, the chat-template word-problem task, and the whole grid path run on CPU
with --smoke."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numloss.compare.arith_words import ArithmeticWordTask
from numloss.compare.config import load_compare_config
from numloss.compare.word_task import ChatExample, WordProblemTask, chat_prompt, last_number_matches
from numloss.data import tokenize_examples
from numloss.models.tiny import build_char_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "compare-smollm2-gpu.yaml"


def test_the_gpu_grid_runs_the_cpu_recipe_and_sees_each_training_item_once() -> None:
    gpu, cpu = load_compare_config(CONFIG), load_compare_config(ROOT / "configs" / "compare-smollm2-words.yaml")
    assert gpu.base == cpu.base and gpu.task.answer_digits == cpu.task.answer_digits, "the CPU arm's recipe"
    assert set(cpu.seeds) <= set(gpu.seeds) and "mle" in [s.name for s in gpu.objectives], "more seeds, with the baseline"
    train = gpu.base["train"]
    per_step = train["per_device_train_batch_size"] * train.get("gradient_accumulation_steps", 1)
    task = gpu.task
    assert isinstance(task, ArithmeticWordTask) and task.train_size == train["max_steps"] * per_step
    assert task.generate_check > 0 and task.benchmarks and task.benchmark_limit > 0


def test_each_device_call_ends_inside_its_limit() -> None:
    script = (ROOT / "bench" / "device_compare.sh").read_text()
    calls = dict(re.findall(r'run\(command="bash bench/device_compare.sh (call\d)", carry=\["build/device/\1"\], timeout_s=(\d+)\)', script))
    assert calls
    for call, limit in calls.items():
        body = re.search(rf"^{call}\)\n(.*?)^  ;;", script, re.S | re.M)
        assert body, f"{call} has no section in the script"
        # the call's own deadlines: inner timeouts and the grid's end after its start
        deadlines = [int(n) for pair in re.findall(r"timeout (\d+) |start \+ (\d+)", body.group(1)) for n in pair if n]
        assert deadlines and max(deadlines) < int(limit) < 600, (call, deadlines, limit)


def test_word_problems_render_in_the_chat_template_with_completion_only_labels(tmp_path) -> None:
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
    # the benchmarks' criterion: the last number of the answer
    assert last_number_matches("6 * 2 = 12. The answer is 12.", "12")
    assert last_number_matches("so 4.50 dollars", "4.5")
    assert not last_number_matches("The answer is 13.", "12") and not last_number_matches("no idea", "12")


def test_device_script_smoke_runs_the_grid_path_on_cpu(tmp_path) -> None:
    """`bench/device_compare.sh --smoke`: the GPU grid's whole path (baseline, every objective,
    the benchmarks, records copied to OUT as they finish, the summary) on the tiny model."""
    text = CONFIG.read_text().replace("data_dir: ../shared/benchmarks", f"data_dir: {ROOT / 'tests' / 'fixtures' / 'benchmarks'}")
    config = tmp_path / "gpu.yaml"
    config.write_text(text)
    out = tmp_path / "smoke"
    env = {**os.environ, "PYTHON": sys.executable, "NUMLOSS_COMPARE_CONFIG": str(config)}
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "device_compare.sh"), "--smoke", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = sorted((out / "OUT").glob("*-s0-*.json"))
    assert [p.name.split("-s0-")[0] for p in records] == ["del-a0.3", "mle", "ntl-was", "untrained"]
    for path in records:
        run = json.loads(path.read_text())
        assert set(run["evaluation"]) == {"heldout", "svamp", "gsm8k"}
        for ev in run["evaluation"].values():
            assert len(ev["items"]) == ev["n"] and set(ev["items"]) <= {"0", "1"}
        assert run["evaluation"]["svamp"]["n"] == 4 and run["evaluation"]["gsm8k"]["n"] == 5, "the fixture files"
        assert run["evaluation"]["heldout"]["generation_check"]["n"] > 0
    summary = (out / "OUT" / "summary-0.md").read_text()
    assert "### heldout" in summary and "### svamp" in summary and "| arm vs mle |" in summary
