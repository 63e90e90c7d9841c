"""The tiny offline model: a small Llama-architecture LM with a character-level tokenizer, so every
digit is one token and the head is cheap; seeded random weights learn the synthetic sets in minutes.
"""

from __future__ import annotations

import string

import torch

from numloss.extras import needs

with needs("hf", "numloss.models"):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
# Printable ASCII (digits first, so digit k has id k + len(SPECIAL_TOKENS)) plus newline and tab.
CHARACTERS: tuple[str, ...] = tuple(
    string.digits
    + "".join(c for c in string.printable if c not in string.digits and c not in "\r\x0b\x0c")
)


def number_chunks(longest: int) -> tuple[list[str], list[tuple[str, str]]]:
    """(tokens, merges) of every digit string of 2..`longest` digits, each reachable by merging at
    any split point, so BPE ends at the whole chunk in any merge order."""
    tokens: list[str] = []
    merges: list[tuple[str, str]] = []
    for length in range(2, longest + 1):
        for value in range(10**length):
            chunk = f"{value:0{length}d}"
            tokens.append(chunk)
            merges += [(chunk[:cut], chunk[cut:]) for cut in range(1, length)]
    return tokens, merges


def build_char_tokenizer(
    model_max_length: int = 2048, digits_per_token: int = 1
) -> PreTrainedTokenizerFast:
    """A deterministic character-level `PreTrainedTokenizerFast` (`<pad> <s> </s> <unk>`, `<s>` in
    front, non-printable characters `<unk>`). `digits_per_token` 3 splits digit runs left to right
    into chunks of up to 3, as Llama-3 does, with all 1,110 chunks after the characters.
    """
    if digits_per_token < 1:
        raise ValueError(f"digits_per_token must be at least 1, got {digits_per_token}")
    chunks, merges = number_chunks(digits_per_token)
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS + tuple(chunks))}
    # BPE with no merges is a character tokenizer that maps unseen characters to <unk>.
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=UNK, fuse_unk=False))
    if digits_per_token > 1:
        core.pre_tokenizer = pre_tokenizers.Split(
            Regex(f"[0-9]{{1,{digits_per_token}}}"), behavior="isolated"
        )
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        add_bos_token=True,
        add_eos_token=False,
        padding_side="right",
        model_max_length=model_max_length,
    )


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    num_layers: int = 6,
    hidden_size: int = 384,
    num_heads: int = 6,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A seeded random `LlamaForCausalLM` sized for `tokenizer`, with tied embeddings and
    Llama's 8/3 intermediate ratio (rounded up to a multiple of 64) by default."""
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} must be a multiple of num_heads {num_heads}")
    if intermediate_size is None:
        intermediate_size = -(-hidden_size * 8 // 3 // 64) * 64
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # the global generator is left as it was
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)
