"""The protocol run (program of thought, sandbox, chain-of-thought fallback), reports and the CLI:
what a newcomer meets (threads, a report that says what made it, a LoRA run's final/ evaluated as
it is; the progress bar: test_eval_report_files)."""

import json
import shlex
import shutil

import pytest
import torch

from numloss import __version__
from numloss.config import load_config
from numloss.evaluate import cli, evaluate
from numloss.evaluate.benchmarks import Benchmark, load_benchmark
from numloss.evaluate.generate import Generation
from numloss.evaluate.programs import ProgramRunner, isolation
from numloss.evaluate.protocol import NUMLOSS, POT_TRIGGER, RELEASED, released_prompt
from numloss.evaluate.runner import run_benchmark
from numloss.evaluate.sandbox import SandboxLimits
from numloss.models import ModelUnavailableError
from numloss.train import run_training
from test_eval_faults import FIXTURES, save_tiny

LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=512 << 20)


class Scripted:
    """A generator that answers each question from a script: (question, style) -> completion."""

    def __init__(self, script):
        self.script, self.prompts, self.limits = script, [], []

    def generate(self, prompts, max_new_tokens=None):
        self.prompts += prompts
        self.limits.append(max_new_tokens)
        out = []
        for prompt in prompts:
            style = "pot" if POT_TRIGGER in prompt else "cot"
            question = next(q for (q, s) in self.script if q in prompt and s == style)
            out.append(Generation(self.script[(question, style)], 5))
        return out


def numbers():
    return Benchmark.from_records("toy", [
        {"question": "What is 6 times 7?", "answer": "42"},
        {"question": "What is 10 minus 3?", "answer": "7"},
        {"question": "What is 2 plus 2?", "answer": "4"},
        {"question": "What is 9 plus 1?", "answer": "10"},
        {"question": "What is 5 minus 5?", "answer": "0"},
    ])


def runner():
    return ProgramRunner(LIMITS, workers=2, allow_unisolated=True)


def test_program_of_thought_with_chain_of_thought_fallback():
    script = {
        # program, right, its stdout in colours and with a title escape; the next instruction is cut off
        ("6 times 7", "pot"): "a = 6\nb = 7\nprint('\\x1b[31m' + str(a * b) + '\\x1b[0m\\x1b]0;owned\\x07')\n### Instruction: more",
        ("10 minus 3", "pot"): "while True:\n    pass\nprint(1)",                # program times out -> CoT
        ("10 minus 3", "cot"): "10 - 3 = 7. The answer is 7.",
        ("2 plus 2", "pot"): "print(4)\nraise ValueError(2)",                     # fails -> CoT, wrong
        ("2 plus 2", "cot"): "The answer is 5.",
        ("9 plus 1", "pot"): "9 + 1 = 10. The answer is 10.",                     # no program: read as text
        ("5 minus 5", "pot"): "Here:\n```python\nx = 5 - 5\nprint('result:', x)\n```\nDone.",  # fenced program
    }
    generator = Scripted(script)
    results = run_benchmark(numbers(), [NUMLOSS], generator, runner(), batch_size=8)["numloss"]
    assert [r.correct for r in results] == [True, True, False, True, True]
    assert [r.style for r in results] == ["pot", "pot+cot", "pot+cot", "pot", "pot"]
    assert results[0].program_status == "ok" and results[1].program_status == "timeout"
    assert results[2].program_status not in ("", "ok") and results[3].program_status == ""
    assert results[0].prediction == "42" and results[0].value == 42
    # the raw program output is kept beside the clean one, and only where they differ
    assert results[0].program_stdout.strip() == "42" and "\x1b]0;owned" in results[0].program_stdout_raw
    assert "\x1b[31m" in results[0].program_stdout_raw and results[4].program_stdout_raw == ""
    assert "\x1b" not in str(results[0].to_json()["program_stdout"])
    assert results[1].fallback_output == "10 - 3 = 7. The answer is 7."
    assert generator.prompts[0] == released_prompt(numbers().items[0], "pot")
    assert generator.limits == [1500, 1500]  # the released limit for open answers, first and fallback


def test_both_protocols_score_one_generation_and_share_the_fallback_and_choices_use_chain_of_thought():
    script = {
        ("6 times 7", "pot"): "```python\nprint(42)\n```",       # released: a SyntaxError in its wrapper -> CoT
        ("6 times 7", "cot"): "The answer is 42.",
        ("10 minus 3", "pot"): "print(7.000000000000001)",        # float noise: only numloss passes it
        ("2 plus 2", "pot"): "print(4)",
        ("9 plus 1", "pot"): "print(10)",
        ("5 minus 5", "pot"): "print(0)",
    }
    generator = Scripted(script)
    out = run_benchmark(numbers(), [RELEASED, NUMLOSS], generator, runner(), batch_size=8)
    assert [r.correct for r in out["released"]] == [True, False, True, True, True]
    assert [r.correct for r in out["numloss"]] == [True, True, True, True, True]
    assert out["released"][0].style == "pot+cot" and out["numloss"][0].style == "pot"
    assert out["numloss"][0].fallback_output == "The answer is 42."  # generated once, kept with both
    assert len(generator.prompts) == 6
    bench = load_benchmark("aqua", data_dir=FIXTURES, limit=2)
    script = {("average speed", "cot"): "240 / 3 = 80. The answer is C", ("5x - 3", "cot"): "So x = 4.\nThe answer is 4"}
    generator = Scripted(script)
    out = run_benchmark(bench, [RELEASED, NUMLOSS], generator, runner())
    assert [r.style for r in out["numloss"]] == ["cot", "cot"]
    assert [r.prediction for r in out["numloss"]] == ["C", "C"] and all(r.correct for r in out["numloss"])
    assert generator.limits == [2048]
    assert "Let's solve the multi-choice question step by step.\n" in generator.prompts[0]


def test_cli_end_to_end_with_a_tiny_model_folder(tmp_path, capsys):
    folder = tmp_path / "model"
    save_tiny(folder, num_layers=1, hidden_size=32, num_heads=2)
    out = tmp_path / "out"
    args = [str(folder), "--benchmarks", f"gsm8k,aqua,svamp={FIXTURES / 'svamp.json'}", "--data-dir", str(FIXTURES),
            "--limit", "2", "--max-new-tokens", "4", "--batch-size", "2", "--out", str(out), "--quiet",
            "--dtype", "float32", "--protocol", "both", "--allow-unisolated-exec", "--threads", "1"]
    assert cli.main(args) == 0
    # report.md says which command, settings, version and date made it (from Python: test_eval_resume's report API test)
    header = (out / "report.md").read_text().splitlines()[2:4]
    assert header[0].startswith(f"Made by `{shlex.join(['numloss', 'eval', *args])}` with numloss {__version__} on ")
    assert "max new tokens 4 open / 4 multiple choice" in header[1] and "limit 2; threads 1." in header[1]
    summary = json.loads((out / "results.json").read_text())
    assert summary["protocols"] == ["released", "numloss"]
    assert set(summary["benchmarks"]["numloss"]) == {"gsm8k", "aqua", "svamp"}
    gsm = summary["benchmarks"]["numloss"]["gsm8k"]
    assert gsm["count"] == 2 and gsm["digit_entropy"] is not None
    assert summary["generation_stats"]["tokens"] > 0
    assert summary["isolation"]["mode"] == isolation(allow_unisolated=True).mode  # bwrap+seccomp where it works
    lines = (out / "items.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 3 * 2  # items x benchmarks x protocols
    assert "mACC" in capsys.readouterr().out
    assert (out / "accuracy.png").read_bytes()[:4] == b"\x89PNG" and (out / "digit_entropy.png").is_file()
    # a re-run finds everything done: nothing is generated again, the file does not grow
    assert cli.main(args) == 0
    assert len((out / "items.jsonl").read_text().splitlines()) == len(lines)
    assert json.loads((out / "results.json").read_text())["generation_stats"]["tokens"] == 0
    # the results file re-scored without a model gives the same verdicts
    rescored = tmp_path / "rescored"
    assert cli.main(["--score-outputs", str(out / "items.jsonl"), "--protocol", "both", "--data-dir", str(FIXTURES),
                     "--out", str(rescored), "--allow-unisolated-exec"]) == 0
    before, after = json.loads((out / "results.json").read_text()), json.loads((rescored / "results.json").read_text())
    for p in ("released", "numloss"):
        assert {b: s["correct"] for b, s in after["benchmarks"][p].items()} == {b: s["correct"] for b, s in before["benchmarks"][p].items()}
    assert torch.is_grad_enabled()


@pytest.mark.filterwarnings("error::FutureWarning")
def test_a_lora_runs_final_folder_is_evaluated_as_its_merged_model(tmp_path):
    """`numloss eval RUN/final` of a LoRA run: the base rebuilt from RUN/config.yaml, the adapter
    merged in; it generates what RUN/merged generates, quietly (peft's FutureWarning about
    transformers' deprecated `is_gradient_checkpointing` is not the user's). Without the run's
    config.yaml: one line naming merged/."""
    config = load_config(FIXTURES.parent / "train" / "tiny-test.yaml", [
        "--train.output_dir", str(tmp_path / "run"), "--lora.enabled", "true", "--lora.target_modules", "[q_proj, v_proj]",
        "--lora.merge", "true", "--lora.dropout", "0.0", "--train.learning_rate", "5e-2", "--train.max_steps", "2"])
    result = run_training(config)
    assert (result.model_dir / "adapter_config.json").is_file() and not (result.model_dir / "config.json").exists()
    options = dict(benchmarks=["synthetic:arithmetic"], limit=3, max_new_tokens=8, program_of_thought=False, digit_stats=False)
    final = evaluate(str(result.model_dir), **options)
    merged = evaluate(str(result.merged_dir), **options)
    outputs = [[r.output for r in report.items["numloss"]["synthetic:arithmetic"]] for report in (final, merged)]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 3
    assert final.meta["model"] == str(result.model_dir)

    alone = tmp_path / "adapter-alone"
    shutil.copytree(result.model_dir, alone)
    with pytest.raises(ModelUnavailableError, match=r"LoRA adapter without its run's config.yaml .* merged"):
        evaluate(str(alone), **options)
