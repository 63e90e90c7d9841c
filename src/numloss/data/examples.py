"""The unit every data source produces: one instruction and the response to learn."""

from __future__ import annotations

from dataclasses import dataclass

from numloss.data.prompts import format_prompt


@dataclass(frozen=True)
class Example:
    """One training (or evaluation) example in the MathInstruct layout.

    `answer` is the final answer alone when the source knows it (synthetic and reasoning-gym
    sets do), for evaluation; training only reads the prompt and `output`.
    """

    instruction: str
    output: str
    input: str = ""
    answer: str | None = None

    @property
    def prompt(self) -> str:
        return format_prompt(self.instruction, self.input)
