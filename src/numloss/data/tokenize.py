"""Examples -> token ids with completion-only labels, and the collator that pads them.

A sequence is `prompt tokens (with the tokenizer's own special tokens, e.g. BOS) + output tokens
+ EOS`. Labels are -100 on the prompt, the token ids on the output and EOS: only the response is
learnt. The prompt and the output are tokenised separately so the label boundary is exact.

A sequence longer than `max_length` is cut at `max_length` (the end of the output goes first),
never dropped and never an error; how many were cut is counted, and so is how many had no output
token left at all (their prompt alone filled the limit: they still train nothing, say so in the
log, raise max_length).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from numloss.data.examples import Example

IGNORE_INDEX = -100
_BATCH = 1024  # examples per call into the (Rust) tokenizer


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
        if self.num_without_target:
            text += f", {self.num_without_target} of them with no response token left (they train nothing; raise data.max_length)"
        return text


def _ids(tokenizer: Any, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
    return tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]


def tokenize_examples(examples: Sequence[Example], tokenizer: Any, max_length: int) -> TokenizedDataset:
    """Tokenise `examples` for training; see the module docstring for the layout and truncation."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token: set one so the model learns where a response ends")
    features: list[dict[str, list[int]]] = []
    truncated = without_target = tokens = target_tokens = 0
    for start in range(0, len(examples), _BATCH):
        chunk = examples[start : start + _BATCH]
        prompts = _ids(tokenizer, [e.prompt for e in chunk], add_special_tokens=True)
        outputs = _ids(tokenizer, [e.output for e in chunk], add_special_tokens=False)
        for prompt, output in zip(prompts, outputs, strict=True):
            # a tokenizer that appends EOS to every encoding would end the prompt with it
            if len(prompt) > 1 and prompt[-1] == eos:
                prompt = prompt[:-1]
            target = list(output) + [eos]
            input_ids = list(prompt) + target
            labels = [IGNORE_INDEX] * len(prompt) + target
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
        stats={"tokens": tokens, "target_tokens": target_tokens},
    )


@dataclass
class CompletionCollator:
    """Pad a list of {input_ids, labels} on the right: pad id / -100, with the attention mask.

    `pad_to_multiple_of` rounds the padded length up (tensor cores like multiples of 8).
    """

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
