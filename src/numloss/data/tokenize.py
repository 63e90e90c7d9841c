"""Training records -> token ids with completion-only labels, and the collator that pads them.

`Example` gets the Alpaca prompt (with the tokenizer's special tokens) + output + EOS;
`PromptCompletion` its prompt as it is; `Conversation` is rendered once with the chat template.
Labels are -100 except on what is learnt: the completion and EOS, or the learnt turns of a
conversation (located by rendering every prefix). Prompt and completion are tokenised apart so
the label boundary is exact. A sequence longer than `max_length` is cut at its end and counted
(and so are those left with no learnt token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from numloss.checks import check_type
from numloss.data.examples import Conversation, Example, PromptCompletion, TrainingRecord
from numloss.data.instructions import DataError
from numloss.textio import read_utf8

IGNORE_INDEX = -100
_BATCH = 1024  # examples per call into the (Rust) tokenizer
_RECORDS = (Example, PromptCompletion, Conversation)


@dataclass
class TokenizedDataset(torch.utils.data.Dataset):
    """Token ids and labels, one dict per example, plus what truncation did."""

    features: list[dict[str, list[int]]]
    max_length: int
    num_truncated: int = 0
    num_without_target: int = 0
    stats: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return self.features[index]

    def summary(self) -> str:
        """One log line: sizes and the truncation counts."""
        text = (
            f"{len(self)} examples, {self.stats.get('tokens', 0)} tokens "
            f"({self.stats.get('target_tokens', 0)} in responses); max_length={self.max_length}: "
            f"{self.num_truncated} truncated"
        )
        if self.stats.get("conversations"):
            text += f"; {self.stats['conversations']} conversations rendered with the chat template"
        if self.num_without_target:
            text += (
                f", {self.num_without_target} of them with no response token left (they train"
                " nothing; raise data.max_length)"
            )
        return text


def resolve_chat_template(chat_template: str | None) -> str | None:
    """A Jinja chat template given inline or as the path of a file holding one (None stays None)."""
    if chat_template is None or "{" in chat_template:
        return chat_template
    path = Path(chat_template).expanduser()
    if not path.is_file():
        raise DataError(
            f"data.chat_template {chat_template!r} is neither a Jinja template nor an existing file"
        )
    return read_utf8(path, DataError)


def compile_chat_template(template: str | None, what: str = "data.chat_template") -> None:
    """Raise DataError ("WHAT: ", line and message) when `template` is not valid Jinja, as
    transformers compiles it; None (the tokenizer's own) passes."""
    if template is None:
        return
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        _compile_jinja_template(template)
    except jinja2.TemplateSyntaxError as error:
        raise DataError(
            f"{what}: Jinja syntax error at line {error.lineno}: {error.message}"
        ) from None
    except jinja2.TemplateError as error:
        raise DataError(f"{what}: not a usable Jinja template: {error}") from None


def conversation_ids(
    conversation: Conversation, tokenizer: Any, chat_template: str | None = None
) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of a conversation rendered with the chat template; see the module
    docstring."""
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise DataError(
            "the data holds chat messages but the tokenizer has no chat template; set"
            " data.chat_template (a Jinja template or a file holding one) or use prompt/completion"
            " records"
        )
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(
            "chat messages need a fast tokenizer (offsets locate the assistant turns); use"
            " use_fast=True"
        )

    import jinja2

    compile_chat_template(template, "the chat template")

    def render(messages, add_generation_prompt: bool = False) -> str:
        try:
            text = tokenizer.apply_chat_template(
                list(messages),
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                chat_template=template,
            )
        except (jinja2.TemplateError, TypeError, ValueError) as error:
            raise DataError(
                f"the chat template fails on a conversation: {type(error).__name__}: {error}"
            ) from None
        if not isinstance(text, str):
            raise DataError(f"the chat template rendered a {type(text).__name__}, expected text")
        return text

    messages = conversation.messages
    text = render(messages)
    spans: list[tuple[int, int]] = []
    for i, learnt in enumerate(conversation.train_on):
        if not learnt:
            continue
        before = render(messages[:i], add_generation_prompt=True) if i else ""
        after = render(messages[: i + 1])
        if not (after.startswith(before) and text.startswith(after)):
            raise DataError(
                "the chat template does not render a conversation's first turns as the start of the"
                " whole conversation, so the assistant turns cannot be located; use a template that"
                " does (data.chat_template) or prompt/completion records"
            )
        spans.append((len(before), len(after)))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids = list(encoded["input_ids"])
    labels = [  # a token is learnt when it starts inside a learnt turn (and is not empty)
        token if end > start and any(a <= start < b for a, b in spans) else IGNORE_INDEX
        for token, (start, end) in zip(input_ids, encoded["offset_mapping"], strict=True)
    ]
    return input_ids, labels


def tokenize_examples(
    examples: Sequence[TrainingRecord],
    tokenizer: Any,
    max_length: int,
    chat_template: str | None = None,
) -> TokenizedDataset:
    """Tokenise `examples` for training (module docstring); `chat_template` (Jinja text or a file)
    replaces the tokenizer's own."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(
            "the tokenizer has no eos_token: set one so the model learns where a response ends"
        )
    template = resolve_chat_template(chat_template)
    for i, example in enumerate(examples):
        check_type(
            f"examples[{i}]", example, _RECORDS, "an Example, PromptCompletion or Conversation"
        )
    pairs: dict[int, tuple[list[int], list[int]]] = {}
    plain = [(i, e) for i, e in enumerate(examples) if not isinstance(e, Conversation)]
    for start in range(0, len(plain), _BATCH):
        chunk = plain[start : start + _BATCH]
        prompts = tokenizer([e.prompt for _, e in chunk], add_special_tokens=True)["input_ids"]
        outputs = tokenizer([e.output for _, e in chunk], add_special_tokens=False)["input_ids"]
        for (index, _), prompt, output in zip(chunk, prompts, outputs, strict=True):
            # a tokenizer that appends EOS to every encoding would end the prompt with it
            if len(prompt) > 1 and prompt[-1] == eos:
                prompt = prompt[:-1]
            target = list(output) + [eos]
            pairs[index] = (list(prompt) + target, [IGNORE_INDEX] * len(prompt) + target)
    conversations = 0
    for index, example in enumerate(examples):
        if isinstance(example, Conversation):
            pairs[index] = conversation_ids(example, tokenizer, template)
            conversations += 1
    features: list[dict[str, list[int]]] = []
    truncated = without_target = tokens = target_tokens = 0
    for index in range(len(examples)):
        input_ids, labels = pairs[index]
        if len(input_ids) > max_length:
            truncated += 1
            input_ids, labels = input_ids[:max_length], labels[:max_length]
            # the label of the last position is only used as the target of the one before
            if all(label == IGNORE_INDEX for label in labels[1:]):
                without_target += 1
        tokens += len(input_ids)
        target_tokens += sum(label != IGNORE_INDEX for label in labels)
        features.append({"input_ids": input_ids, "labels": labels})
    return TokenizedDataset(
        features,
        max_length=max_length,
        num_truncated=truncated,
        num_without_target=without_target,
        stats={"tokens": tokens, "target_tokens": target_tokens, "conversations": conversations},
    )


@dataclass
class CompletionCollator:
    """Pad {input_ids, labels} on the right with the pad id / -100 and an attention mask, to a
    multiple of `pad_to_multiple_of` when given."""

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, features: Sequence[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty batch")
        length = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = len(features)
        input_ids = torch.full((batch, length), self.pad_token_id, dtype=torch.long)
        labels = torch.full((batch, length), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((batch, length), dtype=torch.long)
        for row, feature in enumerate(features):
            n = len(feature["input_ids"])
            input_ids[row, :n] = torch.tensor(feature["input_ids"], dtype=torch.long)
            labels[row, :n] = torch.tensor(feature["labels"], dtype=torch.long)
            attention_mask[row, :n] = 1
        return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}
