"""The Alpaca instruction prompt of the paper's recipe, shared by training and evaluation so a model
is always asked in the form it was trained on; the response follows "### Response:" directly.
"""

from __future__ import annotations

PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:"
)

PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)


def format_prompt(instruction: str, input: str | None = None) -> str:
    """The Alpaca prompt for `instruction` (and `input` when it is non-empty)."""
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string, got {type(instruction).__name__}")
    if input:
        return PROMPT_WITH_INPUT.format(instruction=instruction, input=input)
    return PROMPT_NO_INPUT.format(instruction=instruction)
