"""Greedy exact match without generating: one teacher-forced forward pass per batch.

Greedy decoding writes the reference (then stops) if and only if, with the reference fed in, the
argmax at every answer position, the end token included, is the reference token: each greedy
step sees the teacher-forced prefix until the first wrong argmax. tests/test_compare_words.py
checks it item by item against generation. The layout is the training one
(`numloss.data.tokenize_examples`: prompt, output, EOS). The LM head runs on the target positions
only, so a batch never holds [B, T, V] logits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from numloss.data.examples import Example

IGNORE_INDEX = -100


@dataclass
class TeacherForcedScore:
    """Per-item and pooled teacher-forced statistics of a set of (prompt, reference) items.

    `correct[i]`: argmax right at every target position of item i (the greedy exact match);
    `answer_nll[i]`: mean cross-entropy over item i's target positions (nats); `predictions[i]`:
    the argmax tokens at the target positions, decoded; `place[p] = [right, total]`: argmax
    accuracy at the reference's digits by place (0 = units, counted from the end of each digit
    run); `digit_entropy`: mean entropy (nats) of the 10-digit distribution at those digits.
    """

    correct: list[bool] = field(default_factory=list)
    answer_nll: list[float] = field(default_factory=list)
    predictions: list[str] = field(default_factory=list)
    place: dict[int, list[int]] = field(default_factory=dict)
    digit_entropy: float = float("nan")

    def bits(self) -> str:
        """`correct` as a string of 0/1, item order: small in a JSON record, enough for McNemar."""
        return "".join("1" if c else "0" for c in self.correct)


def digit_token_ids(tokenizer: Any) -> dict[int, int]:
    """token id -> digit for the ten single-digit tokens (ValueError if a digit is not one
    token)."""
    ids = {}
    for d in range(10):
        encoded = tokenizer(str(d), add_special_tokens=False)["input_ids"]
        if len(encoded) != 1:
            raise ValueError(
                f"digit {d} is {len(encoded)} tokens in this tokenizer; teacher-forced places"
                " need one"
            )
        ids[int(encoded[0])] = d
    return ids


@torch.inference_mode()
def teacher_forced_exact(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    batch_size: int = 64,
    max_length: int = 4096,
) -> TeacherForcedScore:
    """Score `examples` (prompt = `example.prompt`, reference = `example.output`) teacher-forced.
    ValueError for an item over `max_length` tokens (it would be scored on part of its answer)."""
    from numloss.data import tokenize_examples
    from numloss.data.tokenize import CompletionCollator

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    features = tokenize_examples(list(examples), tokenizer, max_length=max_length)
    if features.num_truncated:
        raise ValueError(
            f"{features.num_truncated} item(s) exceed max_length={max_length} tokens; raise it"
        )
    digits = digit_token_ids(tokenizer)
    digit_ids = torch.tensor(sorted(digits), dtype=torch.long)
    digit_of = torch.full((max(digits) + 1,), -1)  # ids above the largest digit id are not digits
    for token, d in digits.items():
        digit_of[token] = d
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    score = TeacherForcedScore()
    entropies: list[torch.Tensor] = []
    rows = [features[i] for i in range(len(features))]
    collate = CompletionCollator(pad)
    device = next(model.parameters()).device
    # (decoder, lm_head) of a causal LM, or None when the model does not expose them
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    parts = None if decoder is None or head is None else (decoder, head)
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        padded = collate(batch)
        ids, labels, mask = padded["input_ids"], padded["labels"], padded["attention_mask"]
        # position t predicts token t+1: the targets are labels[:, 1:], read from positions [:, :-1]
        target = labels[:, 1:]
        row, col = (target != IGNORE_INDEX).nonzero(as_tuple=True)
        logits = _target_logits(model, parts, device, ids, mask, row, col)
        gold = target[row, col]
        argmax = logits.argmax(-1)
        nll = torch.nn.functional.cross_entropy(logits, gold, reduction="none")
        hit = argmax == gold
        is_digit = (gold < len(digit_of)) & (digit_of[gold.clamp(max=len(digit_of) - 1)] >= 0)
        for i in range(len(batch)):
            at = row == i
            score.correct.append(bool(hit[at].all()) and bool(at.any()))
            score.answer_nll.append(float(nll[at].mean()) if at.any() else math.nan)
            score.predictions.append(
                tokenizer.decode(argmax[at].tolist(), skip_special_tokens=False)
            )
            _count_places(score.place, hit[at], is_digit[at])
        if is_digit.any():
            p = torch.softmax(logits[is_digit][:, digit_ids], dim=-1)
            entropies.append(-(p * p.clamp_min(1e-30).log()).sum(-1))
    if entropies:
        score.digit_entropy = float(torch.cat(entropies).mean())
    score.place = dict(sorted(score.place.items()))
    return score


def _target_logits(
    model: Any,
    parts: tuple[Any, Any] | None,
    device: torch.device,
    ids: torch.Tensor,
    mask: torch.Tensor,
    row: torch.Tensor,
    col: torch.Tensor,
) -> torch.Tensor:
    """float32 logits (on the CPU) at the positions (row, col) only: the LM head sees those alone
    when `parts` (the model's decoder and head) is given, so a batch never holds [B, T, V] logits.
    """
    ids_d, mask_d, at = ids.to(device), mask.to(device), (row.to(device), col.to(device))
    if parts is not None:
        decoder, head = parts
        hidden = decoder(input_ids=ids_d, attention_mask=mask_d).last_hidden_state
        return head(hidden[at]).float().cpu()
    return model(input_ids=ids_d, attention_mask=mask_d).logits[at].float().cpu()


def _count_places(place: dict[int, list[int]], hit: torch.Tensor, is_digit: torch.Tensor) -> None:
    """Add one item's digit hits to `place` ({place: [right, total]}), places counted from the
    end of each run of digits (0 = units)."""
    at = 0
    for j in range(len(hit) - 1, -1, -1):
        if not is_digit[j]:
            at = 0
            continue
        entry = place.setdefault(at, [0, 0])
        entry[0] += int(hit[j])
        entry[1] += 1
        at += 1


def generated_exact(
    model: Any, tokenizer: Any, examples: Sequence[Example], batch_size: int = 64
) -> list[bool]:
    """Real greedy generation (numloss.evaluate.HFGenerator, no stop strings): item i is right when
    the model writes `examples[i].output` and then its end token.

    The limit is the longest reference + 2 tokens, so a row that stops after exactly
    len(reference tokens) + 1 tokens stopped at EOS; its text (special tokens dropped) must be the
    reference."""
    from numloss.compare.learning import greedy

    lengths = [len(tokenizer(e.output, add_special_tokens=False)["input_ids"]) for e in examples]
    prompts = [e.prompt for e in examples]
    generations = greedy(model, tokenizer, prompts, batch_size, max(lengths) + 2, stop=())
    return [
        g.text == e.output and g.new_tokens == n + 1
        for e, g, n in zip(examples, generations, lengths, strict=True)
    ]
