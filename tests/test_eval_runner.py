"""The protocol (program of thought, sandbox, chain-of-thought fallback), reports and the CLI."""

import json
from pathlib import Path

import torch

from numloss.data.prompts import format_prompt
from numloss.evaluate import cli
from numloss.evaluate.benchmarks import Benchmark, load_benchmark
from numloss.evaluate.generate import Generation
from numloss.evaluate.prompts import POT_TRIGGER, build_prompt
from numloss.evaluate.report import summarize, write_report
from numloss.evaluate.runner import evaluate_benchmark, extract_program
from numloss.evaluate.sandbox import SandboxLimits
from numloss.models.tiny import build_char_tokenizer, build_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "benchmarks"
LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_bytes=512 << 20)


class Scripted:
    """A generator that answers each question from a script: (question, style) -> completion."""

    def __init__(self, script):
        self.script, self.prompts, self.tokens, self.seconds = script, [], 0, 0.0

    def generate(self, prompts):
        self.prompts += prompts
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


def test_program_of_thought_with_chain_of_thought_fallback():
    script = {
        ("6 times 7", "pot"): "a = 6\nb = 7\nprint(a * b)",                       # program, right
        ("10 minus 3", "pot"): "while True:\n    pass\nprint(1)",                # program times out -> CoT
        ("10 minus 3", "cot"): "10 - 3 = 7. The answer is 7.",
        ("2 plus 2", "pot"): "import socket\nsocket.socket().connect(('127.0.0.1', 9))\nprint(4)",  # blocked -> CoT, wrong
        ("2 plus 2", "cot"): "The answer is 5.",
        ("9 plus 1", "pot"): "9 + 1 = 10. The answer is 10.",                     # no program: read as text
        ("5 minus 5", "pot"): "```python\nx = 5 - 5\nprint('result:', x)\n```",  # fenced program
    }
    generator = Scripted(script)
    results = evaluate_benchmark(numbers(), generator, format_prompt, LIMITS, workers=2)
    assert [r.correct for r in results] == [True, True, False, True, True]
    assert [r.style for r in results] == ["pot", "pot+cot", "pot+cot", "pot", "pot"]
    assert [r.program_status for r in results] == ["ok", "timeout", "blocked", "", "ok"]
    assert results[0].prediction == "42" and results[0].value == 42
    assert results[1].fallback_output == "10 - 3 = 7. The answer is 7."
    # prompts use the training template; the fallback prompt is the bare question
    assert generator.prompts[0] == format_prompt(f"What is 6 times 7? {POT_TRIGGER}")
    assert format_prompt("What is 10 minus 3?") in generator.prompts[5:]


def test_multiple_choice_uses_chain_of_thought_and_programs_map_to_options():
    bench = load_benchmark("aqua", data_dir=FIXTURES, limit=2)
    script = {
        ("average speed", "cot"): "240 / 3 = 80. The answer is C",
        ("5x - 3", "cot"): "x = 12 / 3\nprint(x)",  # a program for a choice item: value 4.0 -> option C
    }
    results = evaluate_benchmark(bench, Scripted(script), format_prompt, LIMITS)
    assert [r.style for r in results] == ["cot", "cot"]
    assert [r.prediction for r in results] == ["C", "C"] and all(r.correct for r in results)


def test_extract_program():
    assert extract_program("The answer is 4.") is None
    assert extract_program("Here:\n```python\nprint(4)\n```\nDone.") == "print(4)\n"
    assert extract_program("x = 2\nprint(x)") == "x = 2\nprint(x)"


def test_summary_report_and_plots(tmp_path):
    script = {("6 times 7", "pot"): "print(42)", ("10 minus 3", "pot"): "print(8)", ("2 plus 2", "pot"): "print(4)",
              ("9 plus 1", "pot"): "print(10.5)", ("5 minus 5", "pot"): "print('none')", ("5 minus 5", "cot"): "no idea"}
    results = {"toy": evaluate_benchmark(numbers(), Scripted(script), format_prompt, LIMITS)}
    summary = summarize(results, extra={"model": "scripted"})
    toy = summary["benchmarks"]["toy"]
    assert toy["accuracy"] == 0.4 and summary["macc"] == 0.4 and toy["answered"] == 4
    assert toy["numeric_distance"]["count"] == 4 and toy["numeric_distance"]["missing"] == 1
    assert toy["numeric_distance"]["mae"] == (0 + 1 + 0 + 0.5) / 4
    written = write_report(tmp_path, summary, results)
    names = {p.name for p in written}
    assert {"results.json", "report.md", "toy.jsonl", "accuracy.png", "place_accuracy.png"} <= names
    assert json.loads((tmp_path / "results.json").read_text())["benchmarks"]["toy"]["correct"] == 2
    assert "| toy | 5 | 40.0 |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_end_to_end_with_a_tiny_model_folder(tmp_path, capsys):
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, num_layers=1, hidden_size=32, num_heads=2)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "out"
    status = cli.main([str(folder), "--benchmarks", f"gsm8k,aqua,svamp={FIXTURES / 'svamp.json'}", "--data-dir", str(FIXTURES),
                       "--limit", "2", "--max-new-tokens", "4", "--batch-size", "2", "--out", str(out), "--quiet",
                       "--dtype", "float32"])
    assert status == 0
    summary = json.loads((out / "results.json").read_text())
    assert set(summary["benchmarks"]) == {"gsm8k", "aqua", "svamp"}
    gsm = summary["benchmarks"]["gsm8k"]
    assert gsm["count"] == 2 and gsm["digit_stats"]["count"] == 1 + 3  # "7" and "46.5"
    assert summary["generation"]["tokens"] > 0
    assert (out / "digit_entropy.png").is_file() and (out / "predictions" / "aqua.jsonl").is_file()
    assert "mACC" in capsys.readouterr().out


def test_cli_reports_bad_input_clearly(tmp_path, capsys):
    assert cli.main(["tiny", "--benchmarks", "gsm9k"]) == 2
    assert "unknown benchmark 'gsm9k'" in capsys.readouterr().err
    assert cli.main(["tiny", "--benchmarks", "simuleq", "--data-dir", str(tmp_path)]) == 2
    assert "simuleq" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "no-model"), "--benchmarks", "gsm8k", "--data-dir", str(FIXTURES)]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert cli.main(["tiny", "--benchmarks", "gsm8k", "--data-dir", str(FIXTURES), "--backend", "vllm"]) == 2
    assert "vllm" in capsys.readouterr().err.lower()


def test_prompts_follow_the_protocol():
    item = numbers().items[0]
    assert build_prompt(item, "pot", format_prompt) == format_prompt(f"{item.question} {POT_TRIGGER}")
    assert build_prompt(item, "cot") == format_prompt(item.question)
    assert torch.is_grad_enabled()  # nothing above leaves autograd switched off
