"""Evaluation prompts: MAmmoTH's zero-shot protocol inside the training prompt template.

- open answers (number, math): program of thought first, the question followed by
  "Let's write a program."; chain of thought (the bare question) when the program yields no answer;
- multiple choice: chain of thought, the question with its "Answer Choices: (A) ..." line.

The text is wrapped by `numloss.data.prompts.format_prompt`, the template the models are trained
with, so an evaluated model sees the prompt format it learned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from numloss.evaluate.benchmarks import Item

Style = Literal["pot", "cot"]
POT_TRIGGER = "Let's write a program."


def training_template() -> Callable[..., str]:
    """`format_prompt(instruction, input=None)` of the training recipe."""
    from numloss.data.prompts import format_prompt

    return format_prompt


def instruction(item: Item, style: Style) -> str:
    """The instruction text for `item`: the question, plus the program trigger for `pot`."""
    if style == "pot":
        return f"{item.question} {POT_TRIGGER}"
    if style == "cot":
        return item.question
    raise ValueError(f"prompt style must be 'pot' or 'cot', got {style!r}")


def first_style(item: Item, program_of_thought: bool = True) -> Style:
    """The protocol's first attempt: program of thought for open answers, else chain of thought."""
    return "pot" if program_of_thought and item.kind != "choice" else "cot"


def build_prompt(item: Item, style: Style, template: Callable[..., str] | None = None) -> str:
    """The full prompt text the model is given for `item` in `style`."""
    return (template or training_template())(instruction(item, style))
