"""The evaluation protocol on one benchmark: prompt, generate, run programs, fall back, score.

1. Every item gets its first prompt (`prompts.first_style`): program of thought for open answers,
   chain of thought for multiple choice. All prompts of a benchmark are generated in batches.
2. An output that contains a program (MAmmoTH's test: it calls ``print(``) is run in the sandbox,
   all programs of the benchmark in parallel; the answer is read from the last non-empty line it
   printed, as "The answer is <line>". An output without a program is read as text.
3. Items whose first attempt yields no answer (the program failed, printed nothing usable, or the
   text holds no answer) get a second, chain-of-thought prompt, generated and scored as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from numloss.evaluate.answers import score
from numloss.evaluate.benchmarks import Benchmark, Item
from numloss.evaluate.generate import Generator
from numloss.evaluate.prompts import build_prompt, first_style
from numloss.evaluate.sandbox import SandboxLimits, run_programs


@dataclass
class ItemResult:
    """Everything about one evaluated item, as written to predictions.jsonl."""

    benchmark: str
    id: str
    kind: str
    question: str
    gold: str
    style: str  # "pot", "cot", or "pot+cot" (program first, chain-of-thought fallback)
    output: str
    prediction: str
    correct: bool
    value: float | None = None
    program_status: str = ""  # sandbox status of the program, "" when no program ran
    program_detail: str = ""
    program_stdout: str = ""
    fallback_output: str = ""  # the chain-of-thought completion when the first attempt gave no answer

    def to_json(self) -> dict:
        return asdict(self)


_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)


def extract_program(output: str) -> str | None:
    """The Python program in a completion: fenced code if any, else the text; None without print()."""
    if "print(" not in output:
        return None
    fenced = _FENCE.findall(output)
    code = "\n".join(fenced) if fenced else output
    return code if "print(" in code else None


def last_line(stdout: str) -> str:
    """The last non-empty printed line."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def evaluate_benchmark(
    benchmark: Benchmark,
    generator: Generator,
    template: Callable[..., str] | None = None,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    program_of_thought: bool = True,
) -> list[ItemResult]:
    """Run the protocol (module doc) on every item of `benchmark`; one result per item, in order."""
    items = benchmark.items
    styles = [first_style(item, program_of_thought) for item in items]
    first = generator.generate([build_prompt(item, style, template) for item, style in zip(items, styles, strict=True)])
    results: list[ItemResult] = []
    programs: dict[int, str] = {}
    for i, (item, style, gen) in enumerate(zip(items, styles, first, strict=True)):
        program = extract_program(gen.text)
        if program is not None:
            programs[i] = program
        results.append(ItemResult(benchmark.name, item.id, item.kind, item.question, item.answer, style, gen.text, "", False))
    ran = run_programs(list(programs.values()), limits, workers) if programs else []
    for i, run in zip(programs, ran, strict=True):
        results[i].program_status, results[i].program_detail = run.status, run.detail
        results[i].program_stdout = run.stdout[-2000:]
    retry: list[int] = []
    for i, (item, result) in enumerate(zip(items, results, strict=True)):
        if i in programs:
            printed = last_line(results[i].program_stdout) if result.program_status == "ok" else ""
            text = f"The answer is {printed}" if printed else ""
        else:
            text = result.output
        scored = score(item, text) if text else None
        if scored is None or not scored.prediction:
            retry.append(i)
            continue
        result.prediction, result.correct, result.value = scored.prediction, scored.correct, scored.value
    retry = [i for i in retry if styles[i] == "pot"]  # a chain-of-thought miss has nothing to fall back to
    if retry:
        second = generator.generate([build_prompt(items[i], "cot", template) for i in retry])
        for i, gen in zip(retry, second, strict=True):
            _score_text(items[i], results[i], gen.text)
    return results


def _score_text(item: Item, result: ItemResult, text: str) -> None:
    scored = score(item, text)
    result.style = "pot+cot"
    result.fallback_output = text
    result.prediction, result.correct, result.value = scored.prediction, scored.correct, scored.value
