"""The records data sources produce: `Example` (instruction / input / output, Alpaca prompt),
`PromptCompletion` (prompt as it is) and `Conversation` (chat `messages`; the loss falls on the
turns in `train_on`, by default the assistant's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from numloss.data.prompts import format_prompt


@dataclass(frozen=True)
class Example:
    """One example in the MathInstruct layout; `answer` is the final answer alone when the
    source knows it (for evaluation)."""

    instruction: str
    output: str
    input: str = ""
    answer: str | None = None

    @property
    def prompt(self) -> str:
        return format_prompt(self.instruction, self.input)


@dataclass(frozen=True)
class PromptCompletion:
    """A prompt (used verbatim, no template) and the completion learnt after it."""

    prompt: str
    completion: str
    answer: str | None = None

    @property
    def output(self) -> str:
        return self.completion


@dataclass(frozen=True)
class Conversation:
    """Chat messages; `train_on[i]` says whether message i is learnt (default: assistant turns)."""

    messages: tuple[Mapping[str, str], ...]
    train_on: tuple[bool, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.train_on:
            object.__setattr__(
                self, "train_on", tuple(m["role"] == "assistant" for m in self.messages)
            )
        if len(self.train_on) != len(self.messages):
            raise ValueError(
                f"train_on has {len(self.train_on)} entries for {len(self.messages)} messages"
            )

    @classmethod
    def from_messages(
        cls, messages: Sequence[Mapping[str, str]], train_on: Sequence[bool] | None = None
    ) -> Conversation:
        return cls(
            tuple({"role": m["role"], "content": m["content"]} for m in messages),
            tuple(train_on or ()),
        )


#: what a training source yields
TrainingRecord = Example | PromptCompletion | Conversation
