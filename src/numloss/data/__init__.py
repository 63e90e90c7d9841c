"""Training data: sources (synthetic, reasoning-gym, instruction / prompt-completion / chat files,
HF datasets), the shared prompt, completion-only tokenisation and the collator.

    examples = load_examples("synthetic:mix", num_examples=2000, seed=0)
    dataset = tokenize_examples(examples, tokenizer, max_length=256)
    collator = CompletionCollator(tokenizer.pad_token_id)
"""

from numloss.data.examples import Conversation, Example, PromptCompletion, TrainingRecord
from numloss.data.instructions import DataError
from numloss.data.prompts import PROMPT_NO_INPUT, PROMPT_WITH_INPUT, format_prompt
from numloss.data.sources import check_source, load_examples, source_kind
from numloss.data.tokenize import (
    IGNORE_INDEX,
    CompletionCollator,
    TokenizedDataset,
    conversation_ids,
    tokenize_examples,
)

__all__ = [
    "Example",
    "PromptCompletion",
    "Conversation",
    "TrainingRecord",
    "DataError",
    "PROMPT_NO_INPUT",
    "PROMPT_WITH_INPUT",
    "format_prompt",
    "check_source",
    "load_examples",
    "source_kind",
    "IGNORE_INDEX",
    "CompletionCollator",
    "TokenizedDataset",
    "conversation_ids",
    "tokenize_examples",
]
