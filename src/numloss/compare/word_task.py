"""The pretrained-model comparison task: GSM-style word problems in the chat template, scored on
real benchmark items (`task: {kind: word_problems, ...}` in a comparison YAML).

Training items come from two seeded generators: reasoning-gym's `gsm_symbolic` (GSM8K problems
with their numbers redrawn; the worked solution is its `answer_cot`, whose "#### N" line becomes
"The answer is N.") and numloss's own arithmetic word problems (`numloss.data.synthetic`
`word_problems`: prices, change, discounts, with decimals), mixed by `gsm_share`. Each item is
one user turn (the question) and one assistant turn (the worked answer) rendered with the
tokenizer's chat template; the loss is on the assistant turn only (completion-only).

Evaluation: `benchmarks` (GSM8K and SVAMP test items from `data_dir`, the first
`benchmark_limit` of each) under the `numloss` protocol (numloss.evaluate.protocol.NUMLOSS:
answer extraction and matching) with its prompt replaced by the same chat template, chain of
thought, greedy; `numloss.evaluate.evaluate` itself would prompt with the released Alpaca text. The
learning checks (numloss.compare.learning) run on a held-out slice of generated problems, drawn
apart from training; a check's item is right when the last number of the output equals the answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from numloss.atomic import write_text_atomic
from numloss.compare.task import Count, Natural, Share
from numloss.data.examples import Example

#: used only when a tokenizer has no chat template of its own (the tiny test model)
FALLBACK_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class ChatExample(Example):
    """An `Example` whose prompt is already rendered with a chat template (`rendered`)."""

    rendered: str = ""
    #: the system turn (None: the template's own default; "" an empty one, which keeps SmolLM2's
    #: 16-token default system prompt out of short sequences)
    system: str | None = None

    @property
    def prompt(self) -> str:
        if not self.rendered:
            raise ValueError(
                "ChatExample.prompt: render the example with WordProblemTask.render(examples,"
                " tokenizer) first"
            )
        return self.rendered


def chat_prompt(tokenizer: Any, question: str, system: str | None = None) -> str:
    """The chat-template text of one user turn (after a `system` turn unless None), ending where
    the assistant's answer starts."""
    messages = [{"role": "user", "content": question}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    template = None if getattr(tokenizer, "chat_template", None) else FALLBACK_CHAT_TEMPLATE
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, chat_template=template
    )


def _gsm_symbolic(n: int, seed: int) -> list[Example]:
    if n <= 0:
        return []
    import reasoning_gym

    examples = []
    for entry in reasoning_gym.create_dataset("gsm_symbolic", size=n, seed=seed):
        answer = str(entry["answer"]).strip()
        working = str(entry["metadata"].get("answer_cot", "")).strip()
        lines = [line for line in working.splitlines() if not line.strip().startswith("####")]
        output = " ".join(lines + [f"The answer is {answer}."])
        examples.append(Example(entry["question"].strip(), output, answer=answer))
    return examples


@dataclass(frozen=True)
class WordProblemTask:
    """Training mix, check slice and the benchmarks a pretrained-model comparison is scored on."""

    kind: Literal["word_problems"] = "word_problems"
    train_size: Count = 2000
    gsm_share: Share = 0.5  # share of gsm_symbolic items; the rest are numloss word problems
    test_seed: Natural = 1234
    benchmarks: tuple[str, ...] = ("gsm8k", "svamp")
    benchmark_limit: Count = 200
    data_dir: str = "../shared/benchmarks"
    max_new_tokens: Count = 320
    eval_batch_size: Count = 200
    #: folder of generated items (JSONL, one file per draw): read when present, written when not,
    #: so a machine without reasoning-gym (the GPU box) trains on items generated here
    cache_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"benchmarks": list(self.benchmarks)}

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"GSM-style word problems in the chat template ({100 * self.gsm_share:.0f}%"
            f" reasoning-gym gsm_symbolic, the rest numloss word problems), {self.train_size}"
            f" training items per seed; scored on the first {self.benchmark_limit} items of"
            f" {', '.join(self.benchmarks)} ({self.data_dir}), chain of thought, greedy"
        )

    def check(self) -> None:
        """Raise ValueError when the task cannot be built (field types and ranges are checked
        before, numloss.compare.tasks.checked)."""
        if not self.benchmarks:
            raise ValueError("task.benchmarks must name at least one benchmark (gsm8k, svamp, ...)")

    def _mix(self, n: int, seed: int) -> list[Example]:
        path = None
        if self.cache_dir is not None:
            path = Path(self.cache_dir) / f"mix-n{n}-s{seed}-g{self.gsm_share:g}.jsonl"
            if path.is_file():
                return [
                    Example(**json.loads(line))
                    for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip()
                ]
        from numloss.data.synthetic import generate

        gsm = round(n * self.gsm_share)
        words = generate("word_problems", n - gsm, seed=seed) if n > gsm else []
        items = _gsm_symbolic(gsm, seed) + words
        random.Random(f"numloss-word-mix-{seed}").shuffle(items)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, "".join(json.dumps(asdict(e)) + "\n" for e in items))
        return items

    def test_sets(self) -> dict[str, list[Example]]:
        """No generated test sets: the scoring is on the benchmarks (see `evaluate`)."""
        return {}

    def check_set(self, size: int) -> list[ChatExample]:
        """`size` generated problems for the learning checks, from their own seed."""
        return [
            ChatExample(e.instruction, e.output, answer=e.answer)
            for e in self._mix(size, 10_000_000 + self.test_seed)
        ]

    def train_set(self, seed: int, exclude: Iterable[str] | None = None) -> list[ChatExample]:
        """`train_size` training items for `seed` (unrendered), none of whose questions is in
        `exclude`."""
        held_out = set(exclude or ())
        items: list[ChatExample] = []
        draw = 0
        while len(items) < self.train_size:
            for e in self._mix(self.train_size - len(items), seed * 1000 + draw):
                if e.instruction not in held_out:
                    items.append(ChatExample(e.instruction, e.output, answer=e.answer))
            draw += 1
            if draw > 20:
                raise ValueError(
                    "task: could not draw enough training items apart from the check slice"
                )
        return items

    @staticmethod
    def render(examples: Sequence[Example], tokenizer: Any) -> list[ChatExample]:
        """`examples` with their chat-template prompts filled in for `tokenizer`."""
        rendered = []
        for e in examples:
            system = getattr(e, "system", None)
            prompt = chat_prompt(tokenizer, e.instruction, system)
            rendered.append(
                ChatExample(
                    e.instruction, e.output, answer=e.answer, rendered=prompt, system=system
                )
            )
        return rendered

    def evaluate(self, model: Any, tokenizer: Any) -> dict[str, dict[str, Any]]:
        """Accuracy on each benchmark (its first `benchmark_limit` items), with the Wilson
        interval."""
        import time
        from dataclasses import replace

        from numloss.compare.stats import exact_match_record
        from numloss.evaluate import HFGenerator, load_benchmark
        from numloss.evaluate.programs import ProgramRunner
        from numloss.evaluate.protocol import NUMLOSS
        from numloss.evaluate.runner import run_benchmark

        generator = HFGenerator(
            model,
            tokenizer,
            batch_size=self.eval_batch_size,
            max_new_tokens=self.max_new_tokens,
            progress=False,
        )
        # the numloss protocol with the chat-template prompt the models were trained on (chain of
        # thought only: no program runs, so no sandbox is needed)
        protocol = replace(
            NUMLOSS, prompt=lambda item, style: chat_prompt(tokenizer, item.question)
        )
        results: dict[str, dict[str, Any]] = {}
        for name in self.benchmarks:
            started = time.perf_counter()
            bench = load_benchmark(name, data_dir=self.data_dir, limit=self.benchmark_limit)
            items = run_benchmark(
                bench,
                [protocol],
                generator,
                ProgramRunner(),
                batch_size=self.eval_batch_size,
                program_of_thought=False,
            )[protocol.name]
            results[name] = {
                **exact_match_record(sum(bool(r.correct) for r in items), len(items)),
                "examples": [
                    {
                        "question": r.question[:200],
                        "gold": r.gold,
                        "prediction": r.prediction,
                        "output": r.output[-300:],
                    }
                    for r in items[:3]
                ],
                "seconds": {"generate": time.perf_counter() - started},
            }
        return results


def last_number_matches(output: str, gold: str) -> bool:
    """A learning check's criterion for word problems: the output's final number equals the gold."""
    from numloss.evaluate.answers import extract_number

    value = extract_number(output)
    try:
        return value is not None and abs(value - float(gold)) <= 1e-6 * max(1.0, abs(float(gold)))
    except ValueError:
        return False
