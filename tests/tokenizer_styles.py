"""Tokenizers in the three ways numbers get written, built offline with the `tokenizers` library.

* `llama3_style()`: numbers in left-to-right chunks of 1-3 digits ("12345" -> "123" "45"), all
  1,110 chunks in the vocabulary, as Llama-3 and tiktoken cl100k/o200k do (character-level
  otherwise: `numloss.models.tiny.build_char_tokenizer(digits_per_token=3)`).
* `gpt2_style()`: byte-level BPE trained without digit splitting, so it learns irregular
  multi-digit merges, with and without the leading-space marker ("Ġ42"), and leaves most
  length-3+ groups incomplete.
* `single_digit_style()`: Llama-1/2-style Metaspace BPE, byte fallback, digits split one by one.
"""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, trainers
from tokenizers import models as tokenizer_models
from transformers import PreTrainedTokenizerFast

from numloss.models.tiny import build_char_tokenizer

CORPUS = [
    f"The total is {a} apples and {b}.{c} pears, so {a * 7} items at {a}.{b}{c} each."
    for a in range(1, 200, 3)
    for b, c in [(1, 2), (3, 4), (25, 5), (100, 9)]
] * 3


@functools.cache
def llama3_style() -> PreTrainedTokenizerFast:
    return build_char_tokenizer(digits_per_token=3)


@functools.cache
def gpt2_style() -> PreTrainedTokenizerFast:
    tok = Tokenizer(tokenizer_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@functools.cache
def single_digit_style() -> PreTrainedTokenizerFast:
    tok = Tokenizer(tokenizer_models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(replacement="▁"), pre_tokenizers.Digits(individual_digits=True)]
    )
    tok.decoder = decoders.Metaspace(replacement="▁")
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def encode(tok, *texts: str) -> torch.Tensor:
    """Rows of token ids, right-padded with -100 (padding is an ignored position)."""
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    labels = torch.full((len(rows), max(map(len, rows))), -100)
    for r, ids in enumerate(rows):
        labels[r, : len(ids)] = torch.tensor(ids)
    return labels
